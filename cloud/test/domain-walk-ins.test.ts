import { asDoorId, asSiteId, newCorrelationId, PersonId } from '@tobira/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CANCEL_REASONS, DEFAULT_CANCELLATION_POLICY, type CancellationPolicy } from '../src/domain/cancellation-policy.js';
import { zonedInstant } from '../src/domain/nights.js';
import type { IntentObservation, IntentStatus } from '../src/domain/payments.js';
import type { Plan } from '../src/domain/plans.js';
import {
  cancelWalkIn,
  createWalkIn,
  expireWalkIn,
  failWalkIn,
  quotaMonthOf,
  repeatWalkIn,
  settleWalkIn,
  walkInIdempotencyKey,
  walkInKeyId,
  WALK_IN_MIN_KEY_MS,
  type CreateWalkInCommand,
  type WalkIn,
  type WalkInStatus,
} from '../src/domain/walk-ins.js';

/** The walk-in verbs, pure: each rule of the desk's day pass as a given / when / then. */
const TZ = 'Asia/Tokyo';
const cid = newCorrelationId();
const cid2 = newCorrelationId();
const site = asSiteId('site-1');
const person = PersonId.parse('p1');
const HOUR = 3_600_000;
/** 10:00 on 2027-03-10 in Tokyo: most of the site's day still ahead */
const MORNING = zonedInstant('2027-03-10', '10:00', TZ);

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

const command = (over: Partial<CreateWalkInCommand> = {}): CreateWalkInCommand => ({
  walkInId: 'wi-1',
  plan,
  personId: person,
  timeZone: TZ,
  holdMinutes: 30,
  credential: { type: 'pin', digest: 'd1' },
  gates: { siteId: site, blocked: null, walkInsAllowed: true, member: false, usedThisMonth: 0 },
  cid,
  ...over,
});

function created(over: Partial<CreateWalkInCommand> = {}, now = MORNING): WalkIn {
  const o = createWalkIn(null, command(over), now);
  if (o.status !== 'applied') throw new Error(`create: ${o.code}`);
  return o.state;
}
const inStatus = (status: WalkInStatus, over: Partial<WalkIn> = {}): WalkIn => ({ ...created(), status, ...over });

const intent = (status: IntentStatus, over: Partial<IntentObservation> = {}): IntentObservation => ({
  intentId: 'pi_1',
  status,
  amount: 2000,
  amountReceived: status === 'succeeded' ? 2000 : 0,
  currency: 'jpy',
  declined: false,
  ...over,
});
const settleCmd = { timeZone: TZ, cid: cid2 };

function paid(now = MORNING): WalkIn {
  const o = settleWalkIn(created(), intent('succeeded'), settleCmd, now);
  if (o.status !== 'applied') throw new Error(`settle: ${o.code}`);
  return o.state;
}

const ALL: readonly WalkInStatus[] = ['pending', 'paid', 'failed', 'expired', 'cancelled'];

describe('walk-in names', () => {
  it('the key of a walk-in and the idempotency key of its intent are derived from its id (and the attempt)', () => {
    expect(walkInKeyId('wi-9')).toBe('key_wi-9');
    expect(walkInIdempotencyKey('wi-9', 2)).toBe('walk_in:wi-9:2');
    expect(walkInKeyId('a')).not.toBe(walkInKeyId('b'));
  });

  it('the quota month is the calendar month at the site, not in UTC', () => {
    const t = zonedInstant('2027-04-01', '08:00', TZ); // still March 31st in UTC
    expect(quotaMonthOf(t, TZ)).toBe('2027-04');
    expect(quotaMonthOf(t, 'UTC')).toBe('2027-03');
  });
});

