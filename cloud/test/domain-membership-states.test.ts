import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  END_REASONS,
  MEMBERSHIP_EVENTS,
  MEMBERSHIP_STATUSES,
  givesDoorAccess,
  grantsAccess,
  isFinal,
  membershipNoopOf,
  membershipTransitionOf,
  type MembershipStatus,
} from '../src/domain/membership-states.js';

/**
 * The membership state machine as rules: who holds door access, what is final, and that the
 * lookups answer one move (or one no-op) per state and event.
 */
const status = fc.constantFrom(...MEMBERSHIP_STATUSES);
const event = fc.constantFrom(...MEMBERSHIP_EVENTS);

describe('grantsAccess (the statuses whose member holds door access)', () => {
  it.each([
    ['applied', false, 'an application is not paid yet'],
    ['active', true, 'the period is paid'],
    ['past_due', true, 'a failed renewal keeps access for the grace'],
    ['ending', true, 'a self-cancel keeps access to the period end'],
    ['ended', false, 'an ended membership opens nothing'],
    ['rejected', false, 'a rejected application never opened anything'],
  ] as const)('%s → %s (%s)', (s, expected, _why) => {
    expect(grantsAccess(s)).toBe(expected);
  });

  it('no final status grants access', () => {
    for (const s of MEMBERSHIP_STATUSES) if (isFinal(s)) expect(grantsAccess(s)).toBe(false);
  });
});

describe('givesDoorAccess (the one gate rule: a living status and access not suspended)', () => {
  it.each([
    ['active', false, true],
    ['active', true, false],
    ['past_due', false, true],
    // past the grace the key was revoked: the status stays past_due but the door stays shut
    ['past_due', true, false],
    ['ending', false, true],
    // suspension outlives a self-cancel: ending is no way back past a gate
    ['ending', true, false],
    ['applied', false, false],
    ['applied', true, false],
    ['ended', false, false],
    ['ended', true, false],
    ['rejected', false, false],
    ['rejected', true, false],
  ] as const)('%s, suspended %s → %s', (s, suspended, expected) => {
    expect(givesDoorAccess({ status: s, suspended })).toBe(expected);
  });

  it('a suspended member is never let in, whatever the status', () => {
    fc.assert(fc.property(status, (s) => !givesDoorAccess({ status: s, suspended: true })));
  });
});

describe('isFinal (nothing more happens to these)', () => {
  it.each([
    ['applied', false],
    ['active', false],
    ['past_due', false],
    ['ending', false],
    ['ended', true],
    ['rejected', true],
  ] as const)('%s → %s', (s, expected) => {
    expect(isFinal(s)).toBe(expected);
  });

  it('no event moves a final membership; every event but apply answers MEMBERSHIP_ALREADY_ENDED', () => {
    fc.assert(
      fc.property(
        fc.constantFrom<MembershipStatus>('ended', 'rejected'),
        event.filter((e) => e !== 'apply'),
        (s, e) => {
          expect(membershipTransitionOf(s, e)).toBeUndefined();
          expect(membershipNoopOf(s, e)?.code).toBe('MEMBERSHIP_ALREADY_ENDED');
        },
      ),
    );
  });
});

describe('membershipTransitionOf / membershipNoopOf', () => {
  it('a membership is born only by apply, from nothing, as applied', () => {
    expect(membershipTransitionOf(null, 'apply')).toMatchObject({ to: 'applied', code: 'MEMBERSHIP_APPLIED' });
    for (const e of MEMBERSHIP_EVENTS.filter((x) => x !== 'apply')) expect(membershipTransitionOf(null, e)).toBeUndefined();
    for (const s of MEMBERSHIP_STATUSES) expect(membershipTransitionOf(s, 'apply')).toBeUndefined();
  });

  it('answers the row of the asked state and event, never another one', () => {
    fc.assert(
      fc.property(status, event, (s, e) => {
        const t = membershipTransitionOf(s, e);
        if (t) {
          expect(t.event).toBe(e);
          expect(t.from).toContain(s);
        }
        const n = membershipNoopOf(s, e);
        if (n) {
          expect(n.event).toBe(e);
          expect(n.from).toContain(s);
        }
      }),
    );
  });

  it('a state and event is a move or a no-op, never both', () => {
    fc.assert(fc.property(status, event, (s, e) => !(membershipTransitionOf(s, e) && membershipNoopOf(s, e))));
  });

  it('ending, ended and rejected are reached only by an end reason or the period end (the one ending verb)', () => {
    const ends = new Set<string>([...END_REASONS, 'period_ended']);
    fc.assert(
      fc.property(status, event, (s, e) => {
        const t = membershipTransitionOf(s, e);
        if (t && (t.to === 'ending' || isFinal(t.to))) expect(ends.has(e)).toBe(true);
      }),
    );
  });

  it.each([
    ['applied', 'approve', 'applied', 'MEMBERSHIP_APPROVED'],
    ['applied', 'invoice_paid', 'active', 'MEMBERSHIP_ACTIVATED'],
    ['active', 'invoice_paid', 'active', 'MEMBERSHIP_RENEWED'],
    ['past_due', 'invoice_paid', 'active', 'MEMBERSHIP_PAYMENT_RECOVERED'],
    ['active', 'payment_failed', 'past_due', 'MEMBERSHIP_PAST_DUE'],
    ['applied', 'payment_failed', 'past_due', 'MEMBERSHIP_ACTIVATED_PAST_DUE'],
    ['past_due', 'self_cancel', 'ending', 'MEMBERSHIP_ENDING'],
    ['ending', 'period_ended', 'ended', 'MEMBERSHIP_ENDED'],
    ['ending', 'force_cancel', 'ended', 'MEMBERSHIP_ENDED'],
    ['past_due', 'payment_failed_final', 'ended', 'MEMBERSHIP_ENDED'],
    ['applied', 'plan_retired', 'rejected', 'MEMBERSHIP_REJECTED'],
    ['active', 'plan_retired', 'ending', 'MEMBERSHIP_ENDING'],
    ['applied', 'checkout_expired', 'rejected', 'MEMBERSHIP_CHECKOUT_EXPIRED'],
  ] as const)('%s --%s--> %s (%s)', (from, e, to, code) => {
    expect(membershipTransitionOf(from, e)).toMatchObject({ to, code });
  });

  it.each([
    ['ending', 'invoice_paid', 'MEMBERSHIP_ALREADY_ENDING'],
    ['past_due', 'payment_failed', 'MEMBERSHIP_ALREADY_PAST_DUE'],
    ['active', 'approve', 'MEMBERSHIP_ALREADY_APPROVED'],
    ['ending', 'checkout_expired', 'MEMBERSHIP_CHECKOUT_PAID'],
  ] as const)('%s --%s--> noop %s', (from, e, code) => {
    expect(membershipNoopOf(from, e)?.code).toBe(code);
    expect(membershipTransitionOf(from, e)).toBeUndefined();
  });
});
