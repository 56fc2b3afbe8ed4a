import { asDoorId, asSiteId, newCorrelationId, PersonId } from '@tobira/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  END_REASONS,
  MEMBERSHIP_STATUSES,
  isFinal,
  membershipNoopOf,
  membershipTransitionOf,
  type EndReason,
  type MembershipStatus,
} from '../src/domain/membership-states.js';
import {
  applyMembership,
  approveMembership,
  decideEnd,
  membershipKeyId,
  observeSubscription,
  recordPendingStop,
  subscriptionIdempotencyKey,
  suspendAccess,
  type EndCommand,
  type Membership,
  type MembershipOutcome,
  type ObservationDecision,
  type SubscriptionObservation,
} from '../src/domain/memberships.js';
import type { Plan } from '../src/domain/plans.js';

/**
 * The membership verbs as rules: what each decides from the row as it is and the command,
 * what it writes (the version grows, the code and correlation id recorded) and what it asks
 * of the rest of the system (keys issued or revoked, notices, the billing stop first).
 */
const cid = newCorrelationId();
const later = newCorrelationId();
const NOW = Date.UTC(2027, 2, 1, 9);
const HOUR = 3_600_000;
const person = PersonId.parse('p1');
const plan: Plan = {
  id: 'plan-1',
  siteId: asSiteId('site-1'),
  name: 'Lounge',
  amount: 8000,
  currency: 'jpy',
  interval: 'month',
  intervalCount: 1,
  doors: [asDoorId('door-1')],
  membersOnly: false,
  monthlyEntryQuota: null,
  walkInAmount: null,
  graceSeconds: 7200,
  status: 'active',
  stripePriceId: null,
  createdAt: 0,
  updatedAt: 0,
  retiredAt: null,
};

function fresh(): Membership {
  const o = applyMembership(null, { membershipId: 'm1', plan, personId: person, credential: null, cid }, NOW - 10 * HOUR);
  if (o.status !== 'applied') throw new Error('apply failed');
  return o.state;
}
/** A membership in `status` as the verbs leave it: approved, with its subscription; a key once it was paid. */
const member = (status: MembershipStatus, over: Partial<Membership> = {}): Membership => ({
  ...fresh(),
  status,
  version: 7,
  approvedAt: NOW - 9 * HOUR,
  approvedBy: 'staff-1',
  subscriptionId: 'sub_1',
  keyId: status === 'applied' ? null : 'key_m1_1',
  keySeq: status === 'applied' ? 0 : 1,
  currentPeriodEnd: NOW + 30 * 24 * HOUR,
  ...over,
});
const obs = (status: SubscriptionObservation['status'], over: Partial<SubscriptionObservation> = {}): SubscriptionObservation => ({
  subscriptionId: 'sub_1',
  status,
  currentPeriodEnd: NOW + 30 * 24 * HOUR,
  cancelAtPeriodEnd: false,
  canceledFor: null,
  ...over,
});
const end = (reason: EndReason, over: Partial<EndCommand> = {}): EndCommand => ({
  reason,
  actor: 'staff-2',
  note: 'asked at the desk',
  subscriptionEnded: false,
  cid: later,
  ...over,
});

function appliedOf(o: MembershipOutcome) {
  if (o.status !== 'applied') throw new Error(`expected applied, got ${o.status} ${o.code}`);
  return o;
}
function stepOf(d: ObservationDecision): MembershipOutcome {
  if (d.kind !== 'step') throw new Error(`expected a step, got ${d.kind}`);
  return d.outcome;
}
/** Every write: the version grows by one, the code and the caller's correlation id are recorded, at `now`. */
function expectWritten(before: Membership, after: Membership, code: string, now: number, by = later) {
  expect(after.version).toBe(before.version + 1);
  expect(after.lastCode).toBe(code);
  expect(after.cid).toBe(by);
  expect(after.updatedAt).toBe(now);
  expect(after.createdAt).toBe(before.createdAt);
}

describe('key ids and idempotency keys', () => {
  it('names the n-th key of a membership key_<id>_<n> and a subscription request <purpose>:<id>:<attempt>', () => {
    expect(membershipKeyId('m9', 3)).toBe('key_m9_3');
    expect(subscriptionIdempotencyKey('membership_initial', 'm9', 1)).toBe('membership_initial:m9:1');
    expect(subscriptionIdempotencyKey('membership_renewal', 'm9', 2)).toBe('membership_renewal:m9:2');
  });
});

describe('applyMembership', () => {
  it('a new application is applied, under review, with no money, key or end yet, at version 1', () => {
    const credential = { type: 'card', digest: 'c'.repeat(43) } as const;
    const o = appliedOf(applyMembership(null, { membershipId: 'm2', plan, personId: person, credential, cid }, NOW));
    expect(o.code).toBe('MEMBERSHIP_APPLIED');
    expect(o.emits).toEqual([]);
    expect(o.state).toEqual({
      id: 'm2',
      siteId: plan.siteId,
      planId: plan.id,
      personId: person,
      status: 'applied',
      version: 1,
      approvedAt: null,
      approvedBy: null,
      attempt: 1,
      idempotencyKey: 'membership_initial:m2:1',
      stripeCustomerId: null,
      subscriptionId: null,
      firstInvoiceId: null,
      currentPeriodEnd: null,
      cancelAtPeriodEnd: false,
      pastDueSince: null,
      suspended: false,
      keyId: null,
      keySeq: 0,
      credential,
      endReason: null,
      endedBy: null,
      endNote: null,
      endedAt: null,
      billingStopPending: null,
      lastCode: 'MEMBERSHIP_APPLIED',
      cid,
      createdAt: NOW,
      updatedAt: NOW,
    });
    expect(givesNothing(o.state)).toBe(true);
  });

  it('the same application again is a noop on the row as it is; another plan or person on the id is a conflict', () => {
    const m = member('active');
    const again = (planId: string, p: PersonId) =>
      applyMembership(m, { membershipId: 'm1', plan: { ...plan, id: planId }, personId: p, credential: null, cid }, NOW);
    expect(again('plan-1', person)).toEqual({ status: 'noop', code: 'MEMBERSHIP_ALREADY_APPLIED', state: m });
    expect(again('plan-2', person)).toMatchObject({ status: 'conflict', code: 'MEMBERSHIP_ALREADY_EXISTS', current: m });
    expect(again('plan-1', PersonId.parse('p2'))).toMatchObject({ status: 'conflict', code: 'MEMBERSHIP_ALREADY_EXISTS', current: m });
  });

  it('a retired plan takes no application, even a repeated one is answered on the existing row first', () => {
    const retired = { ...plan, status: 'retired' as const };
    expect(applyMembership(null, { membershipId: 'm3', plan: retired, personId: person, credential: null, cid }, NOW)).toMatchObject({
      status: 'refused',
      code: 'PLAN_NOT_AVAILABLE',
    });
    const m = fresh();
    expect(applyMembership(m, { membershipId: 'm1', plan: retired, personId: person, credential: null, cid }, NOW)).toMatchObject({
      status: 'noop',
      code: 'MEMBERSHIP_ALREADY_APPLIED',
    });
  });
});