describe('createWalkIn', () => {
  it('a new pass is pending at version 1, for the plan, person and site, priced by the plan', () => {
    const o = createWalkIn(null, command(), MORNING);
    expect(o).toMatchObject({ status: 'applied', code: 'WALK_IN_CREATED' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({
      id: 'wi-1',
      siteId: site,
      planId: 'plan-1',
      personId: person,
      day: '2027-03-10',
      quotaMonth: '2027-03',
      quotaReturned: false,
      status: 'pending',
      version: 1,
      amount: 2000,
      currency: 'jpy',
      idempotencyKey: 'walk_in:wi-1:1',
      intentId: null,
      clientSecret: null,
      amountReceived: 0,
      holdUntil: MORNING + 30 * 60_000,
      keyId: null,
      credential: { type: 'pin', digest: 'd1' },
      cancelReason: null,
      lastCode: 'WALK_IN_CREATED',
      cid,
      createdAt: MORNING,
      updatedAt: MORNING,
    });
    expect(o.emits).toEqual([{ type: 'use_quota', month: '2027-03', quota: 3 }]);
  });

  it('the hold lasts the minutes the site sets', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 24 * 60 }), (minutes) => {
        expect(created({ holdMinutes: minutes }).holdUntil - MORNING).toBe(minutes * 60_000);
      }),
    );
  });

  it('a plan with no monthly quota takes no use and counts against no month', () => {
    const o = createWalkIn(null, command({ plan: { ...plan, monthlyEntryQuota: null } }), MORNING);
    expect(o).toMatchObject({ status: 'applied', state: { quotaMonth: null }, emits: [] });
  });

  it('the day and quota month are those of the site: just after midnight in Tokyo is the next day there', () => {
    const t = zonedInstant('2027-04-01', '00:10', TZ);
    expect(created({}, t)).toMatchObject({ day: '2027-04-01', quotaMonth: '2027-04' });
  });

  it('a gate that refuses creates nothing and says why, for staff', () => {
    const blocked = createWalkIn(null, command({ gates: { ...command().gates, blocked: { reason: 'damage' } } }), MORNING);
    expect(blocked).toEqual({ status: 'refused', code: 'GUEST_BLOCKED', detail: expect.stringContaining('damage') });
    expect(createWalkIn(null, command({ gates: { ...command().gates, usedThisMonth: 3 } }), MORNING)).toMatchObject({
      status: 'refused',
      code: 'QUOTA_EXHAUSTED',
    });
    expect(createWalkIn(null, command({ plan: { ...plan, walkInAmount: null } }), MORNING)).toMatchObject({
      status: 'refused',
      code: 'WALK_IN_NOT_ALLOWED',
    });
  });

  it('the same id again: a noop for the same plan and person, a conflict otherwise; never overwritten', () => {
    const w = { ...created(), status: 'paid' as const, version: 2 };
    expect(createWalkIn(w, command(), MORNING + HOUR)).toEqual({ status: 'noop', code: 'WALK_IN_ALREADY_CREATED', state: w });
    // even a gate that would refuse now does not touch the pass already made
    expect(createWalkIn(w, command({ gates: { ...command().gates, blocked: { reason: 'x' } } }), MORNING)).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_ALREADY_CREATED',
    });
    expect(createWalkIn(w, command({ plan: { ...plan, id: 'plan-2' } }), MORNING)).toEqual({
      status: 'conflict',
      code: 'WALK_IN_ALREADY_EXISTS',
      current: w,
    });
    expect(createWalkIn(w, command({ personId: PersonId.parse('p2') }), MORNING)).toMatchObject({
      status: 'conflict',
      code: 'WALK_IN_ALREADY_EXISTS',
    });
    expect(repeatWalkIn(w, 'plan-1', 'p2', w.credential)).toMatchObject({ status: 'conflict' });
    expect(repeatWalkIn(w, 'plan-2', 'p1', w.credential)).toMatchObject({ status: 'conflict' });
    expect(repeatWalkIn(w, 'plan-1', 'p1', w.credential)).toMatchObject({ status: 'noop' });
    // another PIN, another kind of credential, or one whose digest could not be made is not the same sale
    expect(repeatWalkIn(w, 'plan-1', 'p1', { ...w.credential, digest: 'B'.repeat(43) })).toMatchObject({ status: 'conflict' });
    expect(repeatWalkIn(w, 'plan-1', 'p1', { ...w.credential, type: w.credential.type === 'pin' ? 'card' : 'pin' })).toMatchObject({
      status: 'conflict',
    });
    expect(repeatWalkIn(w, 'plan-1', 'p1', null)).toMatchObject({ status: 'conflict' });
  });
});

