import { afterEach, describe, expect, it } from 'vitest';
import Stripe from 'stripe';
import { rejection, withLocal, type Local } from './helpers.js';

let t: Local;
afterEach(async () => {
  await t.local.close();
});

const types = (l: Local): string[] => l.local.events().map((e) => e.type);

describe('a PaymentIntent paid by card', () => {
  it('is created, retrieved and confirmed by the real SDK, and money is received', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({
      amount: 12000,
      currency: 'JPY',
      metadata: { purpose: 'stay_balance', subject_id: 'stay_1' },
      allowed_payment_method_types: ['card'],
    });
    expect(pi.id).toMatch(/^pi_/);
    expect(pi.client_secret).toMatch(new RegExp(`^${pi.id}_secret_\\w+$`));
    expect(pi).toMatchObject({
      object: 'payment_intent',
      allowed_payment_method_types: ['card'],
      payment_method_types: ['card'],
      status: 'requires_payment_method',
      amount: 12000,
      currency: 'jpy',
      amount_received: 0,
      metadata: { purpose: 'stay_balance', subject_id: 'stay_1' },
    });

    const got = await t.stripe.paymentIntents.retrieve(pi.id);
    expect(got.id).toBe(pi.id);

    const paid = await t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa' });
    expect(paid).toMatchObject({ status: 'succeeded', amount_received: 12000, payment_method: 'pm_card_visa' });
    expect(paid.latest_charge).toMatch(/^ch_/);
    const charge = t.local.charge(String(paid.latest_charge));
    expect(charge).toMatchObject({
      status: 'succeeded',
      paid: true,
      captured: true,
      amount_captured: 12000,
      amount_refunded: 0,
      refunded: false,
    });
    expect(types(t)).toEqual(['payment_intent.created', 'charge.succeeded', 'payment_intent.succeeded']);
  });

  it('can be created and confirmed in one call (confirm=true)', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({
      amount: 5000,
      currency: 'jpy',
      payment_method: 'pm_card_visa',
      confirm: true,
      automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
    });
    expect(pi.status).toBe('succeeded');
    expect(pi.automatic_payment_methods).toEqual({ enabled: true });
    expect(types(t)).toEqual(['payment_intent.created', 'charge.succeeded', 'payment_intent.succeeded']);
  });
});

