import { afterEach, describe, expect, it } from 'vitest';
import Stripe from 'stripe';
import { IDEMPOTENCY_TTL_MS } from '../src/index.js';
import { lastHeaders, rejection, withLocal, type Local } from './helpers.js';

let t: Local;
afterEach(async () => {
  await t.local.close();
});

const form = 'amount=1000&currency=jpy&metadata[purpose]=stay_balance';
function post(l: Local, path: string, body: string, key: string): Promise<Response> {
  return fetch(`${l.local.url}${path}`, {
    method: 'POST',
    body,
    headers: { authorization: `Bearer ${l.local.secretKey}`, 'content-type': 'application/x-www-form-urlencoded', 'idempotency-key': key },
  });
}

describe('an idempotency key reused with the same parameters', () => {
  it('gets the stored answer with Idempotent-Replayed: true, and only one PaymentIntent exists', async () => {
    t = await withLocal();
    const params = { amount: 1000, currency: 'jpy', metadata: { purpose: 'stay_balance', subject_id: 's1' } };
    const first = await t.stripe.paymentIntents.create(params, { idempotencyKey: 'stay_balance:s1:1' });
    const again = await t.stripe.paymentIntents.create(params, { idempotencyKey: 'stay_balance:s1:1' });
    expect(again.id).toBe(first.id);
    expect(again.client_secret).toBe(first.client_secret);
    expect(lastHeaders(first)['idempotent-replayed']).toBeUndefined();
    expect(lastHeaders(again)['idempotent-replayed']).toBe('true');
    expect(lastHeaders(again)['original-request']).toBe(first.lastResponse.requestId);
    expect(again.lastResponse.requestId).not.toBe(first.lastResponse.requestId);
    expect(t.local.events().filter((e) => e.type === 'payment_intent.created')).toHaveLength(1);
  });

  it('replays a stored error too: a declined confirm answers 402 again without a second charge', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    const opts = { idempotencyKey: 'confirm-1' };
    const a = await rejection(t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_chargeDeclined' }, opts));
    const b = await rejection(t.stripe.paymentIntents.confirm(pi.id, { payment_method: 'pm_card_chargeDeclined' }, opts));
    expect(a).toMatchObject({ statusCode: 402, code: 'card_declined' });
    expect(b).toMatchObject({ statusCode: 402, code: 'card_declined', charge: a.charge });
    expect(b.headers?.['idempotent-replayed']).toBe('true');
    expect(t.local.events().filter((e) => e.type === 'charge.failed')).toHaveLength(1);
  });
});

describe('an idempotency key reused with different parameters', () => {
  it('is refused with 400 idempotency_error (StripeIdempotencyError) and nothing is created', async () => {
    t = await withLocal();
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }, { idempotencyKey: 'k1' });
    const err = await rejection(t.stripe.paymentIntents.create({ amount: 2000, currency: 'jpy' }, { idempotencyKey: 'k1' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(err.statusCode).toBe(400);
    expect(t.local.events()).toHaveLength(1);
  });

  it('is refused on another endpoint as well', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }, { idempotencyKey: 'k2' });
    const err = await rejection(t.stripe.paymentIntents.cancel(pi.id, {}, { idempotencyKey: 'k2' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(t.local.paymentIntent(pi.id)?.status).toBe('requires_payment_method');
  });
});

describe('a request whose key is still in flight', () => {
  it('makes a concurrent request with the same key answer 409 idempotency_error; the first one still wins once', async () => {
    t = await withLocal();
    t.local.faults.delayMs = 300;
    const slow = post(t, '/v1/payment_intents', form, 'busy');
    await new Promise((r) => setTimeout(r, 50));
    const second = await post(t, '/v1/payment_intents', form, 'busy');
    expect(second.status).toBe(409);
    expect(await second.json()).toMatchObject({ error: { type: 'idempotency_error' } });
    const first = await slow;
    expect(first.status).toBe(200);
    t.local.faults.delayMs = 0;
    const later = await post(t, '/v1/payment_intents', form, 'busy');
    expect(later.headers.get('idempotent-replayed')).toBe('true');
    const [replayed, original] = [(await later.json()) as { id: string }, (await first.json()) as { id: string }];
    expect(replayed.id).toBe(original.id);
    expect(t.local.events()).toHaveLength(1);
  });
});

describe('answers that are not stored (the endpoint never began)', () => {
  it('a parameter validation 400 leaves the key free: the corrected request with the same key runs', async () => {
    t = await withLocal();
    const bad = await post(t, '/v1/payment_intents', 'amount=ten&currency=jpy', 'fix-me');
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { type: 'invalid_request_error', param: 'amount' } });
    const good = await post(t, '/v1/payment_intents', form, 'fix-me');
    expect(good.status).toBe(200);
    expect(good.headers.get('idempotent-replayed')).toBeNull();
  });

  it('keys are forgotten after 24 hours: the same key then runs anew', async () => {
    let now = Date.UTC(2026, 0, 1);
    t = await withLocal({ clock: { now: () => now } });
    const a = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }, { idempotencyKey: 'old' });
    now += IDEMPOTENCY_TTL_MS - 1;
    expect((await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }, { idempotencyKey: 'old' })).id).toBe(a.id);
    now += 2;
    const b = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }, { idempotencyKey: 'old' });
    expect(b.id).not.toBe(a.id);
  });
});