describe('settleWalkIn', () => {
  it('an unknown walk-in is refused', () => {
    expect(settleWalkIn(null, intent('succeeded'), settleCmd, MORNING)).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_FOUND' });
  });

  it('succeeded: paid, one version on, with its key and the money and intent recorded', () => {
    const w = created();
    const o = settleWalkIn(w, intent('succeeded'), settleCmd, MORNING + 60_000);
    expect(o).toMatchObject({ status: 'applied', code: 'WALK_IN_PAID' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({
      ...w,
      status: 'paid',
      version: 2,
      keyId: 'key_wi-1',
      amountReceived: 2000,
      intentId: 'pi_1',
      lastCode: 'WALK_IN_PAID',
      cid: cid2,
      updatedAt: MORNING + 60_000,
    });
  });

  it('the key runs from payment to the end of the day at the site', () => {
    const o = settleWalkIn(created(), intent('succeeded'), settleCmd, MORNING);
    expect(o).toMatchObject({
      status: 'applied',
      emits: [{ type: 'issue_key', keyId: 'key_wi-1', validFrom: MORNING, validUntil: zonedInstant('2027-03-11', '00:00', TZ) }],
    });
  });

  it('the key lasts at least an hour, even when paid just before midnight', () => {
    const late = zonedInstant('2027-03-10', '23:45', TZ);
    const w = created({}, late);
    const o = settleWalkIn(w, intent('succeeded'), settleCmd, late);
    expect(o).toMatchObject({ emits: [{ type: 'issue_key', validFrom: late, validUntil: late + WALK_IN_MIN_KEY_MS }] });
    expect(WALK_IN_MIN_KEY_MS).toBe(HOUR);
    // exactly an hour before midnight the two agree
    const edge = zonedInstant('2027-03-10', '23:00', TZ);
    expect(settleWalkIn(w, intent('succeeded'), settleCmd, edge)).toMatchObject({
      emits: [{ validUntil: zonedInstant('2027-03-11', '00:00', TZ) }],
    });
  });

  it("the key's end follows the pass's day, not the day it is paid on", () => {
    const w = created();
    const nextMorning = zonedInstant('2027-03-11', '09:00', TZ);
    // paid the next day (a late webhook): the pass's day is over, so the minimum hour applies
    expect(settleWalkIn(w, intent('succeeded'), settleCmd, nextMorning)).toMatchObject({
      emits: [{ validUntil: nextMorning + WALK_IN_MIN_KEY_MS }],
    });
  });

  it('an intent that is not the one the walk-in holds is refused, naming both', () => {
    const w = { ...created(), intentId: 'pi_1' };
    const o = settleWalkIn(w, intent('succeeded', { intentId: 'pi_other' }), settleCmd, MORNING);
    expect(o).toMatchObject({ status: 'refused', code: 'PAYMENT_INTENT_MISMATCH' });
    if (o.status === 'refused') expect(o.detail).toMatch(/pi_other.*pi_1/);
    // no intent recorded yet: the first one Stripe names is taken
    expect(settleWalkIn(created(), intent('succeeded', { intentId: 'pi_new' }), settleCmd, MORNING)).toMatchObject({
      status: 'applied',
      state: { intentId: 'pi_new' },
    });
  });

  it('money that is not the walk-in amount and currency is refused, never applied', () => {
    const w = created();
    const cases: Partial<IntentObservation>[] = [
      { currency: 'usd' },
      { amount: 1999, amountReceived: 1999 },
      { amount: 2001 },
      { amountReceived: 1999 },
      { amountReceived: 2001 },
    ];
    for (const over of cases) {
      const o = settleWalkIn(w, intent('succeeded', over), settleCmd, MORNING);
      expect(o, JSON.stringify(over)).toMatchObject({ status: 'refused', code: 'PAYMENT_AMOUNT_MISMATCH' });
      if (o.status === 'refused') expect(o.detail).toContain('2000 jpy');
    }
    // a canceled intent with the right amount received nothing: that is no mismatch
    expect(settleWalkIn(w, intent('canceled', { amountReceived: 0 }), settleCmd, MORNING)).toMatchObject({ code: 'WALK_IN_FAILED' });
    expect(settleWalkIn(w, intent('canceled', { amount: 1 }), settleCmd, MORNING)).toMatchObject({ code: 'PAYMENT_AMOUNT_MISMATCH' });
    expect(settleWalkIn(w, intent('canceled', { currency: 'eur' }), settleCmd, MORNING)).toMatchObject({
      code: 'PAYMENT_AMOUNT_MISMATCH',
    });
  });

  it('money after the pass ended (failed, expired, or cancelled unpaid) is refused for a refund', () => {
    for (const w of [inStatus('failed'), inStatus('expired'), inStatus('cancelled', { amountReceived: 0 })]) {
      const o = settleWalkIn(w, intent('succeeded'), settleCmd, MORNING);
      expect(o, w.status).toMatchObject({ status: 'refused', code: 'PAYMENT_AFTER_WALK_IN_ENDED' });
      if (o.status === 'refused') expect(o.detail).toContain(w.status);
    }
  });

  it('the same payment seen again on a paid pass, or one cancelled after it was paid, changes nothing', () => {
    const p = paid();
    expect(settleWalkIn(p, intent('succeeded'), settleCmd, MORNING + HOUR)).toEqual({
      status: 'noop',
      code: 'WALK_IN_ALREADY_PAID',
      state: p,
    });
    const c = { ...p, status: 'cancelled' as const };
    expect(settleWalkIn(c, intent('succeeded'), settleCmd, MORNING)).toMatchObject({ status: 'noop', code: 'WALK_IN_ALREADY_PAID' });
  });

  it('a gate that no longer holds when paid: no key, the pass fails, its use and all the money go back', () => {
    const w = created();
    const gate = { status: 'refused' as const, code: 'GUEST_BLOCKED' as const, detail: 'blocked' };
    const o = settleWalkIn(w, intent('succeeded'), { ...settleCmd, gate }, MORNING);
    expect(o).toMatchObject({ status: 'applied', code: 'WALK_IN_FAILED' });
    if (o.status !== 'applied') return;
    expect(o.state).toMatchObject({
      status: 'failed',
      keyId: null,
      intentId: 'pi_1',
      amountReceived: 2000,
      quotaReturned: true,
      version: 2,
    });
    expect(o.emits).toEqual([
      { type: 'return_quota', month: '2027-03' },
      { type: 'refund', amount: 2000 },
    ]);
    // no quota: only the money goes back
    const free = created({ plan: { ...plan, monthlyEntryQuota: null } });
    const f = settleWalkIn(free, intent('succeeded'), { ...settleCmd, gate }, MORNING);
    expect(f).toMatchObject({ status: 'applied', state: { quotaReturned: false }, emits: [{ type: 'refund', amount: 2000 }] });
    if (f.status === 'applied') expect(f.emits).toHaveLength(1);
  });

  it('a gate that passes, or a gate run on a pass already paid, leaves the key alone', () => {
    const ok = { status: 'ok' as const, value: { quotaLeft: 1 } };
    expect(settleWalkIn(created(), intent('succeeded'), { ...settleCmd, gate: ok }, MORNING)).toMatchObject({ code: 'WALK_IN_PAID' });
    const refusedGate = { status: 'refused' as const, code: 'GUEST_BLOCKED' as const, detail: 'blocked' };
    expect(settleWalkIn(paid(), intent('succeeded'), { ...settleCmd, gate: refusedGate }, MORNING)).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_ALREADY_PAID',
    });
  });

  it('canceled: a pending pass fails, its use goes back to its month; one already settled is left as it is', () => {
    const o = settleWalkIn(created(), intent('canceled'), settleCmd, MORNING);
    expect(o).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_FAILED',
      state: { status: 'failed', intentId: 'pi_1', quotaReturned: true, version: 2 },
      emits: [{ type: 'return_quota', month: '2027-03' }],
    });
    const free = created({ plan: { ...plan, monthlyEntryQuota: null } });
    expect(settleWalkIn(free, intent('canceled'), settleCmd, MORNING)).toMatchObject({
      status: 'applied',
      state: { quotaReturned: false },
      emits: [],
    });
    expect(settleWalkIn(paid(), intent('canceled'), settleCmd, MORNING)).toMatchObject({ status: 'noop', code: 'PAYMENT_FAILURE_IGNORED' });
    expect(settleWalkIn(inStatus('cancelled'), intent('canceled'), settleCmd, MORNING)).toMatchObject({
      status: 'noop',
      code: 'PAYMENT_FAILURE_IGNORED',
    });
    for (const s of ['failed', 'expired'] as const)
      expect(settleWalkIn(inStatus(s), intent('canceled'), settleCmd, MORNING)).toMatchObject({
        status: 'noop',
        code: 'WALK_IN_ALREADY_ENDED',
      });
  });

  it('a decline or any state in between changes nothing: the guest may try another card', () => {
    const w = created();
    for (const s of [
      'requires_payment_method',
      'requires_confirmation',
      'requires_action',
      'processing',
      'requires_capture',
      'other',
    ] as const)
      expect(settleWalkIn(w, intent(s, { declined: s === 'requires_payment_method' }), settleCmd, MORNING), s).toEqual({
        status: 'noop',
        code: 'WALK_IN_PAYMENT_PENDING',
        state: w,
      });
  });
});

