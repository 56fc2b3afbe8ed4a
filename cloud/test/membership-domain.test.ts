import { asDoorId, asSiteId, newCorrelationId, PersonId } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { END_REASONS, MEMBERSHIP_STATUSES, type MembershipStatus } from '../src/domain/membership-states.js';
import {
  applyMembership,
  decideEnd,
  observeSubscription,
  suspendAccess,
  type Membership,
  type SubscriptionObservation,
} from '../src/domain/memberships.js';
import type { Plan } from '../src/domain/plans.js';

/** The pure membership verbs: given a membership and a command, what they decide (and that "nothing happened" is a decision). */
const cid = newCorrelationId();
const NOW = Date.UTC(2027, 0, 10);
const plan: Plan = {
  id: 'plan-1',
  siteId: asSiteId('site-1'),
  name: 'Gym',
  amount: 5000,
  currency: 'jpy',
  interval: 'month',
  intervalCount: 1,
  doors: [asDoorId('door-1')],
  membersOnly: false,
  monthlyEntryQuota: null,
  walkInAmount: null,
  graceSeconds: 3600,
  status: 'active',
  stripePriceId: null,
  createdAt: 0,
  updatedAt: 0,
  retiredAt: null,
};

function applied(): Membership {
  const o = applyMembership(null, { membershipId: 'm1', plan, personId: PersonId.parse('p1'), credential: null, cid }, NOW);
  if (o.status !== 'applied') throw new Error('apply');
  return o.state;
}
const member = (status: MembershipStatus, over: Partial<Membership> = {}): Membership => ({
  ...applied(),
  status,
  version: 5,
  approvedAt: NOW,
  subscriptionId: 'sub_1',
  keyId: status === 'applied' ? null : 'key_m1_1',
  keySeq: status === 'applied' ? 0 : 1,
  currentPeriodEnd: NOW + 1000,
  ...over,
});
const obs = (status: SubscriptionObservation['status'], over: Partial<SubscriptionObservation> = {}): SubscriptionObservation => ({
  subscriptionId: 'sub_1',
  status,
  currentPeriodEnd: NOW + 1000,
  cancelAtPeriodEnd: false,
  canceledFor: null,
  ...over,
});
const end = (reason: (typeof END_REASONS)[number], over: Partial<Parameters<typeof decideEnd>[1]> = {}) => ({
  reason,
  actor: 'staff-1',
  note: 'note',
  subscriptionEnded: false,
  cid,
  ...over,
});

describe('applyMembership', () => {
  it('stores the subscription idempotency key membership_initial:<id>:1 at apply, before any Stripe call', () => {
    expect(applied()).toMatchObject({ status: 'applied', version: 1, idempotencyKey: 'membership_initial:m1:1', approvedAt: null });
  });
  it('a retired plan takes no application; the same application again is a noop, another one on the id a conflict', () => {
    expect(
      applyMembership(
        null,
        { membershipId: 'm2', plan: { ...plan, status: 'retired' }, personId: PersonId.parse('p1'), credential: null, cid },
        NOW,
      ),
    ).toMatchObject({
      status: 'refused',
      code: 'PLAN_NOT_AVAILABLE',
    });
    const m = applied();
    expect(applyMembership(m, { membershipId: 'm1', plan, personId: PersonId.parse('p1'), credential: null, cid }, NOW).status).toBe(
      'noop',
    );
    expect(applyMembership(m, { membershipId: 'm1', plan, personId: PersonId.parse('p2'), credential: null, cid }, NOW)).toMatchObject({
      status: 'conflict',
      code: 'MEMBERSHIP_ALREADY_EXISTS',
    });
  });
});

