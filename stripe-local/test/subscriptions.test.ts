import { afterEach, describe, expect, it } from 'vitest';
import type Stripe from 'stripe';
import { rejection, startReceiver, verify, withLocal, type Local, type Receiver } from './helpers.js';

let t: Local;
let receiver: Receiver | undefined;
afterEach(async () => {
  await t.local.close();
  await receiver?.close();
  receiver = undefined;
});

/** A customer on a monthly 5,000 yen price and its subscription, its first invoice open. */
async function subscribed(l: Local, key = 'membership_initial:m1:1'): Promise<Stripe.Subscription> {
  const customer = await l.stripe.customers.create({ email: 'a@example.test', metadata: { person_id: 'p1' } });
  const price = await l.stripe.prices.create({
    currency: 'jpy',
    unit_amount: 5000,
    recurring: { interval: 'month' },
    product_data: { name: 'Gym' },
  });
  return l.stripe.subscriptions.create(
    {
      customer: customer.id,
      items: [{ price: price.id }],
      payment_behavior: 'default_incomplete',
      metadata: { purpose: 'membership_initial', subject_id: 'm1' },
    },
    { idempotencyKey: key },
  );
}

const invoiceOf = (s: Stripe.Subscription): string => {
  if (typeof s.latest_invoice !== 'string') throw new Error('no invoice');
  return s.latest_invoice;
};

