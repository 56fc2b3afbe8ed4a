import { pgBackends } from '@tobira/shared/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../src/adapters/db/tokens.js';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * A walk-in's money back, from outside: the admin API over HTTP, the real
 * `stripe` SDK against the local Stripe (its pending and failing refunds),
 * and refunds made in Stripe directly the way the dashboard makes them. The
 * walk-in records every refund as Stripe holds it (never succeeded before
 * Stripe says so), and a pass whose money all went back ends, its key
 * revoked: a door does not open on money the guest has back.
 */
const SECRET = 'whsec_tobira_walk_in_refunds';

interface Refund {
  stripeRefundId: string | null;
  amount: number;
  status: string;
  source: string;
}
interface DeadJob {
  id: number;
  kind: string;
  subjectId: string;
  code: string | null;
  siteId: string | null;
}
interface WalkInBody {
  id: string;
  walkInStatus: string;
  keyId: string | null;
  intentId: string;
  cancelReason: string | null;
  amountReceived: number;
  refunds: Refund[];
}

describe.each(pgBackends())('walk-in refunds on %s', (backend) => {
  let h: StaysApi;
  let n = 0;
  let planId: string;
  const auth = () => ({ authorization: `Bearer ${h.admin}` });
  const post = (url: string, payload: Record<string, unknown> = {}) => h.app.inject({ method: 'POST', url, headers: auth(), payload });
  const get = (url: string) => h.app.inject({ method: 'GET', url, headers: auth() });
  const settle = async () => {
    await h.local.webhooks.idle();
    await h.cloud.runBilling();
    await h.local.webhooks.idle();
    return h.cloud.runBilling();
  };
  const walkIn = async (id: string) => (await get(`/walk-ins/${id}`)).json<WalkInBody>();
  const keyStatus = async (keyId: string) => (await get(`/keys/${keyId}`)).json<{ key: { status: string } }>().key.status;
  const atStripe = (intentId: string) => h.local.refunds().filter((r) => r.payment_intent === intentId);
  const given = (intentId: string) =>
    atStripe(intentId)
      .filter((r) => r.status !== 'failed')
      .map((r) => r.amount);
  const deadJobs = async (id: string, token = h.admin) =>
    (await h.app.inject({ method: 'GET', url: '/billing/dead-letters?kind=billing-jobs', headers: { authorization: `Bearer ${token}` } }))
      .json<{ items: DeadJob[] }>()
      .items.filter((j) => j.subjectId === id);
  const retry = (jobId: number) => post(`/billing/dead-letters/billing-jobs/${jobId}/retry`);

  /** Sold and paid at the desk: paid with its key. */
  async function paidWalkIn(): Promise<WalkInBody> {
    const r = await post('/walk-ins', {
      id: `wi-${h.u}-${++n}`,
      siteId: h.siteId,
      planId,
      personId: h.personId,
      credential: { type: 'pin', value: String(41_000_000 + n) },
    });
    expect(r.statusCode).toBe(202);
    const { id, intentId } = r.json<WalkInBody>();
    expect((await fetch(`${h.local.url}/_local/pay/${intentId}?card=pm_card_visa`)).status).toBe(200);
    await settle();
    const w = await walkIn(id);
    expect(w).toMatchObject({ walkInStatus: 'paid', keyId: `key_${id}`, amountReceived: 1500, refunds: [] });
    return w;
  }

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'wr', secret: SECRET, doors: 1 });
    const p = await post('/plans', {
      id: `plan-${h.u}`,
      siteId: h.siteId,
      name: 'Day pass',
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [h.doors[0]],
      walkInAmount: 1500,
    });
    expect(p.statusCode).toBe(201);
    planId = p.json<{ id: string }>().id;
    const on = await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/stay-settings`,
      headers: auth(),
      payload: { walkInsAllowed: true, cancellationPolicy: { tiers: [], noShowRefundPercent: 0, quotaReturn: 'always' } },
    });
    expect(on.statusCode).toBe(200);
  });
  afterAll(() => h?.close());
  afterEach(async () => {
    Object.assign(h.local.faults, { refundsPending: false, failNextRefunds: 0 });
    h.local.webhooks.faults.drop = false;
    await h.local.webhooks.idle();
  });

  describe('made in Stripe directly (the dashboard, support)', () => {
    it('in full: recorded from Stripe, the pass ends payment_refunded with its key revoked, and nothing more is refunded', async () => {
      const w = await paidWalkIn();
      const re = await h.stripe.refunds.create({ payment_intent: w.intentId });
      await settle();
      expect(await walkIn(w.id)).toMatchObject({
        walkInStatus: 'cancelled',
        cancelReason: 'payment_refunded',
        refunds: [{ stripeRefundId: re.id, amount: 1500, status: 'succeeded', source: 'stripe' }],
      });
      expect(await keyStatus(w.keyId ?? '')).toBe('revoking');
      // the guest has their money back once, not twice
      expect(atStripe(w.intentId).map((r) => r.amount)).toEqual([1500]);
      const dead = (await get('/billing/dead-letters?kind=webhook-events')).json<{ items: unknown[] }>();
      expect(dead.items).toEqual([]);
    });

    it('in part: recorded, the pass and its key kept (an operator alarm)', async () => {
      const w = await paidWalkIn();
      await h.stripe.refunds.create({ payment_intent: w.intentId, amount: 500 });
      await settle();
      expect(await walkIn(w.id)).toMatchObject({
        walkInStatus: 'paid',
        refunds: [{ amount: 500, status: 'succeeded', source: 'stripe' }],
      });
      expect(await keyStatus(w.keyId ?? '')).toBe('issuing');
    });

    it('pending at Stripe: the pass ends at once (the money is on its way back), the refund recorded pending until Stripe settles it', async () => {
      const w = await paidWalkIn();
      h.local.faults.refundsPending = true;
      const re = await h.stripe.refunds.create({ payment_intent: w.intentId });
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ walkInStatus: 'cancelled', refunds: [{ status: 'pending', source: 'stripe' }] });
      expect(await keyStatus(w.keyId ?? '')).toBe('revoking');
      expect(h.local.settleRefund(re.id, 'succeeded').status).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ status: 'succeeded', source: 'stripe' }] });
    });

    it('pending at Stripe with its webhooks lost when Stripe settles it: the billing worker re-reads it after BILLING_RECONCILE_MS and records it once', async () => {
      const w = await paidWalkIn();
      h.local.faults.refundsPending = true;
      const re = await h.stripe.refunds.create({ payment_intent: w.intentId });
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ status: 'pending', source: 'stripe' }] });
      h.local.webhooks.faults.drop = true;
      expect(h.local.settleRefund(re.id, 'succeeded').status).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ status: 'pending', source: 'stripe' }] });
      h.cloud.clock.advance(15 * 60_000);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 1, refundsReconciled: 1 });
      expect(await walkIn(w.id)).toMatchObject({
        refunds: [{ amount: 1500, status: 'succeeded', source: 'stripe', stripeRefundId: re.id }],
      });
      h.cloud.clock.advance(15 * 60_000);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 0 });
      expect(atStripe(w.intentId)).toHaveLength(1);
    });
  });

  describe("the desk's own refund", () => {
    it('pending at Stripe is pending here until Stripe says it succeeded', async () => {
      const w = await paidWalkIn();
      h.local.faults.refundsPending = true;
      expect((await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({
        walkInStatus: 'cancelled',
        refunds: [{ amount: 1500, status: 'pending', source: 'tobira', stripeRefundId: expect.stringMatching(/^re_/) }],
      });
      const [re] = atStripe(w.intentId);
      expect(h.local.settleRefund(re?.id ?? '', 'succeeded').status).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ amount: 1500, status: 'succeeded', source: 'tobira' }] });
    });

    it('failed at Stripe is failed here, never counted as given back', async () => {
      const w = await paidWalkIn();
      h.local.faults.refundsPending = true;
      await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' });
      await settle();
      const [re] = atStripe(w.intentId);
      expect(h.local.settleRefund(re?.id ?? '', 'failed').status).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ amount: 1500, status: 'failed', source: 'tobira' }] });
    });

    it('failed at Stripe after it was made: the job back on the dead-letter list with REFUND_FAILED, and its retry a new attempt refunded once', async () => {
      const w = await paidWalkIn();
      h.local.faults.refundsPending = true;
      await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' });
      await settle();
      const [re] = atStripe(w.intentId);
      expect(h.local.settleRefund(re?.id ?? '', 'failed').status).toBe(200);
      await settle();
      const [dead] = await deadJobs(w.id);
      expect(dead).toMatchObject({ kind: 'walk_in_refund', code: 'REFUND_FAILED', siteId: h.siteId });
      h.local.faults.refundsPending = false;
      expect((await retry(dead?.id ?? 0)).statusCode).toBe(200);
      await settle();
      expect(given(w.intentId)).toEqual([1500]);
      expect(atStripe(w.intentId).map((r) => [r.status, r.metadata?.['refund_id']])).toEqual([
        ['failed', `rf_${w.id}`],
        ['succeeded', `rf_${w.id}_2`],
      ]);
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ amount: 1500, status: 'succeeded', source: 'tobira' }] });
      expect(await deadJobs(w.id)).toEqual([]);
    });

    it('pending at Stripe with its webhooks lost: the billing worker re-reads it from Stripe after BILLING_RECONCILE_MS and records it once', async () => {
      const w = await paidWalkIn();
      h.local.faults.refundsPending = true;
      expect((await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(200);
      await settle();
      const [re] = atStripe(w.intentId);
      h.local.webhooks.faults.drop = true;
      expect(h.local.settleRefund(re?.id ?? '', 'succeeded').status).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({ refunds: [{ status: 'pending', source: 'tobira' }] });
      h.cloud.clock.advance(15 * 60_000);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 1, refundsReconciled: 1 });
      expect(await walkIn(w.id)).toMatchObject({
        refunds: [{ amount: 1500, status: 'succeeded', source: 'tobira', stripeRefundId: re?.id }],
      });
      h.cloud.clock.advance(15 * 60_000);
      expect(await h.cloud.runBilling()).toMatchObject({ refundsRechecked: 0 });
      expect(atStripe(w.intentId)).toHaveLength(1);
    });
    it('refused by Stripe once: failed and on the dead-letter list with its code and site; the operator retry is a new attempt under a new key, refunded once', async () => {
      const w = await paidWalkIn();
      h.local.faults.failNextRefunds = 1;
      expect((await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(200);
      await settle();
      // the guest is owed the money: visible as failed, never pending for ever, and nothing made at Stripe
      expect(await walkIn(w.id)).toMatchObject({
        walkInStatus: 'cancelled',
        refunds: [{ amount: 1500, status: 'failed', source: 'tobira', stripeRefundId: null }],
      });
      expect(given(w.intentId)).toEqual([]);
      const [dead, ...more] = await deadJobs(w.id);
      expect(more).toEqual([]);
      expect(dead).toMatchObject({ kind: 'walk_in_refund', code: 'BILLING_REQUEST_INVALID', siteId: h.siteId });
      // a site's own token sees its dead walk-in job; another site's does not
      const mine = (await createApiToken(h.t.db, { name: `m-${w.id}`, role: 'manager', sites: [h.siteId] }, h.cloud.clock.now())).token;
      expect((await deadJobs(w.id, mine)).map((j) => j.id)).toEqual([dead?.id]);
      expect(await deadJobs(w.id, h.managerOther)).toEqual([]);

      expect((await retry(dead?.id ?? 0)).statusCode).toBe(200);
      await settle();
      expect(await walkIn(w.id)).toMatchObject({
        refunds: [{ amount: 1500, status: 'succeeded', source: 'tobira', stripeRefundId: expect.stringMatching(/^re_/) }],
      });
      // the retry was not the refused key's stored error replayed: a new attempt, made once
      expect(atStripe(w.intentId).map((r) => [r.amount, r.metadata?.['refund_id']])).toEqual([[1500, `rf_${w.id}_2`]]);
      expect(await deadJobs(w.id)).toEqual([]);
      await settle();
      expect(given(w.intentId)).toEqual([1500]);
    });

    it('after part was refunded in Stripe directly: only the rest is refunded, once', async () => {
      const w = await paidWalkIn();
      const re = await h.stripe.refunds.create({ payment_intent: w.intentId, amount: 500 });
      await settle();
      expect((await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(200);
      await settle();
      expect(given(w.intentId)).toEqual([500, 1000]);
      expect(await walkIn(w.id)).toMatchObject({
        walkInStatus: 'cancelled',
        refunds: expect.arrayContaining([
          expect.objectContaining({ stripeRefundId: re.id, amount: 500, status: 'succeeded', source: 'stripe' }),
          expect.objectContaining({ amount: 1000, status: 'succeeded', source: 'tobira' }),
        ]),
      });
      expect((await walkIn(w.id)).refunds).toHaveLength(2);
      expect(await deadJobs(w.id)).toEqual([]);
    });

    it('after part was refunded in Stripe directly with its webhooks lost: the job re-reads Stripe and asks only for the rest, under a new key', async () => {
      const w = await paidWalkIn();
      h.local.webhooks.faults.drop = true;
      await h.stripe.refunds.create({ payment_intent: w.intentId, amount: 500 });
      await h.local.webhooks.idle();
      h.local.webhooks.faults.drop = false;
      expect((await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(200);
      await settle();
      expect(given(w.intentId)).toEqual([500, 1000]);
      expect(atStripe(w.intentId)[1]?.metadata?.['refund_id']).toBe(`rf_${w.id}_2`);
      const after = await walkIn(w.id);
      expect(after.refunds.map((r) => [r.source, r.amount, r.status]).sort()).toEqual([
        ['stripe', 500, 'succeeded'],
        ['tobira', 1000, 'succeeded'],
      ]);
      expect(await deadJobs(w.id)).toEqual([]);
    });

    it('refused, then the rest refunded in Stripe directly (its webhooks lost): the retry re-reads Stripe, owes nothing and refunds nothing', async () => {
      const w = await paidWalkIn();
      await h.stripe.refunds.create({ payment_intent: w.intentId, amount: 500 });
      await settle();
      h.local.faults.failNextRefunds = 1;
      expect((await post(`/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(200);
      await settle();
      const [dead] = await deadJobs(w.id);
      expect(dead).toMatchObject({ kind: 'walk_in_refund', siteId: h.siteId });
      expect(given(w.intentId)).toEqual([500]);
      h.local.webhooks.faults.drop = true;
      await h.stripe.refunds.create({ payment_intent: w.intentId, amount: 1000 });
      await h.local.webhooks.idle();
      h.local.webhooks.faults.drop = false;
      expect((await retry(dead?.id ?? 0)).statusCode).toBe(200);
      await settle();
      expect(given(w.intentId)).toEqual([500, 1000]);
      const after = await walkIn(w.id);
      expect(after.refunds.map((r) => [r.source, r.amount, r.status])).toEqual([
        ['stripe', 500, 'succeeded'],
        ['stripe', 1000, 'succeeded'],
      ]);
      expect(await deadJobs(w.id)).toEqual([]);
    });
  });
});
