import { afterEach, describe, expect, it } from 'vitest';
import Stripe from 'stripe';
import { rejection, withLocal, type Local } from './helpers.js';

let t: Local;
afterEach(async () => {
  await t.local.close();
});

async function paid(l: Local, amount: number): Promise<Stripe.PaymentIntent> {
  return l.stripe.paymentIntents.create({ amount, currency: 'jpy', payment_method: 'pm_card_visa', confirm: true });
}

describe('refunding a paid PaymentIntent', () => {
  it('with no amount refunds everything: the charge is marked refunded, refund.created and charge.refunded are emitted', async () => {
    t = await withLocal();
    const pi = await paid(t, 9000);
    const refund = await t.stripe.refunds.create({ payment_intent: pi.id, reason: 'requested_by_customer', metadata: { stay: 's1' } });
    expect(refund).toMatchObject({
      object: 'refund',
      amount: 9000,
      status: 'succeeded',
      payment_intent: pi.id,
      charge: pi.latest_charge,
      reason: 'requested_by_customer',
      metadata: { stay: 's1' },
      currency: 'jpy',
    });
    expect(refund.id).toMatch(/^re_/);
    expect(t.local.charge(String(pi.latest_charge))).toMatchObject({ amount_refunded: 9000, refunded: true });
    expect((await t.stripe.refunds.retrieve(refund.id)).amount).toBe(9000);
    const last = t.local.events().slice(-2);
    expect(last.map((e) => e.type)).toEqual(['refund.created', 'charge.refunded']);
    expect(last[1]?.data.previous_attributes).toEqual({ amount_refunded: 0, refunded: false });
  });

  it('in parts: partial refunds add up, the charge is refunded only when nothing remains', async () => {
    t = await withLocal();
    const pi = await paid(t, 9000);
    await t.stripe.refunds.create({ payment_intent: pi.id, amount: 3000 });
    expect(t.local.charge(String(pi.latest_charge))).toMatchObject({ amount_refunded: 3000, refunded: false });
    const rest = await t.stripe.refunds.create({ charge: String(pi.latest_charge) });
    expect(rest.amount).toBe(6000);
    expect(t.local.charge(String(pi.latest_charge))).toMatchObject({ amount_refunded: 9000, refunded: true });
  });

  it('more than remains is refused with amount_too_large; a fully refunded charge with charge_already_refunded', async () => {
    t = await withLocal();
    const pi = await paid(t, 9000);
    await t.stripe.refunds.create({ payment_intent: pi.id, amount: 5000 });
    const tooMuch = await rejection(t.stripe.refunds.create({ payment_intent: pi.id, amount: 5000 }));
    expect(tooMuch).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(tooMuch).toMatchObject({ statusCode: 400, code: 'amount_too_large', param: 'amount' });
    await t.stripe.refunds.create({ payment_intent: pi.id });
    const again = await rejection(t.stripe.refunds.create({ payment_intent: pi.id }));
    expect(again).toMatchObject({ statusCode: 400, code: 'charge_already_refunded' });
    expect(t.local.refunds().reduce((sum, r) => sum + r.amount, 0)).toBe(9000);
  });

  it('an unpaid PaymentIntent has nothing to refund', async () => {
    t = await withLocal();
    const pi = await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    expect(await rejection(t.stripe.refunds.create({ payment_intent: pi.id }))).toMatchObject({
      statusCode: 400,
      code: 'charge_not_refundable',
    });
    expect(await rejection(t.stripe.refunds.create({ payment_intent: 'pi_missing' }))).toMatchObject({
      statusCode: 400,
      code: 'resource_missing',
      param: 'payment_intent',
    });
    expect(await rejection(t.stripe.refunds.retrieve('re_missing'))).toMatchObject({ statusCode: 404, code: 'resource_missing' });
    expect(t.local.refunds()).toEqual([]);
  });

  it('the same refund retried with its idempotency key is made once', async () => {
    t = await withLocal();
    const pi = await paid(t, 9000);
    const a = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 4000 }, { idempotencyKey: 'refund:s1:1' });
    const b = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 4000 }, { idempotencyKey: 'refund:s1:1' });
    expect(b.id).toBe(a.id);
    expect(t.local.charge(String(pi.latest_charge))?.amount_refunded).toBe(4000);
  });

  it('are listed per PaymentIntent, newest first', async () => {
    t = await withLocal();
    const pi = await paid(t, 9000);
    const a = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 1000 });
    const b = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 2000 });
    await t.stripe.refunds.create({ payment_intent: (await paid(t, 500)).id });
    const list = await t.stripe.refunds.list({ payment_intent: pi.id, limit: 100 });
    expect(list.data.map((r) => r.id)).toEqual([b.id, a.id]);
  });
});