const givesNothing = (m: Membership) => m.keyId === null && m.subscriptionId === null && m.currentPeriodEnd === null;

describe('approveMembership', () => {
  const approve = (m: Membership | null, now = NOW) => approveMembership(m, { actor: 'staff-9', cid: later }, now);

  it('approving an application under review records who and when; the status waits for the money', () => {
    const m = fresh();
    const o = appliedOf(approve(m));
    expect(o.code).toBe('MEMBERSHIP_APPROVED');
    expect(o.emits).toEqual([]);
    expect(o.state).toMatchObject({ status: 'applied', approvedAt: NOW, approvedBy: 'staff-9', keyId: null });
    expectWritten(m, o.state, 'MEMBERSHIP_APPROVED', NOW);
  });

  it('a second approval (two staff, a retried click) changes nothing: the first approval stands', () => {
    const first = appliedOf(approve(fresh())).state;
    expect(approve(first, NOW + HOUR)).toEqual({ status: 'noop', code: 'MEMBERSHIP_ALREADY_APPROVED', state: first });
  });

  it.each([
    ['active', 'MEMBERSHIP_ALREADY_APPROVED'],
    ['past_due', 'MEMBERSHIP_ALREADY_APPROVED'],
    ['ending', 'MEMBERSHIP_ALREADY_APPROVED'],
    ['ended', 'MEMBERSHIP_ALREADY_ENDED'],
    ['rejected', 'MEMBERSHIP_ALREADY_ENDED'],
  ] as const)('approving a %s membership is a noop %s', (status, code) => {
    const m = member(status);
    expect(approve(m)).toEqual({ status: 'noop', code, state: m });
    // a row that was never approved (rejected under review) answers the same
    const unapproved = member(status, { approvedAt: null });
    expect(approve(unapproved)).toEqual({ status: 'noop', code, state: unapproved });
  });

  it('an unknown membership is refused', () => {
    expect(approve(null)).toMatchObject({ status: 'refused', code: 'MEMBERSHIP_NOT_FOUND' });
  });
});

describe('observeSubscription: Stripe says active', () => {
  it('activates an applied membership: its first key issued, the period end recorded, the member told once', () => {
    const m = member('applied');
    const o = appliedOf(stepOf(observeSubscription(m, obs('active'), { cid: later }, NOW)));
    expect(o.code).toBe('MEMBERSHIP_ACTIVATED');
    expect(o.state).toMatchObject({ status: 'active', keyId: 'key_m1_1', keySeq: 1, currentPeriodEnd: NOW + 30 * 24 * HOUR });
    expect(o.emits).toEqual([
      { type: 'issue_key', keyId: 'key_m1_1' },
      { type: 'notify', notice: 'membership_activated', dedupeKey: 'membership_activated:m1' },
    ]);
    expectWritten(m, o.state, 'MEMBERSHIP_ACTIVATED', NOW);
  });

  it('the key after n keys is the (n + 1)-th, never a reused id', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 50 }), (n) => {
        const o = appliedOf(stepOf(observeSubscription(member('applied', { keySeq: n }), obs('active'), { cid }, NOW)));
        expect(o.state.keySeq).toBe(n + 1);
        expect(o.state.keyId).toBe(`key_m1_${n + 1}`);
        expect(o.emits[0]).toEqual({ type: 'issue_key', keyId: `key_m1_${n + 1}` });
      }),
    );
  });

  it('a past-due member who pays is active again, the grace cleared; the key still works, so none is issued', () => {
    const m = member('past_due', { pastDueSince: NOW - HOUR, currentPeriodEnd: NOW - HOUR });
    const o = appliedOf(stepOf(observeSubscription(m, obs('active'), { cid: later }, NOW)));
    expect(o.code).toBe('MEMBERSHIP_PAYMENT_RECOVERED');
    expect(o.state).toMatchObject({
      status: 'active',
      pastDueSince: null,
      suspended: false,
      keyId: 'key_m1_1',
      keySeq: 1,
      currentPeriodEnd: NOW + 30 * 24 * HOUR,
    });
    expect(o.emits).toEqual([]);
    expectWritten(m, o.state, 'MEMBERSHIP_PAYMENT_RECOVERED', NOW);
  });

  it('a suspended member who pays gets a fresh key and is told access is restored (one notice per key)', () => {
    const m = member('past_due', { pastDueSince: NOW - 5 * HOUR, suspended: true, keySeq: 3, keyId: 'key_m1_3' });
    const o = appliedOf(stepOf(observeSubscription(m, obs('active'), { cid }, NOW)));
    expect(o.state).toMatchObject({ status: 'active', suspended: false, pastDueSince: null, keyId: 'key_m1_4', keySeq: 4 });
    expect(o.emits).toEqual([
      { type: 'issue_key', keyId: 'key_m1_4' },
      { type: 'notify', notice: 'access_restored', dedupeKey: 'access_restored:key_m1_4' },
    ]);
  });

  it('renews an active member only for a later period end; the same or an older one changes nothing', () => {
    const pe = NOW + 30 * 24 * HOUR;
    const m = member('active', { currentPeriodEnd: pe });
    expect(stepOf(observeSubscription(m, obs('active', { currentPeriodEnd: pe }), { cid }, NOW))).toEqual({
      status: 'noop',
      code: 'SUBSCRIPTION_STATUS_UNCHANGED',
      state: m,
    });
    expect(stepOf(observeSubscription(m, obs('active', { currentPeriodEnd: pe - 1 }), { cid }, NOW))).toMatchObject({
      status: 'noop',
      code: 'SUBSCRIPTION_STATUS_UNCHANGED',
    });
    const o = appliedOf(stepOf(observeSubscription(m, obs('active', { currentPeriodEnd: pe + 1 }), { cid: later }, NOW)));
    expect(o.code).toBe('MEMBERSHIP_RENEWED');
    expect(o.state).toMatchObject({ status: 'active', currentPeriodEnd: pe + 1, keyId: 'key_m1_1' });
    expect(o.emits).toEqual([]);
    expectWritten(m, o.state, 'MEMBERSHIP_RENEWED', NOW);
  });

  it('an active member with no period end known yet takes the one Stripe says', () => {
    const m = member('active', { currentPeriodEnd: null });
    const o = appliedOf(stepOf(observeSubscription(m, obs('active', { currentPeriodEnd: NOW + HOUR }), { cid }, NOW)));
    expect(o).toMatchObject({ code: 'MEMBERSHIP_RENEWED', state: { currentPeriodEnd: NOW + HOUR } });
  });
});

