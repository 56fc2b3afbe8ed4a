import { asDoorId, asSiteId, newCorrelationId, PersonId } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CANCELLATION_POLICY, returnsQuota } from '../src/domain/cancellation-policy.js';
import { checkInGates, type GateFacts } from '../src/domain/check-in-gates.js';
import { zonedInstant } from '../src/domain/nights.js';
import type { Plan } from '../src/domain/plans.js';
import { cancelWalkIn, createWalkIn, expireWalkIn, quotaMonthOf, settleWalkIn, type WalkIn } from '../src/domain/walk-ins.js';

/** The check-in gates and the walk-in verbs, pure: one test per gate code, given / when / then. */
const cid = newCorrelationId();
const site = asSiteId('site-1');
const plan: Plan = {
  id: 'plan-1',
  siteId: site,
  name: 'Day pass',
  amount: 8000,
  currency: 'jpy',
  interval: 'month',
  intervalCount: 1,
  doors: [asDoorId('door-1')],
  membersOnly: false,
  monthlyEntryQuota: 3,
  walkInAmount: 2000,
  graceSeconds: 0,
  status: 'active',
  stripePriceId: null,
  createdAt: 0,
  updatedAt: 0,
  retiredAt: null,
};
const open: GateFacts = {
  kind: 'walk_in',
  siteId: site,
  blocked: null,
  walkInsAllowed: true,
  plan,
  member: false,
  usedThisMonth: 0,
};

describe('checkInGates', () => {
  it('passes a walk-in that every gate lets through, with the uses left after it', () => {
    expect(checkInGates(open)).toEqual({ status: 'ok', value: { quotaLeft: 2 } });
  });

  it('GUEST_BLOCKED: a person the site blocked is refused first, whatever else holds', () => {
    const r = checkInGates({ ...open, blocked: { reason: 'damage' }, walkInsAllowed: false, usedThisMonth: 99 });
    expect(r).toMatchObject({ status: 'refused', code: 'GUEST_BLOCKED' });
    expect(
      checkInGates({
        kind: 'stay',
        siteId: site,
        blocked: { reason: 'x' },
        walkInsAllowed: false,
        plan: null,
        member: false,
        usedThisMonth: 0,
      }),
    ).toMatchObject({
      code: 'GUEST_BLOCKED',
    });
  });

  it('PLAN_NOT_IN_CONFIG: a plan of another site, a retired plan, or none', () => {
    expect(checkInGates({ ...open, plan: { ...plan, siteId: asSiteId('site-2') } })).toMatchObject({ code: 'PLAN_NOT_IN_CONFIG' });
    expect(checkInGates({ ...open, plan: { ...plan, status: 'retired' } })).toMatchObject({ code: 'PLAN_NOT_IN_CONFIG' });
    expect(checkInGates({ ...open, plan: null })).toMatchObject({ code: 'PLAN_NOT_IN_CONFIG' });
  });

  it('WALK_IN_NOT_ALLOWED: the site sells no walk-ins, or the plan is not sold at the desk', () => {
    expect(checkInGates({ ...open, walkInsAllowed: false })).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_ALLOWED' });
    expect(checkInGates({ ...open, plan: { ...plan, walkInAmount: null } })).toMatchObject({ code: 'WALK_IN_NOT_ALLOWED' });
  });

  it('MEMBERS_ONLY_PLAN: a members-only plan refuses a person who is not a member, and lets a member through', () => {
    const only = { ...open, plan: { ...plan, membersOnly: true } };
    expect(checkInGates(only)).toMatchObject({ status: 'refused', code: 'MEMBERS_ONLY_PLAN' });
    expect(checkInGates({ ...only, member: true })).toMatchObject({ status: 'ok' });
  });

  it('QUOTA_EXHAUSTED: the last use passes, the one after is refused; no quota is no limit', () => {
    expect(checkInGates({ ...open, usedThisMonth: 2 })).toEqual({ status: 'ok', value: { quotaLeft: 0 } });
    expect(checkInGates({ ...open, usedThisMonth: 3 })).toMatchObject({ status: 'refused', code: 'QUOTA_EXHAUSTED' });
    expect(checkInGates({ ...open, plan: { ...plan, monthlyEntryQuota: 0 } })).toMatchObject({ code: 'QUOTA_EXHAUSTED' });
    expect(checkInGates({ ...open, plan: { ...plan, monthlyEntryQuota: null }, usedThisMonth: 1000 })).toEqual({
      status: 'ok',
      value: { quotaLeft: null },
    });
  });

  it("a stay checks in with no plan (only the block applies); a members' booking needs its membership", () => {
    const stay: GateFacts = { ...open, kind: 'stay', plan: null, walkInsAllowed: false, usedThisMonth: 99 };
    expect(checkInGates(stay)).toEqual({ status: 'ok', value: { quotaLeft: null } });
    expect(checkInGates({ ...stay, plan: { ...plan, membersOnly: true } })).toMatchObject({ code: 'MEMBERS_ONLY_PLAN' });
  });
});

