import { applied, conflict, noop, refused, type CorrelationId, type Outcome, type PersonId, type SiteId } from '@tobira/shared';
import {
  givesDoorAccess,
  isFinal,
  membershipNoopOf,
  membershipTransitionOf,
  type EndReason,
  type MembershipEvent,
  type MembershipStatus,
} from './membership-states.js';
import type { Plan } from './plans.js';

/** A credential kept as its keyed digest (the pepper of the plan doors' gateway); the clear value is in no row. */
export interface MemberCredential {
  readonly type: 'pin' | 'card';
  readonly digest: string;
}

export interface Membership {
  readonly id: string;
  readonly siteId: SiteId;
  readonly planId: string;
  readonly personId: PersonId;
  readonly status: MembershipStatus;
  /** compare-and-set counter: grows on every write */
  readonly version: number;
  /** staff approval starts the checkout (Stripe customer, subscription, first invoice) */
  readonly approvedAt: number | null;
  readonly approvedBy: string | null;
  readonly attempt: number;
  /** `membership_initial:<id>:<attempt>`, stored before the first Stripe call */
  readonly idempotencyKey: string;
  readonly stripeCustomerId: string | null;
  readonly subscriptionId: string | null;
  readonly firstInvoiceId: string | null;
  /** the end of the period paid for (ms), from Stripe */
  readonly currentPeriodEnd: number | null;
  readonly cancelAtPeriodEnd: boolean;
  /** when the renewal first failed (the grace runs from here) */
  readonly pastDueSince: number | null;
  /** door access suspended after the grace: the key is revoked; paying issues a fresh one */
  readonly suspended: boolean;
  readonly keyId: string | null;
  /** how many keys the membership has had (`key_<id>_<n>`) */
  readonly keySeq: number;
  readonly credential: MemberCredential | null;
  readonly endReason: EndReason | null;
  readonly endedBy: string | null;
  readonly endNote: string | null;
  readonly endedAt: number | null;
  /** a billing stop Stripe may or may not have made (no answer): pending until read back from Stripe */
  readonly billingStopPending: PendingStop | null;
  readonly lastCode: string;
  readonly cid: CorrelationId;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** Notices a membership verb raises; delivering them is the notification outbox's (built apart): the seam. */
export type MembershipNotice =
  | 'membership_activated'
  | 'membership_ending'
  | 'membership_ended'
  | 'membership_rejected'
  | 'payment_failed'
  | 'access_suspended'
  | 'access_restored';

/** What a membership verb asks of the rest of the system, in the transaction of the change. */
export type MembershipEffect =
  | { readonly type: 'issue_key'; readonly keyId: string }
  | { readonly type: 'revoke_key'; readonly keyId: string; readonly reason: 'membership_ended' | 'plan_retired' | 'payment_failed' }
  | { readonly type: 'notify'; readonly notice: MembershipNotice; readonly dedupeKey: string };

export type MembershipOutcome = Outcome<Membership, MembershipEffect>;

/** What Stripe says the subscription is NOW (re-read, never the copy an event carried): the input of `observeSubscription`. */
export interface SubscriptionObservation {
  readonly subscriptionId: string;
  readonly status: 'incomplete' | 'incomplete_expired' | 'active' | 'past_due' | 'unpaid' | 'canceled' | 'other';
  /** ms */
  readonly currentPeriodEnd: number;
  readonly cancelAtPeriodEnd: boolean;
  /** Stripe's `cancellation_details.reason` once canceled */
  readonly canceledFor: 'cancellation_requested' | 'payment_failed' | null;
}

export const membershipKeyId = (membershipId: string, seq: number): string => `key_${membershipId}_${seq}`;
export const subscriptionIdempotencyKey = (purpose: 'membership_initial' | 'membership_renewal', membershipId: string, attempt: number) =>
  `${purpose}:${membershipId}:${attempt}`;

const write = (m: Membership, patch: Partial<Membership>, code: string, cid: CorrelationId, now: number): Membership => ({
  ...m,
  ...patch,
  version: m.version + 1,
  lastCode: code,
  cid,
  updatedAt: now,
});

// ---------------------------------------------------------------- apply / approve

export interface ApplyCommand {
  readonly membershipId: string;
  readonly plan: Plan;
  readonly personId: PersonId;
  readonly credential: MemberCredential | null;
  readonly cid: CorrelationId;
}

/** Apply: a new membership `applied` under review, its subscription's idempotency key fixed now. A retired plan takes none. */
export function applyMembership(existing: Membership | null, cmd: ApplyCommand, now: number): MembershipOutcome {
  if (existing) {
    return existing.planId === cmd.plan.id && existing.personId === cmd.personId
      ? noop('MEMBERSHIP_ALREADY_APPLIED', existing)
      : conflict('MEMBERSHIP_ALREADY_EXISTS', existing);
  }
  if (cmd.plan.status !== 'active') return refused('PLAN_NOT_AVAILABLE');
  const row = membershipTransitionOf(null, 'apply');
  if (!row) throw new Error('no apply row');
  return applied(row.code, {
    id: cmd.membershipId,
    siteId: cmd.plan.siteId,
    planId: cmd.plan.id,
    personId: cmd.personId,
    status: row.to,
    version: 1,
    approvedAt: null,
    approvedBy: null,
    attempt: 1,
    idempotencyKey: subscriptionIdempotencyKey('membership_initial', cmd.membershipId, 1),
    stripeCustomerId: null,
    subscriptionId: null,
    firstInvoiceId: null,
    currentPeriodEnd: null,
    cancelAtPeriodEnd: false,
    pastDueSince: null,
    suspended: false,
    keyId: null,
    keySeq: 0,
    credential: cmd.credential,
    endReason: null,
    endedBy: null,
    endNote: null,
    endedAt: null,
    billingStopPending: null,
    lastCode: row.code,
    cid: cmd.cid,
    createdAt: now,
    updatedAt: now,
  });
}

/** Approve: the application leaves review and its checkout starts (the use case then creates the subscription). */
export function approveMembership(
  m: Membership | null,
  cmd: { readonly actor: string; readonly cid: CorrelationId },
  now: number,
): MembershipOutcome {
  if (!m) return refused('MEMBERSHIP_NOT_FOUND');
  if (m.status === 'applied' && m.approvedAt !== null) return noop('MEMBERSHIP_ALREADY_APPROVED', m);
  const n = membershipNoopOf(m.status, 'approve');
  if (n) return noop(n.code, m);
  const row = membershipTransitionOf(m.status, 'approve');
  if (!row) return refused('INVALID_TRANSITION', `${m.status} --approve-->`);
  return applied(row.code, write(m, { approvedAt: now, approvedBy: cmd.actor }, row.code, cmd.cid, now));
}

// ---------------------------------------------------------------- Stripe's word

/** What an observation of the subscription asks for: a transition here, or the one ending verb. */
export type ObservationDecision =
  | { readonly kind: 'step'; readonly outcome: MembershipOutcome }
  /** `ended`: Stripe ended the subscription; `scheduled`: it is set to end at period end (billing already stopped) */
  | {
      readonly kind: 'end';
      readonly reason: EndReason;
      readonly actor: string;
      readonly note: string;
      readonly stopped: 'ended' | 'scheduled';
    }
  /** the membership is ending but Stripe will bill the next period (the schedule was withdrawn there): set it again */
  | { readonly kind: 'reassert' };

function step(
  m: Membership,
  event: MembershipEvent,
  patch: Partial<Membership>,
  effects: MembershipEffect[],
  cid: CorrelationId,
  now: number,
): MembershipOutcome {
  const n = membershipNoopOf(m.status, event);
  if (n) return noop(n.code, m);
  const row = membershipTransitionOf(m.status, event);
  if (!row) return refused('INVALID_TRANSITION', `${m.status} --${event}-->`);
  return applied(row.code, write(m, { ...patch, status: row.to }, row.code, cid, now), effects);
}

/**
 * Decides on what Stripe says the subscription is now, never on which event
 * arrived or in what order: a `payment_failed` that arrives after the invoice
 * was paid finds the subscription `active` and changes nothing; a canceled
 * subscription is handed to `endMembership` (the one verb that ends).
 */
export function observeSubscription(
  m: Membership,
  obs: SubscriptionObservation,
  cmd: { readonly cid: CorrelationId },
  now: number,
): ObservationDecision {
  const stepped = (o: MembershipOutcome): ObservationDecision => ({ kind: 'step', outcome: o });
  if (m.subscriptionId !== obs.subscriptionId)
    return stepped(refused('SUBSCRIPTION_MISMATCH', `${obs.subscriptionId} is not ${m.subscriptionId}`));
  if (isFinal(m.status)) return stepped(noop('MEMBERSHIP_ALREADY_ENDED', m));
  const living = obs.status === 'active' || obs.status === 'past_due' || obs.status === 'unpaid';
  if (living && obs.cancelAtPeriodEnd && (m.status === 'active' || m.status === 'past_due')) {
    // billing stops at period end in Stripe (our own stop whose answer was lost, or the dashboard): the membership
    // follows as a self-cancel; a stop of ours still pending is finished by its reconcile job, with its own actor
    if (m.billingStopPending !== null) return stepped(noop('MEMBERSHIP_END_PENDING', m));
    return { kind: 'end', reason: 'self_cancel', actor: 'stripe', note: 'the cancellation was scheduled in Stripe', stopped: 'scheduled' };
  }
  if (living && !obs.cancelAtPeriodEnd && m.status === 'ending') return { kind: 'reassert' };
  switch (obs.status) {
    case 'active': {
      if (m.status === 'applied') {
        const seq = m.keySeq + 1;
        const keyId = membershipKeyId(m.id, seq);
        return stepped(
          step(
            m,
            'invoice_paid',
            { currentPeriodEnd: obs.currentPeriodEnd, keyId, keySeq: seq },
            [
              { type: 'issue_key', keyId },
              { type: 'notify', notice: 'membership_activated', dedupeKey: `membership_activated:${m.id}` },
            ],
            cmd.cid,
            now,
          ),
        );
      }
      if (m.status === 'past_due') {
        const effects: MembershipEffect[] = [];
        let patch: Partial<Membership> = { currentPeriodEnd: obs.currentPeriodEnd, pastDueSince: null, suspended: false };
        if (m.suspended) {
          const seq = m.keySeq + 1;
          const keyId = membershipKeyId(m.id, seq);
          patch = { ...patch, keyId, keySeq: seq };
          effects.push({ type: 'issue_key', keyId }, { type: 'notify', notice: 'access_restored', dedupeKey: `access_restored:${keyId}` });
        }
        return stepped(step(m, 'invoice_paid', patch, effects, cmd.cid, now));
      }
      if (m.status === 'active') {
        if (m.currentPeriodEnd !== null && obs.currentPeriodEnd <= m.currentPeriodEnd)
          return stepped(noop('SUBSCRIPTION_STATUS_UNCHANGED', m));
        return stepped(step(m, 'invoice_paid', { currentPeriodEnd: obs.currentPeriodEnd }, [], cmd.cid, now));
      }
      return stepped(step(m, 'invoice_paid', {}, [], cmd.cid, now));
    }
    case 'past_due':
    case 'unpaid': {
      const failed: MembershipEffect = {
        type: 'notify',
        notice: 'payment_failed',
        dedupeKey: `payment_failed:${m.id}:${obs.currentPeriodEnd}`,
      };
      if (m.status === 'applied') {
        // the first period was paid (an unpaid first invoice stays `incomplete`): the member gets the key the
        // payment bought, already inside the plan's grace, and both notices
        const seq = m.keySeq + 1;
        const keyId = membershipKeyId(m.id, seq);
        return stepped(
          step(
            m,
            'payment_failed',
            { currentPeriodEnd: obs.currentPeriodEnd, keyId, keySeq: seq, pastDueSince: now },
            [
              { type: 'issue_key', keyId },
              { type: 'notify', notice: 'membership_activated', dedupeKey: `membership_activated:${m.id}` },
              failed,
            ],
            cmd.cid,
            now,
          ),
        );
      }
      return stepped(step(m, 'payment_failed', { pastDueSince: now }, [failed], cmd.cid, now));
    }
    case 'canceled':
    case 'incomplete_expired': {
      if (m.status === 'ending')
        return {
          kind: 'end',
          reason: m.endReason ?? 'self_cancel',
          actor: 'stripe',
          note: 'the subscription ended at its period end',
          stopped: 'ended',
        };
      // An application first, whatever Stripe's reason: nothing was delivered, so it ends rejected (an
      // application has no force_cancel move, and the end would be refused with the subscription gone).
      if (m.status === 'applied')
        // Stripe expires an incomplete subscription itself 23 hours after its creation: the checkout's end
        return obs.status === 'incomplete_expired'
          ? { kind: 'end', reason: 'checkout_expired', actor: 'stripe', note: 'Stripe expired the unpaid checkout', stopped: 'ended' }
          : { kind: 'end', reason: 'application_rejected', actor: 'stripe', note: 'the first invoice was never paid', stopped: 'ended' };
      if (m.status === 'past_due' || obs.canceledFor === 'payment_failed')
        return {
          kind: 'end',
          reason: m.status === 'past_due' ? 'payment_failed_final' : 'force_cancel',
          actor: 'stripe',
          note: 'Stripe gave up collecting the renewal',
          stopped: 'ended',
        };
      return { kind: 'end', reason: 'force_cancel', actor: 'stripe', note: 'the subscription was canceled in Stripe', stopped: 'ended' };
    }
    case 'incomplete':
      return stepped(m.status === 'applied' ? noop('MEMBERSHIP_PAYMENT_PENDING', m) : noop('SUBSCRIPTION_STATUS_UNCHANGED', m));
    case 'other':
      return stepped(noop('SUBSCRIPTION_STATUS_UNCHANGED', m));
    default: {
      const never: never = obs.status;
      throw new Error(`unhandled subscription status ${String(never)}`);
    }
  }
}

// ---------------------------------------------------------------- the one ending verb

export interface EndCommand {
  readonly reason: EndReason;
  /** who: staff for force_cancel (required), `member` for self_cancel, `stripe` when Stripe ended it */
  readonly actor: string | null;
  readonly note: string | null;
  /** the version the caller saw: a stale click on a membership that moved is a conflict */
  readonly expectedVersion?: number;
  /** Stripe already ended the subscription (its deleted event): no billing call, an `ending` membership reaches its period end */
  readonly subscriptionEnded: boolean;
  /** `checkout_expired`: how long after its approval an unpaid checkout stays open (config MEMBERSHIP_CHECKOUT_DEADLINE_MS) */
  readonly checkoutDeadlineMs?: number;
  readonly cid: CorrelationId;
}

/** What must happen in Stripe BEFORE the local write (I3): billing stops first. */
export type BillingStop = 'cancel_now' | 'cancel_at_period_end' | 'none';
export type PendingStop = Exclude<BillingStop, 'none'>;

export interface EndDecision {
  readonly outcome: MembershipOutcome;
  readonly billing: BillingStop;
}

/**
 * endMembership's decision, pure: every way a membership ends (reasons are
 * events of the table) and the billing stop it needs first. Stale clicks
 * are outcomes: an ended membership is `noop MEMBERSHIP_ALREADY_ENDED`, one
 * that moved since the caller looked is `conflict MEMBERSHIP_STATE_CHANGED`.
 * An application under review or with its checkout in flight cannot be
 * force-cancelled (a payment may land a second later).
 */
export function decideEnd(m: Membership | null, cmd: EndCommand, now: number): EndDecision {
  const none = (outcome: MembershipOutcome): EndDecision => ({ outcome, billing: 'none' });
  if (!m) return none(refused('MEMBERSHIP_NOT_FOUND'));
  if (isFinal(m.status)) return none(noop('MEMBERSHIP_ALREADY_ENDED', m));
  if (cmd.expectedVersion !== undefined && cmd.expectedVersion !== m.version) return none(conflict('MEMBERSHIP_STATE_CHANGED', m));
  if (cmd.reason === 'force_cancel' && !cmd.subscriptionEnded && (!cmd.actor || !cmd.note))
    return none(refused('MEMBERSHIP_NOTE_REQUIRED', 'force_cancel needs the staff actor and a note'));
  if (cmd.reason === 'checkout_expired' && m.status === 'applied' && !cmd.subscriptionEnded) {
    // only an approved checkout expires, and only once its deadline has passed (the sweep and a late retry agree)
    if (m.approvedAt === null) return none(refused('APPLICATION_UNDER_REVIEW'));
    if (cmd.checkoutDeadlineMs === undefined || now < m.approvedAt + cmd.checkoutDeadlineMs)
      return none(noop('MEMBERSHIP_CHECKOUT_OPEN', m));
  } else if (m.status === 'applied' && !cmd.subscriptionEnded) {
    const rejecting = cmd.reason === 'application_rejected' || cmd.reason === 'plan_retired';
    if (m.approvedAt !== null) return none(refused('CHECKOUT_IN_PROGRESS'));
    if (!rejecting) return none(refused('APPLICATION_UNDER_REVIEW'));
  }
  if (cmd.reason === 'application_rejected' && m.status !== 'applied') return none(conflict('MEMBERSHIP_STATE_CHANGED', m));
  const event: MembershipEvent = cmd.subscriptionEnded && m.status === 'ending' ? 'period_ended' : cmd.reason;
  const n = membershipNoopOf(m.status, event);
  if (n) return none(noop(n.code, m));
  const row = membershipTransitionOf(m.status, event);
  if (!row) return none(refused('INVALID_TRANSITION', `${m.status} --${event}-->`));
  const final = row.to === 'ended' || row.to === 'rejected';
  const next = write(
    m,
    {
      status: row.to,
      endReason: event === 'period_ended' ? (m.endReason ?? 'self_cancel') : cmd.reason,
      endedBy: event === 'period_ended' ? m.endedBy : cmd.actor,
      endNote: event === 'period_ended' ? m.endNote : cmd.note,
      endedAt: final ? now : null,
      cancelAtPeriodEnd: row.to === 'ending' ? true : m.cancelAtPeriodEnd,
    },
    row.code,
    cmd.cid,
    now,
  );
  const effects: MembershipEffect[] = [];
  if (final && m.keyId !== null && !m.suspended)
    effects.push({ type: 'revoke_key', keyId: m.keyId, reason: cmd.reason === 'plan_retired' ? 'plan_retired' : 'membership_ended' });
  const notice: MembershipNotice =
    row.to === 'ending' ? 'membership_ending' : row.to === 'rejected' ? 'membership_rejected' : 'membership_ended';
  effects.push({ type: 'notify', notice, dedupeKey: `${notice}:${m.id}` });
  const billing: BillingStop =
    cmd.subscriptionEnded || m.subscriptionId === null ? 'none' : row.to === 'ending' ? 'cancel_at_period_end' : 'cancel_now';
  return { outcome: applied(row.code, next, effects), billing };
}

// ---------------------------------------------------------------- a billing stop with no answer

/**
 * Records a billing stop Stripe may or may not have made (the call timed out, its connection was lost):
 * the membership keeps its status and carries the stop as pending until its reconcile job has read the
 * subscription back (I8: an unknown outcome is never "nothing changed"). `null` clears it when Stripe
 * refused the stop for good. Invariant: only a living membership carries a pending stop.
 */
export function recordPendingStop(
  m: Membership | null,
  stop: PendingStop | null,
  cmd: { readonly cid: CorrelationId },
  now: number,
): MembershipOutcome {
  if (!m) return refused('MEMBERSHIP_NOT_FOUND');
  if (isFinal(m.status)) return noop('MEMBERSHIP_ALREADY_ENDED', m);
  if (m.billingStopPending === stop) return noop(stop === null ? 'SUBSCRIPTION_STATUS_UNCHANGED' : 'MEMBERSHIP_END_PENDING', m);
  const code = stop === null ? 'MEMBERSHIP_END_NOT_MADE' : 'MEMBERSHIP_END_PENDING';
  return applied(code, write(m, { billingStopPending: stop }, code, cmd.cid, now));
}

// ---------------------------------------------------------------- grace

/** A past-due member past the plan's grace loses door access (the key revoked); the status stays (`past_due`, or `ending` after a self-cancel while owing). */
/**
 * A member's key given back once the site lifted their block: blocking revoked it (`person_blocked`) and
 * the membership ran on as billed, its key effects skipped. A membership that gives door access now (a
 * living status, not suspended) and holds no live key gets a fresh one (the next `key_<id>_<n>`, the same
 * credential); a suspended one waits for the money, as it would unblocked.
 */
export function restoreAccess(
  m: Membership | null,
  cmd: { readonly cid: CorrelationId; readonly keyLive: boolean },
  now: number,
): MembershipOutcome {
  if (!m) return refused('MEMBERSHIP_NOT_FOUND');
  if (!givesDoorAccess(m)) return noop('MEMBERSHIP_NO_DOOR_ACCESS', m);
  if (cmd.keyLive) return noop('MEMBER_KEY_ALREADY_LIVE', m);
  const seq = m.keySeq + 1;
  const keyId = membershipKeyId(m.id, seq);
  return applied('MEMBERSHIP_ACCESS_RESTORED', write(m, { keyId, keySeq: seq }, 'MEMBERSHIP_ACCESS_RESTORED', cmd.cid, now), [
    { type: 'issue_key', keyId },
    { type: 'notify', notice: 'access_restored', dedupeKey: `access_restored:${keyId}` },
  ]);
}

export function suspendAccess(m: Membership | null, plan: Plan, cmd: { readonly cid: CorrelationId }, now: number): MembershipOutcome {
  if (!m) return refused('MEMBERSHIP_NOT_FOUND');
  // a self-cancel while owing (ending, past due since) is no way past the grace: the period is not paid for
  if ((m.status !== 'past_due' && m.status !== 'ending') || m.pastDueSince === null) return noop('MEMBERSHIP_NOT_PAST_DUE', m);
  if (m.suspended) return noop('MEMBERSHIP_ACCESS_ALREADY_SUSPENDED', m);
  if (m.pastDueSince + plan.graceSeconds * 1000 > now) return noop('MEMBERSHIP_GRACE_NOT_OVER', m);
  const effects: MembershipEffect[] = [
    { type: 'notify', notice: 'access_suspended', dedupeKey: `access_suspended:${m.id}:${m.pastDueSince}` },
  ];
  if (m.keyId !== null) effects.unshift({ type: 'revoke_key', keyId: m.keyId, reason: 'payment_failed' });
  return applied('MEMBERSHIP_ACCESS_SUSPENDED', write(m, { suspended: true }, 'MEMBERSHIP_ACCESS_SUSPENDED', cmd.cid, now), effects);
}