describe('observeSubscription: Stripe says past_due or unpaid', () => {
  it.each(['past_due', 'unpaid'] as const)('%s: an active member is past due from now, keeps the key, and is told once per period', (s) => {
    const m = member('active');
    const o = appliedOf(stepOf(observeSubscription(m, obs(s, { currentPeriodEnd: NOW + 5 }), { cid: later }, NOW)));
    expect(o.code).toBe('MEMBERSHIP_PAST_DUE');
    expect(o.state).toMatchObject({ status: 'past_due', pastDueSince: NOW, keyId: 'key_m1_1', suspended: false });
    expect(o.state.currentPeriodEnd).toBe(m.currentPeriodEnd);
    expect(o.emits).toEqual([{ type: 'notify', notice: 'payment_failed', dedupeKey: `payment_failed:m1:${NOW + 5}` }]);
    expectWritten(m, o.state, 'MEMBERSHIP_PAST_DUE', NOW);
  });

  it.each(['past_due', 'unpaid'] as const)(
    '%s before the activation was learned: the key the first payment bought, inside the grace, and both notices',
    (s) => {
      const m = member('applied');
      const o = appliedOf(stepOf(observeSubscription(m, obs(s, { currentPeriodEnd: NOW + 7 }), { cid: later }, NOW)));
      expect(o.code).toBe('MEMBERSHIP_ACTIVATED_PAST_DUE');
      expect(o.state).toMatchObject({ status: 'past_due', pastDueSince: NOW, keyId: 'key_m1_1', keySeq: 1, currentPeriodEnd: NOW + 7 });
      expect(o.emits).toEqual([
        { type: 'issue_key', keyId: 'key_m1_1' },
        { type: 'notify', notice: 'membership_activated', dedupeKey: 'membership_activated:m1' },
        { type: 'notify', notice: 'payment_failed', dedupeKey: `payment_failed:m1:${NOW + 7}` },
      ]);
      expectWritten(m, o.state, 'MEMBERSHIP_ACTIVATED_PAST_DUE', NOW);
    },
  );

  it('a member already past due stays so, the grace still running from the first failure', () => {
    const m = member('past_due', { pastDueSince: NOW - HOUR });
    expect(stepOf(observeSubscription(m, obs('unpaid'), { cid }, NOW))).toEqual({
      status: 'noop',
      code: 'MEMBERSHIP_ALREADY_PAST_DUE',
      state: m,
    });
  });
});