describe('quota months', () => {
  it('are the calendar month of the site: 2027-01-31 15:30 UTC is already February in Tokyo', () => {
    const t = zonedInstant('2027-02-01', '00:30', 'Asia/Tokyo');
    expect(new Date(t).toISOString()).toBe('2027-01-31T15:30:00.000Z');
    expect(quotaMonthOf(t, 'Asia/Tokyo')).toBe('2027-02');
    expect(quotaMonthOf(t, 'UTC')).toBe('2027-01');
    expect(quotaMonthOf(t - 3_600_000, 'Asia/Tokyo')).toBe('2027-01');
  });
});

describe('walk-in verbs', () => {
  const NOW = zonedInstant('2027-01-31', '23:30', 'Asia/Tokyo');
  const credential = { type: 'pin' as const, digest: 'd1' };
  const make = (over: Partial<GateFacts> = {}) =>
    createWalkIn(
      null,
      {
        walkInId: 'wi-1',
        plan,
        personId: PersonId.parse('p1'),
        timeZone: 'Asia/Tokyo',
        holdMinutes: 30,
        credential,
        gates: { siteId: site, blocked: null, walkInsAllowed: true, member: false, usedThisMonth: 0, ...over },
        cid,
      },
      NOW,
    );
  const pending = (): WalkIn => {
    const o = make();
    if (o.status !== 'applied') throw new Error('create');
    return o.state;
  };
  const intent = (status: 'succeeded' | 'canceled' | 'requires_payment_method' | 'processing', amount = 2000) => ({
    intentId: 'pi_1',
    status,
    amount,
    amountReceived: status === 'succeeded' ? amount : 0,
    currency: 'jpy',
    declined: status === 'requires_payment_method',
  });

  it('create: pending with its idempotency key and one use of the site month, or the gate code and nothing', () => {
    const o = make();
    expect(o).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_CREATED',
      state: { status: 'pending', day: '2027-01-31', quotaMonth: '2027-01', idempotencyKey: 'walk_in:wi-1:1', amount: 2000 },
      emits: [{ type: 'use_quota', month: '2027-01', quota: 3 }],
    });
    expect(make({ usedThisMonth: 3 })).toMatchObject({ status: 'refused', code: 'QUOTA_EXHAUSTED' });
    expect(make({ blocked: { reason: 'x' } })).toMatchObject({ status: 'refused', code: 'GUEST_BLOCKED' });
  });

  it('settle: paid issues the key to the end of the day at the site; a decline changes nothing; canceled releases the use', () => {
    const w = pending();
    const paid = settleWalkIn(w, intent('succeeded'), { timeZone: 'Asia/Tokyo', cid }, NOW);
    expect(paid).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_PAID',
      emits: [{ type: 'issue_key', keyId: 'key_wi-1', validFrom: NOW, validUntil: NOW + 3_600_000 }],
    });
    expect(settleWalkIn(w, intent('requires_payment_method'), { timeZone: 'Asia/Tokyo', cid }, NOW)).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_PAYMENT_PENDING',
    });
    expect(settleWalkIn(w, intent('canceled'), { timeZone: 'Asia/Tokyo', cid }, NOW)).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_FAILED',
      state: { quotaReturned: true },
      emits: [{ type: 'return_quota', month: '2027-01' }],
    });
    expect(settleWalkIn(w, intent('succeeded', 1), { timeZone: 'Asia/Tokyo', cid }, NOW)).toMatchObject({
      status: 'refused',
      code: 'PAYMENT_AMOUNT_MISMATCH',
    });
  });

  it('expire: not before the hold; after it, the use goes back to the month it was taken from', () => {
    const w = pending();
    expect(expireWalkIn(w, intent('canceled'), { timeZone: 'Asia/Tokyo', cid }, NOW + 60_000)).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_HOLD_NOT_OVER',
    });
    // an hour later it is February in Tokyo: the use still goes back to January
    expect(expireWalkIn(w, intent('canceled'), { timeZone: 'Asia/Tokyo', cid }, NOW + 3_600_000)).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_EXPIRED',
      emits: [{ type: 'return_quota', month: '2027-01' }],
    });
    // money that landed before the cancel: paid, not expired
    expect(expireWalkIn(w, intent('succeeded'), { timeZone: 'Asia/Tokyo', cid }, NOW + 3_600_000)).toMatchObject({ code: 'WALK_IN_PAID' });
    // money in flight: the hold waits for it
    expect(expireWalkIn(w, intent('processing'), { timeZone: 'Asia/Tokyo', cid }, NOW + 3_600_000)).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_PAYMENT_PROCESSING',
    });
  });

  it('cancel while pending: on the intent Stripe answered (canceled: use back, nothing charged; succeeded: no key, refunded)', () => {
    const w = { ...pending(), intentId: 'pi_1' };
    const opts = { reason: 'staff_cancelled' as const, policy: DEFAULT_CANCELLATION_POLICY, cid };
    expect(cancelWalkIn(w, { ...opts, intent: intent('canceled') }, NOW)).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_CANCELLED',
      state: { status: 'cancelled', quotaReturned: true, amountReceived: 0, keyId: null },
      emits: [{ type: 'return_quota', month: '2027-01' }],
    });
    expect(cancelWalkIn(w, { ...opts, intent: intent('succeeded') }, NOW)).toMatchObject({
      status: 'applied',
      state: { status: 'cancelled', amountReceived: 2000, keyId: null },
      emits: [{ type: 'return_quota' }, { type: 'refund', amount: 2000 }],
    });
    expect(cancelWalkIn(w, { ...opts, intent: intent('processing') }, NOW)).toMatchObject({
      status: 'refused',
      code: 'WALK_IN_PAYMENT_PROCESSING',
    });
    const cancelled = cancelWalkIn(w, { ...opts, intent: intent('canceled') }, NOW);
    if (cancelled.status !== 'applied') throw new Error('cancel');
    // money that lands after the unpaid pass was cancelled is not its own: all of it back
    expect(settleWalkIn(cancelled.state, intent('succeeded'), { timeZone: 'Asia/Tokyo', cid }, NOW)).toMatchObject({
      status: 'refused',
      code: 'PAYMENT_AFTER_WALK_IN_ENDED',
    });
  });

  it('cancel: revokes the key; gives the use back to its own month only when the policy says so, and once', () => {
    const w = pending();
    const p = settleWalkIn(w, intent('succeeded'), { timeZone: 'Asia/Tokyo', cid }, NOW);
    if (p.status !== 'applied') throw new Error('paid');
    const later = NOW + 40 * 86_400_000;
    const staff = cancelWalkIn(p.state, { reason: 'staff_cancelled', policy: DEFAULT_CANCELLATION_POLICY, cid }, later);
    expect(staff).toMatchObject({
      code: 'WALK_IN_CANCELLED',
      state: { quotaReturned: true },
      emits: [
        { type: 'revoke_key', keyId: 'key_wi-1' },
        { type: 'return_quota', month: '2027-01' },
        // the site cancelled: the whole price comes back
        { type: 'refund', amount: 2000 },
      ],
    });
    const guest = cancelWalkIn(p.state, { reason: 'guest_cancelled', policy: DEFAULT_CANCELLATION_POLICY, cid }, later);
    expect(guest).toMatchObject({ code: 'WALK_IN_CANCELLED', state: { quotaReturned: false }, emits: [{ type: 'revoke_key' }] });
    const always = cancelWalkIn(
      p.state,
      { reason: 'guest_cancelled', policy: { ...DEFAULT_CANCELLATION_POLICY, quotaReturn: 'always' }, cid },
      later,
    );
    expect(always).toMatchObject({ emits: [{ type: 'revoke_key' }, { type: 'return_quota', month: '2027-01' }] });
    if (staff.status !== 'applied') throw new Error('cancel');
    expect(cancelWalkIn(staff.state, { reason: 'staff_cancelled', policy: DEFAULT_CANCELLATION_POLICY, cid }, later)).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_ALREADY_CANCELLED',
    });
    expect(cancelWalkIn(w, { reason: 'staff_cancelled', policy: DEFAULT_CANCELLATION_POLICY, cid }, later)).toMatchObject({
      status: 'refused',
      code: 'WALK_IN_NOT_PAID',
    });
  });

  it('returnsQuota follows the policy', () => {
    expect(returnsQuota({ ...DEFAULT_CANCELLATION_POLICY, quotaReturn: 'never' }, 'site_closed')).toBe(false);
    expect(returnsQuota(DEFAULT_CANCELLATION_POLICY, 'site_closed')).toBe(true);
    expect(returnsQuota(DEFAULT_CANCELLATION_POLICY, 'no_show')).toBe(false);
  });
});
