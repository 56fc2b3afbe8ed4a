import type { OutcomeCode } from '@tobira/shared';

/**
 * The stay and payment state machines, as literal tables. The
 * same tables are in docs/state-machines.md; a test parses the document and
 * checks that both agree. Verbs consult them through the `*Of` helpers.
 */
export const STAY_STATUSES = ['pending', 'confirmed', 'checked_in', 'checked_out', 'failed', 'expired', 'cancelled'] as const;
export type StayStatus = (typeof STAY_STATUSES)[number];

export const STAY_EVENTS = ['book', 'payment_settled', 'payment_failed', 'hold_expired', 'check_in', 'check_out', 'cancel'] as const;
export type StayEvent = (typeof STAY_EVENTS)[number];

export interface StayTransitionRow {
  /** `null` is "no stay yet". */
  readonly from: readonly (StayStatus | null)[];
  readonly event: StayEvent;
  readonly to: StayStatus;
  readonly code: OutcomeCode;
}
export interface StayNoopRow {
  readonly from: readonly StayStatus[];
  readonly event: StayEvent;
  readonly code: OutcomeCode;
}

export const STAY_TRANSITIONS: readonly StayTransitionRow[] = [
  { from: [null], event: 'book', to: 'pending', code: 'STAY_BOOKED' },
  { from: ['pending'], event: 'payment_settled', to: 'confirmed', code: 'STAY_CONFIRMED' },
  { from: ['pending'], event: 'payment_failed', to: 'failed', code: 'STAY_FAILED' },
  { from: ['pending'], event: 'hold_expired', to: 'expired', code: 'STAY_EXPIRED' },
  { from: ['confirmed'], event: 'check_in', to: 'checked_in', code: 'STAY_CHECKED_IN' },
  { from: ['checked_in'], event: 'check_out', to: 'checked_out', code: 'STAY_CHECKED_OUT' },
  // a pending stay can be cancelled too (the guest changed their mind, the desk, a membership that ended): its intents are cancelled
  { from: ['pending', 'confirmed', 'checked_in'], event: 'cancel', to: 'cancelled', code: 'STAY_CANCELLED' },
];

/** Events answered with `noop` and a code from these states (nothing is written). */
export const STAY_NOOPS: readonly StayNoopRow[] = [
  { from: ['confirmed', 'checked_in', 'checked_out'], event: 'payment_settled', code: 'STAY_ALREADY_CONFIRMED' },
  // ranked, not arrival order: a failure reported after the money settled changes nothing
  { from: ['confirmed', 'checked_in', 'checked_out', 'cancelled'], event: 'payment_failed', code: 'PAYMENT_FAILURE_IGNORED' },
  { from: ['failed', 'expired'], event: 'payment_failed', code: 'STAY_ALREADY_ENDED' },
  { from: ['confirmed', 'checked_in', 'checked_out', 'failed', 'expired', 'cancelled'], event: 'hold_expired', code: 'STAY_NOT_PENDING' },
  { from: ['checked_in', 'checked_out'], event: 'check_in', code: 'STAY_ALREADY_CHECKED_IN' },
  { from: ['checked_out'], event: 'check_out', code: 'STAY_ALREADY_CHECKED_OUT' },
  { from: ['cancelled'], event: 'cancel', code: 'STAY_ALREADY_CANCELLED' },
  { from: ['checked_out', 'failed', 'expired'], event: 'cancel', code: 'STAY_ALREADY_ENDED' },
];

export function stayTransitionOf(from: StayStatus | null, event: StayEvent): StayTransitionRow | undefined {
  return STAY_TRANSITIONS.find((r) => r.event === event && r.from.includes(from));
}
export function stayNoopOf(from: StayStatus, event: StayEvent): StayNoopRow | undefined {
  return STAY_NOOPS.find((r) => r.event === event && r.from.includes(from));
}

/** A stay that holds its room's nights (the `stay_nights` rows exist exactly for these). */
export const holdsNights = (s: StayStatus): boolean => s === 'pending' || s === 'confirmed' || s === 'checked_in';

// ---------------------------------------------------------------- payment

export const PAYMENT_STATUSES = [
  'requires_payment',
  'processing',
  'succeeded',
  'failed',
  'refund_pending',
  'refunded',
  'partially_refunded',
] as const;
export type PaymentStatus = (typeof PAYMENT_STATUSES)[number];

export const PAYMENT_EVENTS = ['processing', 'succeeded', 'failed', 'refund_requested', 'refunded_full', 'refunded_partial'] as const;
export type PaymentEvent = (typeof PAYMENT_EVENTS)[number];