describe('observeSubscription: a schedule to cancel at period end', () => {
  it.each([
    ['active', 'active'],
    ['active', 'past_due'],
    ['active', 'unpaid'],
    ['past_due', 'active'],
    ['past_due', 'past_due'],
    ['past_due', 'unpaid'],
  ] as const)(
    'a %s member whose subscription (%s) is set to cancel follows as a self-cancel by stripe, billing already stopped',
    (status, s) => {
      const d = observeSubscription(member(status), obs(s, { cancelAtPeriodEnd: true }), { cid }, NOW);
      if (d.kind !== 'end') throw new Error(`expected an end, got ${d.kind}`);
      expect(d).toMatchObject({ reason: 'self_cancel', actor: 'stripe', stopped: 'scheduled' });
      expect(d.note.trim()).not.toBe('');
    },
  );

  it('while a stop of ours is pending its reconcile job finishes it, with its own actor: here nothing', () => {
    for (const stop of ['cancel_at_period_end', 'cancel_now'] as const) {
      const m = member('active', { billingStopPending: stop });
      expect(stepOf(observeSubscription(m, obs('active', { cancelAtPeriodEnd: true }), { cid }, NOW))).toEqual({
        status: 'noop',
        code: 'MEMBERSHIP_END_PENDING',
        state: m,
      });
    }
  });

  it('an applied membership whose paid subscription is set to cancel is first activated (the schedule is learned next)', () => {
    const o = stepOf(observeSubscription(member('applied'), obs('active', { cancelAtPeriodEnd: true }), { cid }, NOW));
    expect(o).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ACTIVATED' });
  });

  it('an ending member whose schedule Stripe still holds has nothing to do; a payment or failure then is no news', () => {
    const m = member('ending', { endReason: 'self_cancel', cancelAtPeriodEnd: true });
    for (const s of ['active', 'past_due', 'unpaid'] as const)
      expect(stepOf(observeSubscription(m, obs(s, { cancelAtPeriodEnd: true }), { cid }, NOW))).toEqual({
        status: 'noop',
        code: 'MEMBERSHIP_ALREADY_ENDING',
        state: m,
      });
  });

  it('an ending member whose schedule was withdrawn in Stripe (it would bill again) has the schedule set again', () => {
    const m = member('ending', { endReason: 'self_cancel', cancelAtPeriodEnd: true });
    for (const s of ['active', 'past_due', 'unpaid'] as const)
      expect(observeSubscription(m, obs(s, { cancelAtPeriodEnd: false }), { cid }, NOW)).toEqual({ kind: 'reassert' });
    // not living in Stripe: nothing will be billed, no schedule to set again
    expect(stepOf(observeSubscription(m, obs('incomplete'), { cid }, NOW))).toMatchObject({ status: 'noop' });
    expect(stepOf(observeSubscription(m, obs('other'), { cid }, NOW))).toMatchObject({ status: 'noop' });
  });
});

describe('observeSubscription: Stripe ended the subscription', () => {
  const ended = (m: Membership, o: SubscriptionObservation) => {
    const d = observeSubscription(m, o, { cid }, NOW);
    if (d.kind !== 'end') throw new Error(`expected an end, got ${d.kind}`);
    expect(d).toMatchObject({ actor: 'stripe', stopped: 'ended' });
    expect(d.note.trim()).not.toBe('');
    return d;
  };

  it.each(['canceled', 'incomplete_expired'] as const)(
    '%s: an ending membership reaches its period end with the reason it was ending for',
    (s) => {
      expect(ended(member('ending', { endReason: 'plan_retired' }), obs(s)).reason).toBe('plan_retired');
      expect(ended(member('ending', { endReason: 'force_cancel' }), obs(s, { canceledFor: 'payment_failed' })).reason).toBe('force_cancel');
      // an ending row with no reason recorded is a self-cancel (the Stripe dashboard schedule)
      expect(ended(member('ending', { endReason: null }), obs(s)).reason).toBe('self_cancel');
    },
  );

  it('a past-due member whose subscription Stripe gave up on ends as payment_failed_final, whatever Stripe gives as the cause', () => {
    for (const canceledFor of [null, 'payment_failed', 'cancellation_requested'] as const)
      expect(ended(member('past_due'), obs('canceled', { canceledFor })).reason).toBe('payment_failed_final');
  });

  it('an active member canceled in Stripe ends as a force-cancel by stripe; a payment given up on is told apart in the note', () => {
    const plain = ended(member('active'), obs('canceled', { canceledFor: 'cancellation_requested' }));
    const unpaid = ended(member('active'), obs('canceled', { canceledFor: 'payment_failed' }));
    expect(plain.reason).toBe('force_cancel');
    expect(unpaid.reason).toBe('force_cancel');
    expect(unpaid.note).not.toBe(plain.note);
    expect(ended(member('active'), obs('incomplete_expired')).reason).toBe('force_cancel');
  });

  it('an applied membership: an expired checkout is checkout_expired, a canceled one a rejection', () => {
    expect(ended(member('applied'), obs('incomplete_expired')).reason).toBe('checkout_expired');
    expect(ended(member('applied'), obs('canceled')).reason).toBe('application_rejected');
    expect(ended(member('applied'), obs('canceled', { canceledFor: 'cancellation_requested' })).reason).toBe('application_rejected');
  });
});

describe('observeSubscription: nothing to decide', () => {
  it('an incomplete subscription: the applicant has not paid yet (payment pending); for a member it is no news', () => {
    const a = member('applied');
    expect(stepOf(observeSubscription(a, obs('incomplete'), { cid }, NOW))).toEqual({
      status: 'noop',
      code: 'MEMBERSHIP_PAYMENT_PENDING',
      state: a,
    });
    for (const s of ['active', 'past_due'] as const) {
      const m = member(s);
      expect(stepOf(observeSubscription(m, obs('incomplete'), { cid }, NOW))).toEqual({
        status: 'noop',
        code: 'SUBSCRIPTION_STATUS_UNCHANGED',
        state: m,
      });
    }
  });

  it('a status Stripe gives that the rules do not know changes nothing', () => {
    for (const s of ['applied', 'active', 'past_due', 'ending'] as const) {
      const m = member(s);
      expect(stepOf(observeSubscription(m, obs('other'), { cid }, NOW))).toEqual({
        status: 'noop',
        code: 'SUBSCRIPTION_STATUS_UNCHANGED',
        state: m,
      });
    }
  });

  it('another subscription than the membership’s is refused, naming both', () => {
    const o = stepOf(observeSubscription(member('active'), obs('canceled', { subscriptionId: 'sub_9' }), { cid }, NOW));
    expect(o).toMatchObject({ status: 'refused', code: 'SUBSCRIPTION_MISMATCH' });
    if (o.status === 'refused') {
      expect(o.detail).toContain('sub_9');
      expect(o.detail).toContain('sub_1');
    }
  });

  it('a final membership ignores whatever Stripe says', () => {
    const statuses = ['incomplete', 'incomplete_expired', 'active', 'past_due', 'unpaid', 'canceled', 'other'] as const;
    fc.assert(
      fc.property(fc.constantFrom('ended', 'rejected' as const), fc.constantFrom(...statuses), fc.boolean(), (s, os, cancel) => {
        const m = member(s);
        expect(stepOf(observeSubscription(m, obs(os, { cancelAtPeriodEnd: cancel }), { cid }, NOW))).toEqual({
          status: 'noop',
          code: 'MEMBERSHIP_ALREADY_ENDED',
          state: m,
        });
      }),
    );
  });
});

