import { KEY_TRANSITIONS, type KeyEvent } from './key-states.js';
import { MEMBERSHIP_TRANSITIONS, type MembershipEvent } from './membership-states.js';
import { MODE_REQUEST_TRANSITIONS } from './mode-requests.js';
import {
  PAYMENT_TRANSITIONS,
  REFUND_TRANSITIONS,
  STAY_TRANSITIONS,
  type PaymentEvent,
  type RefundEvent,
  type StayEvent,
} from './stay-states.js';
import { UPLINK_KEY_ROTATION_TRANSITIONS } from './uplink-keys.js';
import { WALK_IN_TRANSITIONS, type WalkInEvent } from './walk-ins.js';

/**
 * I4 "one verb, one writer", as data: which verb may make which move of each
 * status column, and which verbs may change each money column and billing
 * flag. A verb is the name its transaction gives the database
 * (`tobira.verb`, set by `enterVerb` / `withVerb`). The cloud copies these
 * rows into `verb_moves` and `verb_columns` at every start (`migrate` →
 * `syncVerbGuards`), and the `verb_guard` trigger checks every insert and
 * update of a guarded table against them, so the state tables below stay
 * the only source and the database cannot disagree with them.
 *
 * THE place to change who writes what:
 * - a new move of an event: its row in the state table (`*-states.ts`);
 *   every verb listed for the event below may then make it;
 * - a new verb raising an event: its name in the event's list below;
 * - a new event: the state table, and its verbs here (the `Record` makes
 *   the type checker ask);
 * - a verb writing a money column or flag: its name in `VALUE_GUARDS`.
 * A new guarded table also needs its trigger (`<table>_verb_guard`, see the
 * verb-guard migration); the agreement test names any table without one.
 */
export interface GuardMove {
  readonly verb: string;
  /** `null` is the row's insert. */
  readonly from: string | null;
  readonly to: string;
}

export interface StatusGuard {
  readonly table: string;
  readonly column: string;
  readonly moves: readonly GuardMove[];
}

export interface ValueGuard {
  readonly table: string;
  readonly column: string;
  /** The verbs that may change it once the row exists; empty: nobody (set at insert, never rewritten). */
  readonly verbs: readonly string[];
}

interface TableRow<E extends string> {
  readonly from: readonly (string | null)[];
  readonly event: E;
  readonly to: string;
}

/** Several events one verb decides in a row and writes as ONE update (check-out of a stay never checked in). */
interface Chain<E extends string> {
  readonly events: readonly E[];
  readonly verbs: readonly string[];
}

/** Every (verb, from, to) a state table allows, given the verbs that raise each event. */
export function movesOf<E extends string>(
  rows: readonly TableRow<E>[],
  verbsOf: Readonly<Record<E, readonly string[]>>,
  chains: readonly Chain<E>[] = [],
): GuardMove[] {
  const moves: GuardMove[] = rows.flatMap((r) => r.from.flatMap((from) => verbsOf[r.event].map((verb) => ({ verb, from, to: r.to }))));
  for (const c of chains) {
    const starts = new Set(rows.filter((r) => r.event === c.events[0]).flatMap((r) => r.from));
    for (const start of starts) {
      let at: string | null | undefined = start;
      for (const e of c.events) {
        const from: string | null | undefined = at;
        at = from === undefined ? undefined : rows.find((r) => r.event === e && r.from.includes(from))?.to;
      }
      if (at !== undefined && at !== null) for (const verb of c.verbs) moves.push({ verb, from: start, to: at });
    }
  }
  return dedupe(moves);
}

function dedupe(moves: readonly GuardMove[]): GuardMove[] {
  const seen = new Map<string, GuardMove>();
  for (const m of moves) seen.set(`${m.verb}\u0000${m.from ?? ''}\u0000${m.from === null}\u0000${m.to}`, m);
  return [...seen.values()];
}

const KEY_VERBS: Record<KeyEvent, readonly string[]> = {
  issue: ['issueKey'],
  grant_applied: ['recordGatewayReport'],
  grant_rejected: ['recordGatewayReport'],
  revoke: ['revokeKey'],
  revoke_applied: ['recordGatewayReport'],
  validity_ended: ['expireKey'],
  used_at_door: ['recordKeyUse'],
};

const STAY_VERBS: Record<StayEvent, readonly string[]> = {
  book: ['bookStay'],
  payment_settled: ['settlePayment'],
  // settlePayment on a failed intent; failStay when no intent could be created at booking
  payment_failed: ['settlePayment', 'failStay'],
  hold_expired: ['expireStay'],
  check_in: ['checkInStay'],
  check_out: ['checkOutStay', 'endStay'],
  // cancelStay; the confirmation whose gate refused the key (settlePayment); a full refund made in Stripe (recordRefund)
  cancel: ['cancelStay', 'settlePayment', 'recordRefund'],
};

const PAYMENT_VERBS: Record<PaymentEvent, readonly string[]> = {
  processing: ['settlePayment'],
  succeeded: ['settlePayment'],
  failed: ['settlePayment'],
  // a cancellation's refund, and money that arrived for a stay that had ended
  // a stay that ended undelivered (failStay, expireStay) gives back what was paid
  refund_requested: ['cancelStay', 'settlePayment', 'failStay', 'expireStay', 'recordRefund'],
  refunded_full: ['recordRefund'],
  refunded_partial: ['recordRefund'],
};

const REFUND_VERBS: Record<RefundEvent, readonly string[]> = {
  // retryRefund: an operator's retry of a refund Stripe failed for good, a new attempt with a new key
  queue: ['cancelStay', 'settlePayment', 'failStay', 'expireStay', 'recordRefund', 'retryRefund'],
  refund_made: ['recordRefund'],
  refund_failed: ['noteRefundError'],
};

