import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pgBackends } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { enterVerb } from '../src/adapters/db/db.js';
import { casMembership, loadMembership } from '../src/adapters/db/memberships.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import { SimulatedCrash, crashAt } from '../src/app/crash.js';
import { getKey } from '../src/app/keys.js';
import { createPerson } from '../src/app/registry.js';
import { blockPerson, unblockPerson } from '../src/app/walk-ins.js';
import {
  applyMembership,
  approveMembership,
  createPlan,
  endMembership,
  retirePlan,
  selfCancelMembership,
  type MembershipDeps,
} from '../src/app/memberships.js';
import type { Membership } from '../src/domain/memberships.js';
import { DAY, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { startInbox } from './stays-harness.js';

/**
 * Memberships end to end through the use cases and the billing worker, with
 * the real `stripe` SDK against the local Stripe, on both cloud databases:
 * apply → approve (subscription from the one factory) → first invoice paid →
 * active with a key for the plan doors; self-cancel stops billing first, the
 * key works to the period end, then is revoked; Stripe down changes nothing;
 * stale and racing staff clicks; payment events duplicated and reordered;
 * the grace period; the database guard of the one ending verb.
 */
const WEBHOOK_SECRET = 'whsec_tobira_membership_flow';

describe.each(pgBackends())('memberships on %s', (pgBackend) => {
  let t: TestDb;
  let local: StripeLocal;
  let stripe: Stripe;
  let inbox: Awaited<ReturnType<typeof startInbox>>;
  let base: ReturnType<typeof deps>;
  let s: Awaited<ReturnType<typeof seed>>;
  let planId: string;
  let pins = 0;
  const newPin = () => String(20_000_000 + ++pins);
  const md = (over: Partial<MembershipDeps> = {}): MembershipDeps => ({ ...base, stripe, newPin, ...over });
  const worker = () => new BillingWorker({ ...md(), stripe, random: () => 0.5 });
  const settle = async () => {
    await local.webhooks.idle();
    return worker().runOnce();
  };
  const load = async (id: string): Promise<Membership> => {
    const m = await loadMembership(t.db, id);
    if (!m) throw new Error(`no membership ${id}`);
    return m;
  };
  let n = 0;

  /** A membership applied, approved and paid: active with its first key. */
  async function activeMember(personId = s.personId): Promise<Membership> {
    const id = `mem-${s.u}-${++n}`;
    const a = await applyMembership(md(), { membershipId: id, planId, personId });
    expect(a).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPLIED' });
    const ap = await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
    expect(ap).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPROVED' });
    if (!ap.invoiceId) throw new Error('no invoice');
    expect(local.payInvoice(ap.invoiceId).status).toBe(200);
    await settle();
    const m = await load(id);
    expect(m).toMatchObject({ status: 'active', keyId: `key_${id}_1` });
    return m;
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
    local = await startStripeLocal({ webhook: { url: inbox.url, secret: WEBHOOK_SECRET }, seed: `mem${pgBackend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
    const p = await createPlan(md(), {
      id: `plan-${s.u}`,
      siteId: s.siteId,
      name: 'Lounge',
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [s.doorA, s.doorB],
      membersOnly: true,
      monthlyEntryQuota: 20,
      graceSeconds: 2 * 86_400,
    });
    expect(p).toMatchObject({ status: 'applied', code: 'PLAN_CREATED', state: { monthlyEntryQuota: 20, membersOnly: true } });
    planId = `plan-${s.u}`;
  });
  afterAll(async () => {
    await local.close();
    await inbox.close();
    await t.close();
  });
  afterEach(async () => {
    await local.webhooks.idle();
    Object.assign(local.faults, { unavailable: false, unavailableRequests: 0, failAfterEffect: 0 });
    Object.assign(local.webhooks.faults, { duplicates: 1, hold: false, drop: false });
  });

  describe('when a member applies, is approved and pays the first invoice', () => {
    it('is active with a key for the plan doors, from a subscription made by the one factory with the stored key', async () => {
      const m = await activeMember();
      const sub = local.subscription(m.subscriptionId ?? '');
      expect(sub).toMatchObject({ status: 'active', metadata: { purpose: 'membership_initial', subject_id: m.id } });
      const created = local.events().filter((e) => e.type === 'customer.subscription.created' && e.data.object.id === m.subscriptionId);
      expect(created).toHaveLength(1);
      expect(created[0]?.request.idempotency_key).toBe(`membership_initial:${m.id}:1`);
      const key = await getKey(base, m.keyId ?? '');
      expect(key).toMatchObject({ status: 'issuing', personId: s.personId });
      expect([...(key?.doors ?? [])].sort()).toEqual([s.doorA, s.doorB].sort());
      // the PIN is kept only as the key's digest
      expect(m.credential).toEqual({ type: 'pin', digest: key?.credential.digest });
    });

    it('approving twice makes one subscription (same idempotency key), and approving with Stripe down changes nothing', async () => {
      const id = `mem-${s.u}-${++n}`;
      await applyMembership(md(), { membershipId: id, planId, personId: s.personId });
      local.faults.unavailable = true;
      const down = await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
      expect(down).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
      expect(await load(id)).toMatchObject({ status: 'applied', approvedAt: null, subscriptionId: null, version: 1 });
      local.faults.unavailable = false;
      const a = await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
      const b = await approveMembership(md(), { membershipId: id, actor: 'staff-2' });
      expect(a).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPROVED' });
      expect(b).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_ALREADY_APPROVED' });
      const subs = local
        .events()
        .filter((e) => e.type === 'customer.subscription.created' && e.request.idempotency_key === `membership_initial:${id}:1`);
      expect(subs).toHaveLength(1);
    });
  });

  describe('when the approval crashes between the subscription and its local write', () => {
    it('events for the unrecorded subscription are retried, approving again gets the same subscription, and the paid invoice activates it', async () => {
      const id = `mem-${s.u}-${++n}`;
      await applyMembership(md(), { membershipId: id, planId, personId: s.personId });
      await expect(
        approveMembership(md({ crash: crashAt(['afterSubscriptionCreatedBeforeRecord']) }), { membershipId: id, actor: 'staff-1' }),
      ).rejects.toBeInstanceOf(SimulatedCrash);
      expect(await load(id)).toMatchObject({ status: 'applied', approvedAt: null, subscriptionId: null });
      const created = local
        .events()
        .filter((e) => e.type === 'customer.subscription.created' && e.request.idempotency_key === `membership_initial:${id}:1`);
      expect(created).toHaveLength(1);
      const subId = created[0]?.data.object.id ?? '';
      // the member pays before the approval is recorded: the worker cannot place the events yet and retries them
      expect(local.payInvoice(local.subscription(subId)?.latest_invoice ?? '').status).toBe(200);
      await settle();
      expect(await load(id)).toMatchObject({ status: 'applied' });
      const again = await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
      expect(again).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPROVED', state: { subscriptionId: subId } });
      expect(
        local
          .events()
          .filter((e) => e.type === 'customer.subscription.created' && e.request.idempotency_key === `membership_initial:${id}:1`),
      ).toHaveLength(1);
      base.clock.advance(3_600_000);
      await worker().runOnce();
      expect(await load(id)).toMatchObject({ status: 'active', keyId: `key_${id}_1` });
    });
  });

  describe('self-cancel', () => {
    it('with Stripe up: the subscription is set to cancel first, the membership is ending and the key still works; at period end it ends and the key is revoked', async () => {
      const m = await activeMember();
      const r = await selfCancelMembership(md(), { membershipId: m.id });
      expect(r).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDING', state: { status: 'ending', endReason: 'self_cancel' } });
      expect(r.notices.map((x) => x.notice)).toEqual(['membership_ending']);
      expect(local.subscription(m.subscriptionId ?? '')).toMatchObject({ status: 'active', cancel_at_period_end: true });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'issuing' });
      // the subscription.updated event the schedule raised changes nothing
      await settle();
      expect(await load(m.id)).toMatchObject({ status: 'ending' });
      expect(local.advanceSubscription(m.subscriptionId ?? '').status).toBe(200);
      await settle();
      expect(await load(m.id)).toMatchObject({ status: 'ended', endReason: 'self_cancel', endedBy: 'member' });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'revoking', revokeReason: 'membership_ended' });
      // a stale click afterwards
      expect(await selfCancelMembership(md(), { membershipId: m.id })).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDED' });
    });

    it('with Stripe unreachable: refused BILLING_UNAVAILABLE, and nothing changed (membership, key, subscription)', async () => {
      const m = await activeMember();
      local.faults.unavailable = true;
      const r = await selfCancelMembership(md(), { membershipId: m.id });
      expect(r).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
      expect(await load(m.id)).toEqual(m);
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'issuing', revokeReason: null });
      local.faults.unavailable = false;
      expect(local.subscription(m.subscriptionId ?? '')).toMatchObject({ status: 'active', cancel_at_period_end: false });
    });
  });

  describe('a subscription Stripe changed while its webhooks were lost', () => {
    it('is re-read every BILLING_RECONCILE_MS: cancelled in the dashboard, the membership ends and its key is revoked; a failed renewal makes it past due', async () => {
      const m = await activeMember();
      local.webhooks.faults.drop = true;
      await stripe.subscriptions.cancel(m.subscriptionId ?? '');
      await settle();
      expect(await load(m.id)).toMatchObject({ status: 'active' });
      base.clock.advance(16 * 60_000);
      expect(await worker().runOnce()).toMatchObject({ membershipsRechecked: expect.any(Number) as number });
      expect(await load(m.id)).toMatchObject({ status: 'ended' });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'revoking' });

      local.webhooks.faults.drop = false;
      const late = await activeMember();
      local.webhooks.faults.drop = true;
      local.advanceSubscription(late.subscriptionId ?? '', 'failed');
      await settle();
      expect(await load(late.id)).toMatchObject({ status: 'active' });
      base.clock.advance(16 * 60_000);
      await worker().runOnce();
      expect(await load(late.id)).toMatchObject({ status: 'past_due' });
      // re-read once per interval, not every pass
      local.webhooks.faults.drop = false;
      const again = await worker().runOnce();
      expect(again).toMatchObject({ membershipsRechecked: 0 });
    });
  });

  describe('staff force-cancel', () => {
    it('of an application under review is APPLICATION_UNDER_REVIEW; with its checkout in flight CHECKOUT_IN_PROGRESS; without a note MEMBERSHIP_NOTE_REQUIRED', async () => {
      const id = `mem-${s.u}-${++n}`;
      await applyMembership(md(), { membershipId: id, planId, personId: s.personId });
      const staff = { reason: 'force_cancel' as const, actor: 'staff-1', note: 'fraud' };
      expect(await endMembership(md(), { membershipId: id, ...staff })).toMatchObject({
        status: 'refused',
        code: 'APPLICATION_UNDER_REVIEW',
      });
      await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
      expect(await endMembership(md(), { membershipId: id, ...staff })).toMatchObject({ status: 'refused', code: 'CHECKOUT_IN_PROGRESS' });
      expect(await endMembership(md(), { membershipId: id, reason: 'application_rejected', actor: 'staff-1' })).toMatchObject({
        status: 'refused',
        code: 'CHECKOUT_IN_PROGRESS',
      });
      const m = await activeMember();
      expect(await endMembership(md(), { membershipId: m.id, reason: 'force_cancel', actor: 'staff-1' })).toMatchObject({
        status: 'refused',
        code: 'MEMBERSHIP_NOTE_REQUIRED',
      });
    });

    it('by two staff at once: one applied, the other noop or conflict; the subscription is canceled and the key revoked once', async () => {
      const m = await activeMember();
      const end = (actor: string) =>
        endMembership(md(), { membershipId: m.id, reason: 'force_cancel', actor, note: 'banned', expectedVersion: m.version });
      const [a, b] = await Promise.all([end('staff-1'), end('staff-2')]);
      const statuses = [a.status, b.status].sort();
      expect(statuses[0]).toBe('applied');
      expect(['noop', 'conflict']).toContain(statuses[1]);
      expect(local.subscription(m.subscriptionId ?? '')).toMatchObject({ status: 'canceled' });
      const ended = await load(m.id);
      expect(ended).toMatchObject({ status: 'ended', endReason: 'force_cancel', endNote: 'banned' });
      const key = await getKey(base, m.keyId ?? '');
      expect(key).toMatchObject({ status: 'revoking', revokeReason: 'membership_ended', version: 2 });
      // the subscription.deleted webhook that follows changes nothing
      await settle();
      expect(await load(m.id)).toEqual(ended);
    });

    it('a stale click on a membership that moved is conflict MEMBERSHIP_STATE_CHANGED with the current state', async () => {
      const m = await activeMember();
      local.advanceSubscription(m.subscriptionId ?? '', 'failed');
      await settle();
      const r = await endMembership(md(), {
        membershipId: m.id,
        reason: 'force_cancel',
        actor: 's',
        note: 'n',
        expectedVersion: m.version,
      });
      expect(r).toMatchObject({ status: 'conflict', code: 'MEMBERSHIP_STATE_CHANGED' });
      if (r.status === 'conflict') expect(r.current.status).toBe('past_due');
    });
  });

  describe('payments after activation', () => {
    it('invoice.payment_failed duplicated and delivered out of order with invoice.paid: the final state follows the invoice current status', async () => {
      const m = await activeMember();
      Object.assign(local.webhooks.faults, { hold: true, duplicates: 2 });
      local.advanceSubscription(m.subscriptionId ?? '', 'failed');
      const open = local.subscription(m.subscriptionId ?? '')?.latest_invoice ?? '';
      expect(local.payInvoice(open).status).toBe(200);
      local.webhooks.faults.hold = false;
      local.webhooks.release('reverse');
      await settle();
      // paid now: whatever arrived last, the membership is active with its key
      expect(await load(m.id)).toMatchObject({ status: 'active', suspended: false, keyId: m.keyId });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'issuing' });
    });

    it('the first invoice paid and a renewal failed before any of it was learned: past due with the key the payment bought, inside the grace', async () => {
      await t.db.query(
        `INSERT INTO webhook_endpoints (id, site_id, url, secret, events, created_at)
         VALUES ($1, $2, 'https://hooks.example.test/late', 'whsec_x', ARRAY['membership.activated'], 0)`,
        [`wh-${s.u}-late`, s.siteId],
      );
      const id = `mem-${s.u}-${++n}`;
      expect(await applyMembership(md(), { membershipId: id, planId, personId: s.personId })).toMatchObject({ status: 'applied' });
      const ap = await approveMembership(md(), { membershipId: id, actor: 'staff-1' });
      if (!ap.invoiceId) throw new Error('no invoice');
      await settle();
      // the activation's events and the renewal's are held, then arrive newest first
      local.webhooks.faults.hold = true;
      expect(local.payInvoice(ap.invoiceId).status).toBe(200);
      const sub = (await load(id)).subscriptionId ?? '';
      expect(local.advanceSubscription(sub, 'failed').status).toBe(200);
      local.webhooks.faults.hold = false;
      local.webhooks.release('reverse');
      await settle();
      const m = await load(id);
      expect(m).toMatchObject({ status: 'past_due', suspended: false, keyId: `key_${id}_1`, lastCode: 'MEMBERSHIP_ACTIVATED_PAST_DUE' });
      expect(m.pastDueSince).not.toBeNull();
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'issuing', personId: s.personId });
      const told = await t.db.query<{ template: string }>('SELECT template FROM notification_outbox WHERE dedupe_key LIKE $1', [
        `payment_failed:${id}:%`,
      ]);
      expect(told.rows.map((r) => r.template)).toEqual(['payment_failed']);
      // property systems hear of the activation all the same
      const out = await t.db.query<{ type: string; status: string }>(
        `SELECT type, body->>'status' AS status FROM webhook_outbox WHERE endpoint_id = $1 AND body->>'membershipId' = $2`,
        [`wh-${s.u}-late`, id],
      );
      expect(out.rows).toEqual([{ type: 'membership.activated', status: 'past_due' }]);
      // the grace runs from when it was learned: past it, suspended like any past-due member
      base.clock.advance(2 * DAY + 1);
      expect((await worker().runOnce()).suspended).toBeGreaterThanOrEqual(1);
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'revoking', revokeReason: 'payment_failed' });
    });

    it('a past-due member who self-cancels within the grace is still suspended when it ends (key revoked): ending is no way past the grace', async () => {
      const m = await activeMember();
      local.advanceSubscription(m.subscriptionId ?? '', 'failed');
      await settle();
      expect(await selfCancelMembership(md(), { membershipId: m.id })).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDING' });
      await settle();
      expect(await load(m.id)).toMatchObject({ status: 'ending', suspended: false });
      base.clock.advance(2 * DAY + 1);
      expect((await worker().runOnce()).suspended).toBeGreaterThanOrEqual(1);
      expect(await load(m.id)).toMatchObject({ status: 'ending', suspended: true });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'revoking', revokeReason: 'payment_failed' });
    });

    it('past due keeps access for the grace, is suspended after it (key revoked), and invoice.paid restores it with a fresh key and the same PIN', async () => {
      const m = await activeMember();
      local.advanceSubscription(m.subscriptionId ?? '', 'failed');
      await settle();
      expect(await load(m.id)).toMatchObject({ status: 'past_due', suspended: false });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'issuing' });
      // the member is told once, in the site's language (ja), with the plan's price, through the notification outbox
      const told = await t.db.query<{ template: string; locale: string; body: string; dedupe_key: string }>(
        "SELECT template, locale, body, dedupe_key FROM notification_outbox WHERE template = 'payment_failed' AND dedupe_key LIKE $1",
        [`payment_failed:${m.id}:%`],
      );
      expect(told.rows).toHaveLength(1);
      expect(told.rows[0]).toMatchObject({ locale: 'ja', body: expect.stringContaining('Lounge') as string });
      base.clock.advance(DAY);
      await worker().runOnce();
      expect(await load(m.id)).toMatchObject({ status: 'past_due', suspended: false });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'issuing' });
      base.clock.advance(DAY + 1);
      expect((await worker().runOnce()).suspended).toBeGreaterThanOrEqual(1);
      expect(await load(m.id)).toMatchObject({ status: 'past_due', suspended: true });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'revoking', revokeReason: 'payment_failed' });
      const open = local.subscription(m.subscriptionId ?? '')?.latest_invoice ?? '';
      local.payInvoice(open);
      await settle();
      const back = await load(m.id);
      expect(back).toMatchObject({ status: 'active', suspended: false, keyId: `key_${m.id}_2`, pastDueSince: null });
      const key2 = await getKey(base, back.keyId ?? '');
      expect(key2).toMatchObject({ status: 'issuing', credential: { digest: m.credential?.digest } });
    });

    it('a member the site blocked gets no key when the paid invoice restores access: the block revoked it, and billing does not give it back', async () => {
      const personId = `person-${s.u}-blocked-${++n}`;
      expect(await createPerson(base, { id: personId, name: 'Ren' })).toMatchObject({ status: 'applied' });
      const m = await activeMember(personId);
      const b = await blockPerson(md(), { siteId: s.siteId, personId, reason: 'banned', actor: 'staff-1' });
      expect(b).toMatchObject({ status: 'applied', code: 'PERSON_BLOCKED', state: { keysRevoked: 1 } });
      local.advanceSubscription(m.subscriptionId ?? '', 'failed');
      await settle();
      base.clock.advance(2 * DAY + 1);
      expect((await worker().runOnce()).suspended).toBeGreaterThanOrEqual(1);
      local.payInvoice(local.subscription(m.subscriptionId ?? '')?.latest_invoice ?? '');
      await settle();
      // billing moves as Stripe says (the member paid); the door does not open for a person the site blocked
      expect(await load(m.id)).toMatchObject({ status: 'active', suspended: false });
      const live = await t.db.query("SELECT id FROM keys WHERE person_id = $1 AND status IN ('issuing', 'active')", [personId]);
      expect(live.rows).toEqual([]);
    });

    it('lifting the block gives a member whose membership gives door access a fresh key with the same PIN, once; a suspended or ended one gets none', async () => {
      const person = async () => {
        const id = `person-${s.u}-unblocked-${++n}`;
        expect(await createPerson(base, { id, name: 'Aoi' })).toMatchObject({ status: 'applied' });
        return id;
      };
      const liveKeys = async (personId: string) =>
        (
          await t.db.query<{ id: string }>("SELECT id FROM keys WHERE person_id = $1 AND status IN ('issuing', 'active')", [personId])
        ).rows.map((r) => r.id);
      // paying on while blocked: active, no key
      const paying = await person();
      const m = await activeMember(paying);
      expect(await blockPerson(md(), { siteId: s.siteId, personId: paying, reason: 'mistaken', actor: 'staff-1' })).toMatchObject({
        state: { keysRevoked: 1 },
      });
      expect(await liveKeys(paying)).toEqual([]);
      const u = await unblockPerson(md(), { siteId: s.siteId, personId: paying, actor: 'staff-1' });
      expect(u).toMatchObject({ status: 'applied', code: 'PERSON_UNBLOCKED', state: { keysIssued: 1 } });
      const back = await load(m.id);
      expect(back).toMatchObject({ status: 'active', keyId: `key_${m.id}_2`, lastCode: 'MEMBERSHIP_ACCESS_RESTORED' });
      expect(await liveKeys(paying)).toEqual([`key_${m.id}_2`]);
      expect(await getKey(base, back.keyId ?? '')).toMatchObject({ credential: { digest: m.credential?.digest } });
      // a repeat gives nothing more
      expect(await unblockPerson(md(), { siteId: s.siteId, personId: paying, actor: 'staff-1' })).toMatchObject({
        status: 'noop',
        code: 'PERSON_NOT_BLOCKED',
        state: { keysIssued: 0 },
      });
      expect(await liveKeys(paying)).toEqual([`key_${m.id}_2`]);

      // self-cancelled (ending at the period's end, paid up to it) and blocked: the unblock gives the paid-for rest back
      const leaving = await person();
      const e = await activeMember(leaving);
      expect(await selfCancelMembership(md(), { membershipId: e.id })).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDING' });
      await blockPerson(md(), { siteId: s.siteId, personId: leaving, reason: 'mistaken', actor: 'staff-1' });
      expect(await liveKeys(leaving)).toEqual([]);
      expect(await unblockPerson(md(), { siteId: s.siteId, personId: leaving, actor: 'staff-1' })).toMatchObject({
        status: 'applied',
        state: { keysIssued: 1 },
      });
      expect(await load(e.id)).toMatchObject({ status: 'ending', keyId: `key_${e.id}_2`, lastCode: 'MEMBERSHIP_ACCESS_RESTORED' });
      expect(await liveKeys(leaving)).toEqual([`key_${e.id}_2`]);
      // the period's end still ends it and takes the new key back
      expect(local.advanceSubscription(e.subscriptionId ?? '').status).toBe(200);
      await settle();
      expect(await load(e.id)).toMatchObject({ status: 'ended', endReason: 'self_cancel' });
      expect(await getKey(base, `key_${e.id}_2`)).toMatchObject({ status: 'revoking', revokeReason: 'membership_ended' });

      // suspended for an unpaid renewal while blocked: the money gives access back, not the unblock
      const owing = await person();
      const o = await activeMember(owing);
      await blockPerson(md(), { siteId: s.siteId, personId: owing, reason: 'mistaken', actor: 'staff-1' });
      local.advanceSubscription(o.subscriptionId ?? '', 'failed');
      await settle();
      base.clock.advance(2 * DAY + 1);
      await worker().runOnce();
      expect(await load(o.id)).toMatchObject({ status: 'past_due', suspended: true });
      expect(await unblockPerson(md(), { siteId: s.siteId, personId: owing, actor: 'staff-1' })).toMatchObject({
        status: 'applied',
        state: { keysIssued: 0 },
      });
      expect(await liveKeys(owing)).toEqual([]);
    });

    it('Stripe giving up on a past-due renewal ends the membership (payment_failed_final) and revokes the key', async () => {
      const m = await activeMember();
      local.advanceSubscription(m.subscriptionId ?? '', 'failed');
      await settle();
      local.giveUpSubscription(m.subscriptionId ?? '');
      await settle();
      expect(await load(m.id)).toMatchObject({ status: 'ended', endReason: 'payment_failed_final' });
      expect(await getKey(base, m.keyId ?? '')).toMatchObject({ status: 'revoking', revokeReason: 'membership_ended' });
    });
  });

  describe('retiring a plan', () => {
    it('sets each paying member to end at period end (billing scheduled first) and rejects applications', async () => {
      const p = await createPlan(md(), {
        siteId: s.siteId,
        name: `Old ${s.u}`,
        amount: 3000,
        currency: 'jpy',
        interval: 'month',
        doors: [s.doorA],
      });
      if (p.status !== 'applied') throw new Error('plan');
      const applied = await applyMembership(md(), { planId: p.state.id, personId: s.personId });
      const r = await retirePlan(md(), { planId: p.state.id, actor: 'staff-1' });
      expect(r).toMatchObject({ status: 'applied', code: 'PLAN_RETIRED', pending: [] });
      if (applied.status !== 'applied') throw new Error('apply');
      expect(await load(applied.state.id)).toMatchObject({ status: 'rejected', endReason: 'plan_retired' });
      expect(await applyMembership(md(), { planId: p.state.id, personId: s.personId })).toMatchObject({
        status: 'refused',
        code: 'PLAN_NOT_AVAILABLE',
      });
    });
  });

  describe('webhooks out', () => {
    it('membership.activated once on activation and membership.ended once on the end, in the transaction of the change', async () => {
      await t.db.query(
        `INSERT INTO webhook_endpoints (id, site_id, url, secret, events, created_at)
         VALUES ($1, $2, 'https://hooks.example.test/m', 'whsec_x', ARRAY['membership.activated', 'membership.ended'], 0)`,
        [`wh-${s.u}`, s.siteId],
      );
      const m = await activeMember();
      await endMembership(md(), { membershipId: m.id, reason: 'force_cancel', actor: 'staff-1', note: 'done' });
      await settle(); // the subscription.deleted that follows raises nothing more
      const rows = await t.db.query<{ type: string; status: string }>(
        `SELECT type, body->>'status' AS status FROM webhook_outbox WHERE endpoint_id = $1 AND body->>'membershipId' = $2 ORDER BY id`,
        [`wh-${s.u}`, m.id],
      );
      expect(rows.rows).toEqual([
        { type: 'membership.activated', status: 'active' },
        { type: 'membership.ended', status: 'ended' },
      ]);
    });
  });

  describe('the database guard of the one ending verb', () => {
    it('refuses ended/ending/rejected written under any verb but endMembership, and any status change outside a verb', async () => {
      const m = await activeMember();
      await expect(
        t.db.query(`UPDATE memberships SET status = 'ended', ended_at = 1, end_reason = 'force_cancel' WHERE id = $1`, [m.id]),
      ).rejects.toThrow(/memberships\.status active -> ended is not a move of verb \(none: tobira\.verb unset\)/);
      await expect(
        t.db.transaction(async (tx) => {
          await enterVerb(tx, 'observeSubscription');
          await tx.query(`UPDATE memberships SET status = 'ended', ended_at = 1, end_reason = 'force_cancel' WHERE id = $1`, [m.id]);
        }),
      ).rejects.toThrow(/memberships\.status active -> ended is not a move of verb observeSubscription/);
      // the living-status writer cannot end one either: its SQL matches no row
      const n0 = await t.db.transaction(async (tx) => {
        await enterVerb(tx, 'observeSubscription');
        return casMembership(tx, { ...m, status: 'ended', version: m.version + 1 }, m.version);
      });
      expect(n0).toBe(0);
      expect(await load(m.id)).toEqual(m);
    });
  });
});

describe('the one writer rules (source)', () => {
  const root = fileURLToPath(new URL('../src/', import.meta.url));
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
    );
  const filesMatching = (re: RegExp) =>
    walk(root)
      .filter((f) => re.test(readFileSync(f, 'utf8')))
      .map((f) => relative(root, f));

  it('only the memberships repository writes the memberships table, and only endMembershipRow names the endMembership verb', () => {
    expect(filesMatching(/(UPDATE|INSERT INTO)\s+memberships\b/)).toEqual(['adapters/db/memberships.ts']);
    // the verb marker the guard checks (tobira.verb = endMembership) is set in one file
    expect(filesMatching(/(enterVerb|set_config|inBilling)\([^)]*['"]endMembership['"]/)).toEqual(['adapters/db/memberships.ts']);
    const src = readFileSync(join(root, 'adapters/db/memberships.ts'), 'utf8');
    // the verb marker is set in exactly one function, the one that writes the ending statuses
    const fns = src.split(/\nexport async function /).slice(1);
    const naming = fns.filter((f) => f.includes("'endMembership'")).map((f) => f.slice(0, f.indexOf('(')));
    expect(naming).toEqual(['endMembershipRow']);
    const endingWriters = fns.filter((f) => /'ending', 'ended', 'rejected'/.test(f)).map((f) => f.slice(0, f.indexOf('(')));
    expect(endingWriters).toEqual(['endMembershipRow']);
  });
});