describe('decideEnd: what ends, and the billing stop first', () => {
  it('unknown → refused; final → noop whatever the version the caller saw', () => {
    expect(decideEnd(null, end('self_cancel'), NOW)).toEqual({
      outcome: expect.objectContaining({ status: 'refused', code: 'MEMBERSHIP_NOT_FOUND' }),
      billing: 'none',
    });
    for (const s of ['ended', 'rejected'] as const) {
      const m = member(s);
      expect(decideEnd(m, end('force_cancel', { expectedVersion: 99 }), NOW)).toEqual({
        outcome: { status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDED', state: m },
        billing: 'none',
      });
    }
  });

  it('the version the caller saw must be the row’s: equal goes ahead, any other is a conflict with the current row', () => {
    const m = member('active');
    expect(decideEnd(m, end('self_cancel', { expectedVersion: 7 }), NOW).outcome).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_ENDING',
    });
    for (const v of [6, 8])
      expect(decideEnd(m, end('self_cancel', { expectedVersion: v }), NOW)).toEqual({
        outcome: { status: 'conflict', code: 'MEMBERSHIP_STATE_CHANGED', current: m },
        billing: 'none',
      });
  });

  it('self_cancel: ending, billing set to stop at period end, the member keeps the key and is told', () => {
    const m = member('active');
    const d = decideEnd(m, end('self_cancel', { actor: 'member', note: null }), NOW);
    expect(d.billing).toBe('cancel_at_period_end');
    const o = appliedOf(d.outcome);
    expect(o.code).toBe('MEMBERSHIP_ENDING');
    expect(o.state).toMatchObject({
      status: 'ending',
      endReason: 'self_cancel',
      endedBy: 'member',
      endNote: null,
      endedAt: null,
      cancelAtPeriodEnd: true,
      keyId: 'key_m1_1',
    });
    expect(o.emits).toEqual([{ type: 'notify', notice: 'membership_ending', dedupeKey: 'membership_ending:m1' }]);
    expectWritten(m, o.state, 'MEMBERSHIP_ENDING', NOW);
  });

  it('force_cancel of an active member: ended now, cancelled in Stripe first, the key revoked, who and why kept', () => {
    const m = member('active');
    const d = decideEnd(m, end('force_cancel'), NOW);
    expect(d.billing).toBe('cancel_now');
    const o = appliedOf(d.outcome);
    expect(o.code).toBe('MEMBERSHIP_ENDED');
    expect(o.state).toMatchObject({
      status: 'ended',
      endReason: 'force_cancel',
      endedBy: 'staff-2',
      endNote: 'asked at the desk',
      endedAt: NOW,
      cancelAtPeriodEnd: false,
    });
    expect(o.emits).toEqual([
      { type: 'revoke_key', keyId: 'key_m1_1', reason: 'membership_ended' },
      { type: 'notify', notice: 'membership_ended', dedupeKey: 'membership_ended:m1' },
    ]);
    expectWritten(m, o.state, 'MEMBERSHIP_ENDED', NOW);
  });

  it('force_cancel of an ending member ends it now, the schedule it had kept on record', () => {
    const m = member('ending', { endReason: 'self_cancel', endedBy: 'member', cancelAtPeriodEnd: true });
    const d = decideEnd(m, end('force_cancel'), NOW);
    expect(d.billing).toBe('cancel_now');
    expect(appliedOf(d.outcome).state).toMatchObject({
      status: 'ended',
      endReason: 'force_cancel',
      endedBy: 'staff-2',
      endedAt: NOW,
      cancelAtPeriodEnd: true,
    });
  });

  it('force_cancel by staff needs both actor and note; when Stripe already ended the subscription it needs neither', () => {
    for (const over of [{ actor: null }, { note: null }, { actor: '' }, { note: '' }, { actor: null, note: null }])
      expect(decideEnd(member('active'), end('force_cancel', over), NOW)).toMatchObject({
        billing: 'none',
        outcome: { status: 'refused', code: 'MEMBERSHIP_NOTE_REQUIRED' },
      });
    const d = decideEnd(member('active'), end('force_cancel', { actor: null, note: null, subscriptionEnded: true }), NOW);
    expect(d.billing).toBe('none');
    expect(appliedOf(d.outcome).state).toMatchObject({ status: 'ended', endReason: 'force_cancel', endedBy: null, endNote: null });
    // the other reasons need no note
    expect(decideEnd(member('active'), end('plan_retired', { actor: null, note: null }), NOW).outcome).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_ENDING',
    });
  });

  it('payment_failed_final ends a past-due member (key already revoked when suspended); it is not a move of an active one', () => {
    const d = decideEnd(member('past_due', { suspended: true }), end('payment_failed_final', { actor: 'stripe' }), NOW);
    expect(d.billing).toBe('cancel_now');
    const o = appliedOf(d.outcome);
    expect(o.state).toMatchObject({ status: 'ended', endReason: 'payment_failed_final', endedAt: NOW });
    expect(o.emits).toEqual([{ type: 'notify', notice: 'membership_ended', dedupeKey: 'membership_ended:m1' }]);
    const invalid = decideEnd(member('active'), end('payment_failed_final'), NOW);
    expect(invalid).toMatchObject({ billing: 'none', outcome: { status: 'refused', code: 'INVALID_TRANSITION' } });
    if (invalid.outcome.status === 'refused') {
      expect(invalid.outcome.detail).toContain('active');
      expect(invalid.outcome.detail).toContain('payment_failed_final');
    }
  });

  it('a membership with no subscription has no billing to stop', () => {
    const d = decideEnd(member('active', { subscriptionId: null }), end('force_cancel'), NOW);
    expect(d.billing).toBe('none');
    expect(d.outcome).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDED' });
    expect(decideEnd(member('active', { subscriptionId: null }), end('self_cancel'), NOW).billing).toBe('none');
  });

  it('a final end with no key revokes nothing, but still tells the member', () => {
    const o = appliedOf(decideEnd(member('active', { keyId: null }), end('force_cancel'), NOW).outcome);
    expect(o.emits).toEqual([{ type: 'notify', notice: 'membership_ended', dedupeKey: 'membership_ended:m1' }]);
  });

  it('application_rejected only ends an application: any other status moved since the click', () => {
    for (const s of ['active', 'past_due', 'ending'] as const) {
      const m = member(s);
      expect(decideEnd(m, end('application_rejected'), NOW)).toEqual({
        outcome: { status: 'conflict', code: 'MEMBERSHIP_STATE_CHANGED', current: m },
        billing: 'none',
      });
    }
  });
});