describe('decideEnd', () => {
  it('self_cancel of an active membership: ending, billing stopped at period end first, no key revoked yet', () => {
    const d = decideEnd(member('active'), end('self_cancel', { actor: 'member', note: null }), NOW);
    expect(d.billing).toBe('cancel_at_period_end');
    expect(d.outcome).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_ENDING',
      state: { status: 'ending', cancelAtPeriodEnd: true, endedAt: null },
    });
    if (d.outcome.status === 'applied') expect(d.outcome.emits.map((e) => e.type)).toEqual(['notify']);
  });

  it('force_cancel: ended now, the subscription cancelled first, the key revoked with membership_ended', () => {
    const d = decideEnd(member('past_due'), end('force_cancel'), NOW);
    expect(d.billing).toBe('cancel_now');
    expect(d.outcome).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_ENDED',
      state: { status: 'ended', endedAt: NOW, endedBy: 'staff-1' },
    });
    if (d.outcome.status === 'applied')
      expect(d.outcome.emits[0]).toEqual({ type: 'revoke_key', keyId: 'key_m1_1', reason: 'membership_ended' });
  });

  it('a suspended member has no live key to revoke: ending it revokes nothing more', () => {
    const d = decideEnd(member('past_due', { suspended: true }), end('force_cancel'), NOW);
    if (d.outcome.status !== 'applied') throw new Error('expected applied');
    expect(d.outcome.emits.some((e) => e.type === 'revoke_key')).toBe(false);
  });

  it('an application under review cannot be force-cancelled; with its checkout in flight nothing but Stripe may end it', () => {
    const review = member('applied', { approvedAt: null, subscriptionId: null });
    expect(decideEnd(review, end('force_cancel'), NOW).outcome).toMatchObject({ status: 'refused', code: 'APPLICATION_UNDER_REVIEW' });
    expect(decideEnd(review, end('application_rejected'), NOW)).toMatchObject({
      billing: 'none',
      outcome: { status: 'applied', code: 'MEMBERSHIP_REJECTED' },
    });
    const checkout = member('applied');
    // the checkout's own deadline (checkout_expired) is the one end of it besides Stripe's: tested below
    for (const r of END_REASONS.filter((x) => x !== 'checkout_expired'))
      expect(decideEnd(checkout, end(r), NOW).outcome).toMatchObject({ status: 'refused', code: 'CHECKOUT_IN_PROGRESS' });
    // Stripe ended it (the first invoice never paid): rejected, nothing to stop
    expect(decideEnd(checkout, end('application_rejected', { subscriptionEnded: true }), NOW)).toMatchObject({
      billing: 'none',
      outcome: { status: 'applied', code: 'MEMBERSHIP_REJECTED' },
    });
  });

  it('stale clicks are outcomes: ended → noop MEMBERSHIP_ALREADY_ENDED (before any version check), a stale version → conflict with the current state', () => {
    for (const s of ['ended', 'rejected'] as const) {
      for (const r of END_REASONS)
        expect(decideEnd(member(s), end(r, { expectedVersion: 1 }), NOW)).toMatchObject({
          billing: 'none',
          outcome: { status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDED' },
        });
    }
    const d = decideEnd(member('active'), end('force_cancel', { expectedVersion: 4 }), NOW);
    expect(d).toMatchObject({
      billing: 'none',
      outcome: { status: 'conflict', code: 'MEMBERSHIP_STATE_CHANGED', current: { version: 5 } },
    });
    expect(decideEnd(member('active'), end('application_rejected'), NOW).outcome).toMatchObject({
      status: 'conflict',
      code: 'MEMBERSHIP_STATE_CHANGED',
    });
  });

  it('force_cancel needs the staff actor and a note', () => {
    expect(decideEnd(member('active'), end('force_cancel', { note: null }), NOW).outcome).toMatchObject({
      code: 'MEMBERSHIP_NOTE_REQUIRED',
    });
    expect(decideEnd(member('active'), end('force_cancel', { actor: null }), NOW).outcome).toMatchObject({
      code: 'MEMBERSHIP_NOTE_REQUIRED',
    });
  });

  it('an ending membership reaches ended when Stripe ends the subscription (period_ended), keeping who asked and why', () => {
    const ending = member('ending', { endReason: 'self_cancel', endedBy: 'member', cancelAtPeriodEnd: true });
    const d = decideEnd(ending, end('self_cancel', { subscriptionEnded: true, actor: 'stripe', note: 'x' }), NOW);
    expect(d).toMatchObject({
      billing: 'none',
      outcome: { status: 'applied', code: 'MEMBERSHIP_ENDED', state: { status: 'ended', endReason: 'self_cancel', endedBy: 'member' } },
    });
    // the member asking again while ending: nothing to do
    expect(decideEnd(ending, end('self_cancel'), NOW).outcome).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDING' });
  });

  it('never moves a final membership, for any reason from any caller', () => {
    for (const s of MEMBERSHIP_STATUSES) {
      for (const r of END_REASONS) {
        const d = decideEnd(member(s), end(r), NOW);
        if (d.outcome.status === 'applied') expect(['ending', 'ended', 'rejected']).toContain(d.outcome.state.status);
        if (s === 'ended' || s === 'rejected') expect(d.outcome.status).toBe('noop');
      }
    }
  });
});