export interface PaymentTransitionRow {
  readonly from: readonly PaymentStatus[];
  readonly event: PaymentEvent;
  readonly to: PaymentStatus;
  readonly code: OutcomeCode;
}
export interface PaymentNoopRow {
  readonly from: readonly PaymentStatus[];
  readonly event: PaymentEvent;
  readonly code: OutcomeCode;
}

/** A payment row is created `requires_payment` by the booking (with its idempotency key); the table starts there. */
export const PAYMENT_TRANSITIONS: readonly PaymentTransitionRow[] = [
  { from: ['requires_payment'], event: 'processing', to: 'processing', code: 'PAYMENT_PROCESSING' },
  { from: ['requires_payment', 'processing'], event: 'succeeded', to: 'succeeded', code: 'PAYMENT_SUCCEEDED' },
  // money that arrived after the ledger gave up is still money: the ledger follows Stripe (I3), the stay side refunds it
  { from: ['failed'], event: 'succeeded', to: 'succeeded', code: 'PAYMENT_SUCCEEDED_LATE' },
  { from: ['requires_payment', 'processing'], event: 'failed', to: 'failed', code: 'PAYMENT_FAILED' },
  // what a refund made in Stripe directly left on the charge can still be refunded by a verb here
  { from: ['succeeded', 'partially_refunded'], event: 'refund_requested', to: 'refund_pending', code: 'REFUND_QUEUED' },
  // refunds from any source are recorded, ours (refund_pending) and those made in Stripe directly (from succeeded)
  { from: ['succeeded', 'refund_pending', 'partially_refunded'], event: 'refunded_full', to: 'refunded', code: 'PAYMENT_REFUNDED' },
  {
    from: ['succeeded', 'refund_pending', 'partially_refunded'],
    event: 'refunded_partial',
    to: 'partially_refunded',
    code: 'PAYMENT_PARTIALLY_REFUNDED',
  },
];

/**
 * Noops by rank: requires_payment < processing < failed < succeeded (and
 * the refund states after succeeded). An observation that ranks at or below
 * the current status changes nothing, whatever order the events arrived in.
 */
export const PAYMENT_NOOPS: readonly PaymentNoopRow[] = [
  {
    from: ['processing', 'succeeded', 'failed', 'refund_pending', 'refunded', 'partially_refunded'],
    event: 'processing',
    code: 'PAYMENT_STATUS_STALE',
  },
  { from: ['succeeded', 'refund_pending', 'refunded', 'partially_refunded'], event: 'succeeded', code: 'PAYMENT_ALREADY_SUCCEEDED' },
  { from: ['succeeded', 'refund_pending', 'refunded', 'partially_refunded'], event: 'failed', code: 'PAYMENT_FAILURE_IGNORED' },
  { from: ['failed'], event: 'failed', code: 'PAYMENT_ALREADY_FAILED' },
  { from: ['refund_pending', 'refunded'], event: 'refund_requested', code: 'REFUND_ALREADY_REQUESTED' },
  { from: ['refunded'], event: 'refunded_full', code: 'REFUND_ALREADY_RECORDED' },
  { from: ['refunded'], event: 'refunded_partial', code: 'REFUND_ALREADY_RECORDED' },
];

export function paymentTransitionOf(from: PaymentStatus, event: PaymentEvent): PaymentTransitionRow | undefined {
  return PAYMENT_TRANSITIONS.find((r) => r.event === event && r.from.includes(from));
}
export function paymentNoopOf(from: PaymentStatus, event: PaymentEvent): PaymentNoopRow | undefined {
  return PAYMENT_NOOPS.find((r) => r.event === event && r.from.includes(from));
}

/** Money the guest has paid and not had back is held in these states. */
export const holdsMoney = (s: PaymentStatus): boolean => s === 'succeeded' || s === 'refund_pending' || s === 'partially_refunded';

// ---------------------------------------------------------------- refund

/** A refund row (`refunds`): queued with its idempotency key, then made by Stripe or given up on. */
export const REFUND_STATUSES = ['pending', 'succeeded', 'failed'] as const;
export type RefundStatus = (typeof REFUND_STATUSES)[number];

export const REFUND_EVENTS = ['queue', 'refund_made', 'refund_failed'] as const;
export type RefundEvent = (typeof REFUND_EVENTS)[number];

export interface RefundTransitionRow {
  /** `null` is "no refund yet". */
  readonly from: readonly (RefundStatus | null)[];
  readonly event: RefundEvent;
  readonly to: RefundStatus;
}

export const REFUND_TRANSITIONS: readonly RefundTransitionRow[] = [
  { from: [null], event: 'queue', to: 'pending' },
  { from: ['pending'], event: 'refund_made', to: 'succeeded' },
  // a permanent error of the refund call: the money stays held and an operator sees the row
  { from: ['pending'], event: 'refund_failed', to: 'failed' },
];
