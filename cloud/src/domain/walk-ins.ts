import {
  applied,
  conflict,
  noop,
  refused,
  type CorrelationId,
  type Outcome,
  type OutcomeCode,
  type PersonId,
  type SiteId,
} from '@tobira/shared';
import { refundPercent, returnsQuota, type CancelReason, type CancellationPolicy } from './cancellation-policy.js';
import { checkInGates, type GateFacts, type GatePass } from './check-in-gates.js';
import { addDays, localDateOf, zonedInstant, type Checked, type IsoDate } from './nights.js';
import type { IntentObservation } from './payments.js';
import type { Plan } from './plans.js';

/**
 * Walk-ins: a day pass of a plan sold at the front desk. It
 * passes the check-in gates, takes one use of the plan's monthly quota in
 * the site's calendar month, pays through the intent factory
 * (`purpose = walk_in`) and only then gets its key, through the key verb.
 * The state machine is a literal table (docs/state-machines.md checks it).
 */
export const WALK_IN_STATUSES = ['pending', 'paid', 'failed', 'expired', 'cancelled'] as const;
export type WalkInStatus = (typeof WALK_IN_STATUSES)[number];

export const WALK_IN_EVENTS = ['create', 'payment_settled', 'payment_cancelled', 'hold_expired', 'cancel'] as const;
export type WalkInEvent = (typeof WALK_IN_EVENTS)[number];

export interface WalkInTransitionRow {
  readonly from: readonly (WalkInStatus | null)[];
  readonly event: WalkInEvent;
  readonly to: WalkInStatus;
  readonly code: OutcomeCode;
}
export interface WalkInNoopRow {
  readonly from: readonly WalkInStatus[];
  readonly event: WalkInEvent;
  readonly code: OutcomeCode;
}

export const WALK_IN_TRANSITIONS: readonly WalkInTransitionRow[] = [
  { from: [null], event: 'create', to: 'pending', code: 'WALK_IN_CREATED' },
  { from: ['pending'], event: 'payment_settled', to: 'paid', code: 'WALK_IN_PAID' },
  { from: ['pending'], event: 'payment_cancelled', to: 'failed', code: 'WALK_IN_FAILED' },
  { from: ['pending'], event: 'hold_expired', to: 'expired', code: 'WALK_IN_EXPIRED' },
  { from: ['paid'], event: 'cancel', to: 'cancelled', code: 'WALK_IN_CANCELLED' },
  // the desk ends a pass still unpaid (its intent cancelled in Stripe first): money that landed meanwhile is refunded
  { from: ['pending'], event: 'cancel', to: 'cancelled', code: 'WALK_IN_CANCELLED' },
];

export const WALK_IN_NOOPS: readonly WalkInNoopRow[] = [
  { from: ['paid', 'cancelled'], event: 'payment_settled', code: 'WALK_IN_ALREADY_PAID' },
  { from: ['paid', 'cancelled'], event: 'payment_cancelled', code: 'PAYMENT_FAILURE_IGNORED' },
  { from: ['failed', 'expired'], event: 'payment_cancelled', code: 'WALK_IN_ALREADY_ENDED' },
  { from: ['paid', 'failed', 'expired', 'cancelled'], event: 'hold_expired', code: 'WALK_IN_NOT_PENDING' },
  { from: ['cancelled'], event: 'cancel', code: 'WALK_IN_ALREADY_CANCELLED' },
  { from: ['failed', 'expired'], event: 'cancel', code: 'WALK_IN_ALREADY_ENDED' },
];

const transitionOf = (from: WalkInStatus | null, event: WalkInEvent) =>
  WALK_IN_TRANSITIONS.find((r) => r.event === event && r.from.includes(from));
const noopOf = (from: WalkInStatus, event: WalkInEvent) => WALK_IN_NOOPS.find((r) => r.event === event && r.from.includes(from));