describe('decideEnd: an application', () => {
  const review = () => member('applied', { approvedAt: null, approvedBy: null, subscriptionId: null });

  it.each(['application_rejected', 'plan_retired'] as const)(
    '%s rejects an application under review: nothing to bill, no key, the applicant told',
    (r) => {
      const m = review();
      const d = decideEnd(m, end(r), NOW);
      expect(d.billing).toBe('none');
      const o = appliedOf(d.outcome);
      expect(o.code).toBe('MEMBERSHIP_REJECTED');
      expect(o.state).toMatchObject({ status: 'rejected', endReason: r, endedBy: 'staff-2', endedAt: NOW, cancelAtPeriodEnd: false });
      expect(o.emits).toEqual([{ type: 'notify', notice: 'membership_rejected', dedupeKey: 'membership_rejected:m1' }]);
      expectWritten(m, o.state, 'MEMBERSHIP_REJECTED', NOW);
    },
  );

  it('an application under review ends only by a rejection: the other reasons are refused', () => {
    for (const r of ['self_cancel', 'force_cancel', 'payment_failed_final', 'checkout_expired'] as const)
      expect(decideEnd(review(), end(r, { checkoutDeadlineMs: HOUR }), NOW)).toMatchObject({
        billing: 'none',
        outcome: { status: 'refused', code: 'APPLICATION_UNDER_REVIEW' },
      });
  });

  it('once approved its checkout is in flight: no reason but the deadline ends it (a payment may land a second later)', () => {
    for (const r of END_REASONS.filter((x) => x !== 'checkout_expired'))
      expect(decideEnd(member('applied'), end(r), NOW)).toMatchObject({
        billing: 'none',
        outcome: { status: 'refused', code: 'CHECKOUT_IN_PROGRESS' },
      });
  });

  it('the checkout deadline: open before approvedAt + deadline, expired from then on, the subscription cancelled first', () => {
    const m = member('applied');
    const approvedAt = NOW - 9 * HOUR;
    fc.assert(
      fc.property(fc.integer({ min: 60_000, max: 23 * HOUR }), fc.integer({ min: -2 * HOUR, max: 2 * HOUR }), (deadline, offset) => {
        const at = approvedAt + deadline + offset;
        const d = decideEnd(m, end('checkout_expired', { actor: 'tobira', checkoutDeadlineMs: deadline }), at);
        if (offset < 0) expect(d).toEqual({ outcome: { status: 'noop', code: 'MEMBERSHIP_CHECKOUT_OPEN', state: m }, billing: 'none' });
        else {
          expect(d.billing).toBe('cancel_now');
          expect(appliedOf(d.outcome).state).toMatchObject({ status: 'rejected', endReason: 'checkout_expired', endedAt: at });
        }
      }),
    );
    // no deadline configured: the checkout never expires locally
    expect(decideEnd(m, end('checkout_expired'), NOW + 1000 * HOUR).outcome).toMatchObject({
      status: 'noop',
      code: 'MEMBERSHIP_CHECKOUT_OPEN',
    });
  });

  it('Stripe ended the subscription of a checkout: rejected or expired as Stripe says, nothing left to stop', () => {
    const expired = decideEnd(member('applied'), end('checkout_expired', { actor: 'stripe', subscriptionEnded: true }), NOW);
    expect(expired.billing).toBe('none');
    expect(appliedOf(expired.outcome)).toMatchObject({
      code: 'MEMBERSHIP_CHECKOUT_EXPIRED',
      state: { status: 'rejected', endReason: 'checkout_expired' },
    });
    const rejected = decideEnd(member('applied'), end('application_rejected', { actor: 'stripe', subscriptionEnded: true }), NOW);
    expect(rejected).toMatchObject({ billing: 'none', outcome: { status: 'applied', code: 'MEMBERSHIP_REJECTED' } });
    // a reason with no move from applied is refused, not forced through
    expect(decideEnd(member('applied'), end('self_cancel', { subscriptionEnded: true }), NOW).outcome).toMatchObject({
      status: 'refused',
      code: 'INVALID_TRANSITION',
    });
  });

  it('an application rejected while its subscription existed has the subscription cancelled now', () => {
    const m = member('applied', { approvedAt: null, subscriptionId: 'sub_1' });
    expect(decideEnd(m, end('application_rejected'), NOW).billing).toBe('cancel_now');
  });
});

