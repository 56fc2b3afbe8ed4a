import { asDoorId, asSiteId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { listPaymentsOfStay } from '../src/adapters/db/payments.js';
import { insertRoom, loadStay, loadStaySettings, saveStaySettings } from '../src/adapters/db/stays.js';
import { loadWalkIn, quotaUsed, returnQuota, useQuota } from '../src/adapters/db/walk-ins.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import { getKey } from '../src/app/keys.js';
import { applyMembership, approveMembership, createPlan, endMembership, selfCancelMembership } from '../src/app/memberships.js';
import { createPerson } from '../src/app/registry.js';
import { bookStay, checkInStay, type StayDeps } from '../src/app/stays.js';
import { blockPerson, cancelWalkIn, createWalkIn, quotaView, unblockPerson } from '../src/app/walk-ins.js';
import { localDateOf, zonedInstant } from '../src/domain/nights.js';
import type { Room } from '../src/domain/stays.js';
import { T0, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { startInbox } from './stays-harness.js';

/**
 * Check-in gates, walk-ins and monthly quotas end to end on both
 * cloud databases, with the real `stripe` SDK against the local Stripe and
 * its signed webhooks through the verified inbox and the billing worker:
 * a walk-in pays through the intent factory (purpose walk_in) before its key
 * is issued; failure and expiry release; quota uses raced by 20 clients stay
 * exact; a use is returned to the month it was used in (Asia/Tokyo); a
 * blocked guest is refused at a stay's check-in; ending a membership cancels
 * its members' bookings and queues the member's message.
 */
const WEBHOOK_SECRET = 'whsec_tobira_walk_ins';

describe.each(pgBackends())('walk-ins and check-in gates on %s', (pgBackend) => {
  let t: TestDb;
  let local: StripeLocal;
  let stripe: Stripe;
  let inbox: Awaited<ReturnType<typeof startInbox>>;
  let base: ReturnType<typeof deps>;
  let s: Awaited<ReturnType<typeof seed>>;
  let room: Room;
  let pins = 0;
  const pin = () => String(30_000_000 + ++pins);
  const d = (over: Partial<StayDeps> = {}): StayDeps => ({ ...base, stripe, newPin: pin, ...over });
  const worker = () => new BillingWorker({ ...d(), stripe, random: () => 0.5 });
  const settle = async () => {
    await local.webhooks.idle();
    return worker().runOnce();
  };
  const pay = async (intentId: string) => {
    const r = await fetch(`${local.url}/_local/pay/${intentId}?card=pm_card_visa`);
    expect(r.status).toBeLessThan(300);
  };
  let n = 0;
  const person = async () => {
    const id = `walker-${s.u}-${++n}`;
    expect((await createPerson(base, { id, name: `Walker ${n}` })).status).toBe('applied');
    return id;
  };
  const plan = async (over: { quota?: number | null; membersOnly?: boolean; walkInAmount?: number | null } = {}) => {
    const id = `plan-${s.u}-${++n}`;
    const p = await createPlan(d(), {
      id,
      siteId: s.siteId,
      name: id,
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [s.doorA],
      membersOnly: over.membersOnly ?? false,
      monthlyEntryQuota: over.quota === undefined ? 2 : over.quota,
      walkInAmount: over.walkInAmount === undefined ? 2000 : over.walkInAmount,
    });
    expect(p.status).toBe('applied');
    return id;
  };
  const walkIn = (planId: string, personId: string, id = `wi-${s.u}-${++n}`, value = pin()) =>
    createWalkIn(d(), { walkInId: id, siteId: s.siteId, planId, personId, credential: { type: 'pin', value } });
  const used = (planId: string, personId: string, month: string) => quotaUsed(t.db, planId, personId, month);
  const month = () => localDateOf(base.clock.now(), 'Asia/Tokyo').slice(0, 7);

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    base = deps(t.db);
    s = await seed(base);
    room = { id: `room-${s.u}`, siteId: asSiteId(s.siteId), name: '101', doors: [asDoorId(s.doorB)] };
    await insertRoom(t.db, room, T0);
    const settings = await loadStaySettings(t.db, s.siteId);
    if (!settings) throw new Error('settings');
    await saveStaySettings(t.db, { ...settings, walkInsAllowed: true }, T0);
    inbox = await startInbox(
      () => t.db,
      () => stripe,
      () => base.clock.now(),
      WEBHOOK_SECRET,
    );
    local = await startStripeLocal({ webhook: { url: inbox.url, secret: WEBHOOK_SECRET }, seed: `walkin${pgBackend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
  });
  afterAll(async () => {
    await local.close();
    await inbox.close();
    await t.close();
  });
  afterEach(async () => {
    await local.webhooks.idle();
    Object.assign(local.faults, { unavailable: false, unavailableRequests: 0, failAfterEffect: 0 });
    Object.assign(local.webhooks.faults, { duplicates: 1, hold: false });
  });

  describe('when a walk-in passes the gates and pays', () => {
    it('is pending with an intent from the one factory (purpose walk_in, the stored key), and its key is issued only once paid', async () => {
      const planId = await plan();
      const who = await person();
      const w = await walkIn(planId, who);
      expect(w).toMatchObject({ status: 'applied', code: 'WALK_IN_CREATED', state: { status: 'pending', amount: 2000, keyId: null } });
      if (w.status !== 'applied') return;
      const intentId = w.state.intentId ?? '';
      expect(w.state.clientSecret).toMatch(/^pi_.+_secret_/);
      const created = local.events().filter((e) => e.type === 'payment_intent.created' && e.data.object.id === intentId);
      expect(created).toHaveLength(1);
      expect(created[0]?.request.idempotency_key).toBe(`walk_in:${w.state.id}:1`);
      expect(local.paymentIntent(intentId)?.metadata).toMatchObject({ purpose: 'walk_in', subject_id: w.state.id });
      expect(await getKey(base, `key_${w.state.id}`)).toBeNull();
      expect(await used(planId, who, month())).toBe(1);

      local.webhooks.faults.duplicates = 2; // every event twice: one effect
      await pay(intentId);
      await settle();
      const paid = await loadWalkIn(t.db, w.state.id);
      expect(paid).toMatchObject({ status: 'paid', keyId: `key_${w.state.id}`, amountReceived: 2000, version: 2 });
      const key = await getKey(base, `key_${w.state.id}`);
      expect(key).toMatchObject({ status: 'issuing', personId: who, doors: [s.doorA] });
      // a day pass: to the end of the day at the site
      expect(key?.validUntil).toBe(zonedInstant('2026-11-30', '00:00', 'Asia/Tokyo'));
      expect(await used(planId, who, month())).toBe(1);
    });

    it('a repeat with the same id answers the same walk-in and the same intent, taking no second use', async () => {
      const planId = await plan();
      const who = await person();
      const id = `wi-${s.u}-rep`;
      const value = pin();
      const a = await walkIn(planId, who, id, value);
      const b = await walkIn(planId, who, id, value);
      expect(a.status).toBe('applied');
      expect(b).toMatchObject({ status: 'noop', code: 'WALK_IN_ALREADY_CREATED' });
      if (a.status !== 'applied' || b.status !== 'noop') return;
      expect(b.state.intentId).toBe(a.state.intentId);
      expect(await used(planId, who, month())).toBe(1);
    });
  });

  describe('when a gate refuses', () => {
    it('answers the gate code and creates nothing: blocked, not offered, not sold, members only, quota used up', async () => {
      const who = await person();
      const planId = await plan({ quota: 1 });
      const count = async () => (await t.db.query('SELECT 1 FROM walk_ins WHERE person_id = $1', [who])).rows.length;

      expect((await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'damage', actor: 'staff-1' })).code).toBe('PERSON_BLOCKED');
      expect(await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'again', actor: 'staff-1' })).toMatchObject({
        status: 'noop',
        code: 'PERSON_ALREADY_BLOCKED',
      });
      expect(await walkIn(planId, who)).toMatchObject({ status: 'refused', code: 'GUEST_BLOCKED' });
      expect((await unblockPerson(d(), { siteId: s.siteId, personId: who, actor: 'staff-1' })).code).toBe('PERSON_UNBLOCKED');

      expect(await walkIn(`plan-nope-${s.u}`, who)).toMatchObject({ status: 'refused', code: 'PLAN_NOT_IN_CONFIG' });
      expect(await walkIn(await plan({ walkInAmount: null }), who)).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_ALLOWED' });
      expect(await walkIn(await plan({ membersOnly: true }), who)).toMatchObject({ status: 'refused', code: 'MEMBERS_ONLY_PLAN' });
      expect(await count()).toBe(0);

      expect((await walkIn(planId, who)).status).toBe('applied');
      expect(await walkIn(planId, who)).toMatchObject({ status: 'refused', code: 'QUOTA_EXHAUSTED' });
      expect(await count()).toBe(1);
      expect(await used(planId, who, month())).toBe(1);
    });

    it('WALK_IN_NOT_ALLOWED when the site sells no walk-ins', async () => {
      const settings = await loadStaySettings(t.db, s.siteId);
      if (!settings) throw new Error('settings');
      await saveStaySettings(t.db, { ...settings, walkInsAllowed: false }, T0);
      try {
        expect(await walkIn(await plan(), await person())).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_ALLOWED' });
      } finally {
        await saveStaySettings(t.db, { ...settings, walkInsAllowed: true }, T0);
      }
    });
  });

  describe('when the payment never comes', () => {
    it('Stripe unreachable at the desk: BILLING_UNAVAILABLE changes nothing (no walk-in, no quota use), and the same id sells later', async () => {
      const planId = await plan();
      const who = await person();
      local.faults.unavailable = true;
      const w = await walkIn(planId, who, `wi-${s.u}-down`);
      expect(w).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
      expect(await loadWalkIn(t.db, `wi-${s.u}-down`)).toBeNull();
      expect(await used(planId, who, month())).toBe(0);
      local.faults.unavailable = false;
      expect(await walkIn(planId, who, `wi-${s.u}-down`)).toMatchObject({ status: 'applied', code: 'WALK_IN_CREATED' });
      expect(await used(planId, who, month())).toBe(1);
    });

    it('the hold ends: the intent is cancelled in Stripe first, then the walk-in expires and gives its use back', async () => {
      const planId = await plan();
      const who = await person();
      const w = await walkIn(planId, who);
      if (w.status !== 'applied') throw new Error(w.code);
      base.clock.advance(29 * 60_000);
      expect((await settle()).walkInsExpired).toBe(0);
      local.faults.unavailable = true;
      base.clock.advance(2 * 60_000);
      expect((await settle()).walkInsExpired).toBe(0); // Stripe down: nothing released while money may land
      expect(await loadWalkIn(t.db, w.state.id)).toMatchObject({ status: 'pending' });
      local.faults.unavailable = false;
      // (walk-ins other tests left unpaid expire in the same pass)
      expect((await settle()).walkInsExpired).toBeGreaterThanOrEqual(1);
      expect(local.paymentIntent(w.state.intentId ?? '')?.status).toBe('canceled');
      expect(await loadWalkIn(t.db, w.state.id)).toMatchObject({ status: 'expired', quotaReturned: true, keyId: null });
      expect(await used(planId, who, month())).toBe(0);
      await settle(); // the canceled event changes nothing more
      expect(await loadWalkIn(t.db, w.state.id)).toMatchObject({ status: 'expired', version: 2 });
    });
  });

  describe('when 20 clients race for one quota', () => {
    it('20 walk-ins at once for a quota of 5: exactly 5 are created, 15 refused QUOTA_EXHAUSTED, the count is 5', async () => {
      const planId = await plan({ quota: 5 });
      const who = await person();
      const rs = await Promise.all(Array.from({ length: 20 }, () => walkIn(planId, who)));
      expect(rs.filter((r) => r.status === 'applied')).toHaveLength(5);
      expect(rs.filter((r) => r.status === 'refused' && r.code === 'QUOTA_EXHAUSTED')).toHaveLength(15);
      expect(await used(planId, who, month())).toBe(5);
      expect((await t.db.query('SELECT 1 FROM walk_ins WHERE person_id = $1', [who])).rows.length).toBe(5);
    });

    it('uses and returns raced from 20 clients: the count is exact and never leaves 0..N', async () => {
      const planId = await plan({ quota: 10 });
      const who = await person();
      const m = '2031-05';
      const now = base.clock.now();
      const tx = <T>(fn: (q: typeof t.db) => Promise<T>) => t.db.transaction((q) => fn(q as typeof t.db));
      // 20 uses of a quota of 7-of-10 from 3: exactly 7 succeed
      for (let i = 0; i < 3; i++) expect(await useQuota(t.db, { planId, personId: who, month: m, quota: 10, now })).toBe(1);
      const uses = await Promise.all(
        Array.from({ length: 20 }, () => tx((q) => useQuota(q, { planId, personId: who, month: m, quota: 10, now }))),
      );
      expect(uses.filter((x) => x === 1)).toHaveLength(7);
      expect(await used(planId, who, m)).toBe(10);
      // 20 returns from 10: exactly 10 succeed, never below 0
      const back = await Promise.all(Array.from({ length: 20 }, () => tx((q) => returnQuota(q, { planId, personId: who, month: m, now }))));
      expect(back.filter((x) => x === 1)).toHaveLength(10);
      expect(await used(planId, who, m)).toBe(0);
      // mixed: 10 uses and 10 returns at once from 5
      for (let i = 0; i < 5; i++) await useQuota(t.db, { planId, personId: who, month: m, quota: 10, now });
      const mixed = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          tx((q) =>
            i % 2 === 0
              ? useQuota(q, { planId, personId: who, month: m, quota: 10, now })
              : returnQuota(q, { planId, personId: who, month: m, now }),
          ).then((r) => (i % 2 === 0 ? r : -r)),
        ),
      );
      const final = await used(planId, who, m);
      expect(final).toBe(5 + mixed.reduce((a, b) => a + b, 0));
      expect(final).toBeGreaterThanOrEqual(0);
      expect(final).toBeLessThanOrEqual(10);
      // the database refuses a count out of range whatever writes it
      await expect(t.db.query('UPDATE quota_usage SET used = quota + 1 WHERE plan_id = $1', [planId])).rejects.toThrow();
      await expect(t.db.query('UPDATE quota_usage SET used = -1 WHERE plan_id = $1', [planId])).rejects.toThrow();
    });
  });

  describe('when a stay checks in', () => {
    it('a blocked guest is refused GUEST_BLOCKED and stays confirmed; unblocked, the check-in goes through', async () => {
      const who = await person();
      const today = localDateOf(base.clock.now(), 'Asia/Tokyo');
      const tomorrow = localDateOf(base.clock.now() + 86_400_000, 'Asia/Tokyo');
      const booked = await bookStay(d(), {
        personId: who,
        roomId: room.id,
        checkIn: today,
        checkOut: tomorrow,
        amount: 12_000,
        currency: 'jpy',
      });
      if (booked.status !== 'applied') throw new Error(booked.code);
      const [p] = await listPaymentsOfStay(t.db, booked.state.stay.id);
      await pay(p?.intentId ?? '');
      await settle();
      expect(await loadStay(t.db, booked.state.stay.id)).toMatchObject({ status: 'confirmed' });
      await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'police report', actor: 'staff-1' });
      const refusedIn = await checkInStay(d(), { stayId: booked.state.stay.id });
      expect(refusedIn).toMatchObject({ status: 'refused', code: 'GUEST_BLOCKED' });
      expect(await loadStay(t.db, booked.state.stay.id)).toMatchObject({ status: 'confirmed', version: 2 });
      await unblockPerson(d(), { siteId: s.siteId, personId: who, actor: 'staff-1' });
      expect(await checkInStay(d(), { stayId: booked.state.stay.id })).toMatchObject({ status: 'applied', code: 'STAY_CHECKED_IN' });
    });
  });

  describe('when a membership ends', () => {
    it("its members' bookings are cancelled through the stay verb (key revoked, refund queued) and the member gets the ending message", async () => {
      const who = await person();
      await t.db.query("UPDATE people SET locale = 'en' WHERE id = $1", [who]);
      const planId = await plan({ membersOnly: true, quota: null });
      const mid = `mem-${s.u}-end`;
      expect((await applyMembership(d(), { membershipId: mid, planId, personId: who })).status).toBe('applied');
      const ap = await approveMembership(d(), { membershipId: mid, actor: 'staff-1' });
      expect(local.payInvoice(ap.invoiceId ?? '').status).toBe(200);
      await settle();
      // a member may walk in on the members-only plan
      expect((await walkIn(planId, who)).status).toBe('applied');

      const checkIn = localDateOf(base.clock.now() + 20 * 86_400_000, 'Asia/Tokyo');
      const checkOut = localDateOf(base.clock.now() + 21 * 86_400_000, 'Asia/Tokyo');
      const notMember = await bookStay(d(), {
        personId: await person(),
        roomId: room.id,
        checkIn,
        checkOut,
        amount: 9_000,
        currency: 'jpy',
        membershipId: mid,
      });
      expect(notMember).toMatchObject({ status: 'refused', code: 'MEMBERS_ONLY_PLAN' });
      const booked = await bookStay(d(), {
        personId: who,
        roomId: room.id,
        checkIn,
        checkOut,
        amount: 9_000,
        currency: 'jpy',
        membershipId: mid,
      });
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const [p] = await listPaymentsOfStay(t.db, stayId);
      await pay(p?.intentId ?? '');
      await settle();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed', membershipId: mid });

      // self-cancel: ending at the period end; the booking stays, the member is told in English
      const sc = await selfCancelMembership(d(), { membershipId: mid });
      expect(sc).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDING' });
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });
      const msgs = await t.db.query<{ template: string; locale: string; subject: string }>(
        'SELECT template, locale, subject FROM notification_outbox WHERE person_id = $1 ORDER BY id',
        [who],
      );
      expect(msgs.rows.filter((r) => r.template === 'membership_ending')).toEqual([
        { template: 'membership_ending', locale: 'en', subject: expect.stringContaining('membership is ending') as string },
      ]);
      // asked again (a retried verb): one message
      await selfCancelMembership(d(), { membershipId: mid });

      // staff force-cancel takes effect now: the booking is cancelled in the same transaction
      const fc = await endMembership(d(), { membershipId: mid, reason: 'force_cancel', actor: 'staff-2', note: 'fraud' });
      expect(fc).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDED' });
      const stay = await loadStay(t.db, stayId);
      expect(stay).toMatchObject({ status: 'cancelled', cancelReason: 'membership_ended' });
      expect(await getKey(base, `key_${stayId}`)).toMatchObject({ status: 'revoking' });
      const [after] = await listPaymentsOfStay(t.db, stayId);
      expect(after).toMatchObject({ status: 'refund_pending' });
      const ending = await t.db.query("SELECT 1 FROM notification_outbox WHERE person_id = $1 AND template = 'membership_ending'", [who]);
      expect(ending.rows).toHaveLength(1);
      // no longer a member: the members-only plan refuses the walk-in
      expect(await walkIn(planId, who)).toMatchObject({ status: 'refused', code: 'MEMBERS_ONLY_PLAN' });
    });
  });

  describe('when a use is cancelled across a month boundary in Asia/Tokyo', () => {
    it('the use goes back to the month it was used in, never to the current one, and only when the policy says so', async () => {
      const planId = await plan({ quota: 2 });
      const who = await person();
      // 2027-01-31 23:50 in Tokyo (14:50 UTC: still January in UTC too; 00:30 Feb 1st in Tokyo is January 31st in UTC)
      base.clock.set(zonedInstant('2027-01-31', '23:50', 'Asia/Tokyo'));
      const jan = await walkIn(planId, who);
      const jan2 = await walkIn(planId, who);
      if (jan.status !== 'applied' || jan2.status !== 'applied') throw new Error('jan');
      expect(jan.state).toMatchObject({ day: '2027-01-31', quotaMonth: '2027-01' });
      await pay(jan.state.intentId ?? '');
      await pay(jan2.state.intentId ?? '');
      await settle();
      expect(await walkIn(planId, who)).toMatchObject({ status: 'refused', code: 'QUOTA_EXHAUSTED' });

      base.clock.set(zonedInstant('2027-02-01', '00:30', 'Asia/Tokyo'));
      expect(new Date(base.clock.now()).toISOString().slice(0, 10)).toBe('2027-01-31'); // UTC says January
      const feb = await walkIn(planId, who);
      expect(feb).toMatchObject({ status: 'applied', state: { quotaMonth: '2027-02' } });
      expect(await used(planId, who, '2027-01')).toBe(2);
      expect(await used(planId, who, '2027-02')).toBe(1);

      // the guest cancels: the default policy (site_fault) keeps the use
      expect(await cancelWalkIn(d(), { walkInId: jan.state.id, reason: 'guest_cancelled' })).toMatchObject({
        status: 'applied',
        code: 'WALK_IN_CANCELLED',
        state: { quotaReturned: false },
      });
      expect(await used(planId, who, '2027-01')).toBe(2);
      expect(await getKey(base, `key_${jan.state.id}`)).toMatchObject({ status: 'revoking' });
      // staff cancel: the use goes back to January, February is untouched
      expect(await cancelWalkIn(d(), { walkInId: jan2.state.id, reason: 'staff_cancelled' })).toMatchObject({
        code: 'WALK_IN_CANCELLED',
        state: { quotaReturned: true },
      });
      expect(await cancelWalkIn(d(), { walkInId: jan2.state.id, reason: 'staff_cancelled' })).toMatchObject({
        status: 'noop',
        code: 'WALK_IN_ALREADY_CANCELLED',
      });
      expect(await used(planId, who, '2027-01')).toBe(1);
      expect(await used(planId, who, '2027-02')).toBe(1);

      const view = await quotaView(d(), { planId, personId: who });
      expect(view).toMatchObject({ currentMonth: '2027-02', plan: { monthlyEntryQuota: 2 } });
      expect(view?.usage.map((u) => [u.month, u.used])).toEqual([
        ['2027-02', 1],
        ['2027-01', 1],
      ]);
    });
  });

  describe('when a person is blocked at the site (the gates run at booking and when the key is issued)', () => {
    const nights = (fromDay: number) => ({
      checkIn: localDateOf(base.clock.now() + fromDay * 86_400_000, 'Asia/Tokyo'),
      checkOut: localDateOf(base.clock.now() + (fromDay + 1) * 86_400_000, 'Asia/Tokyo'),
    });
    const refundsOf = (intentId: string) => local.refunds().filter((r) => r.payment_intent === intentId);

    it('a blocked guest cannot book: GUEST_BLOCKED, nothing held, no intent made', async () => {
      const who = await person();
      await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'damage', actor: 'staff-1' });
      const before = local.events().filter((e) => e.type === 'payment_intent.created').length;
      const r = await bookStay(d(), { personId: who, roomId: room.id, ...nights(40), amount: 9_000, currency: 'jpy' });
      expect(r).toMatchObject({ status: 'refused', code: 'GUEST_BLOCKED' });
      expect(local.events().filter((e) => e.type === 'payment_intent.created')).toHaveLength(before);
      const free = await bookStay(d(), { personId: await person(), roomId: room.id, ...nights(40), amount: 9_000, currency: 'jpy' });
      expect(free).toMatchObject({ status: 'applied' });
    });

    it('blocked after booking, the payment gets no key: the stay is cancelled (guest_blocked) and refunded in full once', async () => {
      const who = await person();
      const booked = await bookStay(d(), { personId: who, roomId: room.id, ...nights(42), amount: 9_000, currency: 'jpy', deposit: 3_000 });
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const blocked = await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'fraud', actor: 'staff-1' });
      expect(blocked).toMatchObject({ status: 'applied', code: 'PERSON_BLOCKED', state: { keysRevoked: 0 } });
      const payments = await listPaymentsOfStay(t.db, stayId);
      for (const p of payments) await pay(p.intentId ?? '');
      for (let i = 0; i < 3; i++) await settle();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'cancelled', cancelReason: 'guest_blocked', keyId: null });
      expect(await getKey(base, `key_${stayId}`)).toBeNull();
      for (const p of payments) expect(refundsOf(p.intentId ?? '').map((r) => r.amount)).toEqual([p.amount]);
      expect((await listPaymentsOfStay(t.db, stayId)).map((p) => p.status)).toEqual(['refunded', 'refunded']);
    });

    it("blocking revokes the person's live keys at the site (person_blocked) and the answer says how many", async () => {
      const who = await person();
      const planId = await plan({ quota: null });
      const w = await walkIn(planId, who);
      if (w.status !== 'applied') throw new Error(w.code);
      await pay(w.state.intentId ?? '');
      const booked = await bookStay(d(), { personId: who, roomId: room.id, ...nights(44), amount: 9_000, currency: 'jpy' });
      if (booked.status !== 'applied') throw new Error(booked.code);
      const [p] = await listPaymentsOfStay(t.db, booked.state.stay.id);
      await pay(p?.intentId ?? '');
      await settle();
      expect(await getKey(base, `key_${booked.state.stay.id}`)).toMatchObject({ status: 'issuing' });
      const blocked = await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'violence', actor: 'staff-1' });
      expect(blocked).toMatchObject({ status: 'applied', code: 'PERSON_BLOCKED', state: { keysRevoked: 2 } });
      expect(await getKey(base, `key_${booked.state.stay.id}`)).toMatchObject({ status: 'revoking', revokeReason: 'person_blocked' });
      const wk = (await loadWalkIn(t.db, w.state.id))?.keyId ?? '';
      expect(await getKey(base, wk)).toMatchObject({ status: 'revoking', revokeReason: 'person_blocked' });
      expect(await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'again', actor: 'staff-1' })).toMatchObject({
        status: 'noop',
        code: 'PERSON_ALREADY_BLOCKED',
        state: { keysRevoked: 0 },
      });
    });
  });

  describe("when a membership ends while a members' booking is still pending", () => {
    it('the booking is cancelled with its intent, and money that lands for it later is refunded once, never confirmed into a key', async () => {
      const who = await person();
      const planId = await plan({ membersOnly: true, quota: null });
      const mid = `mem-${s.u}-pend`;
      expect((await applyMembership(d(), { membershipId: mid, planId, personId: who })).status).toBe('applied');
      const ap = await approveMembership(d(), { membershipId: mid, actor: 'staff-1' });
      expect(local.payInvoice(ap.invoiceId ?? '').status).toBe(200);
      await settle();
      const checkIn = localDateOf(base.clock.now() + 50 * 86_400_000, 'Asia/Tokyo');
      const checkOut = localDateOf(base.clock.now() + 51 * 86_400_000, 'Asia/Tokyo');
      const booked = await bookStay(d(), {
        personId: who,
        roomId: room.id,
        checkIn,
        checkOut,
        amount: 9_000,
        currency: 'jpy',
        membershipId: mid,
      });
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const [p] = await listPaymentsOfStay(t.db, stayId);
      const fc = await endMembership(d(), { membershipId: mid, reason: 'force_cancel', actor: 'staff-2', note: 'fraud' });
      expect(fc).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDED' });
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'cancelled', cancelReason: 'membership_ended' });
      // the guest pays before the intent's cancellation reaches Stripe
      await pay(p?.intentId ?? '');
      for (let i = 0; i < 3; i++) await settle();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'cancelled', keyId: null });
      expect(await getKey(base, `key_${stayId}`)).toBeNull();
      expect(
        local
          .refunds()
          .filter((r) => r.payment_intent === p?.intentId)
          .map((r) => r.amount),
      ).toEqual([9_000]);
      // the nights are free again
      const again = await bookStay(d(), { personId: await person(), roomId: room.id, checkIn, checkOut, amount: 9_000, currency: 'jpy' });
      expect(again.status).toBe('applied');
    });
  });

  describe('when a walk-in ends with money in', () => {
    const refundsOf = (intentId: string) => local.refunds().filter((r) => r.payment_intent === intentId);

    it('a staff_cancelled walk-in is refunded in full, exactly once, at Stripe', async () => {
      const planId = await plan({ quota: null });
      const w = await walkIn(planId, await person());
      if (w.status !== 'applied') throw new Error(w.code);
      await pay(w.state.intentId ?? '');
      await settle();
      expect(await cancelWalkIn(d(), { walkInId: w.state.id, reason: 'staff_cancelled' })).toMatchObject({ code: 'WALK_IN_CANCELLED' });
      await settle();
      await settle();
      expect(refundsOf(w.state.intentId ?? '').map((r) => r.amount)).toEqual([2000]);
      const row = await t.db.query<{ status: string }>('SELECT status FROM walk_in_refunds WHERE walk_in_id = $1', [w.state.id]);
      expect(row.rows).toEqual([{ status: 'succeeded' }]);
    });

    it('a person blocked after the desk sold the pass gets no key when it is paid: it fails and the money comes back', async () => {
      const planId = await plan({ quota: null });
      const who = await person();
      const w = await walkIn(planId, who);
      if (w.status !== 'applied') throw new Error(w.code);
      await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'theft', actor: 'staff-1' });
      await pay(w.state.intentId ?? '');
      await settle();
      await settle();
      expect(await loadWalkIn(t.db, w.state.id)).toMatchObject({ status: 'failed', keyId: null });
      expect(await getKey(base, `key_${w.state.id}`)).toBeNull();
      expect(refundsOf(w.state.intentId ?? '').map((r) => r.amount)).toEqual([2000]);
    });
  });
});
