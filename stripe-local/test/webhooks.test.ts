import { afterEach, describe, expect, it } from 'vitest';
import Stripe from 'stripe';
import { startReceiver, verify, withLocal, WEBHOOK_SECRET, type Local, type Receiver } from './helpers.js';

let t: Local;
let rx: Receiver;
afterEach(async () => {
  await t.local.close();
  await rx.close();
});

async function setup(answer?: (n: number) => number): Promise<void> {
  rx = await startReceiver(answer);
  t = await withLocal({ webhook: { url: rx.url, secret: WEBHOOK_SECRET } });
}

const payOne = (l: Local): Promise<Stripe.PaymentIntent> =>
  l.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy', payment_method: 'pm_card_visa', confirm: true });

describe('webhook delivery', () => {
  it('POSTs every event, signed so that stripe.webhooks.constructEvent accepts the raw body', async () => {
    await setup();
    const pi = await payOne(t);
    await t.local.webhooks.idle();
    const events = rx.received.map((r) => verify(r));
    expect(events.map((e) => e.type)).toEqual(['payment_intent.created', 'charge.succeeded', 'payment_intent.succeeded']);
    expect(events.map((e) => e.id)).toEqual(t.local.events().map((e) => e.id));
    const succeeded = events[2];
    expect(succeeded?.data.object).toMatchObject({ id: pi.id, status: 'succeeded' });
  });

  it('a receiver with the wrong secret, or a re-serialized body, fails verification', async () => {
    await setup();
    await payOne(t);
    await t.local.webhooks.idle();
    const first = rx.received[0];
    if (!first) throw new Error('nothing delivered');
    expect(() => verify(first, 'whsec_not_the_secret')).toThrow(Stripe.errors.StripeSignatureVerificationError);
    const reserialized = { ...first, rawBody: JSON.stringify(JSON.parse(first.rawBody)) };
    expect(() => verify(reserialized)).toThrow(Stripe.errors.StripeSignatureVerificationError);
  });

  it('retries after the receiver answers 500, with the same event id, until it gets a 2xx', async () => {
    await setup((n) => (n <= 2 ? 500 : 200));
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.local.webhooks.idle();
    const ids = rx.received.map((r) => verify(r).id);
    expect(ids).toHaveLength(3);
    expect(new Set(ids).size).toBe(1);
    expect(t.local.webhooks.attempts().map((a) => [a.attempt, a.status])).toEqual([
      [1, 500],
      [2, 500],
      [3, 200],
    ]);
  });

  it('retries a connection error, and gives up after the configured attempts', async () => {
    rx = await startReceiver();
    await rx.close();
    t = await withLocal({
      webhook: { url: rx.url, secret: WEBHOOK_SECRET },
      webhookRetry: { attempts: 3, backoffMs: 10, maxBackoffMs: 20, timeoutMs: 500 },
    });
    rx = await startReceiver();
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.local.webhooks.idle();
    const attempts = t.local.webhooks.attempts();
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
    expect(attempts.every((a) => a.status === null && a.error !== undefined)).toBe(true);
  });
});

describe('webhook fault knobs', () => {
  it('duplicates: each event is delivered N times with the same id', async () => {
    await setup();
    t.local.webhooks.faults.duplicates = 3;
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.local.webhooks.idle();
    const ids = rx.received.map((r) => verify(r).id);
    expect(ids).toHaveLength(3);
    expect(new Set(ids)).toEqual(new Set([t.local.events()[0]?.id]));
  });

  it('hold and release in reverse: payment_intent.succeeded arrives before payment_intent.created', async () => {
    await setup();
    t.local.webhooks.faults.hold = true;
    await payOne(t);
    await t.local.webhooks.idle();
    expect(rx.received).toEqual([]);
    expect(t.local.webhooks.held()).toHaveLength(3);
    const released = t.local.webhooks.release('reverse');
    await t.local.webhooks.idle();
    const types = rx.received.map((r) => verify(r).type);
    expect(types).toEqual(['payment_intent.succeeded', 'charge.succeeded', 'payment_intent.created']);
    expect(rx.received.map((r) => verify(r).id)).toEqual(released);
  });

  it('a seeded shuffle through the control route is the same order every time', async () => {
    const orders: string[][] = [];
    for (let run = 0; run < 2; run++) {
      await setup();
      await fetch(`${t.local.url}/_local/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ webhooks: { hold: true } }),
      });
      await payOne(t);
      await t.stripe.paymentIntents.create({ amount: 2000, currency: 'jpy' });
      const res = await fetch(`${t.local.url}/_local/webhooks/flush`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ order: 'shuffle', seed: 7 }),
      });
      expect(res.status).toBe(200);
      await t.local.webhooks.idle();
      orders.push(rx.received.map((r) => verify(r).id));
      if (run === 0) {
        await t.local.close();
        await rx.close();
      }
    }
    expect(orders[0]).toHaveLength(4);
    expect(orders[1]).toEqual(orders[0]);
    expect(orders[0]).not.toEqual(t.local.events().map((e) => e.id));
  });

  it('drop: events are recorded (GET /v1/events) but never delivered', async () => {
    await setup();
    t.local.webhooks.faults.drop = true;
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.local.webhooks.idle();
    expect(rx.received).toEqual([]);
    expect((await t.stripe.events.list()).data).toHaveLength(1);
  });

  it('endpoints can be added through the control route', async () => {
    rx = await startReceiver();
    t = await withLocal();
    const res = await fetch(`${t.local.url}/_local/webhooks/endpoints`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: rx.url, secret: WEBHOOK_SECRET }),
    });
    expect(res.status).toBe(200);
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.local.webhooks.idle();
    expect(rx.received.map((r) => verify(r).type)).toEqual(['payment_intent.created']);
  });
});

describe('signature timestamps', () => {
  it('come from the injected clock: a clock 10 minutes behind makes constructEvent refuse a stale signature', async () => {
    rx = await startReceiver();
    t = await withLocal({ webhook: { url: rx.url, secret: WEBHOOK_SECRET }, clock: { now: () => Date.now() - 10 * 60_000 } });
    await t.stripe.paymentIntents.create({ amount: 1000, currency: 'jpy' });
    await t.local.webhooks.idle();
    const first = rx.received[0];
    if (!first) throw new Error('nothing delivered');
    expect(() => verify(first)).toThrow(/timestamp outside the tolerance zone/i);
    expect(Stripe.webhooks.constructEvent(first.rawBody, first.signature, WEBHOOK_SECRET, 3600).type).toBe('payment_intent.created');
  });
});