describe('a subscription through the real SDK', () => {
  it('starts incomplete with an open first invoice; paying it with a test card makes it active, with signed events', async () => {
    receiver = await startReceiver();
    t = await withLocal({ webhook: { url: receiver.url, secret: 'whsec_test_tobira_local_receiver' } });
    const sub = await subscribed(t);
    expect(sub).toMatchObject({ object: 'subscription', status: 'incomplete', cancel_at_period_end: false, currency: 'jpy' });
    expect(sub.metadata).toEqual({ purpose: 'membership_initial', subject_id: 'm1' });
    const item = sub.items.data[0];
    expect(item?.current_period_end).toBeGreaterThan(item?.current_period_start ?? Infinity);
    const invoice = await t.stripe.invoices.retrieve(invoiceOf(sub));
    expect(invoice).toMatchObject({ status: 'open', amount_due: 5000, billing_reason: 'subscription_create' });
    expect(invoice.parent?.subscription_details?.subscription).toBe(sub.id);

    const paid = await t.stripe.invoices.pay(invoice.id, { payment_method: 'pm_card_visa' });
    expect(paid).toMatchObject({ status: 'paid', amount_paid: 5000 });
    expect((await t.stripe.subscriptions.retrieve(sub.id)).status).toBe('active');
    await t.local.webhooks.idle();
    const types = receiver.received.map((r) => verify(r).type);
    expect(types).toEqual(
      expect.arrayContaining(['customer.subscription.created', 'invoice.finalized', 'invoice.paid', 'customer.subscription.updated']),
    );
  });

  it('a declined first payment leaves the invoice open and the subscription incomplete (402 card_error)', async () => {
    t = await withLocal();
    const sub = await subscribed(t);
    const e = await rejection(t.stripe.invoices.pay(invoiceOf(sub), { payment_method: 'pm_card_chargeDeclined' }));
    expect(e.statusCode).toBe(402);
    expect(e.code).toBe('card_declined');
    expect((await t.stripe.invoices.retrieve(invoiceOf(sub))).status).toBe('open');
    expect((await t.stripe.subscriptions.retrieve(sub.id)).status).toBe('incomplete');
    expect(t.local.events().map((x) => x.type)).toContain('invoice.payment_failed');
  });

  it('the same idempotency key answers the same subscription; other parameters with it are refused', async () => {
    t = await withLocal();
    const a = await subscribed(t, 'membership_initial:m2:1');
    const customer = a.customer;
    const again = await t.stripe.subscriptions.create(
      {
        customer: typeof customer === 'string' ? customer : customer.id,
        items: [{ price: a.items.data[0]?.price.id ?? '' }],
        payment_behavior: 'default_incomplete',
        metadata: { purpose: 'membership_initial', subject_id: 'm1' },
      },
      { idempotencyKey: 'membership_initial:m2:1' },
    );
    expect(again.id).toBe(a.id);
    expect(t.local.events().filter((e) => e.type === 'customer.subscription.created')).toHaveLength(1);
    const replay = await rejection(
      t.stripe.subscriptions.create(
        { customer: 'cus_other', items: [{ price: 'price_x' }], metadata: { purpose: 'membership_initial', subject_id: 'm1' } },
        { idempotencyKey: 'membership_initial:m2:1' },
      ),
    );
    expect(replay.type).toBe('StripeIdempotencyError');
  });

  it('cancel_at_period_end is scheduled by update, and the period boundary ends the subscription', async () => {
    t = await withLocal();
    const sub = await subscribed(t);
    await t.stripe.invoices.pay(invoiceOf(sub), { payment_method: 'pm_card_visa' });
    const scheduled = await t.stripe.subscriptions.update(sub.id, { cancel_at_period_end: true });
    expect(scheduled).toMatchObject({ status: 'active', cancel_at_period_end: true, cancel_at: sub.items.data[0]?.current_period_end });
    const r = await fetch(`${t.local.url}/_local/subscriptions/${sub.id}/advance`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(r.status).toBe(200);
    expect(await t.stripe.subscriptions.retrieve(sub.id)).toMatchObject({ status: 'canceled' });
    expect(t.local.events().at(-1)?.type).toBe('customer.subscription.deleted');
  });

  it('a renewal charges the default card: paid keeps it active; failed makes it past_due until paid or given up', async () => {
    t = await withLocal();
    const sub = await subscribed(t);
    await t.stripe.invoices.pay(invoiceOf(sub), { payment_method: 'pm_card_visa' });
    const end1 = sub.items.data[0]?.current_period_end ?? 0;
    t.local.advanceSubscription(sub.id, 'paid');
    const renewed = await t.stripe.subscriptions.retrieve(sub.id);
    expect(renewed.status).toBe('active');
    expect(renewed.items.data[0]?.current_period_start).toBe(end1);
    expect((await t.stripe.invoices.retrieve(invoiceOf(renewed))).status).toBe('paid');

    t.local.advanceSubscription(sub.id, 'failed');
    const due = await t.stripe.subscriptions.retrieve(sub.id);
    expect(due.status).toBe('past_due');
    expect((await t.stripe.invoices.retrieve(invoiceOf(due))).status).toBe('open');
    await t.stripe.invoices.pay(invoiceOf(due));
    expect((await t.stripe.subscriptions.retrieve(sub.id)).status).toBe('active');

    t.local.advanceSubscription(sub.id, 'failed');
    t.local.giveUpSubscription(sub.id);
    const gone = await t.stripe.subscriptions.retrieve(sub.id);
    expect(gone).toMatchObject({ status: 'canceled', cancellation_details: { reason: 'payment_failed' } });
  });

  it('cancel (DELETE) ends it now; a second cancel with a new key is 404 resource_missing as on Stripe, with the same key replayed', async () => {
    t = await withLocal();
    const sub = await subscribed(t);
    await t.stripe.invoices.pay(invoiceOf(sub), { payment_method: 'pm_card_visa' });
    const c = await t.stripe.subscriptions.cancel(sub.id, {}, { idempotencyKey: `cancel:${sub.id}` });
    expect(c.status).toBe('canceled');
    const again = await t.stripe.subscriptions.cancel(sub.id, {}, { idempotencyKey: `cancel:${sub.id}` });
    expect(again.status).toBe('canceled');
    const e = await rejection(t.stripe.subscriptions.cancel(sub.id));
    expect(e).toMatchObject({ statusCode: 404, code: 'resource_missing' });
    // still there to read, and a schedule on it is refused with the SDK's own code
    expect((await t.stripe.subscriptions.retrieve(sub.id)).status).toBe('canceled');
    const u = await rejection(t.stripe.subscriptions.update(sub.id, { cancel_at_period_end: true }));
    expect(u).toMatchObject({ statusCode: 400, code: 'invalid_canceled_subscription_fields' });
  });

  it('an unpaid subscription cancelled before payment voids its invoice: nothing can be paid or charged after the end', async () => {
    t = await withLocal();
    const sub = await subscribed(t);
    const c = await t.stripe.subscriptions.cancel(sub.id, {}, { idempotencyKey: `cancel:${sub.id}` });
    expect(c.status).toBe('canceled');
    expect((await t.stripe.invoices.retrieve(invoiceOf(sub))).status).toBe('void');
    const e = await rejection(t.stripe.invoices.pay(invoiceOf(sub), { payment_method: 'pm_card_visa' }));
    expect(e).toMatchObject({ statusCode: 400, code: 'invoice_not_open' });
    expect((await t.stripe.invoicePayments.list({ invoice: invoiceOf(sub) })).data).toEqual([]);
  });

  it("a paid invoice names its PaymentIntent (InvoicePayment), whose money is refunded as any PaymentIntent's", async () => {
    t = await withLocal();
    const sub = await subscribed(t);
    await t.stripe.invoices.pay(invoiceOf(sub), { payment_method: 'pm_card_visa' });
    const payments = await t.stripe.invoicePayments.list({ invoice: invoiceOf(sub), status: 'paid' });
    expect(payments.data).toHaveLength(1);
    const [payment] = payments.data;
    expect(payment).toMatchObject({ object: 'invoice_payment', invoice: invoiceOf(sub), amount_paid: 5000, status: 'paid' });
    const pi = payment?.payment.payment_intent;
    if (typeof pi !== 'string') throw new Error('no PaymentIntent');
    expect(await t.stripe.paymentIntents.retrieve(pi)).toMatchObject({ status: 'succeeded', amount_received: 5000, currency: 'jpy' });
    const refund = await t.stripe.refunds.create({ payment_intent: pi }, { idempotencyKey: 'refund:membership:m1:1' });
    expect(refund).toMatchObject({ status: 'succeeded', amount: 5000 });
    const again = await t.stripe.refunds.create({ payment_intent: pi }, { idempotencyKey: 'refund:membership:m1:1' });
    expect(again.id).toBe(refund.id);
    expect((await t.stripe.refunds.list({ payment_intent: pi })).data).toHaveLength(1);
  });

  it('is unavailable like every /v1 route when the fault is set', async () => {
    t = await withLocal();
    t.local.faults.unavailable = true;
    const e = await rejection(t.stripe.customers.create({}));
    expect(e.statusCode).toBe(503);
  });
});
