import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * Money and Stripe converging, attacked from outside: the admin API over
 * HTTP, the real `stripe` SDK against the local Stripe with its fault knobs
 * (a Stripe slower than the cloud's client timeout, a connection reset,
 * pending and failing refunds, a refusal saved under its key), and the
 * signed webhooks it delivers to the listening app. Refunds made in Stripe
 * directly (the dashboard) go through the same SDK call a support agent's
 * dashboard makes.
 */
const SECRET = 'whsec_tobira_billing_reconcile';
const TIMEOUT_MS = 1_500;
const SLOW_MS = 2_500;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

interface MembershipBody {
  id: string;
  membershipStatus: string;
  version: number;
  subscriptionId: string | null;
  firstInvoiceId: string | null;
  cancelAtPeriodEnd: boolean;
  suspended: boolean;
  keyId: string | null;
  endReason: string | null;
  endedBy: string | null;
  billingStopPending: string | null;
  code: string;
}

describe.each(pgBackends())('billing reconciliation over HTTP on %s', (backend) => {
  let h: StaysApi;
  let n = 0;
  let roomId: string;
  const auth = () => ({ authorization: `Bearer ${h.admin}` });
  const post = (url: string, payload: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
    h.app.inject({ method: 'POST', url, headers: { ...auth(), ...headers }, payload });
  const get = (url: string) => h.app.inject({ method: 'GET', url, headers: auth() });
  const settle = async () => {
    await h.local.webhooks.idle();
    return h.cloud.runBilling();
  };
  const membership = async (id: string) => (await get(`/memberships/${id}`)).json<MembershipBody>();
  const person = async () => {
    const id = `p-${h.u}-${++n}`;
    expect((await h.cloud.createPerson({ id, name: `Member ${n}` })).status).toBe('applied');
    return id;
  };

  async function plan(): Promise<string> {
    const r = await post('/plans', {
      id: `plan-${h.u}-${++n}`,
      siteId: h.siteId,
      name: `Lounge ${n}`,
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [h.doors[0]],
      membersOnly: true,
      walkInAmount: 1500,
      graceSeconds: 3600,
    });
    expect(r.statusCode).toBe(201);
    return r.json<{ id: string }>().id;
  }

  /** Applied, approved and paid over HTTP: active with its key. */
  async function activeMember(planId: string): Promise<MembershipBody> {
    const personId = await person();
    const a = await post('/memberships', { planId, personId });
    expect(a.statusCode).toBe(201);
    const id = a.json<MembershipBody>().id;
    const ap = await post(`/memberships/${id}/approve`);
    expect(ap.statusCode).toBe(200);
    expect(h.local.payInvoice(ap.json<MembershipBody>().firstInvoiceId ?? '').status).toBe(200);
    await settle();
    const m = await membership(id);
    expect(m).toMatchObject({ membershipStatus: 'active', keyId: `key_${id}_1` });
    return m;
  }

  /** A renewal that failed, past the plan's grace: past due with the key revoked. */
  async function suspendedMember(planId: string): Promise<MembershipBody> {
    const m = await activeMember(planId);
    expect(h.local.advanceSubscription(m.subscriptionId ?? '', 'failed').status).toBe(200);
    await settle();
    h.cloud.clock.advance(3_601_000);
    await settle();
    const s = await membership(m.id);
    expect(s).toMatchObject({ membershipStatus: 'past_due', suspended: true });
    return s;
  }

  /** A stay of one night booked over HTTP (30 000 JPY), not paid yet; `from`: the first day of the months it is put in. */
  async function booked(from = Date.UTC(2027, 5, 1)): Promise<{ stay: { id: string }; payment: { id: string; intentId: string } }> {
    n += 1;
    const start = from + n * 3 * 86_400_000;
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    const b = await post(
      '/stays',
      { personId: h.personId, roomId, checkIn: iso(start), checkOut: iso(start + 86_400_000), amount: 30_000, currency: 'jpy' },
      { 'idempotency-key': `bk-${newId()}` },
    );
    expect(b.statusCode).toBe(202);
    return b.json<{ stay: { id: string }; payment: { id: string; intentId: string } }>();
  }

  /** A stay booked and paid over HTTP: confirmed with its key. */
  async function paidStay(): Promise<{ stayId: string; intentId: string; keyId: string; paymentId: string }> {
    const body = await booked();
    expect((await fetch(`${h.local.url}/_local/pay/${body.payment.intentId}?card=pm_card_visa`)).status).toBe(200);
    await settle();
    const stay = (await get(`/stays/${body.stay.id}`)).json<{ stay: { status: string; keyId: string } }>();
    expect(stay.stay.status).toBe('confirmed');
    return { stayId: body.stay.id, intentId: body.payment.intentId, keyId: stay.stay.keyId, paymentId: body.payment.id };
  }

  const paymentsOf = async (stayId: string) =>
    (await get(`/stays/${stayId}/payments`)).json<{
      items: { status: string; amountRefunded: number; refunds: { status: string; amount: number; stripeRefundId: string | null }[] }[];
    }>().items;
  const keyStatus = async (keyId: string) => (await get(`/keys/${keyId}`)).json<{ key: { status: string } }>().key.status;

  beforeAll(async () => {
    h = await openStaysApi(backend, {
      tag: 'rc',
      secret: SECRET,
      doors: 2,
      // the cloud gives up on Stripe long before a slow Stripe answers
      stripeOptions: { maxNetworkRetries: 0, timeout: TIMEOUT_MS },
    });
    const room = await post('/rooms', { siteId: h.siteId, name: 'R1', doors: [h.doors[1]] });
    expect(room.statusCode).toBe(201);
    roomId = room.json<{ id: string }>().id;
    const on = await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/stay-settings`,
      headers: auth(),
      payload: { walkInsAllowed: true },
    });
    expect(on.statusCode).toBe(200);
  });
  afterAll(() => h?.close());
  afterEach(async () => {
    Object.assign(h.local.faults, {
      delayMs: 0,
      unavailable: false,
      unavailableMode: 'error',
      refundsPending: false,
      refundsRequireAction: false,
      failNextRefunds: 0,
    });
    await h.local.webhooks.idle();
  });

  describe('a self-cancel whose Stripe call has no known outcome', () => {
    it('answered after the client gave up: 202 MEMBERSHIP_END_PENDING, then ending from what Stripe did, and the period end ends it as a self-cancel', async () => {
      const m = await activeMember(await plan());
      h.local.faults.delayMs = SLOW_MS;
      const r = await post(`/memberships/${m.id}/self-cancel`);
      expect(r.statusCode).toBe(202);
      expect(r.json()).toMatchObject({
        status: 'applied',
        code: 'MEMBERSHIP_END_PENDING',
        membershipStatus: 'active',
        billingStopPending: 'cancel_at_period_end',
      });
      // Stripe did schedule it, after the cloud stopped waiting
      await until('Stripe to schedule the end', () => h.local.subscription(m.subscriptionId ?? '')?.cancel_at_period_end === true);
      h.local.faults.delayMs = 0;
      h.cloud.clock.advance(120_000);
      await settle();
      expect(await membership(m.id)).toMatchObject({
        membershipStatus: 'ending',
        cancelAtPeriodEnd: true,
        billingStopPending: null,
        endReason: 'self_cancel',
        endedBy: 'member',
      });
      expect(await keyStatus(m.keyId ?? '')).toBe('issuing');
      expect(h.local.advanceSubscription(m.subscriptionId ?? '').status).toBe(200);
      await settle();
      expect(await membership(m.id)).toMatchObject({ membershipStatus: 'ended', endReason: 'self_cancel', endedBy: 'member' });
      expect(await keyStatus(m.keyId ?? '')).toBe('revoking');
    });

    it('a connection reset before Stripe saw it: pending, and the reconciling job finds nothing scheduled and makes the stop itself', async () => {
      const m = await activeMember(await plan());
      Object.assign(h.local.faults, { unavailable: true, unavailableMode: 'reset' });
      const r = await post(`/memberships/${m.id}/self-cancel`);
      expect(r.statusCode).toBe(202);
      expect(r.json()).toMatchObject({ code: 'MEMBERSHIP_END_PENDING', billingStopPending: 'cancel_at_period_end' });
      Object.assign(h.local.faults, { unavailable: false, unavailableMode: 'error' });
      expect(h.local.subscription(m.subscriptionId ?? '')).toMatchObject({ cancel_at_period_end: false });
      h.cloud.clock.advance(120_000);
      await settle();
      expect(h.local.subscription(m.subscriptionId ?? '')).toMatchObject({ cancel_at_period_end: true });
      await settle();
      expect(await membership(m.id)).toMatchObject({ membershipStatus: 'ending', billingStopPending: null, endReason: 'self_cancel' });
    });

    it('a 503 from Stripe (refused before any endpoint ran) is still 503 BILLING_UNAVAILABLE with nothing changed', async () => {
      const m = await activeMember(await plan());
      h.local.faults.unavailable = true;
      const r = await post(`/memberships/${m.id}/self-cancel`);
      expect(r.statusCode).toBe(503);
      expect(r.json()).toMatchObject({ code: 'BILLING_UNAVAILABLE' });
      h.local.faults.unavailable = false;
      expect(await membership(m.id)).toMatchObject({ membershipStatus: 'active', version: m.version, billingStopPending: null });
    });
  });

  describe('a cancellation scheduled in Stripe directly (the dashboard)', () => {
    it('is read from customer.subscription.updated: the membership is ending, and ends at period end as a self-cancel, not a force-cancel', async () => {
      const m = await activeMember(await plan());
      await h.stripe.subscriptions.update(m.subscriptionId ?? '', { cancel_at_period_end: true });
      await settle();
      expect(await membership(m.id)).toMatchObject({
        membershipStatus: 'ending',
        cancelAtPeriodEnd: true,
        endReason: 'self_cancel',
        endedBy: 'stripe',
      });
      expect(await keyStatus(m.keyId ?? '')).toBe('issuing');
      h.local.advanceSubscription(m.subscriptionId ?? '');
      await settle();
      expect(await membership(m.id)).toMatchObject({ membershipStatus: 'ended', endReason: 'self_cancel' });
    });
  });

  describe('an expectedVersion that goes stale while Stripe stops billing', () => {
    it('converges: Stripe canceled the subscription, so the membership ends too (not a 409 that leaves them apart)', async () => {
      const m = await activeMember(await plan());
      expect(h.local.advanceSubscription(m.subscriptionId ?? '', 'failed').status).toBe(200);
      await settle();
      const due = await membership(m.id);
      expect(due).toMatchObject({ membershipStatus: 'past_due', suspended: false });
      h.local.faults.delayMs = 600;
      const cancel = post(`/memberships/${m.id}/force-cancel`, { note: 'fraud', expectedVersion: due.version });
      await sleep(150);
      // while Stripe works on the cancel, the grace runs out and the sweep suspends access (the version moves)
      h.cloud.clock.advance(3_601_000);
      expect((await h.cloud.runBilling()).suspended).toBeGreaterThanOrEqual(1);
      const r = await cancel;
      h.local.faults.delayMs = 0;
      expect(h.local.subscription(m.subscriptionId ?? '')).toMatchObject({ status: 'canceled' });
      expect(r.statusCode).toBe(200);
      expect(r.json()).toMatchObject({ code: 'MEMBERSHIP_ENDED', membershipStatus: 'ended' });
      expect(await membership(m.id)).toMatchObject({ membershipStatus: 'ended', endReason: 'force_cancel' });
    });
  });

  describe('a suspended member who self-cancels', () => {
    it('is still refused at the members-only gate: MEMBERS_ONLY_PLAN, ending or not', async () => {
      const planId = await plan();
      const m = await suspendedMember(planId);
      const personId = (await h.t.db.query<{ person_id: string }>('SELECT person_id FROM memberships WHERE id = $1', [m.id])).rows[0]
        ?.person_id;
      const walkIn = () =>
        post('/walk-ins', { siteId: h.siteId, planId, personId, credential: { type: 'pin', value: String(50_000_000 + ++n) } });
      const before = await walkIn();
      expect(before.statusCode).toBe(422);
      expect(before.json()).toMatchObject({ code: 'MEMBERS_ONLY_PLAN' });
      const c = await post(`/memberships/${m.id}/self-cancel`);
      expect(c.json()).toMatchObject({ code: 'MEMBERSHIP_ENDING', membershipStatus: 'ending', suspended: true });
      const after = await walkIn();
      expect(after.statusCode).toBe(422);
      expect(after.json()).toMatchObject({ code: 'MEMBERS_ONLY_PLAN' });
    });
  });

  describe('a refund made in Stripe directly (dashboard, support)', () => {
    it('in full: recorded from Stripe, the payment refunded, the stay cancelled and its key revoked', async () => {
      const s = await paidStay();
      const re = await h.stripe.refunds.create({ payment_intent: s.intentId });
      await settle();
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'succeeded', amount: 30_000, stripeRefundId: re.id })]);
      expect((await get(`/stays/${s.stayId}`)).json()).toMatchObject({ stay: { status: 'cancelled' } });
      expect(await keyStatus(s.keyId)).toBe('revoking');
      const dead = (await get('/billing/dead-letters?kind=webhook-events')).json<{ items: unknown[] }>();
      expect(dead.items).toEqual([]);
    });

    it('in part, then the stay cancelled: the cloud refunds the rest of that payment under a key of its own', async () => {
      const s = await paidStay();
      await h.stripe.refunds.create({ payment_intent: s.intentId, amount: 5_000 });
      await settle();
      expect((await paymentsOf(s.stayId))[0]).toMatchObject({ status: 'partially_refunded', amountRefunded: 5_000 });
      expect((await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(202);
      await settle();
      await settle();
      const [p] = await paymentsOf(s.stayId);
      // staff_cancelled keeps nothing: the 25 000 left comes back too
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      const atStripe = h.local.refunds().filter((r) => r.payment_intent === s.intentId && r.status === 'succeeded');
      expect(atStripe.map((r) => r.amount).sort((a, b) => a - b)).toEqual([5_000, 25_000]);
    });

    it('in part: recorded (partially refunded), the stay and its key kept, and an alarm raised for an operator', async () => {
      const s = await paidStay();
      await h.stripe.refunds.create({ payment_intent: s.intentId, amount: 10_000 });
      await settle();
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'partially_refunded', amountRefunded: 10_000 });
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'succeeded', amount: 10_000 })]);
      expect((await get(`/stays/${s.stayId}`)).json()).toMatchObject({ stay: { status: 'confirmed' } });
      expect(await keyStatus(s.keyId)).toBe('issuing');
    });
  });

  describe('a refund made in Stripe directly that Stripe then fails', () => {
    const page = async (stayId: string) =>
      (await h.app.inject({ method: 'GET', url: `/pay/return?stay=${stayId}&lang=en` })).body.match(/data-money="[a-z_]+"/)?.[0];

    /**
     * The desk cancels a stay of 30 000 (`staff_cancelled` keeps nothing) while a refund of 10 000 made in Stripe
     * directly is unsettled: Stripe takes the 20 000 the charge has left. `undo` then ends that refund with no
     * money moved, and the cloud refunds the 10 000 it had counted on it for.
     */
    const cancelWhileUnsettled = async (s: { stayId: string; intentId: string }, undo: () => Promise<void>) => {
      expect((await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(202);
      await settle();
      await settle();
      expect((await paymentsOf(s.stayId))[0]).toMatchObject({ amountRefunded: 20_000 });
      await undo();
      await settle();
      await settle();
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      const atStripe = h.local.refunds().filter((r) => r.payment_intent === s.intentId && r.status === 'succeeded');
      expect(atStripe.map((r) => r.amount).sort((a, b) => a - b)).toEqual([10_000, 20_000]);
      expect(await page(s.stayId)).toBe('data-money="refunded"');
    };

    it('in part, pending, the stay then cancelled: once it fails, the cloud refunds what it had counted on it for, so all the policy owes comes back', async () => {
      const s = await paidStay();
      h.local.faults.refundsPending = true;
      const re = await h.stripe.refunds.create({ payment_intent: s.intentId, amount: 10_000 });
      h.local.faults.refundsPending = false;
      await settle();
      // staff_cancelled keeps nothing; Stripe takes only the 20 000 the pending refund left on the charge
      await cancelWhileUnsettled(s, async () => expect(h.local.settleRefund(re.id, 'failed').status).toBe(200));
    });

    it('in part, waiting for the customer (requires_action), the stay then cancelled: once that refund is canceled, the cloud refunds what it had counted on it for', async () => {
      const s = await paidStay();
      h.local.faults.refundsRequireAction = true;
      const re = await h.stripe.refunds.create({ payment_intent: s.intentId, amount: 10_000 });
      h.local.faults.refundsRequireAction = false;
      await settle();
      expect((await paymentsOf(s.stayId))[0]?.refunds).toEqual([
        expect.objectContaining({ source: 'stripe', status: 'pending', amount: 10_000 }),
      ]);
      await cancelWhileUnsettled(s, async () => expect((await h.stripe.refunds.cancel(re.id)).status).toBe('canceled'));
    });

    it('in full, pending, then failed while the stay is live: the money is held again, the stay and its key kept, nothing refunded by the cloud', async () => {
      const s = await paidStay();
      h.local.faults.refundsPending = true;
      const re = await h.stripe.refunds.create({ payment_intent: s.intentId });
      h.local.faults.refundsPending = false;
      await settle();
      expect(h.local.settleRefund(re.id, 'failed').status).toBe(200);
      await settle();
      await settle();
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'succeeded', amountRefunded: 0 });
      expect(p?.refunds).toEqual([expect.objectContaining({ source: 'stripe', status: 'failed', amount: 30_000 })]);
      expect((await get(`/stays/${s.stayId}`)).json()).toMatchObject({ stay: { status: 'confirmed' } });
      expect(h.local.refunds().filter((r) => r.payment_intent === s.intentId && r.status !== 'failed')).toEqual([]);
    });
  });

  describe("a refund made in Stripe directly whose webhook comes before the payment's", () => {
    /** Booked and paid at Stripe with the payment's webhooks lost: the cloud has not seen the money arrive. */
    async function paidUnseen(): Promise<{ stayId: string; intentId: string }> {
      const body = await booked(Date.UTC(2027, 9, 1));
      await settle();
      h.local.webhooks.faults.drop = true;
      expect((await fetch(`${h.local.url}/_local/pay/${body.payment.intentId}?card=pm_card_visa`)).status).toBe(200);
      await h.local.webhooks.idle();
      h.local.webhooks.faults.drop = false;
      return { stayId: body.stay.id, intentId: body.payment.intentId };
    }
    const deadEvents = async () =>
      (await get('/billing/dead-letters?kind=webhook-events&limit=100')).json<{ items: { type: string }[] }>().items;

    it('in full: the money is first recorded as received, then as refunded; the stay ends; nothing is dead-lettered', async () => {
      const deadBefore = (await deadEvents()).length;
      const s = await paidUnseen();
      const re = await h.stripe.refunds.create({ payment_intent: s.intentId });
      await settle();
      await settle();
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'succeeded', amount: 30_000, stripeRefundId: re.id })]);
      expect((await get(`/stays/${s.stayId}`)).json()).toMatchObject({ stay: { status: 'cancelled' } });
      expect(await deadEvents()).toHaveLength(deadBefore);
    });

    it('in part: received and partially refunded, the stay confirmed with its key', async () => {
      const deadBefore = (await deadEvents()).length;
      const s = await paidUnseen();
      await h.stripe.refunds.create({ payment_intent: s.intentId, amount: 10_000 });
      await settle();
      await settle();
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'partially_refunded', amountRefunded: 10_000 });
      const stay = (await get(`/stays/${s.stayId}`)).json<{ stay: { status: string; keyId: string | null } }>().stay;
      expect(stay.status).toBe('confirmed');
      expect(await keyStatus(stay.keyId ?? '')).toBe('issuing');
      expect(await deadEvents()).toHaveLength(deadBefore);
    });
  });

  describe("a refund made in Stripe directly that races the cloud's own refund", () => {
    const deadRefundJobs = async (paymentId: string) =>
      (await get('/billing/dead-letters?kind=billing-jobs&limit=100'))
        .json<{ items: { kind: string; subjectId: string }[] }>()
        .items.filter((j) => j.kind === 'refund' && j.subjectId.startsWith(`rf_${paymentId}_`));
    const stripeRefunded = (intentId: string) =>
      h.local
        .refunds()
        .filter((r) => r.payment_intent === intentId && r.status === 'succeeded')
        .reduce((n, r) => n + r.amount, 0);

    for (const webhooks of ['delivered', 'dropped'] as const) {
      it(`in full before the cloud's refund job runs (its webhooks ${webhooks}): no dead job, our row settled, each refund recorded once`, async () => {
        const s = await paidStay();
        expect((await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(202);
        h.local.webhooks.faults.drop = webhooks === 'dropped';
        const re = await h.stripe.refunds.create({ payment_intent: s.intentId });
        if (webhooks === 'delivered') await h.local.webhooks.idle();
        h.local.webhooks.faults.drop = false;
        await settle();
        await settle();
        expect(await deadRefundJobs(s.paymentId)).toEqual([]);
        const [p] = await paymentsOf(s.stayId);
        // staff_cancelled keeps nothing: received − refunded = 0, and the ledger says what Stripe says
        expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
        expect(stripeRefunded(s.intentId)).toBe(30_000);
        expect(p?.refunds.filter((r) => r.stripeRefundId === re.id)).toHaveLength(1);
        expect(p?.refunds.filter((r) => r.status === 'pending')).toEqual([]);
        expect(p?.refunds.filter((r) => r.status === 'succeeded').reduce((n, r) => n + r.amount, 0)).toBe(30_000);
        expect(h.local.refunds().filter((r) => r.payment_intent === s.intentId)).toHaveLength(1);
      });
    }

    it("in part before the cloud's full refund: the cloud refunds only the rest", async () => {
      const s = await paidStay();
      expect((await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(202);
      h.local.webhooks.faults.drop = true;
      await h.stripe.refunds.create({ payment_intent: s.intentId, amount: 10_000 });
      h.local.webhooks.faults.drop = false;
      await settle();
      await settle();
      expect(await deadRefundJobs(s.paymentId)).toEqual([]);
      const [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      expect(stripeRefunded(s.intentId)).toBe(30_000);
      expect(
        h.local
          .refunds()
          .filter((r) => r.payment_intent === s.intentId)
          .map((r) => r.amount)
          .sort((a, b) => a - b),
      ).toEqual([10_000, 20_000]);
      expect(p?.refunds.filter((r) => r.status === 'pending')).toEqual([]);
      expect(p?.refunds.filter((r) => r.status === 'succeeded').reduce((n, r) => n + r.amount, 0)).toBe(30_000);
    });
  });

  describe("a refund's own status", () => {
    it('pending at Stripe stays pending here until refund.updated says it succeeded', async () => {
      const s = await paidStay();
      h.local.faults.refundsPending = true;
      expect((await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' })).statusCode).toBe(202);
      await settle();
      let [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refund_pending', amountRefunded: 0 });
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'pending', stripeRefundId: expect.stringMatching(/^re_/) })]);
      const re = h.local.refunds().find((x) => x.payment_intent === s.intentId);
      expect(h.local.settleRefund(re?.id ?? '', 'succeeded').status).toBe(200);
      await settle();
      [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'succeeded' })]);
    });

    it('failed at Stripe is failed here and nothing is counted as refunded; the operator retry is a new attempt with a new key that succeeds', async () => {
      const s = await paidStay();
      h.local.faults.refundsPending = true;
      await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' });
      await settle();
      const re = h.local.refunds().find((x) => x.payment_intent === s.intentId);
      h.local.settleRefund(re?.id ?? '', 'failed');
      h.local.faults.refundsPending = false;
      await settle();
      let [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refund_pending', amountRefunded: 0 });
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'failed' })]);
      // the guest's page does not say the policy kept money that is owed back: it is being refunded
      const page = async () => (await h.app.inject({ method: 'GET', url: `/pay/return?stay=${s.stayId}&lang=en` })).body;
      expect(await page()).toContain('data-money="refunding"');
      await retryDeadRefund(s.paymentId);
      [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      expect(p?.refunds.map((x) => x.status)).toEqual(['failed', 'succeeded']);
      // the failed attempt counts no more once a later one succeeded
      expect(await page()).toContain('data-money="refunded"');
    });

    it('refused by Stripe (saved under its key): the operator retry gets a new key, not the stored error', async () => {
      const s = await paidStay();
      h.local.faults.failNextRefunds = 1;
      await post(`/stays/${s.stayId}/cancel`, { reason: 'staff_cancelled' });
      await settle();
      let [p] = await paymentsOf(s.stayId);
      expect(p?.refunds).toEqual([expect.objectContaining({ status: 'failed' })]);
      await retryDeadRefund(s.paymentId);
      [p] = await paymentsOf(s.stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 30_000 });
      const keys = h.local
        .events()
        .filter((e) => e.type === 'refund.created' && (e.data.object as { payment_intent?: string }).payment_intent === s.intentId)
        .map((e) => e.request.idempotency_key);
      expect(keys).toEqual([`refund:${s.paymentId}:2`]);
    });
  });

  /** The operator's retry of the payment's dead refund job, through the API, then a billing pass. */
  async function retryDeadRefund(paymentId: string): Promise<void> {
    const dead = (await get('/billing/dead-letters?kind=billing-jobs&limit=100')).json<{
      items: { id: number; kind: string; subjectId: string }[];
    }>();
    const job = dead.items.find((j) => j.kind === 'refund' && j.subjectId.startsWith(`rf_${paymentId}_`));
    expect(job).toBeDefined();
    const r = await post(`/billing/dead-letters/billing-jobs/${job?.id}/retry`, {}, { 'idempotency-key': `retry-${newId()}` });
    expect(r.statusCode).toBe(200);
    await settle();
    await settle();
  }
});
