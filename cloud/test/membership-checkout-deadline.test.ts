import { pgBackends } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { listNotifications } from '../src/adapters/db/notifications.js';
import { loadMembership } from '../src/adapters/db/memberships.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import {
  DEFAULT_CHECKOUT_RECHECK_MS,
  applyMembership,
  approveMembership,
  createPlan,
  endMembership,
  type MembershipDeps,
} from '../src/app/memberships.js';
import type { Membership } from '../src/domain/memberships.js';
import { deps, openTestDb, seed, type TestDb } from './helpers.js';
import { startInbox } from './stays-harness.js';

/**
 * An application approved by staff whose first invoice is never paid ends at
 * its checkout deadline (the real `stripe` SDK against the local Stripe, its
 * signed webhooks through the inbox and the billing worker, both cloud
 * databases, the cloud's manual clock moved past the deadline): the
 * subscription is cancelled at Stripe first (its invoice voided: nothing can
 * be charged after the end), the application is `rejected` with the stable
 * reason `checkout_expired` and code `MEMBERSHIP_CHECKOUT_EXPIRED`, the
 * applicant is told; money that landed anyway (paid in the moment before
 * the end, its webhook not yet processed) is refunded once, in full.
 */
const WEBHOOK_SECRET = 'whsec_tobira_checkout_deadline';
const HOUR = 3_600_000;
const DEADLINE = 2 * HOUR;

