import { applied, noop, refused, type CorrelationId, type Outcome } from '@tobira/shared';
import { PAYMENT_TRANSITIONS, paymentNoopOf, paymentTransitionOf, type PaymentEvent, type PaymentStatus } from './stay-states.js';
import type { PaymentPurpose } from './stays.js';

/** One charge in the ledger: a row per (stay, purpose), created before any call to Stripe. */
export interface Payment {
  readonly id: string;
  readonly stayId: string;
  readonly purpose: PaymentPurpose;
  /** minor units */
  readonly amount: number;
  readonly currency: string;
  readonly status: PaymentStatus;
  /** Compare-and-set counter: grows on every write. */
  readonly version: number;
  /** Which PaymentIntent of this payment: part of the idempotency key, grows when a new intent is needed. */
  readonly attempt: number;
  /** `purpose:subjectId:attempt`, stored before the first Stripe call so a retry after a crash reuses it. */
  readonly idempotencyKey: string;
  readonly intentId: string | null;
  readonly clientSecret: string | null;
  readonly amountReceived: number;
  readonly amountRefunded: number;
  readonly lastCode: string;
  readonly cid: CorrelationId;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** The idempotency key of a PaymentIntent. */
export const intentIdempotencyKey = (purpose: PaymentPurpose, subjectId: string, attempt: number): string =>
  `${purpose}:${subjectId}:${attempt}`;

/** The idempotency key of the refund of a payment for a cancellation (one refund per payment and reason of being). */
export const refundIdempotencyKey = (paymentId: string, n: number): string => `refund:${paymentId}:${n}`;

export const INTENT_STATUSES = [
  'requires_payment_method',
  'requires_confirmation',
  'requires_action',
  'processing',
  'requires_capture',
  'canceled',
  'succeeded',
  'other',
] as const;
export type IntentStatus = (typeof INTENT_STATUSES)[number];

/**
 * A PaymentIntent as Stripe reports it now (re-read, or the object of a
 * verified event): the input of `settlePayment`, never a browser's claim.
 */
export interface IntentObservation {
  readonly intentId: string;
  /** Stripe's PaymentIntent status; `other` is one this code does not know (it settles nothing) */
  readonly status: IntentStatus;
  readonly amount: number;
  readonly amountReceived: number;
  readonly currency: string;
  /** Stripe's `last_payment_error` is set: the latest attempt was declined. */
  readonly declined: boolean;
}

export type PaymentEffect = {
  readonly type: 'refund';
  readonly paymentId: string;
  readonly amount: number;
  readonly idempotencyKey: string;
};
export type PaymentOutcome = Outcome<Payment, PaymentEffect>;

/** The event an observation stands for; `undefined` is "nothing settled yet". */
function eventOf(o: IntentObservation): PaymentEvent | undefined {
  switch (o.status) {
    case 'succeeded':
      return 'succeeded';
    case 'processing':
      return 'processing';
    case 'canceled':
      return 'failed';
    case 'requires_payment_method':
      // a decline puts the intent back to requires_payment_method: Stripe means it to be retried with another
      // card, so it is not a failure (the hold decides when the stay stops waiting)
      return undefined;
    case 'requires_confirmation':
    case 'requires_action':
    case 'requires_capture':
    case 'other':
      return undefined;
    default: {
      const never: never = o.status;
      throw new Error(`unhandled PaymentIntent status ${String(never)}`);
    }
  }
}

function step(
  p: Payment,
  event: PaymentEvent,
  patch: Partial<Payment>,
  cid: CorrelationId,
  now: number,
  emits: readonly PaymentEffect[] = [],
): PaymentOutcome {
  const same = paymentNoopOf(p.status, event);
  if (same) return noop(same.code, p);
  const row = paymentTransitionOf(p.status, event);
  if (!row) return refused('INVALID_TRANSITION', `${event} from ${p.status}`);
  return applied(row.code, { ...p, ...patch, status: row.to, version: p.version + 1, lastCode: row.code, cid, updatedAt: now }, emits);
}

/**
 * Settle: moves the payment to what Stripe says the intent is NOW, ranked
 * (requires_payment < processing < failed < succeeded), so the order events
 * arrive in never matters: `payment_failed` after `succeeded` changes
 * nothing. Invariant: an observation whose amount or currency is not the
 * ledger's is refused (`PAYMENT_AMOUNT_MISMATCH`, an alarm), never applied.
 */
export function settlePayment(p: Payment | null, o: IntentObservation, cmd: { readonly cid: CorrelationId }, now: number): PaymentOutcome {
  if (!p) return refused('PAYMENT_NOT_FOUND');
  if (p.intentId !== null && p.intentId !== o.intentId)
    return refused('PAYMENT_INTENT_MISMATCH', `${o.intentId} is not the intent of ${p.id}`);
  if (o.currency !== p.currency || o.amount !== p.amount || (o.status === 'succeeded' && o.amountReceived !== p.amount)) {
    return refused('PAYMENT_AMOUNT_MISMATCH', `ledger ${p.amount} ${p.currency}, Stripe ${o.amount}/${o.amountReceived} ${o.currency}`);
  }
  const event = eventOf(o);
  if (!event) {
    if (o.status !== 'requires_payment_method' || !o.declined) return noop('PAYMENT_NOT_SETTLED', p);
    // ranked: a decline reported once the money settled changes nothing, as any failure would
    return noop(p.status === 'requires_payment' || p.status === 'processing' ? 'PAYMENT_DECLINED_RETRYABLE' : 'PAYMENT_FAILURE_IGNORED', p);
  }
  return step(
    p,
    event,
    event === 'succeeded' ? { amountReceived: o.amountReceived, intentId: o.intentId } : { intentId: o.intentId },
    cmd.cid,
    now,
  );
}

/**
 * Request a refund: `succeeded` → `refund_pending` and one refund job with
 * its idempotency key, both in the transaction that cancels the stay.
 * Invariant: 0 < amount <= what was received and not yet refunded.
 */
export function requestRefund(
  p: Payment | null,
  /** `attempt`: the refund key's number, past every key the payment's refunds used (1 for its first) */
  cmd: { readonly amount: number; readonly cid: CorrelationId; readonly attempt?: number },
  now: number,
): PaymentOutcome {
  if (!p) return refused('PAYMENT_NOT_FOUND');
  if (cmd.amount === 0) return noop('NOTHING_TO_REFUND', p);
  if (!Number.isSafeInteger(cmd.amount) || cmd.amount < 0 || cmd.amount > p.amountReceived - p.amountRefunded) {
    return refused('REFUND_EXCEEDS_PAYMENT', `at most ${p.amountReceived - p.amountRefunded}`);
  }
  const key = refundIdempotencyKey(p.id, cmd.attempt ?? 1);
  return step(p, 'refund_requested', {}, cmd.cid, now, [{ type: 'refund', paymentId: p.id, amount: cmd.amount, idempotencyKey: key }]);
}

/**
 * Record a refund: Stripe's `amount_refunded` of the charge (a re-read or
 * `charge.refunded`) moves `refund_pending` to `refunded` (all of it back)
 * or `partially_refunded`. Invariant: the recorded amount never shrinks and
 * never exceeds what was received.
 */
export function recordRefund(
  p: Payment | null,
  cmd: { readonly amountRefunded: number; readonly currency: string; readonly cid: CorrelationId },
  now: number,
): PaymentOutcome {
  if (!p) return refused('PAYMENT_NOT_FOUND');
  if (cmd.currency !== p.currency || cmd.amountRefunded > p.amountReceived) {
    return refused('PAYMENT_AMOUNT_MISMATCH', `refunded ${cmd.amountRefunded} ${cmd.currency} of ${p.amountReceived} ${p.currency}`);
  }
  if (cmd.amountRefunded <= p.amountRefunded) return noop('REFUND_ALREADY_RECORDED', p);
  const event: PaymentEvent = cmd.amountRefunded === p.amountReceived ? 'refunded_full' : 'refunded_partial';
  return step(p, event, { amountRefunded: cmd.amountRefunded }, cmd.cid, now);
}

/** The history event of an applied payment outcome (codes are unique per row). */
export function paymentEventOfCode(code: string): PaymentEvent {
  const row = PAYMENT_TRANSITIONS.find((r) => r.code === code);
  if (!row) throw new Error(`no payment transition has code ${code}`);
  return row.event;
}

/** A refund of one payment as the ledger holds it, whoever made it (`attempt`: our key's number; null for Stripe's own). */
export interface RefundView {
  readonly amount: number;
  readonly status: 'pending' | 'succeeded' | 'failed';
  readonly source: 'tobira' | 'stripe';
  readonly stripeRefundId: string | null;
  readonly attempt: number | null;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/**
 * What our refunds of a payment must give back again once refunds made in
 * Stripe directly (`failed`) fail. A pending refund has already left the
 * charge, so Stripe refuses ours for more than the rest, and ours was cut to
 * that rest (settleRefusedRefund) counting on the pending one; when it fails,
 * the guest is owed what ours was cut by. The attempt that was cut is our
 * latest one Stripe refused (failed with no Stripe refund) that was closed
 * after a failed one existed; what it was cut by is its amount less what
 * our later attempts give (a give-back made for an earlier failure included).
 * Invariant: 0 <= result <= the failed amounts, the cut, and what the charge
 * still holds, so the guest never gets back more than the refund ours was
 * asked for, nor more than was received.
 */
export function refundOwedAfterFailedRefunds(
  refunds: readonly RefundView[],
  failed: readonly RefundView[],
  amountReceived: number,
): number {
  const earliest = Math.min(...failed.map((f) => f.createdAt));
  const cut = refunds
    .filter(
      (r) => r.source === 'tobira' && r.status === 'failed' && r.stripeRefundId === null && r.attempt !== null && r.updatedAt >= earliest,
    )
    .reduce<RefundView | null>((a, b) => (a === null || (b.attempt ?? 0) > (a.attempt ?? 0) ? b : a), null);
  if (cut === null) return 0;
  const after = refunds
    .filter((r) => r.source === 'tobira' && r.status !== 'failed' && (r.attempt ?? 0) > (cut.attempt ?? 0))
    .reduce((n, r) => n + r.amount, 0);
  const given = refunds.filter((r) => r.status !== 'failed').reduce((n, r) => n + r.amount, 0);
  const failedTotal = failed.reduce((n, r) => n + r.amount, 0);
  return Math.max(0, Math.min(failedTotal, cut.amount - after, amountReceived - given));
}

/**
 * What the guest is told of the money of a booking that ended (the return page's `data-money`):
 * - `checking`: an intent of the booking is still open in the ledger (`requires_payment` or `processing`
 *   with an intent shown to the guest): it may have been paid with the webhook not in yet, or its
 *   cancellation not yet reached Stripe. Nothing about the money is stated until Stripe has said.
 * - `none`: nothing received and every intent known unpaid (cancelled at Stripe, or never made).
 * - `kept`, `refunding`, `refunded`: what was received, what is being given back and what the policy keeps.
 */
export type MoneyStatement = 'none' | 'checking' | 'refunding' | 'refunded' | 'kept';

/** One payment of an ended booking as the statement reads it: its ledger row and its refunds. */
export interface PaymentMoney {
  readonly status: PaymentStatus;
  readonly intentId: string | null;
  readonly amountReceived: number;
  readonly amountRefunded: number;
  readonly refunds: readonly Pick<RefundView, 'amount' | 'status' | 'source' | 'attempt'>[];
}

export interface MoneyOfEndedStay {
  readonly said: MoneyStatement;
  readonly received: number;
  readonly refunded: number;
  /** refunds pending at Stripe, and refunds of ours Stripe failed that no later attempt replaced (still owed) */
  readonly refunding: number;
  readonly kept: number;
}

/** A payment whose intent's outcome the ledger does not know yet: shown to the guest, neither paid nor cancelled. */
export const intentUnsettled = (p: Pick<PaymentMoney, 'status' | 'intentId'>): boolean =>
  p.intentId !== null && (p.status === 'requires_payment' || p.status === 'processing');

/**
 * The money of a booking that ended, from the ledger only. Invariant: `none` only when nothing was
 * received and no intent is unsettled; `checking` whenever an intent is unsettled (whatever else was
 * paid: the sentence would leave out money that may have landed); kept = received - refunded - refunding.
 */
export function moneyOfEndedStay(payments: readonly PaymentMoney[]): MoneyOfEndedStay {
  let received = 0;
  let refunded = 0;
  let refunding = 0;
  for (const p of payments) {
    received += p.amountReceived;
    refunded += p.amountRefunded;
    for (const r of p.refunds) {
      if (r.status === 'pending') refunding += r.amount;
      // a refund of ours Stripe failed is still owed (an operator retries it from the dead letters) until a
      // later attempt of the payment's takes its place: it is not money the policy kept
      else if (
        r.status === 'failed' &&
        r.source === 'tobira' &&
        !p.refunds.some((x) => x.source === 'tobira' && (x.attempt ?? 0) > (r.attempt ?? 0))
      )
        refunding += r.amount;
    }
  }
  const kept = received - refunded - refunding;
  const said: MoneyStatement = payments.some(intentUnsettled)
    ? 'checking'
    : received === 0
      ? 'none'
      : kept > 0
        ? 'kept'
        : refunding > 0
          ? 'refunding'
          : 'refunded';
  return { said, received, refunded, refunding, kept };
}