describe('decideEnd checkout_expired (an approved checkout left unpaid)', () => {
  const HOUR = 3_600_000;
  const expire = (m: Membership, now: number) =>
    decideEnd(m, end('checkout_expired', { actor: 'tobira', checkoutDeadlineMs: 2 * HOUR }), now);

  it('ends only an approved checkout, only once its deadline has passed: rejected, billing cancelled first, the applicant told', () => {
    expect(expire(member('applied', { approvedAt: null }), NOW + 3 * HOUR).outcome).toMatchObject({
      status: 'refused',
      code: 'APPLICATION_UNDER_REVIEW',
    });
    expect(expire(member('applied'), NOW + 2 * HOUR - 1)).toMatchObject({
      billing: 'none',
      outcome: { status: 'noop', code: 'MEMBERSHIP_CHECKOUT_OPEN' },
    });
    const d = expire(member('applied'), NOW + 2 * HOUR);
    expect(d.billing).toBe('cancel_now');
    expect(d.outcome).toMatchObject({
      status: 'applied',
      code: 'MEMBERSHIP_CHECKOUT_EXPIRED',
      state: { status: 'rejected', endReason: 'checkout_expired', endedBy: 'tobira', endedAt: NOW + 2 * HOUR },
    });
    if (d.outcome.status === 'applied')
      expect(d.outcome.emits).toEqual([{ type: 'notify', notice: 'membership_rejected', dedupeKey: 'membership_rejected:m1' }]);
    // no deadline given: never expired
    expect(decideEnd(member('applied'), end('checkout_expired'), NOW + 100 * HOUR).outcome).toMatchObject({
      code: 'MEMBERSHIP_CHECKOUT_OPEN',
    });
  });

  it('a paid checkout (a membership now) and an ended one are stable no-ops', () => {
    for (const status of ['active', 'past_due', 'ending'] as const)
      expect(expire(member(status), NOW + 3 * HOUR).outcome).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_CHECKOUT_PAID' });
    for (const status of ['ended', 'rejected'] as const)
      expect(expire(member(status, { endedAt: NOW }), NOW + 3 * HOUR).outcome).toMatchObject({
        status: 'noop',
        code: 'MEMBERSHIP_ALREADY_ENDED',
      });
  });

  it("Stripe's own expiry of the incomplete subscription ends the application as checkout_expired", () => {
    expect(observeSubscription(member('applied'), obs('incomplete_expired'), { cid }, NOW)).toMatchObject({
      kind: 'end',
      reason: 'checkout_expired',
      actor: 'stripe',
      stopped: 'ended',
    });
  });
});