describe.each(pgBackends())('the checkout deadline of an approved membership on %s', (pgBackend) => {
  let t: TestDb;
  let local: StripeLocal;
  let stripe: Stripe;
  let inbox: Awaited<ReturnType<typeof startInbox>>;
  let base: ReturnType<typeof deps>;
  let s: Awaited<ReturnType<typeof seed>>;
  let planId: string;
  let n = 0;
  const md = (): MembershipDeps => ({ ...base, stripe });
  const pass = async () => {
    await local.webhooks.idle();
    return new BillingWorker({ ...md(), stripe, random: () => 0.5 }, { checkoutDeadlineMs: DEADLINE }).runOnce();
  };
  const load = async (id: string): Promise<Membership> => {
    const m = await loadMembership(t.db, id);
    if (!m) throw new Error(`no membership ${id}`);
    return m;
  };
  const notices = async (personId: string) => {
    const page = await listNotifications(t.db, { personId, limit: 100 });
    if (page === 'bad_cursor') throw new Error('cursor');
    return page.items;
  };

  /** Applied and approved by staff: the checkout is open, its first invoice unpaid. */
  async function approved(): Promise<{ id: string; invoiceId: string; subscriptionId: string }> {
    const id = `mem-${s.u}-${++n}`;
    expect(await applyMembership(md(), { membershipId: id, planId, personId: s.personId })).toMatchObject({ status: 'applied' });
    const ap = await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
    expect(ap).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPROVED' });
    const m = await load(id);
    if (!ap.invoiceId || !m.subscriptionId) throw new Error('no checkout');
    return { id, invoiceId: ap.invoiceId, subscriptionId: m.subscriptionId };
  }

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    base = deps(t.db);
    s = await seed(base);
    inbox = await startInbox(
      () => t.db,
      () => stripe,
      () => base.clock.now(),
      WEBHOOK_SECRET,
    );
    local = await startStripeLocal({ webhook: { url: inbox.url, secret: WEBHOOK_SECRET }, seed: `cod${pgBackend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
    planId = `plan-${s.u}`;
    const p = await createPlan(md(), {
      id: planId,
      siteId: s.siteId,
      name: 'Lounge',
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [s.doorA],
      membersOnly: true,
      monthlyEntryQuota: null,
      graceSeconds: 86_400,
    });
    expect(p).toMatchObject({ status: 'applied' });
  });
  afterAll(async () => {
    await local.close();
    await inbox.close();
    await t.close();
  });
  afterEach(async () => {
    await local.webhooks.idle();
    Object.assign(local.webhooks.faults, { duplicates: 1, hold: false });
  });

  it('an unpaid checkout stays open to its deadline, then ends: billing cancelled first, the applicant told, nothing charged after', async () => {
    const c = await approved();
    base.clock.advance(DEADLINE - 60_000);
    await pass();
    expect(await load(c.id)).toMatchObject({ status: 'applied', endReason: null });
    const early = await endMembership(md(), { membershipId: c.id, reason: 'checkout_expired', checkoutDeadlineMs: DEADLINE });
    expect(early).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_CHECKOUT_OPEN' });
    expect(local.subscription(c.subscriptionId)).toMatchObject({ status: 'incomplete' });

    base.clock.advance(2 * 60_000);
    const p = await pass();
    expect(p.checkoutsExpired).toBe(1);
    const ended = await load(c.id);
    expect(ended).toMatchObject({
      status: 'rejected',
      endReason: 'checkout_expired',
      endedBy: 'tobira',
      lastCode: 'MEMBERSHIP_CHECKOUT_EXPIRED',
      keyId: null,
    });
    expect(ended.endedAt).toBe(base.clock.now());
    // Stripe stopped first: the subscription cancelled, its open invoice voided, so it can no longer be paid
    expect(local.subscription(c.subscriptionId)).toMatchObject({ status: 'canceled' });
    expect(local.invoice(c.invoiceId)).toMatchObject({ status: 'void', amount_paid: 0 });
    await expect(stripe.invoices.pay(c.invoiceId, { payment_method: 'pm_card_visa' })).rejects.toMatchObject({ code: 'invoice_not_open' });
    expect((await notices(s.personId)).filter((x) => x.dedupeKey === `checkout_expired:${c.id}`)).toEqual([
      expect.objectContaining({ template: 'checkout_expired', subject: '【Site】メンバーシップのお申し込みの期限が過ぎました' }),
    ]);

    // the subscription's deleted event and more passes change nothing; the verb again is a stable noop
    await pass();
    await pass();
    expect(await load(c.id)).toMatchObject({ status: 'rejected', version: ended.version, lastCode: 'MEMBERSHIP_CHECKOUT_EXPIRED' });
    expect(await endMembership(md(), { membershipId: c.id, reason: 'checkout_expired', checkoutDeadlineMs: DEADLINE })).toMatchObject({
      status: 'noop',
      code: 'MEMBERSHIP_ALREADY_ENDED',
    });
    expect(local.refunds()).toEqual([]);
  });

  it('a paid first invoice whose webhooks were all lost activates at the next checkout recheck, not at the deadline', async () => {
    const c = await approved();
    await pass();
    local.webhooks.faults.drop = true;
    expect(local.payInvoice(c.invoiceId).status).toBe(200);
    await local.webhooks.idle();
    local.webhooks.faults.drop = false;
    // not due yet: nothing re-read, still waiting for a webhook that will never come
    expect((await pass()).checkoutsRechecked).toBe(0);
    expect(await load(c.id)).toMatchObject({ status: 'applied', keyId: null });
    base.clock.advance(DEFAULT_CHECKOUT_RECHECK_MS);
    expect((await pass()).checkoutsRechecked).toBeGreaterThanOrEqual(1);
    const m = await load(c.id);
    expect(m).toMatchObject({ status: 'active', keyId: `key_${c.id}_1`, lastCode: 'MEMBERSHIP_ACTIVATED' });
    const key = await t.db.query<{ status: string }>('SELECT status FROM keys WHERE id = $1', [m.keyId]);
    expect(key.rows).toEqual([{ status: 'issuing' }]);
  });

  it('an unpaid checkout is re-read once per recheck interval, not on every pass', async () => {
    const c = await approved();
    await pass();
    const spy = vi.spyOn(stripe.subscriptions, 'retrieve');
    const reads = () => spy.mock.calls.filter(([id]) => id === c.subscriptionId).length;
    base.clock.advance(DEFAULT_CHECKOUT_RECHECK_MS);
    const before = reads();
    await pass();
    expect(reads()).toBe(before + 1);
    await pass();
    await pass();
    expect(reads()).toBe(before + 1);
    base.clock.advance(DEFAULT_CHECKOUT_RECHECK_MS);
    await pass();
    expect(reads()).toBe(before + 2);
    expect(await load(c.id)).toMatchObject({ status: 'applied' });
    spy.mockRestore();
  });

  it('money that lands in the moment before the end is refunded once, in full; its late webhooks leave the application ended', async () => {
    const c = await approved();
    await pass(); // the approval's own events: the subscription read back still incomplete
    expect(await load(c.id)).toMatchObject({ status: 'applied' });
    // the applicant pays just before the deadline; the cloud has not heard of it when the sweep runs
    local.webhooks.faults.hold = true;
    expect(local.payInvoice(c.invoiceId).status).toBe(200);
    expect(local.subscription(c.subscriptionId)).toMatchObject({ status: 'active' });
    base.clock.advance(DEADLINE + 60_000);
    await pass();
    await pass();
    expect(await load(c.id)).toMatchObject({ status: 'rejected', endReason: 'checkout_expired', keyId: null });
    expect(local.subscription(c.subscriptionId)).toMatchObject({ status: 'canceled' });
    const [payment] = (await stripe.invoicePayments.list({ invoice: c.invoiceId })).data;
    const intentId = payment?.payment.payment_intent;
    const refunds = () => local.refunds().filter((r) => r.payment_intent === intentId);
    expect(refunds()).toEqual([expect.objectContaining({ amount: 8000, status: 'succeeded' })]);
    expect((await notices(s.personId)).map((x) => x.template)).toContain('refund_made');

    // the held invoice.paid / subscription events arrive now, in reverse: still ended, no key, one refund
    local.webhooks.faults.hold = false;
    local.webhooks.release('reverse');
    await pass();
    await pass();
    expect(await load(c.id)).toMatchObject({ status: 'rejected', endReason: 'checkout_expired', keyId: null });
    expect(refunds()).toHaveLength(1);
    const keys = await t.db.query('SELECT id FROM keys WHERE person_id = $1 AND id LIKE $2', [s.personId, `key_${c.id}%`]);
    expect(keys.rows).toEqual([]);
  });
});