describe('when Stripe is unavailable', () => {
  it('a 503 surfaces as StripeAPIError with no retries, and nothing is created', async () => {
    t = await withLocal();
    t.local.faults.unavailable = true;
    const err = await rejection(t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(err.statusCode).toBe(503);
    expect(t.local.events()).toEqual([]);
  });

  it('a reset connection surfaces as StripeConnectionError', async () => {
    t = await withLocal();
    Object.assign(t.local.faults, { unavailable: true, unavailableMode: 'reset' });
    const err = await rejection(t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(t.local.events()).toEqual([]);
  });

  it('the SDK retries (maxNetworkRetries) with the same idempotency key until it is back: exactly one PaymentIntent', async () => {
    t = await withLocal();
    t.local.faults.unavailableRequests = 2;
    const stripe = t.client({ maxNetworkRetries: 3 });
    const pi = await stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }, { idempotencyKey: 'retry-me' });
    expect(pi.status).toBe('requires_payment_method');
    const created = t.local.events().filter((e) => e.type === 'payment_intent.created');
    expect(created).toHaveLength(1);
    expect(created[0]?.request.idempotency_key).toBe('retry-me');
    expect(t.local.faults.unavailableRequests).toBe(0);
  });
});

describe('when the effect happens but the answer is lost (failAfterEffect)', () => {
  it('a 500 after the effect: the SDK retry with the same key gets the stored PaymentIntent, not a second one', async () => {
    t = await withLocal();
    t.local.faults.failAfterEffect = 1;
    const pi = await t.client({ maxNetworkRetries: 2 }).paymentIntents.create({ amount: 1000, currency: 'jpy' });
    expect(lastHeaders(pi)['idempotent-replayed']).toBe('true');
    expect(t.local.events().filter((e) => e.type === 'payment_intent.created')).toHaveLength(1);
  });

  it('a reset after a refund: the retry gets the stored refund, money goes back once', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy', payment_method: 'pm_card_visa', confirm: true });
    Object.assign(t.local.faults, { failAfterEffect: 1, failAfterEffectMode: 'reset' });
    const refund = await t.client({ maxNetworkRetries: 2 }).refunds.create({ payment_intent: pi.id }, { idempotencyKey: 'refund:s1:1' });
    expect(refund.amount).toBe(1000);
    expect(lastHeaders(refund)['idempotent-replayed']).toBe('true');
    expect(t.local.refunds()).toHaveLength(1);
  });

  it('without retries the caller only sees the 500, yet the effect is there', async () => {
    t = await withLocal();
    t.local.faults.failAfterEffect = 1;
    const err = await rejection(t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(err.statusCode).toBe(500);
    expect(t.local.events().map((e) => e.type)).toEqual(['payment_intent.created']);
  });
});

describe('when Stripe is slow', () => {
  it('a delay beyond the SDK timeout surfaces as StripeConnectionError (timeout)', async () => {
    t = await withLocal();
    t.local.faults.delayMs = 400;
    const err = await rejection(t.client({ maxNetworkRetries: 0, timeout: 100 }).paymentIntents.retrieve('pi_whatever'));
    expect(err).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(err.message).toMatch(/timeout/i);
  });
});