describe('when the card is declined', () => {
  it('answers 402 card_declined, leaves the PaymentIntent reusable, emits payment_failed, and a good card then pays it', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 3000, currency: 'jpy' });
    const err = await rejection(t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_chargeDeclined' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(err).toMatchObject({ statusCode: 402, type: 'StripeCardError', code: 'card_declined', decline_code: 'generic_decline' });
    expect(err.payment_intent?.id).toBe(pi.id);

    const after = await t.stripe.paymentIntents.retrieve(pi.id);
    expect(after.status).toBe('requires_payment_method');
    expect(after.last_payment_error).toMatchObject({ type: 'card_error', code: 'card_declined', decline_code: 'generic_decline' });
    expect(after.amount_received).toBe(0);
    expect(types(t)).toEqual(['payment_intent.created', 'charge.failed', 'payment_intent.payment_failed']);

    const paid = await t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa' });
    expect(paid.status).toBe('succeeded');
    expect(paid.last_payment_error).toBeNull();
  });

  it('pm_card_visa_chargeDeclinedInsufficientFunds gives decline_code insufficient_funds', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 3000, currency: 'jpy' });
    const err = await rejection(t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa_chargeDeclinedInsufficientFunds' }));
    expect(err).toMatchObject({ statusCode: 402, code: 'card_declined', decline_code: 'insufficient_funds' });
  });

  it('the declineNextConfirms knob declines a good card once', async () => {
    t = await withLocal();
    t.local.faults.declineNextConfirms = 1;
    const pi = await t.stripe.paymentIntents.create({ amount: 3000, currency: 'jpy' });
    const err = await rejection(t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa' }));
    expect(err).toMatchObject({ statusCode: 402, code: 'card_declined' });
    expect((await t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa' })).status).toBe('succeeded');
  });
});

describe('when payments settle asynchronously (processing knob)', () => {
  it('goes processing → succeeded, emitting payment_intent.processing then payment_intent.succeeded', async () => {
    t = await withLocal();
    t.local.faults.processing = true;
    const pi = await t.stripe.paymentIntents.create({ amount: 8000, currency: 'jpy' });
    const confirmed = await t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa' });
    expect(confirmed.status).toBe('processing');
    expect(confirmed.amount_received).toBe(0);
    expect(t.local.settle(pi.id, 'succeeded').status).toBe(200);
    const done = await t.stripe.paymentIntents.retrieve(pi.id);
    expect(done).toMatchObject({ status: 'succeeded', amount_received: 8000 });
    expect(types(t)).toEqual([
      'payment_intent.created',
      'charge.pending',
      'payment_intent.processing',
      'charge.succeeded',
      'payment_intent.succeeded',
    ]);
  });

  it('goes processing → requires_payment_method with payment_failed when the rail fails, via the control route', async () => {
    t = await withLocal();
    t.local.faults.processing = true;
    const pi = await t.stripe.paymentIntents.create({ amount: 8000, currency: 'jpy', payment_method: 'pm_card_visa', confirm: true });
    expect(pi.status).toBe('processing');
    const res = await fetch(`${t.local.url}/_local/payment_intents/${pi.id}/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outcome: 'failed' }),
    });
    expect(res.status).toBe(402);
    expect((await t.stripe.paymentIntents.retrieve(pi.id)).status).toBe('requires_payment_method');
    expect(types(t).at(-1)).toBe('payment_intent.payment_failed');
  });
});

describe('cancelling', () => {
  it('cancels an unpaid PaymentIntent with its reason and emits payment_intent.canceled', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    const c = await t.stripe.paymentIntents.cancel(pi.id, { cancellation_reason: 'abandoned' });
    expect(c).toMatchObject({ status: 'canceled', cancellation_reason: 'abandoned' });
    expect(c.canceled_at).toEqual(expect.any(Number));
    expect(types(t)).toEqual(['payment_intent.created', 'payment_intent.canceled']);
  });

  it('refuses to cancel a succeeded one: 400 payment_intent_unexpected_state, nothing changes', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy', payment_method: 'pm_card_visa', confirm: true });
    const err = await rejection(t.stripe.paymentIntents.cancel(pi.id));
    expect(err).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(err).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
    expect(t.local.paymentIntent(pi.id)?.status).toBe('succeeded');
    expect(types(t)).not.toContain('payment_intent.canceled');
  });

  it('refuses to confirm a canceled one', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.stripe.paymentIntents.cancel(pi.id);
    const err = await rejection(t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_visa' }));
    expect(err).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
  });
});

describe('bad requests', () => {
  it('a wrong or missing secret key is 401 (StripeAuthenticationError)', async () => {
    t = await withLocal();
    const wrong = new Stripe('sk_test_not_this_one', { host: t.local.host, port: t.local.port, protocol: 'http', maxNetworkRetries: 0 });
    expect(await rejection(wrong.paymentIntents.create({ amount: 1, currency: 'jpy' }))).toBeInstanceOf(
      Stripe.errors.StripeAuthenticationError,
    );
    const res = await fetch(`${t.local.url}/v1/payment_intents`, {
      method: 'POST',
      body: 'amount=1&currency=jpy',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(res.status).toBe(401);
    expect(t.local.events()).toEqual([]);
  });

  it('an unknown id is 404 resource_missing, an unknown parameter 400 parameter_unknown, a missing one 400 parameter_missing', async () => {
    t = await withLocal();
    expect(await rejection(t.stripe.paymentIntents.retrieve('pi_nope'))).toMatchObject({ statusCode: 404, code: 'resource_missing' });
    const unknown = await rejection(t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy', setup_future_usage: 'off_session' }));
    expect(unknown).toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'setup_future_usage' });
    const res = await fetch(`${t.local.url}/v1/payment_intents`, {
      method: 'POST',
      body: 'currency=jpy',
      headers: { authorization: `Bearer ${t.local.secretKey}`, 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'parameter_missing', param: 'amount' } });
    expect(await rejection(t.stripe.paymentIntents.confirm('pi_nope', { payment_method: 'pm_card_visa' }))).toMatchObject({
      statusCode: 404,
    });
  });
});

describe('events', () => {
  it('are listed newest first with limit and pagination, and retrievable by id', async () => {
    t = await withLocal();
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy', payment_method: 'pm_card_visa', confirm: true });
    const all = t.local
      .events()
      .map((e) => e.id)
      .reverse();
    const page1 = await t.stripe.events.list({ limit: 2 });
    expect(page1.data.map((e) => e.id)).toEqual(all.slice(0, 2));
    expect(page1.has_more).toBe(true);
    const page2 = await t.stripe.events.list({ limit: 2, starting_after: all[1] as string });
    expect(page2.data.map((e) => e.id)).toEqual(all.slice(2, 4));
    expect(page2.has_more).toBe(false);
    const only = await t.stripe.events.list({ type: 'payment_intent.succeeded' });
    expect(only.data.map((e) => e.type)).toEqual(['payment_intent.succeeded']);
    const one = await t.stripe.events.retrieve(all[0] as string);
    expect(one).toMatchObject({ object: 'event', type: 'payment_intent.succeeded', livemode: false, api_version: Stripe.API_VERSION });
    expect(one.request?.idempotency_key).toMatch(/^stripe-node-retry-/);
  });
});

describe('the demo pay route', () => {
  it('GET /_local/pay/:id?card=… confirms the PaymentIntent', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    const res = await fetch(`${t.local.url}/_local/pay/${pi.id}?card=pm_card_visa`);
    expect(res.status).toBe(200);
    expect((await t.stripe.paymentIntents.retrieve(pi.id)).status).toBe('succeeded');
  });
});
