import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * The money of a stay that ends without being delivered, over HTTP, with
 * the real SDK against the local Stripe delivering its signed webhooks to
 * the listening app (money received less refunded is what the policy keeps): a paid deposit comes back when the stay
 * fails or its hold runs out, money that lands after the stay ended is
 * refunded once, a declined card leaves the hold for a retry with another
 * card, a pending stay can be cancelled, and the return page says what
 * happened to the money from the ledger, never from the query string.
 */
const SECRET = 'whsec_tobira_stays_money';

interface PaymentJson {
  id: string;
  purpose: string;
  intentId: string;
  status: string;
  amountReceived: number;
  amountRefunded: number;
}
interface ViewJson {
  stay: { id: string; status: string; keyId: string | null; cancelReason: string | null };
  payments: PaymentJson[];
  payment: PaymentJson;
}

describe.each(pgBackends())('the money of stays that end on %s', (backend) => {
  let h: StaysApi;
  let n = 0;

  const auth = () => ({ authorization: `Bearer ${h.admin}` });
  let roomId: string;
  const dates = () => {
    n += 1;
    const start = Date.UTC(2027, 4, 1) + n * 4 * 86_400_000;
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    return { checkIn: iso(start), checkOut: iso(start + 2 * 86_400_000) };
  };
  const book = async (over: Record<string, unknown> = {}) => {
    const r = await h.app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(), 'idempotency-key': `bk-${newId()}` },
      payload: { personId: h.personId, roomId, ...dates(), amount: 30_000, currency: 'jpy', ...over },
    });
    expect(r.statusCode).toBe(202);
    return r.json<ViewJson>();
  };
  const get = async (stayId: string) => (await h.app.inject({ method: 'GET', url: `/stays/${stayId}`, headers: auth() })).json<ViewJson>();
  /** The guest pays at the local Stripe; its signed webhooks reach the app; the worker runs. */
  const pay = async (intentId: string, card = 'pm_card_visa') => {
    await fetch(`${h.local.url}/_local/pay/${intentId}?card=${card}`);
    await converge();
  };
  const converge = async () => {
    for (let i = 0; i < 3; i++) {
      await h.local.webhooks.idle();
      await h.cloud.runBilling();
    }
    await h.local.webhooks.idle();
  };
  const page = async (stayId: string, lang: 'en' | 'ja', query = '') =>
    (await h.app.inject({ method: 'GET', url: `/pay/return?stay=${stayId}&lang=${lang}${query}` })).body;
  const refundsOf = (intentId: string) => h.local.refunds().filter((r) => r.payment_intent === intentId);
  const deposit = (v: ViewJson) => v.payments.find((p) => p.purpose === 'stay_deposit') as PaymentJson;
  const balance = (v: ViewJson) => v.payments.find((p) => p.purpose === 'stay_balance') as PaymentJson;

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'sm', secret: SECRET, sharedClock: true });
    const room = await h.app.inject({
      method: 'POST',
      url: '/rooms',
      headers: auth(),
      payload: { siteId: h.siteId, name: '501', doors: [h.doors[0]] },
    });
    expect(room.statusCode).toBe(201);
    roomId = room.json<{ id: string }>().id;
  });
  afterAll(() => h?.close());

  describe('when the deposit is paid and the balance card is declined', () => {
    it('the hold stands for a retry; when it runs out the stay expires and the deposit comes back once; the page says so in en and ja', async () => {
      const booked = await book({ deposit: 10_000 });
      await pay(deposit(booked).intentId);
      expect(deposit(await get(booked.stay.id))).toMatchObject({ status: 'succeeded', amountReceived: 10_000 });

      await pay(balance(booked).intentId, 'pm_card_chargeDeclined');
      // Stripe puts a declined intent back to requires_payment_method, to be paid with another card: the stay waits
      expect((await get(booked.stay.id)).stay.status).toBe('pending');

      h.cloud.clock.advance(2 * 3_600_000);
      await converge();
      const ended = await get(booked.stay.id);
      expect(ended.stay.status).toBe('expired');
      expect(deposit(ended)).toMatchObject({ status: 'refunded', amountReceived: 10_000, amountRefunded: 10_000 });
      expect(refundsOf(deposit(booked).intentId).map((r) => r.amount)).toEqual([10_000]);
      expect(refundsOf(balance(booked).intentId)).toEqual([]);

      const en = await page(booked.stay.id, 'en');
      expect(en).toContain('data-status="ended"');
      expect(en).toContain('data-money="refunded"');
      expect(en).not.toContain('Nothing was charged');
      expect(en).toContain('¥10,000 was refunded');
      const ja = await page(booked.stay.id, 'ja');
      expect(ja).toContain('data-money="refunded"');
      expect(ja).not.toContain('請求されていません');
      expect(ja).toContain('返金しました');

      // more passes and the balance intent's cancellation change nothing: one refund
      await converge();
      expect(refundsOf(deposit(booked).intentId)).toHaveLength(1);
    });

    it('a retry with another card within the hold pays the balance and confirms the stay with its key', async () => {
      const booked = await book({ deposit: 10_000 });
      await pay(deposit(booked).intentId);
      await pay(balance(booked).intentId, 'pm_card_chargeDeclined');
      expect((await get(booked.stay.id)).stay.status).toBe('pending');
      await pay(balance(booked).intentId, 'pm_card_mastercard');
      const v = await get(booked.stay.id);
      expect(v.stay).toMatchObject({ status: 'confirmed', keyId: `key_${booked.stay.id}` });
      expect(h.local.refunds().filter((r) => v.payments.some((p) => p.intentId === r.payment_intent))).toEqual([]);
    });
  });

  describe('when the balance intent is cancelled after the deposit was paid', () => {
    it('the stay fails and the deposit comes back once; the page does not say nothing was charged', async () => {
      const booked = await book({ deposit: 12_000 });
      await pay(deposit(booked).intentId);
      await h.stripe.paymentIntents.cancel(balance(booked).intentId);
      await converge();
      const v = await get(booked.stay.id);
      expect(v.stay.status).toBe('failed');
      expect(deposit(v)).toMatchObject({ status: 'refunded', amountRefunded: 12_000 });
      expect(refundsOf(deposit(booked).intentId).map((r) => r.amount)).toEqual([12_000]);
      const en = await page(booked.stay.id, 'en');
      expect(en).toContain('data-money="refunded"');
      expect(en).not.toContain('Nothing was charged');
    });
  });

  describe('when money lands after the stay ended', () => {
    it('the late payment is refunded in full, exactly once, and the page says it was refunded', async () => {
      const booked = await book();
      h.cloud.clock.advance(2 * 3_600_000);
      await h.cloud.runBilling(); // the hold sweep expires it; its intent's cancellation is queued for the next pass
      expect((await get(booked.stay.id)).stay.status).toBe('expired');
      // the guest pays before the cancellation reaches Stripe
      await pay(booked.payment.intentId);
      const v = await get(booked.stay.id);
      expect(v.stay).toMatchObject({ status: 'expired', keyId: null });
      expect(v.payment).toMatchObject({ status: 'refunded', amountReceived: 30_000, amountRefunded: 30_000 });
      expect(refundsOf(booked.payment.intentId).map((r) => r.amount)).toEqual([30_000]);
      expect(await page(booked.stay.id, 'en')).toContain('data-money="refunded"');
      await converge();
      expect(refundsOf(booked.payment.intentId)).toHaveLength(1);
    });
  });

  describe('the return page', () => {
    it("does not take Stripe.js's redirect_status from the query string for a payment", async () => {
      const booked = await book();
      const claim = `&payment_intent=${booked.payment.intentId}&redirect_status=succeeded`;
      const en = await page(booked.stay.id, 'en', claim);
      expect(en).toContain('data-status="pending"');
      expect(en).not.toContain('Paid.');
      expect(await page(booked.stay.id, 'ja', claim)).not.toContain('お支払い済み');
      await pay(booked.payment.intentId);
      expect(await page(booked.stay.id, 'en', '&redirect_status=failed')).toContain('data-status="paid"');
    });

    it('says nothing was charged only when nothing was', async () => {
      const booked = await book();
      h.cloud.clock.advance(2 * 3_600_000);
      await converge();
      const en = await page(booked.stay.id, 'en', '&redirect_status=succeeded');
      expect(en).toContain('data-status="ended"');
      expect(en).toContain('data-money="none"');
      expect(en).toContain('Nothing was charged.');
    });
  });

  describe('when a pending stay is cancelled', () => {
    it('by the guest or the desk: 202, its intent cancelled at Stripe, its nights free, a paid deposit refunded by the policy', async () => {
      const d = dates();
      const booked = await book({ ...d, deposit: 10_000 });
      await pay(deposit(booked).intentId);
      const c = await h.app.inject({
        method: 'POST',
        url: `/stays/${booked.stay.id}/cancel`,
        headers: { ...auth(), 'idempotency-key': `c-${booked.stay.id}` },
        payload: { reason: 'staff_cancelled' },
      });
      expect(c.statusCode).toBe(202);
      expect(c.json()).toMatchObject({ code: 'STAY_CANCELLED', stay: { status: 'cancelled', cancelReason: 'staff_cancelled' } });
      await converge();
      const intent = await h.stripe.paymentIntents.retrieve(balance(booked).intentId);
      expect(intent.status).toBe('canceled');
      expect(refundsOf(deposit(booked).intentId).map((r) => r.amount)).toEqual([10_000]);
      expect(await page(booked.stay.id, 'en')).toContain('data-money="refunded"');
      // the same nights book again
      await book(d);
    });
  });

  describe('when one door belongs to two rooms', () => {
    it('the second booking of the same nights is 409 ROOM_UNAVAILABLE with nothing held; the nights free again once the first ends', async () => {
      const other = await h.app.inject({
        method: 'POST',
        url: '/rooms',
        headers: auth(),
        payload: { siteId: h.siteId, name: '501-suite', doors: [h.doors[0]] },
      });
      expect(other.statusCode).toBe(201);
      const suite = other.json<{ id: string }>().id;
      const d = dates();
      const first = await book({ ...d });
      const second = await h.app.inject({
        method: 'POST',
        url: '/stays',
        headers: { ...auth(), 'idempotency-key': `bk-${newId()}` },
        payload: { personId: h.personId, roomId: suite, ...d, amount: 30_000, currency: 'jpy' },
      });
      expect(second.statusCode).toBe(409);
      expect(second.json()).toMatchObject({ code: 'ROOM_UNAVAILABLE' });
      const held = await h.t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM stays WHERE room_id = $1', [suite]);
      expect(held.rows[0]?.n).toBe(0);
      const c = await h.app.inject({
        method: 'POST',
        url: `/stays/${first.stay.id}/cancel`,
        headers: { ...auth(), 'idempotency-key': `c-${first.stay.id}` },
        payload: { reason: 'guest_cancelled' },
      });
      expect(c.statusCode).toBe(202);
      const again = await h.app.inject({
        method: 'POST',
        url: '/stays',
        headers: { ...auth(), 'idempotency-key': `bk-${newId()}` },
        payload: { personId: h.personId, roomId: suite, ...d, amount: 30_000, currency: 'jpy' },
      });
      expect(again.statusCode).toBe(202);
    });
  });
});
