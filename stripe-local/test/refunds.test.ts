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
});