describe('failWalkIn', () => {
  it('no intent could be made: the pass fails, its use goes back, nothing charged', () => {
    const w = created();
    const o = failWalkIn(w, { cid: cid2 }, MORNING + 1);
    expect(o).toEqual({
      status: 'applied',
      code: 'WALK_IN_FAILED',
      state: { ...w, status: 'failed', quotaReturned: true, version: 2, lastCode: 'WALK_IN_FAILED', cid: cid2, updatedAt: MORNING + 1 },
      emits: [{ type: 'return_quota', month: '2027-03' }],
    });
    const free = created({ plan: { ...plan, monthlyEntryQuota: null } });
    expect(failWalkIn(free, { cid }, MORNING)).toMatchObject({ status: 'applied', state: { quotaReturned: false }, emits: [] });
  });

  it('an unknown walk-in is refused; one no longer pending is not touched', () => {
    expect(failWalkIn(null, { cid }, MORNING)).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_FOUND' });
    expect(failWalkIn(paid(), { cid }, MORNING)).toMatchObject({ status: 'noop', code: 'PAYMENT_FAILURE_IGNORED' });
    expect(failWalkIn(inStatus('expired'), { cid }, MORNING)).toMatchObject({ status: 'noop', code: 'WALK_IN_ALREADY_ENDED' });
  });
});