describe('decideEnd: an ending membership reaches its period end', () => {
  it('when Stripe ends the subscription: ended, keeping why, who and the note of the end asked for, nothing to bill', () => {
    const m = member('ending', { endReason: 'self_cancel', endedBy: 'member', endNote: 'moving away', cancelAtPeriodEnd: true });
    const d = decideEnd(m, end('force_cancel', { actor: 'stripe', note: 'ended', subscriptionEnded: true }), NOW);
    expect(d.billing).toBe('none');
    const o = appliedOf(d.outcome);
    expect(o.code).toBe('MEMBERSHIP_ENDED');
    expect(o.state).toMatchObject({
      status: 'ended',
      endReason: 'self_cancel',
      endedBy: 'member',
      endNote: 'moving away',
      endedAt: NOW,
      cancelAtPeriodEnd: true,
    });
    expect(o.emits).toEqual([
      { type: 'revoke_key', keyId: 'key_m1_1', reason: 'membership_ended' },
      { type: 'notify', notice: 'membership_ended', dedupeKey: 'membership_ended:m1' },
    ]);
  });

  it('an ending row with no reason recorded ends as a self-cancel', () => {
    const m = member('ending', { endReason: null, endedBy: null });
    const o = appliedOf(decideEnd(m, end('self_cancel', { actor: 'stripe', subscriptionEnded: true }), NOW).outcome);
    expect(o.state).toMatchObject({ status: 'ended', endReason: 'self_cancel', endedBy: null });
  });

  it('a retired plan’s member at period end has the key revoked for plan_retired', () => {
    const m = member('ending', { endReason: 'plan_retired', endedBy: 'staff-1', cancelAtPeriodEnd: true });
    const o = appliedOf(decideEnd(m, end('plan_retired', { actor: 'stripe', subscriptionEnded: true }), NOW).outcome);
    expect(o.state).toMatchObject({ status: 'ended', endReason: 'plan_retired', endedBy: 'staff-1' });
    expect(o.emits[0]).toEqual({ type: 'revoke_key', keyId: 'key_m1_1', reason: 'plan_retired' });
  });

  it('retiring the plan of a paying member: ending to the period end, the key kept, billing scheduled to stop', () => {
    const d = decideEnd(member('past_due'), end('plan_retired'), NOW);
    expect(d.billing).toBe('cancel_at_period_end');
    const o = appliedOf(d.outcome);
    expect(o.state).toMatchObject({ status: 'ending', endReason: 'plan_retired', endedAt: null, cancelAtPeriodEnd: true });
    expect(o.emits.map((e) => e.type)).toEqual(['notify']);
  });

  it('without Stripe’s end, asking an ending membership to end again at period end is a noop', () => {
    const m = member('ending', { cancelAtPeriodEnd: true });
    for (const r of ['self_cancel', 'plan_retired'] as const)
      expect(decideEnd(m, end(r), NOW)).toEqual({
        outcome: { status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDING', state: m },
        billing: 'none',
      });
  });
});

describe('decideEnd properties', () => {
  const living = fc.constantFrom<MembershipStatus>('applied', 'active', 'past_due', 'ending');
  const reason = fc.constantFrom(...END_REASONS);
  const cmd = fc.record({
    reason,
    actor: fc.constantFrom('staff-2', null),
    note: fc.constantFrom('why', null),
    subscriptionEnded: fc.boolean(),
    suspended: fc.boolean(),
    approved: fc.boolean(),
  });

  it('an end that takes effect is written once, ended/rejected with endedAt now, and never leaves a live key of an ended membership', () => {
    fc.assert(
      fc.property(living, cmd, (s, c) => {
        const m = member(s, {
          suspended: c.suspended,
          approvedAt: c.approved ? NOW - HOUR : null,
          keyId: s === 'applied' ? null : 'key_m1_1',
        });
        const d = decideEnd(m, { ...end(c.reason), ...c, checkoutDeadlineMs: HOUR }, NOW);
        if (d.outcome.status !== 'applied') {
          expect(d.billing).toBe('none');
          return;
        }
        const next = d.outcome.state;
        expectWritten(m, next, d.outcome.code, NOW);
        expect(['ending', 'ended', 'rejected']).toContain(next.status);
        expect(next.endedAt).toBe(isFinal(next.status) ? NOW : null);
        const revoked = d.outcome.emits.some((e) => e.type === 'revoke_key');
        expect(revoked).toBe(isFinal(next.status) && m.keyId !== null && !m.suspended);
        expect(d.outcome.emits.filter((e) => e.type === 'notify')).toHaveLength(1);
        if (c.subscriptionEnded) expect(d.billing).toBe('none');
        else expect(d.billing).toBe(next.status === 'ending' ? 'cancel_at_period_end' : 'cancel_now');
      }),
    );
  });
});

describe('recordPendingStop (a billing stop with no answer)', () => {
  const rec = (m: Membership | null, stop: 'cancel_now' | 'cancel_at_period_end' | null) => recordPendingStop(m, stop, { cid: later }, NOW);

  it('records the stop as pending, the status unchanged (an unknown outcome is never "nothing changed")', () => {
    for (const stop of ['cancel_now', 'cancel_at_period_end'] as const) {
      const m = member('active');
      const o = appliedOf(rec(m, stop));
      expect(o.code).toBe('MEMBERSHIP_END_PENDING');
      expect(o.state).toMatchObject({ status: 'active', billingStopPending: stop, keyId: 'key_m1_1' });
      expect(o.emits).toEqual([]);
      expectWritten(m, o.state, 'MEMBERSHIP_END_PENDING', NOW);
    }
  });

  it('a stop recorded again is a noop; another stop replaces it', () => {
    const m = member('past_due', { billingStopPending: 'cancel_at_period_end' });
    expect(rec(m, 'cancel_at_period_end')).toEqual({ status: 'noop', code: 'MEMBERSHIP_END_PENDING', state: m });
    expect(appliedOf(rec(m, 'cancel_now')).state.billingStopPending).toBe('cancel_now');
  });

  it('Stripe refusing the stop for good clears it (MEMBERSHIP_END_NOT_MADE); nothing pending to clear is a noop', () => {
    const m = member('active', { billingStopPending: 'cancel_now' });
    const o = appliedOf(rec(m, null));
    expect(o.code).toBe('MEMBERSHIP_END_NOT_MADE');
    expect(o.state).toMatchObject({ status: 'active', billingStopPending: null });
    expectWritten(m, o.state, 'MEMBERSHIP_END_NOT_MADE', NOW);
    const clear = member('active');
    expect(rec(clear, null)).toEqual({ status: 'noop', code: 'SUBSCRIPTION_STATUS_UNCHANGED', state: clear });
  });

  it('only a living membership carries a pending stop; an unknown one is refused', () => {
    for (const s of ['ended', 'rejected'] as const) {
      const m = member(s);
      expect(rec(m, 'cancel_now')).toEqual({ status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDED', state: m });
      expect(rec(m, null)).toEqual({ status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDED', state: m });
    }
    expect(rec(null, 'cancel_now')).toMatchObject({ status: 'refused', code: 'MEMBERSHIP_NOT_FOUND' });
  });
});

describe('suspendAccess (the grace)', () => {
  const suspend = (m: Membership | null, now: number, p: Plan = plan) => suspendAccess(m, p, { cid: later }, now);

  it('suspends exactly when the grace (graceSeconds from the first failure) has run out, never before', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 7 * 86_400 }), fc.integer({ min: -HOUR, max: HOUR }), (grace, offset) => {
        const since = NOW - 10 * 86_400_000;
        const m = member('past_due', { pastDueSince: since });
        const o = suspend(m, since + grace * 1000 + offset, { ...plan, graceSeconds: grace });
        if (offset < 0) expect(o).toEqual({ status: 'noop', code: 'MEMBERSHIP_GRACE_NOT_OVER', state: m });
        else expect(o).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ACCESS_SUSPENDED' });
      }),
    );
  });

  it('revokes the key for payment_failed and tells the member once per failure; the status stays past_due', () => {
    const m = member('past_due', { pastDueSince: NOW - 3 * HOUR });
    const o = appliedOf(suspend(m, NOW));
    expect(o.state).toMatchObject({ status: 'past_due', suspended: true, keyId: 'key_m1_1', pastDueSince: NOW - 3 * HOUR });
    expect(o.emits).toEqual([
      { type: 'revoke_key', keyId: 'key_m1_1', reason: 'payment_failed' },
      { type: 'notify', notice: 'access_suspended', dedupeKey: `access_suspended:m1:${NOW - 3 * HOUR}` },
    ]);
    expectWritten(m, o.state, 'MEMBERSHIP_ACCESS_SUSPENDED', NOW);
    expect(suspend(o.state, NOW + HOUR)).toEqual({ status: 'noop', code: 'MEMBERSHIP_ACCESS_ALREADY_SUSPENDED', state: o.state });
  });

  it('with no key to revoke it still suspends and tells the member', () => {
    const o = appliedOf(suspend(member('past_due', { pastDueSince: NOW - 3 * HOUR, keyId: null }), NOW));
    expect(o.state.suspended).toBe(true);
    expect(o.emits.map((e) => e.type)).toEqual(['notify']);
  });

  it('only a member owing with a failure on record (past due, or ending after a self-cancel while past due) is suspended', () => {
    for (const s of MEMBERSHIP_STATUSES.filter((x) => x !== 'past_due' && x !== 'ending')) {
      const m = member(s, { pastDueSince: NOW - 100 * HOUR });
      expect(suspend(m, NOW)).toEqual({ status: 'noop', code: 'MEMBERSHIP_NOT_PAST_DUE', state: m });
    }
    const unknownSince = member('past_due', { pastDueSince: null });
    expect(suspend(unknownSince, NOW)).toEqual({ status: 'noop', code: 'MEMBERSHIP_NOT_PAST_DUE', state: unknownSince });
    const paidUp = member('ending', { pastDueSince: null });
    expect(suspend(paidUp, NOW)).toEqual({ status: 'noop', code: 'MEMBERSHIP_NOT_PAST_DUE', state: paidUp });
    expect(suspend(member('ending', { pastDueSince: NOW - 100 * HOUR }), NOW)).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_ACCESS_SUSPENDED',
      state: { status: 'ending', suspended: true },
    });
    expect(suspend(null, NOW)).toMatchObject({ status: 'refused', code: 'MEMBERSHIP_NOT_FOUND' });
  });
});