const WALK_IN_VERBS: Record<WalkInEvent, readonly string[]> = {
  create: ['createWalkIn'],
  // the webhook; the hold sweep when the intent had succeeded before it could be cancelled
  payment_settled: ['settleWalkIn', 'expireWalkIn'],
  // the webhook; createWalkIn's own failure when Stripe was unreachable; the hold sweep when the intent it
  // re-read had succeeded but a gate no longer holds (no key, refunded)
  payment_cancelled: ['settleWalkIn', 'failWalkIn', 'expireWalkIn'],
  hold_expired: ['expireWalkIn'],
  cancel: ['cancelWalkIn'],
};

const MEMBERSHIP_VERBS: Record<MembershipEvent, readonly string[]> = {
  apply: ['applyMembership'],
  approve: ['approveMembership'],
  invoice_paid: ['observeSubscription'],
  payment_failed: ['observeSubscription'],
  // every end is endMembership's (endMembershipRow names it): ending, ended and rejected have one writer
  period_ended: ['endMembership'],
  self_cancel: ['endMembership'],
  force_cancel: ['endMembership'],
  application_rejected: ['endMembership'],
  plan_retired: ['endMembership'],
  payment_failed_final: ['endMembership'],
  checkout_expired: ['endMembership'],
};

const UPLINK_KEY_ROTATION_VERBS: Record<(typeof UPLINK_KEY_ROTATION_TRANSITIONS)[number]['event'], readonly string[]> = {
  rotate: ['rotateUplinkKey'],
  'proposal verified': ['applyUplinkKeyProposal'],
  'proposal with a bad new-key proof': ['applyUplinkKeyProposal'],
  'proposal with a kid used before': ['applyUplinkKeyProposal'],
  'first uplink under the new key': ['activateUplinkKey'],
};

/** Every guarded status column with the moves its verbs may make. */
export const STATUS_GUARDS: readonly StatusGuard[] = [
  { table: 'keys', column: 'status', moves: movesOf(KEY_TRANSITIONS, KEY_VERBS) },
  {
    table: 'stays',
    column: 'status',
    // check-out of a confirmed stay never checked in: check_in then check_out, one update
    moves: movesOf(STAY_TRANSITIONS, STAY_VERBS, [{ events: ['check_in', 'check_out'], verbs: ['checkOutStay', 'endStay'] }]),
  },
  {
    table: 'payments',
    column: 'status',
    // the table starts at requires_payment: the booking inserts the row with its idempotency key
    moves: dedupe([{ verb: 'bookStay', from: null, to: 'requires_payment' }, ...movesOf(PAYMENT_TRANSITIONS, PAYMENT_VERBS)]),
  },
  {
    table: 'refunds',
    column: 'status',
    // a refund made in Stripe directly is inserted at the status Stripe gives it, and ours follow Stripe's (recordRefund)
    moves: dedupe([
      ...movesOf(REFUND_TRANSITIONS, REFUND_VERBS),
      ...(['pending', 'succeeded', 'failed'] as const).map((to) => ({ verb: 'recordRefund', from: null, to })),
      { verb: 'recordRefund', from: 'pending', to: 'failed' },
      { verb: 'recordRefund', from: 'succeeded', to: 'failed' },
    ]),
  },
  { table: 'walk_ins', column: 'status', moves: movesOf(WALK_IN_TRANSITIONS, WALK_IN_VERBS) },
  { table: 'memberships', column: 'status', moves: movesOf(MEMBERSHIP_TRANSITIONS, MEMBERSHIP_VERBS) },
  {
    table: 'mode_requests',
    column: 'status',
    moves: dedupe(MODE_REQUEST_TRANSITIONS.map((r) => ({ verb: r.verb, from: r.from, to: r.to }))),
  },
  {
    table: 'gateway_uplink_key_rotations',
    column: 'status',
    moves: movesOf(
      UPLINK_KEY_ROTATION_TRANSITIONS.map((r) => ({ from: [r.from === '—' ? null : r.from], event: r.event, to: r.to })),
      UPLINK_KEY_ROTATION_VERBS,
    ),
  },
];

/** Every guarded money column and billing flag with the verbs that may change it. */
export const VALUE_GUARDS: readonly ValueGuard[] = [
  { table: 'stays', column: 'amount', verbs: [] },
  { table: 'stays', column: 'deposit', verbs: [] },
  { table: 'payments', column: 'amount', verbs: [] },
  { table: 'payments', column: 'amount_received', verbs: ['settlePayment'] },
  { table: 'payments', column: 'amount_refunded', verbs: ['recordRefund'] },
  { table: 'refunds', column: 'amount', verbs: [] },
  { table: 'walk_ins', column: 'amount', verbs: [] },
  // cancelWalkIn: a pending pass whose money landed before its webhook was read, recorded as it is refunded
  { table: 'walk_ins', column: 'amount_received', verbs: ['settleWalkIn', 'expireWalkIn', 'cancelWalkIn'] },
  { table: 'walk_ins', column: 'quota_returned', verbs: ['failWalkIn', 'settleWalkIn', 'expireWalkIn', 'cancelWalkIn'] },
  // the checkout's Stripe objects, recorded once by the approval
  { table: 'memberships', column: 'stripe_customer_id', verbs: ['approveMembership'] },
  { table: 'memberships', column: 'subscription_id', verbs: ['approveMembership'] },
  { table: 'memberships', column: 'cancel_at_period_end', verbs: ['endMembership'] },
  // set by the grace sweep, cleared when the money came back
  { table: 'memberships', column: 'suspended', verbs: ['suspendAccess', 'observeSubscription'] },
];
