import type { OutcomeCode } from '@tobira/shared';

/**
 * The membership state machine, as a literal table. The same
 * table is in docs/state-machines.md; a test parses the document and checks
 * that both agree. `ending`, `ended` and `rejected` are reached only through
 * `endMembership` (its reasons are events here), and the database's verb
 * guard holds that line too (`verb-guards.ts` gives those moves to
 * `endMembership` alone).
 */
export const MEMBERSHIP_STATUSES = ['applied', 'active', 'past_due', 'ending', 'ended', 'rejected'] as const;
export type MembershipStatus = (typeof MEMBERSHIP_STATUSES)[number];

/** Why a membership ends: one parameter of one verb. */
export const END_REASONS = [
  'self_cancel',
  'force_cancel',
  'application_rejected',
  'plan_retired',
  'payment_failed_final',
  // an approved application whose first invoice was not paid by the checkout deadline
  'checkout_expired',
] as const;
export type EndReason = (typeof END_REASONS)[number];

export const MEMBERSHIP_EVENTS = ['apply', 'approve', 'invoice_paid', 'payment_failed', 'period_ended', ...END_REASONS] as const;
export type MembershipEvent = (typeof MEMBERSHIP_EVENTS)[number];

export interface MembershipTransitionRow {
  /** `null` is "no membership yet". */
  readonly from: readonly (MembershipStatus | null)[];
  readonly event: MembershipEvent;
  readonly to: MembershipStatus;
  readonly code: OutcomeCode;
}
export interface MembershipNoopRow {
  readonly from: readonly MembershipStatus[];
  readonly event: MembershipEvent;
  readonly code: OutcomeCode;
}

export const MEMBERSHIP_TRANSITIONS: readonly MembershipTransitionRow[] = [
  { from: [null], event: 'apply', to: 'applied', code: 'MEMBERSHIP_APPLIED' },
  // approval starts the checkout (the subscription and its first invoice); the status waits for the money
  { from: ['applied'], event: 'approve', to: 'applied', code: 'MEMBERSHIP_APPROVED' },
  { from: ['applied'], event: 'invoice_paid', to: 'active', code: 'MEMBERSHIP_ACTIVATED' },
  { from: ['active'], event: 'invoice_paid', to: 'active', code: 'MEMBERSHIP_RENEWED' },
  { from: ['past_due'], event: 'invoice_paid', to: 'active', code: 'MEMBERSHIP_PAYMENT_RECOVERED' },
  { from: ['active'], event: 'payment_failed', to: 'past_due', code: 'MEMBERSHIP_PAST_DUE' },
  // Stripe's default_incomplete keeps an unpaid first invoice `incomplete`: `past_due` means the first period was
  // paid and a renewal failed, the activation's own event lost or overtaken
  { from: ['applied'], event: 'payment_failed', to: 'past_due', code: 'MEMBERSHIP_ACTIVATED_PAST_DUE' },
  { from: ['active', 'past_due'], event: 'self_cancel', to: 'ending', code: 'MEMBERSHIP_ENDING' },
  { from: ['active', 'past_due'], event: 'plan_retired', to: 'ending', code: 'MEMBERSHIP_ENDING' },
  { from: ['ending'], event: 'period_ended', to: 'ended', code: 'MEMBERSHIP_ENDED' },
  { from: ['active', 'past_due', 'ending'], event: 'force_cancel', to: 'ended', code: 'MEMBERSHIP_ENDED' },
  { from: ['past_due'], event: 'payment_failed_final', to: 'ended', code: 'MEMBERSHIP_ENDED' },
  { from: ['applied'], event: 'application_rejected', to: 'rejected', code: 'MEMBERSHIP_REJECTED' },
  { from: ['applied'], event: 'plan_retired', to: 'rejected', code: 'MEMBERSHIP_REJECTED' },
  { from: ['applied'], event: 'checkout_expired', to: 'rejected', code: 'MEMBERSHIP_CHECKOUT_EXPIRED' },
];

/** Events answered with `noop` and a code from these states (nothing is written). */
export const MEMBERSHIP_NOOPS: readonly MembershipNoopRow[] = [
  { from: ['active', 'past_due', 'ending'], event: 'approve', code: 'MEMBERSHIP_ALREADY_APPROVED' },
  { from: ['ending'], event: 'invoice_paid', code: 'MEMBERSHIP_ALREADY_ENDING' },
  { from: ['past_due'], event: 'payment_failed', code: 'MEMBERSHIP_ALREADY_PAST_DUE' },
  { from: ['ending'], event: 'payment_failed', code: 'MEMBERSHIP_ALREADY_ENDING' },
  { from: ['ending'], event: 'self_cancel', code: 'MEMBERSHIP_ALREADY_ENDING' },
  { from: ['ending'], event: 'plan_retired', code: 'MEMBERSHIP_ALREADY_ENDING' },
  {
    from: ['ended', 'rejected'],
    event: 'approve',
    code: 'MEMBERSHIP_ALREADY_ENDED',
  },
  { from: ['ended', 'rejected'], event: 'invoice_paid', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'payment_failed', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'period_ended', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'self_cancel', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'force_cancel', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'application_rejected', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'plan_retired', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['ended', 'rejected'], event: 'payment_failed_final', code: 'MEMBERSHIP_ALREADY_ENDED' },
  { from: ['active', 'past_due', 'ending'], event: 'checkout_expired', code: 'MEMBERSHIP_CHECKOUT_PAID' },
  { from: ['ended', 'rejected'], event: 'checkout_expired', code: 'MEMBERSHIP_ALREADY_ENDED' },
];

export function membershipTransitionOf(from: MembershipStatus | null, event: MembershipEvent): MembershipTransitionRow | undefined {
  return MEMBERSHIP_TRANSITIONS.find((r) => r.event === event && r.from.includes(from));
}
export function membershipNoopOf(from: MembershipStatus, event: MembershipEvent): MembershipNoopRow | undefined {
  return MEMBERSHIP_NOOPS.find((r) => r.event === event && r.from.includes(from));
}

/** A membership whose member holds door access (unless suspended past the grace). */
export const grantsAccess = (s: MembershipStatus): boolean => s === 'active' || s === 'past_due' || s === 'ending';
/**
 * The one rule of "gives door access now", for every gate: a living status
 * and access not suspended. Suspension outlives a self-cancel (`ending`
 * keeps the flag), so `ending` is no way back past a gate.
 */
export const givesDoorAccess = (m: { readonly status: MembershipStatus; readonly suspended: boolean }): boolean =>
  grantsAccess(m.status) && !m.suspended;
/** Nothing more happens to these. */
export const isFinal = (s: MembershipStatus): boolean => s === 'ended' || s === 'rejected';