describe('expireWalkIn', () => {
  const HOLD = MORNING + 30 * 60_000;

  it('an unknown walk-in is refused', () => {
    expect(expireWalkIn(null, null, settleCmd, HOLD)).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_FOUND' });
  });

  it('never before the hold ends; from its last millisecond on, expired with its use back', () => {
    const w = created();
    expect(expireWalkIn(w, null, settleCmd, HOLD - 1)).toEqual({ status: 'noop', code: 'WALK_IN_HOLD_NOT_OVER', state: w });
    const o = expireWalkIn(w, null, settleCmd, HOLD);
    expect(o).toEqual({
      status: 'applied',
      code: 'WALK_IN_EXPIRED',
      state: { ...w, status: 'expired', quotaReturned: true, version: 2, lastCode: 'WALK_IN_EXPIRED', cid: cid2, updatedAt: HOLD },
      emits: [{ type: 'return_quota', month: '2027-03' }],
    });
    expect(expireWalkIn(w, intent('canceled'), settleCmd, HOLD)).toMatchObject({ status: 'applied', code: 'WALK_IN_EXPIRED' });
  });

  it('a plan with no quota expires with nothing to give back', () => {
    const free = created({ plan: { ...plan, monthlyEntryQuota: null } });
    expect(expireWalkIn(free, null, settleCmd, HOLD)).toMatchObject({ status: 'applied', state: { quotaReturned: false }, emits: [] });
  });

  it('money that landed before the cancel is settled as paid, not expired', () => {
    expect(expireWalkIn(created(), intent('succeeded'), settleCmd, HOLD)).toMatchObject({
      status: 'applied',
      code: 'WALK_IN_PAID',
      emits: [{ type: 'issue_key' }],
    });
  });

  it('money in flight holds the pass; an intent Stripe would not cancel leaves it pending', () => {
    const w = created();
    expect(expireWalkIn(w, intent('processing'), settleCmd, HOLD)).toEqual({
      status: 'noop',
      code: 'WALK_IN_PAYMENT_PROCESSING',
      state: w,
    });
    for (const s of ['requires_payment_method', 'requires_action', 'requires_capture', 'other'] as const)
      expect(expireWalkIn(w, intent(s), settleCmd, HOLD), s).toEqual({ status: 'noop', code: 'WALK_IN_PAYMENT_PENDING', state: w });
  });

  it('a pass no longer pending is not expired, whatever the clock says', () => {
    for (const s of ['paid', 'failed', 'expired', 'cancelled'] as const)
      expect(expireWalkIn(inStatus(s), null, settleCmd, MORNING), s).toMatchObject({ status: 'noop', code: 'WALK_IN_NOT_PENDING' });
  });
});