describe('observeSubscription (decided on what Stripe says now, never on event order)', () => {
  it('active activates an applied membership with its first key; seen again it changes nothing', () => {
    const d = observeSubscription(member('applied'), obs('active'), { cid }, NOW);
    if (d.kind !== 'step' || d.outcome.status !== 'applied') throw new Error('expected a step');
    expect(d.outcome).toMatchObject({ code: 'MEMBERSHIP_ACTIVATED', state: { status: 'active', keyId: 'key_m1_1', keySeq: 1 } });
    const again = observeSubscription(d.outcome.state, obs('active'), { cid }, NOW);
    expect(again).toMatchObject({ kind: 'step', outcome: { status: 'noop', code: 'SUBSCRIPTION_STATUS_UNCHANGED' } });
  });

  it('a payment failure reported while Stripe says active changes nothing; past_due moves an active member, once', () => {
    expect(observeSubscription(member('active'), obs('active'), { cid }, NOW)).toMatchObject({ outcome: { status: 'noop' } });
    const d = observeSubscription(member('active'), obs('past_due'), { cid }, NOW);
    if (d.kind !== 'step' || d.outcome.status !== 'applied') throw new Error('expected a step');
    expect(d.outcome.state).toMatchObject({ status: 'past_due', pastDueSince: NOW });
    expect(observeSubscription(d.outcome.state, obs('past_due'), { cid }, NOW + 5)).toMatchObject({
      outcome: { status: 'noop', code: 'MEMBERSHIP_ALREADY_PAST_DUE' },
    });
  });

  it('paid again after a suspension: a fresh key (n + 1) with the same credential', () => {
    const m = member('past_due', { suspended: true, pastDueSince: NOW - 10, credential: { type: 'pin', digest: 'd1' } });
    const d = observeSubscription(m, obs('active'), { cid }, NOW);
    if (d.kind !== 'step' || d.outcome.status !== 'applied') throw new Error('expected a step');
    expect(d.outcome.state).toMatchObject({
      status: 'active',
      suspended: false,
      pastDueSince: null,
      keyId: 'key_m1_2',
      credential: { digest: 'd1' },
    });
    expect(d.outcome.emits[0]).toEqual({ type: 'issue_key', keyId: 'key_m1_2' });
  });

  it('a canceled subscription is handed to the one ending verb with the reason its state implies', () => {
    expect(observeSubscription(member('ending', { endReason: 'plan_retired' }), obs('canceled'), { cid }, NOW)).toMatchObject({
      kind: 'end',
      reason: 'plan_retired',
    });
    expect(observeSubscription(member('past_due'), obs('canceled', { canceledFor: 'payment_failed' }), { cid }, NOW)).toMatchObject({
      kind: 'end',
      reason: 'payment_failed_final',
    });
    expect(observeSubscription(member('active'), obs('canceled'), { cid }, NOW)).toMatchObject({
      kind: 'end',
      reason: 'force_cancel',
      actor: 'stripe',
    });
    // Stripe expired the unpaid checkout itself (23 hours): the checkout's end; a plain cancel is a rejection
    expect(observeSubscription(member('applied'), obs('incomplete_expired'), { cid }, NOW)).toMatchObject({
      kind: 'end',
      reason: 'checkout_expired',
    });
    expect(observeSubscription(member('applied'), obs('canceled'), { cid }, NOW)).toMatchObject({
      kind: 'end',
      reason: 'application_rejected',
    });
  });

  it('another subscription is refused; a final membership ignores Stripe', () => {
    expect(observeSubscription(member('active'), obs('active', { subscriptionId: 'sub_2' }), { cid }, NOW)).toMatchObject({
      outcome: { status: 'refused', code: 'SUBSCRIPTION_MISMATCH' },
    });
    expect(observeSubscription(member('ended'), obs('active'), { cid }, NOW)).toMatchObject({
      outcome: { status: 'noop', code: 'MEMBERSHIP_ALREADY_ENDED' },
    });
  });
});

describe('suspendAccess', () => {
  it('waits for the whole grace, then revokes the key with payment_failed; a second time is a noop', () => {
    const m = member('past_due', { pastDueSince: NOW });
    expect(suspendAccess(m, plan, { cid }, NOW + 3_599_999)).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_GRACE_NOT_OVER' });
    const o = suspendAccess(m, plan, { cid }, NOW + 3_600_000);
    if (o.status !== 'applied') throw new Error('expected applied');
    expect(o.state).toMatchObject({ status: 'past_due', suspended: true, version: 6 });
    expect(o.emits[0]).toEqual({ type: 'revoke_key', keyId: 'key_m1_1', reason: 'payment_failed' });
    expect(suspendAccess(o.state, plan, { cid }, NOW + 9e9)).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_ACCESS_ALREADY_SUSPENDED' });
    expect(suspendAccess(member('active'), plan, { cid }, NOW)).toMatchObject({ status: 'noop', code: 'MEMBERSHIP_NOT_PAST_DUE' });
  });
});