describe('refunds that do not succeed at once', () => {
  it('the refundsPending knob makes them pending; settling emits refund.updated and charge.refund.updated (and refund.failed)', async () => {
    t = await withLocal();
    t.local.faults.refundsPending = true;
    const pi = await paid(t, 9000);
    const r = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 3000 });
    expect(r.status).toBe('pending');
    // Stripe counts a pending refund on the charge until it fails
    expect(t.local.charge(String(pi.latest_charge))?.amount_refunded).toBe(3000);
    expect(t.local.settleRefund(r.id, 'failed').status).toBe(200);
    expect((await t.stripe.refunds.retrieve(r.id)).status).toBe('failed');
    expect(t.local.charge(String(pi.latest_charge))?.amount_refunded).toBe(0);
    expect(
      t.local
        .events()
        .slice(-3)
        .map((e) => e.type),
    ).toEqual(['refund.updated', 'charge.refund.updated', 'refund.failed']);
    const r2 = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 3000 });
    const res = await fetch(`${t.local.url}/_local/refunds/${r2.id}/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outcome: 'succeeded' }),
    });
    expect(res.status).toBe(200);
    expect((await t.stripe.refunds.retrieve(r2.id)).status).toBe('succeeded');
  });

  it('the refundsRequireAction knob makes them requires_action with a display_details next action; refunds.cancel cancels only those, taking the amount back off the charge', async () => {
    t = await withLocal();
    t.local.faults.refundsRequireAction = true;
    const pi = await paid(t, 9000);
    const r = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 3000 });
    expect(r.status).toBe('requires_action');
    expect(r.next_action?.type).toBe('display_details');
    expect(r.next_action?.display_details?.expires_at).toBeGreaterThan(r.created);
    expect(t.local.charge(String(pi.latest_charge))?.amount_refunded).toBe(3000);
    const c = await t.stripe.refunds.cancel(r.id);
    expect(c).toMatchObject({ id: r.id, status: 'canceled' });
    expect(c.next_action).toBeUndefined();
    expect(t.local.charge(String(pi.latest_charge))?.amount_refunded).toBe(0);
    expect(
      t.local
        .events()
        .slice(-2)
        .map((e) => [e.type, (e.data.previous_attributes as { status?: string } | undefined)?.status]),
    ).toEqual([
      ['refund.updated', 'requires_action'],
      ['charge.refund.updated', 'requires_action'],
    ]);
    // a canceled (or any other) refund cannot be canceled: Stripe's invalid_request_error
    await expect(t.stripe.refunds.cancel(r.id)).rejects.toMatchObject({ type: 'StripeInvalidRequestError', statusCode: 400 });
    // the customer answers: it succeeds; it cannot fail from there (only pending ones fail)
    const r2 = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 3000 });
    expect(t.local.settleRefund(r2.id, 'failed').status).toBe(400);
    expect(t.local.settleRefund(r2.id, 'succeeded').status).toBe(200);
    expect((await t.stripe.refunds.retrieve(r2.id)).status).toBe('succeeded');
    t.local.faults.refundsRequireAction = false;
    const r3 = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 1000 });
    await expect(t.stripe.refunds.cancel(r3.id)).rejects.toMatchObject({ statusCode: 400 });
  });

  it("refunds.retrieve answers Stripe's Refund object: pending with its pending_reason, then the status it settled on (failed with a failure_reason)", async () => {
    t = await withLocal();
    t.local.faults.refundsPending = true;
    const pi = await paid(t, 9000);
    const made = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 3000, metadata: { refund_id: 'rf_1' } });
    const fields = {
      object: 'refund',
      amount: 3000,
      balance_transaction: null,
      charge: pi.latest_charge,
      currency: 'jpy',
      customer: null,
      metadata: { refund_id: 'rf_1' },
      payment_intent: pi.id,
      payment_method: 'pm_card_visa',
      reason: null,
      receipt_number: null,
      source_transfer_reversal: null,
      transfer_reversal: null,
    };
    const pending: Stripe.Refund = await t.stripe.refunds.retrieve(made.id);
    expect(pending).toMatchObject({ ...fields, id: made.id, status: 'pending', pending_reason: 'processing' });
    expect(pending.failure_reason).toBeUndefined();
    expect(t.local.settleRefund(made.id, 'succeeded').status).toBe(200);
    const succeeded = await t.stripe.refunds.retrieve(made.id);
    expect(succeeded).toMatchObject({ ...fields, status: 'succeeded' });
    expect(succeeded.pending_reason).toBeUndefined();
    const other = await t.stripe.refunds.create({ payment_intent: pi.id, amount: 1000 });
    expect(t.local.settleRefund(other.id, 'failed').status).toBe(200);
    expect(await t.stripe.refunds.retrieve(other.id)).toMatchObject({ status: 'failed', failure_reason: 'unknown' });
    // a settled refund does not settle again
    expect(t.local.settleRefund(made.id, 'failed').status).toBe(400);
  });

  it('the failNextRefunds knob refuses one with balance_insufficient, saved under its key: the same key gets it back, a new key runs', async () => {
    t = await withLocal();
    t.local.faults.failNextRefunds = 1;
    const pi = await paid(t, 9000);
    const e = await rejection(t.stripe.refunds.create({ payment_intent: pi.id }, { idempotencyKey: 'refund:p1:1' }));
    expect(e).toMatchObject({ statusCode: 400, code: 'balance_insufficient' });
    const again = await rejection(t.stripe.refunds.create({ payment_intent: pi.id }, { idempotencyKey: 'refund:p1:1' }));
    expect(again).toMatchObject({ statusCode: 400, code: 'balance_insufficient' });
    const fresh = await t.stripe.refunds.create({ payment_intent: pi.id }, { idempotencyKey: 'refund:p1:2' });
    expect(fresh.status).toBe('succeeded');
  });
});

describe('webhook payloads', () => {
  it("are rendered at the endpoint's API version, not at the request's Stripe-Version", async () => {
    t = await withLocal();
    const seen: string[] = [];
    const { createServer } = await import('node:http');
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { api_version: string }).api_version);
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    t.local.webhooks.add({ url: `http://127.0.0.1:${port}/hook`, secret: 'whsec_v', apiVersion: '2025-03-31.basil' });
    const old = new Stripe(t.local.secretKey, {
      host: t.local.host,
      port: t.local.port,
      protocol: 'http',
      apiVersion: '2024-06-20' as Stripe.LatestApiVersion,
    });
    await old.paymentIntents.create({ amount: 100, currency: 'jpy' });
    await t.local.webhooks.idle();
    await new Promise<void>((r) => server.close(() => r()));
    expect(seen).toEqual(['2025-03-31.basil']);
    expect(t.local.events().at(-1)?.api_version).toBe(Stripe.API_VERSION);
  });
});