export interface WalkIn {
  readonly id: string;
  readonly siteId: SiteId;
  readonly planId: string;
  readonly personId: PersonId;
  /** the site-local date of the pass */
  readonly day: IsoDate;
  /** the month (`YYYY-MM`, site calendar) its quota use counts against; null: the plan has no quota */
  readonly quotaMonth: string | null;
  /** the use was given back (to `quotaMonth`) */
  readonly quotaReturned: boolean;
  readonly status: WalkInStatus;
  readonly version: number;
  /** minor units */
  readonly amount: number;
  readonly currency: string;
  /** `walk_in:<id>:1`, stored before the first Stripe call */
  readonly idempotencyKey: string;
  readonly intentId: string | null;
  readonly clientSecret: string | null;
  readonly amountReceived: number;
  /** while pending: when the quota use and the sale are released if unpaid */
  readonly holdUntil: number;
  readonly keyId: string | null;
  /** the credential the desk gave the guest, as its keyed digest only */
  readonly credential: { readonly type: 'pin' | 'card'; readonly digest: string };
  readonly cancelReason: CancelReason | null;
  readonly lastCode: string;
  readonly cid: CorrelationId;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** What a walk-in verb asks of the rest of the system, in the transaction of its change. */
export type WalkInEffect =
  | { readonly type: 'use_quota'; readonly month: string; readonly quota: number }
  | { readonly type: 'return_quota'; readonly month: string }
  | { readonly type: 'issue_key'; readonly keyId: string; readonly validFrom: number; readonly validUntil: number }
  | { readonly type: 'revoke_key'; readonly keyId: string }
  | { readonly type: 'refund'; readonly amount: number };

export type WalkInOutcome = Outcome<WalkIn, WalkInEffect>;

/** The quota month of an instant at the site: the calendar month there (`YYYY-MM`), not UTC's. */
export const quotaMonthOf = (now: number, timeZone: string): string => localDateOf(now, timeZone).slice(0, 7);

export const walkInKeyId = (walkInId: string): string => `key_${walkInId}`;
export const walkInIdempotencyKey = (walkInId: string, attempt: number): string => `walk_in:${walkInId}:${attempt}`;

/** A walk-in key runs to the end of its day at the site (at least an hour from when it is paid). */
export const WALK_IN_MIN_KEY_MS = 3_600_000;

const write = (w: WalkIn, event: WalkInEvent, patch: Partial<WalkIn>, cid: CorrelationId, now: number): WalkInOutcome | null => {
  const n = noopOf(w.status, event);
  if (n) return noop(n.code, w);
  const row = transitionOf(w.status, event);
  if (!row) return null;
  return applied(row.code, { ...w, ...patch, status: row.to, version: w.version + 1, lastCode: row.code, cid, updatedAt: now });
};

// ---------------------------------------------------------------- create

export interface CreateWalkInCommand {
  readonly walkInId: string;
  readonly plan: Plan;
  readonly personId: PersonId;
  readonly timeZone: string;
  readonly holdMinutes: number;
  readonly credential: { readonly type: 'pin' | 'card'; readonly digest: string };
  /** the facts of the gates (blocked, walk-ins allowed, membership, uses this month), loaded in the transaction */
  readonly gates: Omit<GateFacts, 'kind' | 'plan'>;
  readonly cid: CorrelationId;
}

/**
 * Create: the check-in gates first (each refusal coded for staff), then a
 * pending walk-in with its idempotency key and, when the plan has a quota,
 * one use of this month's quota (the SQL use is the guard under races:
 * 0 rows there is QUOTA_EXHAUSTED too). Invariant: nothing is created for a
 * person a gate refuses; an existing id is never overwritten.
 */
export function createWalkIn(existing: WalkIn | null, cmd: CreateWalkInCommand, now: number): WalkInOutcome {
  if (existing) return repeatWalkIn(existing, cmd.plan.id, cmd.personId, cmd.credential);
  const gate = checkInGates({ ...cmd.gates, kind: 'walk_in', plan: cmd.plan });
  if (gate.status === 'refused') return refused(gate.code, gate.detail);
  if (cmd.plan.walkInAmount === null) return refused('WALK_IN_NOT_ALLOWED');
  const row = transitionOf(null, 'create');
  if (!row) throw new Error('walk-in table has no create row');
  const day = localDateOf(now, cmd.timeZone);
  const quota = cmd.plan.monthlyEntryQuota;
  const quotaMonth = quota === null ? null : day.slice(0, 7);
  const w: WalkIn = {
    id: cmd.walkInId,
    siteId: cmd.gates.siteId,
    planId: cmd.plan.id,
    personId: cmd.personId,
    day,
    quotaMonth,
    quotaReturned: false,
    status: row.to,
    version: 1,
    amount: cmd.plan.walkInAmount,
    currency: cmd.plan.currency,
    idempotencyKey: walkInIdempotencyKey(cmd.walkInId, 1),
    intentId: null,
    clientSecret: null,
    amountReceived: 0,
    holdUntil: now + cmd.holdMinutes * 60_000,
    keyId: null,
    credential: cmd.credential,
    cancelReason: null,
    lastCode: row.code,
    cid: cmd.cid,
    createdAt: now,
    updatedAt: now,
  };
  return applied(row.code, w, quota === null || quotaMonth === null ? [] : [{ type: 'use_quota', month: quotaMonth, quota }]);
}

/**
 * The same walk-in asked for again (same id): noop when it is the same plan, person and credential, else a
 * conflict. The credential counts: a sale answered as done under another PIN leaves the guest holding a PIN
 * no door knows. `credential` null: its digest could not be made (the plan's doors are gone), so it is not
 * known to be the same.
 */
export function repeatWalkIn(
  existing: WalkIn,
  planId: string,
  personId: string,
  credential: { readonly type: 'pin' | 'card'; readonly digest: string } | null,
): WalkInOutcome {
  return existing.planId === planId &&
    existing.personId === personId &&
    credential !== null &&
    existing.credential.type === credential.type &&
    existing.credential.digest === credential.digest
    ? noop('WALK_IN_ALREADY_CREATED', existing)
    : conflict('WALK_IN_ALREADY_EXISTS', existing);
}

// ---------------------------------------------------------------- settle

/**
 * Settle on what Stripe says the intent is NOW (never the event order):
 * succeeded → `paid` with its key (to the end of the day at the site);
 * canceled → `failed`, the quota use released (it was never used); a decline
 * or anything in between changes nothing (the guest may try another card
 * until the hold ends). Invariant: money that is not the walk-in's amount
 * and currency is refused (an alarm), never applied.
 */
export function settleWalkIn(
  w: WalkIn | null,
  obs: IntentObservation,
  cmd: {
    readonly timeZone: string;
    readonly cid: CorrelationId;
    /** The gates, run again when the key would be issued (the use case loads the facts); absent: not asked. */
    readonly gate?: Checked<GatePass>;
  },
  now: number,
): WalkInOutcome {
  if (!w) return refused('WALK_IN_NOT_FOUND');
  if (w.intentId !== null && w.intentId !== obs.intentId) return refused('PAYMENT_INTENT_MISMATCH', `${obs.intentId} is not ${w.intentId}`);
  if (obs.currency !== w.currency || obs.amount !== w.amount || (obs.status === 'succeeded' && obs.amountReceived !== w.amount))
    return refused(
      'PAYMENT_AMOUNT_MISMATCH',
      `walk-in ${w.amount} ${w.currency}, Stripe ${obs.amount}/${obs.amountReceived} ${obs.currency}`,
    );
  if (obs.status === 'succeeded') {
    // a pass cancelled while unpaid received nothing: money that lands for it later is not its
    if (w.status === 'failed' || w.status === 'expired' || (w.status === 'cancelled' && w.amountReceived === 0))
      return refused('PAYMENT_AFTER_WALK_IN_ENDED', `the walk-in is ${w.status}: refund what was paid`);
    if (w.status === 'pending' && cmd.gate?.status === 'refused') {
      // a gate that no longer holds (the person was blocked, the plan retired, ...) gets no key: the pass
      // fails, its quota use goes back and the money comes back in full
      const f = write(
        w,
        'payment_cancelled',
        { intentId: obs.intentId, amountReceived: obs.amountReceived, quotaReturned: w.quotaMonth !== null },
        cmd.cid,
        now,
      );
      if (!f) return refused('INVALID_TRANSITION', `payment_cancelled from ${w.status}`);
      return f.status === 'applied' ? applied(f.code, f.state, [...releaseOf(f.state), { type: 'refund', amount: obs.amountReceived }]) : f;
    }
    const keyId = walkInKeyId(w.id);
    const endOfDay = zonedInstant(addDays(w.day, 1), '00:00', cmd.timeZone);
    const validUntil = Math.max(endOfDay, now + WALK_IN_MIN_KEY_MS);
    const o = write(w, 'payment_settled', { keyId, amountReceived: obs.amountReceived, intentId: obs.intentId }, cmd.cid, now);
    if (!o) return refused('INVALID_TRANSITION', `payment_settled from ${w.status}`);
    return o.status === 'applied' ? applied(o.code, o.state, [{ type: 'issue_key', keyId, validFrom: now, validUntil }]) : o;
  }
  if (obs.status === 'canceled') {
    const o = write(w, 'payment_cancelled', { intentId: obs.intentId, quotaReturned: w.quotaMonth !== null }, cmd.cid, now);
    if (!o) return refused('INVALID_TRANSITION', `payment_cancelled from ${w.status}`);
    return o.status === 'applied' ? applied(o.code, o.state, releaseOf(o.state)) : o;
  }
  return noop('WALK_IN_PAYMENT_PENDING', w);
}

/** The quota use of a walk-in that was never used (failed, expired): back to its own month. */
function releaseOf(w: WalkIn): WalkInEffect[] {
  return w.quotaMonth === null ? [] : [{ type: 'return_quota', month: w.quotaMonth }];
}

// ---------------------------------------------------------------- fail

/** Fail: no PaymentIntent could be made for it (Stripe unreachable): `failed`, its quota use released, nothing charged. */
export function failWalkIn(w: WalkIn | null, cmd: { readonly cid: CorrelationId }, now: number): WalkInOutcome {
  if (!w) return refused('WALK_IN_NOT_FOUND');
  const o = write(w, 'payment_cancelled', { quotaReturned: w.quotaMonth !== null }, cmd.cid, now);
  if (!o) return refused('INVALID_TRANSITION', `payment_cancelled from ${w.status}`);
  return o.status === 'applied' ? applied(o.code, o.state, releaseOf(o.state)) : o;
}

// ---------------------------------------------------------------- expire

/**
 * Expire: unpaid past its hold → `expired`, the quota use released. The use
 * case cancels the intent in Stripe FIRST and hands its answer here: one
 * that succeeded meanwhile is settled as paid instead (no money is lost for
 * a pass that was bought). Invariant: never before `holdUntil`.
 */
export function expireWalkIn(
  w: WalkIn | null,
  obs: IntentObservation | null,
  cmd: { readonly timeZone: string; readonly cid: CorrelationId },
  now: number,
): WalkInOutcome {
  if (!w) return refused('WALK_IN_NOT_FOUND');
  if (w.status === 'pending' && now < w.holdUntil) return noop('WALK_IN_HOLD_NOT_OVER', w);
  if (obs !== null && obs.status === 'succeeded') return settleWalkIn(w, obs, cmd, now);
  // Stripe cannot cancel most intents in processing, and the money in flight decides: the hold waits for it
  if (obs !== null && obs.status === 'processing') return noop('WALK_IN_PAYMENT_PROCESSING', w);
  if (obs !== null && obs.status !== 'canceled') return noop('WALK_IN_PAYMENT_PENDING', w);
  const o = write(w, 'hold_expired', { quotaReturned: w.quotaMonth !== null }, cmd.cid, now);
  if (!o) return refused('INVALID_TRANSITION', `hold_expired from ${w.status}`);
  return o.status === 'applied' ? applied(o.code, o.state, releaseOf(o.state)) : o;
}

// ---------------------------------------------------------------- cancel

/**
 * Cancel a walk-in. Paid: its key revoked through the key verb in the same
 * transaction; its quota use given back to the month it was used in (never
 * the current one) only when the site's cancellation policy says so
 * (`returnsQuota`); the money the policy gives back for a cancellation on
 * the day refunded (all of it for `staff_cancelled`, `site_closed`, ...).
 * Pending: the use case cancels its intent in Stripe FIRST and hands its
 * answer here (`intent`): canceled → cancelled, its use given back (it was
 * never used), nothing charged; succeeded meanwhile (its webhook not yet
 * read) → cancelled with no key, the money recorded and refunded by the same
 * policy as a paid pass; still in flight (processing) → refused
 * `WALK_IN_PAYMENT_PROCESSING` (the money decides first).
 * Invariant: a use is given back at most once; the refund never exceeds what was received.
 */
export function cancelWalkIn(
  w: WalkIn | null,
  cmd: {
    readonly reason: CancelReason;
    readonly policy: CancellationPolicy;
    readonly cid: CorrelationId;
    /** a pending walk-in's intent as Stripe answered its cancellation (null: it never had one) */
    readonly intent?: IntentObservation | null | undefined;
  },
  now: number,
): WalkInOutcome {
  if (!w) return refused('WALK_IN_NOT_FOUND');
  if (w.status === 'pending') return cancelPending(w, cmd, now);
  const give = w.quotaMonth !== null && !w.quotaReturned && returnsQuota(cmd.policy, cmd.reason);
  const o = write(w, 'cancel', { cancelReason: cmd.reason, quotaReturned: w.quotaReturned || give }, cmd.cid, now);
  if (!o) return refused('INVALID_TRANSITION', `cancel from ${w.status}`);
  if (o.status !== 'applied') return o;
  const effects: WalkInEffect[] = [];
  if (w.keyId !== null) effects.push({ type: 'revoke_key', keyId: w.keyId });
  if (give && w.quotaMonth !== null) effects.push({ type: 'return_quota', month: w.quotaMonth });
  // a day pass is cancelled on its day: the policy's 0-days tier, or everything when the site cancelled;
  // nothing when the pass ends because its money was already given back in Stripe
  const back = cmd.reason === 'payment_refunded' ? 0 : Math.floor((w.amountReceived * refundPercent(cmd.policy, 0, cmd.reason)) / 100);
  if (back > 0) effects.push({ type: 'refund', amount: back });
  return applied(o.code, o.state, effects);
}

function cancelPending(
  w: WalkIn,
  cmd: {
    readonly reason: CancelReason;
    readonly policy: CancellationPolicy;
    readonly cid: CorrelationId;
    readonly intent?: IntentObservation | null | undefined;
  },
  now: number,
): WalkInOutcome {
  const obs = cmd.intent;
  if (obs === undefined) return refused('WALK_IN_NOT_PAID', 'a pending walk-in is cancelled with its intent');
  if (obs !== null) {
    if (w.intentId !== null && w.intentId !== obs.intentId)
      return refused('PAYMENT_INTENT_MISMATCH', `${obs.intentId} is not ${w.intentId}`);
    if (obs.status === 'processing') return refused('WALK_IN_PAYMENT_PROCESSING', 'the payment is in flight: it decides first');
    if (obs.status !== 'succeeded' && obs.status !== 'canceled')
      return refused('WALK_IN_PAYMENT_PENDING', `the intent is ${obs.status}: it was not cancelled`);
    if (obs.currency !== w.currency || obs.amount !== w.amount || (obs.status === 'succeeded' && obs.amountReceived !== w.amount))
      return refused(
        'PAYMENT_AMOUNT_MISMATCH',
        `walk-in ${w.amount} ${w.currency}, Stripe ${obs.amount}/${obs.amountReceived} ${obs.currency}`,
      );
  }
  const received = obs?.status === 'succeeded' ? obs.amountReceived : 0;
  // an unpaid pass never used its quota; one paid a moment ago never entered either (it never had a key)
  const give = w.quotaMonth !== null && !w.quotaReturned;
  const o = write(
    w,
    'cancel',
    { cancelReason: cmd.reason, quotaReturned: w.quotaReturned || give, amountReceived: received, intentId: obs?.intentId ?? w.intentId },
    cmd.cid,
    now,
  );
  if (!o) return refused('INVALID_TRANSITION', `cancel from ${w.status}`);
  if (o.status !== 'applied') return o;
  const effects: WalkInEffect[] = give && w.quotaMonth !== null ? [{ type: 'return_quota', month: w.quotaMonth }] : [];
  const back = Math.floor((received * refundPercent(cmd.policy, 0, cmd.reason)) / 100);
  if (back > 0) effects.push({ type: 'refund', amount: back });
  return applied(o.code, o.state, effects);
}