describe('cancelWalkIn (paid)', () => {
  const policy = DEFAULT_CANCELLATION_POLICY;

  it('an unknown walk-in is refused', () => {
    expect(cancelWalkIn(null, { reason: 'staff_cancelled', policy, cid }, MORNING)).toMatchObject({
      status: 'refused',
      code: 'WALK_IN_NOT_FOUND',
    });
  });

  it('staff cancel: cancelled one version on with its reason; key revoked, use back, all the money back', () => {
    const p = paid();
    const o = cancelWalkIn(p, { reason: 'staff_cancelled', policy, cid: cid2 }, MORNING + HOUR);
    expect(o).toEqual({
      status: 'applied',
      code: 'WALK_IN_CANCELLED',
      state: {
        ...p,
        status: 'cancelled',
        cancelReason: 'staff_cancelled',
        quotaReturned: true,
        version: p.version + 1,
        lastCode: 'WALK_IN_CANCELLED',
        cid: cid2,
        updatedAt: MORNING + HOUR,
      },
      emits: [
        { type: 'revoke_key', keyId: 'key_wi-1' },
        { type: 'return_quota', month: '2027-03' },
        { type: 'refund', amount: 2000 },
      ],
    });
  });

  it('a use already given back is not given back again', () => {
    const p = { ...paid(), quotaReturned: true };
    const o = cancelWalkIn(p, { reason: 'staff_cancelled', policy, cid }, MORNING);
    expect(o).toMatchObject({ status: 'applied', state: { quotaReturned: true } });
    if (o.status === 'applied') expect(o.emits.map((e) => e.type)).toEqual(['revoke_key', 'refund']);
  });

  it('a plan with no quota gives nothing back to any month', () => {
    const p = { ...paid(), quotaMonth: null };
    const o = cancelWalkIn(p, { reason: 'staff_cancelled', policy: { ...policy, quotaReturn: 'always' }, cid }, MORNING);
    expect(o).toMatchObject({ status: 'applied', state: { quotaReturned: false } });
    if (o.status === 'applied') expect(o.emits.map((e) => e.type)).toEqual(['revoke_key', 'refund']);
  });

  it('a pass with no key has none to revoke', () => {
    const p = { ...paid(), keyId: null };
    const o = cancelWalkIn(p, { reason: 'staff_cancelled', policy, cid }, MORNING);
    if (o.status !== 'applied') throw new Error(o.code);
    expect(o.emits.map((e) => e.type)).toEqual(['return_quota', 'refund']);
  });

  it("the guest's own cancellation is refunded by the policy's same-day tier, rounded down, and nothing when it is 0", () => {
    const halfOnTheDay: CancellationPolicy = { tiers: [{ minDaysBefore: 0, refundPercent: 50 }], noShowRefundPercent: 0 };
    const p = { ...paid(), amount: 2001, amountReceived: 2001 };
    expect(cancelWalkIn(p, { reason: 'guest_cancelled', policy: halfOnTheDay, cid }, MORNING)).toMatchObject({
      emits: [{ type: 'revoke_key' }, { type: 'refund', amount: 1000 }],
    });
    const o = cancelWalkIn(paid(), { reason: 'guest_cancelled', policy, cid }, MORNING);
    expect(o).toMatchObject({ status: 'applied', state: { quotaReturned: false } });
    if (o.status === 'applied') expect(o.emits).toEqual([{ type: 'revoke_key', keyId: 'key_wi-1' }]);
  });

  it('the refund never exceeds what was received, for any reason and policy', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...CANCEL_REASONS),
        fc.integer({ min: 0, max: 100 }),
        fc.integer({ min: 0, max: 100 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.constantFrom('always' as const, 'site_fault' as const, 'never' as const),
        (reason, tier, noShow, amount, quotaReturn) => {
          const p = { ...paid(), amount, amountReceived: amount };
          const pol: CancellationPolicy = { tiers: [{ minDaysBefore: 0, refundPercent: tier }], noShowRefundPercent: noShow, quotaReturn };
          const o = cancelWalkIn(p, { reason, policy: pol, cid }, MORNING);
          if (o.status !== 'applied') throw new Error(o.code);
          const refunds = o.emits.filter((e) => e.type === 'refund');
          const total = refunds.reduce((s, e) => s + (e.type === 'refund' ? e.amount : 0), 0);
          expect(total).toBeLessThanOrEqual(amount);
          expect(refunds.every((e) => e.type === 'refund' && e.amount > 0)).toBe(true);
          expect(o.emits.filter((e) => e.type === 'return_quota').length).toBe(o.state.quotaReturned ? 1 : 0);
          expect(o.emits.filter((e) => e.type === 'return_quota').length).toBeLessThanOrEqual(1);
        },
      ),
    );
  });

  it('a pass already ended is not cancelled again', () => {
    const c = inStatus('cancelled');
    expect(cancelWalkIn(c, { reason: 'staff_cancelled', policy, cid }, MORNING)).toEqual({
      status: 'noop',
      code: 'WALK_IN_ALREADY_CANCELLED',
      state: c,
    });
    for (const s of ['failed', 'expired'] as const)
      expect(cancelWalkIn(inStatus(s), { reason: 'staff_cancelled', policy, cid }, MORNING), s).toMatchObject({
        status: 'noop',
        code: 'WALK_IN_ALREADY_ENDED',
      });
  });
});

