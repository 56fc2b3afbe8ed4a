import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * Money whose outcome only a webhook would tell, attacked from outside: the admin API and the guest's
 * return page over HTTP, the real `stripe` SDK against the local Stripe with its fault knobs (Stripe
 * unreachable from the cloud, webhooks dropped or held back, refunds kept pending), signed webhooks
 * delivered to the listening app. A hold that runs out while Stripe cannot be reached must not tell the
 * guest nothing was charged, and must converge once Stripe is back; a refund whose webhook never comes
 * must not stay "being refunded" for ever.
 */
const SECRET = 'whsec_tobira_lost_outcomes';
/** BILLING_RECONCILE_MS, the default: a pending refund or an ended stay's open intent is re-read after this. */
const RECONCILE_MS = 15 * 60_000;

interface PaymentJson {
  id: string;
  intentId: string;
  status: string;
  amountReceived: number;
  amountRefunded: number;
}
interface ViewJson {
  stay: { id: string; status: string };
  payment: PaymentJson;
  payments: PaymentJson[];
}

describe.each(pgBackends())('outcomes whose webhook was lost, on %s', (backend) => {
  let h: StaysApi;
  let n = 0;
  let roomId: string;
  const auth = () => ({ authorization: `Bearer ${h.admin}` });

  const book = async () => {
    n += 1;
    const start = Date.UTC(2027, 7, 1) + n * 4 * 86_400_000;
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    const r = await h.app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(), 'idempotency-key': `bk-${newId()}` },
      payload: { personId: h.personId, roomId, checkIn: iso(start), checkOut: iso(start + 86_400_000), amount: 30_000, currency: 'jpy' },
    });
    expect(r.statusCode).toBe(202);
    return { ...r.json<ViewJson>(), cid: String(r.headers['x-correlation-id']) };
  };
  const get = async (stayId: string) => (await h.app.inject({ method: 'GET', url: `/stays/${stayId}`, headers: auth() })).json<ViewJson>();
  const converge = async () => {
    for (let i = 0; i < 3; i++) {
      await h.local.webhooks.idle();
      await h.cloud.runBilling();
    }
    await h.local.webhooks.idle();
  };
  /** The guest pays at Stripe (their browser reaches it, whatever the cloud's link to it does). */
  const guestPays = async (intentId: string) =>
    expect((await fetch(`${h.local.url}/_local/pay/${intentId}?card=pm_card_visa`)).status).toBe(200);
  const page = async (stayId: string, lang: 'en' | 'ja') =>
    (await h.app.inject({ method: 'GET', url: `/pay/return?stay=${stayId}&lang=${lang}` })).body;
  const refundsAtStripe = (intentId: string) => h.local.refunds().filter((r) => r.payment_intent === intentId);
  /** The cloud cannot reach Stripe, through the passes that make the stay's cancel_intent job give up (12 attempts). */
  const stripeDownUntilTheJobGivesUp = async () => {
    for (let i = 0; i < 13; i++) {
      h.cloud.clock.advance(11 * 60_000);
      await h.cloud.runBilling();
    }
    const dead = await h.t.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM billing_jobs WHERE kind = 'cancel_intent' AND status = 'dead' AND last_code = 'BILLING_UNAVAILABLE'`,
    );
    expect(Number(dead.rows[0]?.n)).toBeGreaterThanOrEqual(1);
  };
  /** The dead billing jobs an operator is shown for this payment. */
  const deadJobsOf = async (paymentId: string) => {
    const r = await h.app.inject({ method: 'GET', url: '/billing/dead-letters?kind=billing-jobs&limit=200', headers: auth() });
    expect(r.statusCode).toBe(200);
    return r
      .json<{ items: { kind: string; subjectId: string; code: string }[] }>()
      .items.filter((j) => j.subjectId === paymentId)
      .map((j) => `${j.kind} ${j.code}`);
  };
  const refundNotices = async (stayId: string) =>
    (
      await h.t.db.query<{ cid: string }>(
        `SELECT cid FROM notification_outbox WHERE template = 'refund_made' AND dedupe_key LIKE $1 ORDER BY id`,
        [`refund_made:rf_pay_${stayId}_%`],
      )
    ).rows.map((r) => r.cid);

  beforeAll(async () => {
    h = await openStaysApi(backend, {
      tag: 'lo',
      secret: SECRET,
      sharedClock: true,
      // the cloud fails fast while Stripe is down: each pass is one attempt per job
      stripeOptions: { maxNetworkRetries: 0, timeout: 3_000 },
    });
    const room = await h.app.inject({
      method: 'POST',
      url: '/rooms',
      headers: auth(),
      payload: { siteId: h.siteId, name: '701', doors: [h.doors[0]] },
    });
    expect(room.statusCode).toBe(201);
    roomId = room.json<{ id: string }>().id;
  });
  afterAll(() => h?.close());
  afterEach(async () => {
    Object.assign(h.local.faults, { unavailable: false, refundsPending: false });
    Object.assign(h.local.webhooks.faults, { drop: false, hold: false });
    await h.local.webhooks.idle();
  });

  describe('a hold that runs out while Stripe cannot be reached', () => {
    it('the page says the money is being checked, never that nothing was charged; a payment made meanwhile, its webhook lost, is refunded once when Stripe is back', async () => {
      const booked = await book();
      const intentId = booked.payment.intentId;
      h.local.faults.unavailable = true;
      h.local.webhooks.faults.drop = true;
      h.cloud.clock.advance(2 * 3_600_000);
      await h.cloud.runBilling(); // the hold sweep expires it
      await h.cloud.runBilling(); // its cancel_intent job cannot reach Stripe
      expect((await get(booked.stay.id)).stay.status).toBe('expired');

      const en = await page(booked.stay.id, 'en');
      expect(en).toContain('data-status="ended"');
      expect(en).toContain('data-money="checking"');
      expect(en).not.toContain('Nothing was charged');
      expect(en).toContain('We are still confirming with the payment provider whether anything was charged');
      expect(en).toContain('<meta http-equiv="refresh" content="30">');
      const ja = await page(booked.stay.id, 'ja');
      expect(ja).toContain('data-money="checking"');
      expect(ja).not.toContain('請求されていません');
      expect(ja).toContain('請求の有無を決済代行会社に確認しています');

      // the guest had the page open and paid; Stripe's webhooks to the cloud are lost
      await guestPays(intentId);
      await stripeDownUntilTheJobGivesUp();
      expect(await page(booked.stay.id, 'en')).toContain('data-money="checking"');
      expect(await deadJobsOf(booked.payment.id)).toEqual(['cancel_intent BILLING_UNAVAILABLE']);

      h.local.faults.unavailable = false;
      h.cloud.clock.advance(RECONCILE_MS);
      await converge();
      const v = await get(booked.stay.id);
      expect(v.stay.status).toBe('expired');
      expect(v.payment).toMatchObject({ status: 'refunded', amountReceived: 30_000, amountRefunded: 30_000 });
      expect(refundsAtStripe(intentId).map((r) => r.amount)).toEqual([30_000]);
      const after = await page(booked.stay.id, 'en');
      expect(after).toContain('data-money="refunded"');
      expect(after).toContain('¥30,000 was refunded');
      expect(after).not.toContain('http-equiv="refresh"');
      expect(await page(booked.stay.id, 'ja')).toContain('返金しました');
      // the sweep did what the job gave up on: nothing is left for an operator to act on
      expect(await deadJobsOf(booked.payment.id)).toEqual([]);
      // the booking's correlation id carries the refund (its notice too)
      expect(await refundNotices(booked.stay.id)).toEqual([booked.cid]);

      // more passes, later sweeps: one refund, one notice
      h.cloud.clock.advance(2 * RECONCILE_MS);
      await converge();
      expect(refundsAtStripe(intentId)).toHaveLength(1);
      expect(await refundNotices(booked.stay.id)).toHaveLength(1);
    });

    it('nobody paid: "being checked" until Stripe is back, then the intent is cancelled at Stripe and the page says nothing was charged', async () => {
      const booked = await book();
      const intentId = booked.payment.intentId;
      h.local.faults.unavailable = true;
      h.cloud.clock.advance(2 * 3_600_000);
      await h.cloud.runBilling();
      await h.cloud.runBilling();
      expect((await get(booked.stay.id)).stay.status).toBe('expired');
      expect(await page(booked.stay.id, 'en')).toContain('data-money="checking"');
      await stripeDownUntilTheJobGivesUp();
      expect(await page(booked.stay.id, 'ja')).not.toContain('請求されていません');

      h.local.faults.unavailable = false;
      await converge();
      // the job has given up: only the sweep, once the stay has been over BILLING_RECONCILE_MS, cancels the intent
      h.cloud.clock.advance(RECONCILE_MS);
      const pass = await h.cloud.runBilling();
      expect(pass).toMatchObject({ intentsReconciled: 1 });
      expect((await h.stripe.paymentIntents.retrieve(intentId)).status).toBe('canceled');
      expect((await get(booked.stay.id)).payment.status).toBe('failed');
      expect(await deadJobsOf(booked.payment.id)).toEqual([]);
      const en = await page(booked.stay.id, 'en');
      expect(en).toContain('data-money="none"');
      expect(en).toContain('Nothing was charged.');
      expect(await page(booked.stay.id, 'ja')).toContain('料金は請求されていません。');
      // the guest can no longer pay it
      expect((await fetch(`${h.local.url}/_local/pay/${intentId}?card=pm_card_visa`)).status).not.toBe(200);
      expect(refundsAtStripe(intentId)).toEqual([]);
    });
  });

  describe('a refund whose webhook never comes', () => {
    /** A stay booked and paid (its webhooks delivered), then cancelled by the desk under `cid`: its refund made pending at Stripe. */
    async function cancelledWithPendingRefund(cid: string): Promise<{ stayId: string; intentId: string; stripeRefundId: string }> {
      const booked = await book();
      await guestPays(booked.payment.intentId);
      await converge();
      expect((await get(booked.stay.id)).stay.status).toBe('confirmed');
      h.local.faults.refundsPending = true;
      h.local.webhooks.faults.hold = true;
      const c = await h.app.inject({
        method: 'POST',
        url: `/stays/${booked.stay.id}/cancel`,
        headers: { ...auth(), 'idempotency-key': `c-${booked.stay.id}`, 'x-correlation-id': cid },
        payload: { reason: 'staff_cancelled' },
      });
      expect(c.statusCode).toBe(202);
      await h.cloud.runBilling(); // the refund job: Stripe makes it, pending
      const [made] = refundsAtStripe(booked.payment.intentId);
      expect(made).toMatchObject({ status: 'pending', amount: 30_000 });
      const p = await page(booked.stay.id, 'en');
      expect(p).toContain('data-money="refunding"');
      expect(p).toContain('¥30,000 is being refunded');
      return { stayId: booked.stay.id, intentId: booked.payment.intentId, stripeRefundId: made?.id ?? '' };
    }

    it('Stripe settles it and the webhook is lost: the sweep reads it from Stripe and records it once, under the correlation id of the cancel; the late webhook changes nothing', async () => {
      const cid = `cancel-${newId()}`;
      const r = await cancelledWithPendingRefund(cid);
      // still pending at Stripe: re-read once per interval, nothing moves
      h.cloud.clock.advance(RECONCILE_MS);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 1, refundsReconciled: 0 });
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 0 });

      expect(h.local.settleRefund(r.stripeRefundId, 'succeeded').status).toBe(200);
      // its refund.updated and charge.refund.updated never arrive (held back, then dropped below)
      await h.cloud.runBilling();
      expect(await page(r.stayId, 'en')).toContain('data-money="refunding"');
      h.cloud.clock.advance(RECONCILE_MS);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 1, refundsReconciled: 1 });
      const v = await get(r.stayId);
      expect(v.payment).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      const en = await page(r.stayId, 'en');
      expect(en).toContain('data-money="refunded"');
      expect(en).toContain('¥30,000 was refunded');
      expect(await page(r.stayId, 'ja')).toContain('返金しました');
      expect(await refundNotices(r.stayId)).toEqual([cid]);

      // the webhooks turn up after all: recorded already, one notice, one refund
      h.local.webhooks.faults.hold = false;
      h.local.webhooks.release('fifo');
      await converge();
      expect(await refundNotices(r.stayId)).toEqual([cid]);
      expect((await get(r.stayId)).payment).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      expect(refundsAtStripe(r.intentId)).toHaveLength(1);
      h.cloud.clock.advance(RECONCILE_MS);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 0 });
    });

    it('Stripe fails it and the webhook is lost: the sweep records the failure, it goes to the dead letters for an operator, and the page still says it is owed', async () => {
      const r = await cancelledWithPendingRefund(`cancel-${newId()}`);
      expect(h.local.settleRefund(r.stripeRefundId, 'failed').status).toBe(200);
      h.local.webhooks.faults.hold = false;
      h.local.webhooks.faults.drop = true;
      h.cloud.clock.advance(RECONCILE_MS);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsReconciled: 1 });
      const rows = await h.t.db.query<{ status: string }>(`SELECT status FROM refunds WHERE stripe_refund_id = $1`, [r.stripeRefundId]);
      expect(rows.rows.map((x) => x.status)).toEqual(['failed']);
      const dead = await h.t.db.query<{ last_code: string }>(
        `SELECT last_code FROM billing_jobs WHERE kind = 'refund' AND dedupe_key LIKE $1 AND status = 'dead'`,
        [`refund:rf_pay_${r.stayId}_%`],
      );
      expect(dead.rows.map((x) => x.last_code)).toEqual(['REFUND_FAILED']);
      const en = await page(r.stayId, 'en');
      expect(en).toContain('data-money="refunding"');
      expect(en).not.toContain('was refunded');
      expect(await refundNotices(r.stayId)).toEqual([]);
    });
  });
});