describe('observeSubscription: every decision is a move the state table has', () => {
  const statuses: SubscriptionObservation['status'][] = [
    'incomplete',
    'incomplete_expired',
    'active',
    'past_due',
    'unpaid',
    'canceled',
    'other',
  ];
  const canceledFor: SubscriptionObservation['canceledFor'][] = [null, 'cancellation_requested', 'payment_failed'];
  it('never hands endMembership an end its status cannot take, and never steps into INVALID_TRANSITION', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...MEMBERSHIP_STATUSES.filter((s) => !isFinal(s))),
        fc.constantFrom(...statuses),
        fc.constantFrom(...canceledFor),
        fc.boolean(),
        (status, observed, why, atPeriodEnd) => {
          const d = observeSubscription(
            member(status),
            obs(observed, { canceledFor: why, cancelAtPeriodEnd: atPeriodEnd }),
            { cid: later },
            NOW,
          );
          if (d.kind === 'end') {
            const moves = membershipTransitionOf(status, d.reason) ?? membershipNoopOf(status, d.reason);
            expect(moves, `${status} --${d.reason}--> (Stripe ${observed}, ${String(why)})`).toBeDefined();
          } else if (d.kind === 'step') {
            expect(d.outcome.status === 'refused' ? d.outcome.code : 'ok').not.toBe('INVALID_TRANSITION');
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('ends an application whose subscription Stripe canceled for a failed payment as rejected (nothing was delivered)', () => {
    const d = observeSubscription(member('applied'), obs('canceled', { canceledFor: 'payment_failed' }), { cid: later }, NOW);
    expect(d).toMatchObject({ kind: 'end', reason: 'application_rejected', actor: 'stripe' });
  });
});