describe('cancelWalkIn (pending)', () => {
  const opts = { reason: 'staff_cancelled' as const, policy: DEFAULT_CANCELLATION_POLICY, cid: cid2 };

  it('is refused without the answer Stripe gave to cancelling its intent', () => {
    const o = cancelWalkIn(created(), opts, MORNING);
    expect(o).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_PAID' });
    if (o.status === 'refused') expect(o.detail).toContain('intent');
    expect(cancelWalkIn(created(), { ...opts, intent: undefined }, MORNING)).toMatchObject({ status: 'refused', code: 'WALK_IN_NOT_PAID' });
  });

  it('a pass that never had an intent: cancelled, its use back, nothing charged', () => {
    const w = created();
    const o = cancelWalkIn(w, { ...opts, intent: null }, MORNING + 1);
    expect(o).toEqual({
      status: 'applied',
      code: 'WALK_IN_CANCELLED',
      state: {
        ...w,
        status: 'cancelled',
        cancelReason: 'staff_cancelled',
        quotaReturned: true,
        amountReceived: 0,
        intentId: null,
        version: 2,
        lastCode: 'WALK_IN_CANCELLED',
        cid: cid2,
        updatedAt: MORNING + 1,
      },
      emits: [{ type: 'return_quota', month: '2027-03' }],
    });
  });

  it('an intent the walk-in does not hold is refused, naming both; the first intent named is recorded', () => {
    const w = { ...created(), intentId: 'pi_1' };
    const o = cancelWalkIn(w, { ...opts, intent: intent('canceled', { intentId: 'pi_2' }) }, MORNING);
    expect(o).toMatchObject({ status: 'refused', code: 'PAYMENT_INTENT_MISMATCH' });
    if (o.status === 'refused') expect(o.detail).toMatch(/pi_2.*pi_1/);
    expect(cancelWalkIn(created(), { ...opts, intent: intent('canceled', { intentId: 'pi_9' }) }, MORNING)).toMatchObject({
      status: 'applied',
      state: { intentId: 'pi_9' },
    });
    expect(cancelWalkIn(w, { ...opts, intent: null }, MORNING)).toMatchObject({ status: 'applied', state: { intentId: 'pi_1' } });
  });

  it('money in flight decides first; an intent Stripe did not cancel is refused', () => {
    const w = created();
    const inFlight = cancelWalkIn(w, { ...opts, intent: intent('processing') }, MORNING);
    expect(inFlight).toMatchObject({ status: 'refused', code: 'WALK_IN_PAYMENT_PROCESSING' });
    if (inFlight.status === 'refused') expect(inFlight.detail).toContain('in flight');
    for (const s of ['requires_payment_method', 'requires_confirmation', 'requires_action', 'requires_capture', 'other'] as const) {
      const o = cancelWalkIn(w, { ...opts, intent: intent(s) }, MORNING);
      expect(o, s).toMatchObject({ status: 'refused', code: 'WALK_IN_PAYMENT_PENDING' });
      if (o.status === 'refused') expect(o.detail).toContain(s);
    }
  });

  it('money that is not the walk-in amount and currency is refused', () => {
    const w = created();
    const cases: [IntentStatus, Partial<IntentObservation>][] = [
      ['canceled', { currency: 'usd' }],
      ['canceled', { amount: 100 }],
      ['succeeded', { amountReceived: 1999 }],
      ['succeeded', { amount: 3000, amountReceived: 3000 }],
      ['succeeded', { currency: 'usd' }],
    ];
    for (const [s, over] of cases) {
      const o = cancelWalkIn(w, { ...opts, intent: intent(s, over) }, MORNING);
      expect(o, JSON.stringify(over)).toMatchObject({ status: 'refused', code: 'PAYMENT_AMOUNT_MISMATCH' });
      if (o.status === 'refused') expect(o.detail).toContain('2000 jpy');
    }
  });

  it('paid a moment ago (its webhook unread): cancelled with no key, its use back, refunded by the policy', () => {
    const w = created();
    const o = cancelWalkIn(w, { ...opts, intent: intent('succeeded') }, MORNING);
    expect(o).toMatchObject({
      status: 'applied',
      state: { status: 'cancelled', keyId: null, amountReceived: 2000, intentId: 'pi_1', quotaReturned: true },
      emits: [
        { type: 'return_quota', month: '2027-03' },
        { type: 'refund', amount: 2000 },
      ],
    });
    const guest = cancelWalkIn(w, { ...opts, reason: 'guest_cancelled', intent: intent('succeeded') }, MORNING);
    expect(guest).toMatchObject({ status: 'applied', emits: [{ type: 'return_quota', month: '2027-03' }] });
    if (guest.status === 'applied') expect(guest.emits).toHaveLength(1);
    const half: CancellationPolicy = { tiers: [{ minDaysBefore: 0, refundPercent: 50 }], noShowRefundPercent: 0 };
    const odd = { ...w, amount: 2001 };
    const h = cancelWalkIn(
      odd,
      { ...opts, reason: 'guest_cancelled', policy: half, intent: intent('succeeded', { amount: 2001, amountReceived: 2001 }) },
      MORNING,
    );
    expect(h).toMatchObject({ emits: [{ type: 'return_quota' }, { type: 'refund', amount: 1000 }] });
  });

  it('a use already given back, or no quota at all, gives nothing back', () => {
    const back = cancelWalkIn({ ...created(), quotaReturned: true }, { ...opts, intent: intent('canceled') }, MORNING);
    expect(back).toMatchObject({ status: 'applied', state: { quotaReturned: true }, emits: [] });
    const free = cancelWalkIn({ ...created(), quotaMonth: null }, { ...opts, intent: intent('canceled') }, MORNING);
    expect(free).toMatchObject({ status: 'applied', state: { quotaReturned: false }, emits: [] });
  });
});

describe('the walk-in state machine', () => {
  it('an ended pass (failed, expired, cancelled) is changed by no verb; a live one moves one version at a time', () => {
    const policy = DEFAULT_CANCELLATION_POLICY;
    for (const s of ALL) {
      const w = inStatus(s, { intentId: 'pi_1' });
      const outcomes = [
        settleWalkIn(w, intent('succeeded'), settleCmd, MORNING),
        settleWalkIn(w, intent('canceled'), settleCmd, MORNING),
        failWalkIn(w, { cid }, MORNING),
        expireWalkIn(w, null, settleCmd, MORNING + HOUR),
        cancelWalkIn(w, { reason: 'staff_cancelled', policy, cid, intent: intent('canceled') }, MORNING),
      ];
      for (const o of outcomes) {
        if (s === 'failed' || s === 'expired' || s === 'cancelled') expect(o.status, s).not.toBe('applied');
        if (o.status === 'applied') expect(o.state.version).toBe(w.version + 1);
      }
    }
  });
});
