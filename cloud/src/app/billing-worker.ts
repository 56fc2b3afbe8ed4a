import { randomUUID } from 'node:crypto';
import type Stripe from 'stripe';
import { CorrelationId, newCorrelationId, withCorrelation, type OutcomeCode } from '@tobira/shared';
import { z } from 'zod';
import { claimBillingJobs, failBillingJob, markBillingJobDone, type BillingJob } from '../adapters/db/billing-jobs.js';
import type { BackoffPolicy } from '../adapters/backoff.js';
import { loadPayment, loadPaymentByIntent, loadRefund, noteRefundError } from '../adapters/db/payments.js';
import { countOverdueHolds, listExpiredHolds, listSitesWithStaysUnderway, listStaysEnding } from '../adapters/db/stays.js';
import { lastCheckOutDue } from '../domain/nights.js';
import { claimWebhookEvents, failWebhookEvent, markWebhookProcessed, type StoredWebhookEvent } from '../adapters/db/webhook-events.js';
import { classifyStripeError } from '../adapters/stripe/errors.js';
import { cancelPaymentIntent, retrievePaymentIntent } from '../adapters/stripe/payment-intents.js';
import { createRefund, listRefundsOfIntent } from '../adapters/stripe/refunds.js';
import { SimulatedCrash } from './crash.js';
import { recheckOpenIntents, recheckPendingRefunds } from './billing-reconcile.js';
import {
  DEFAULT_CHECKOUT_DEADLINE_MS,
  DEFAULT_CHECKOUT_RECHECK_MS,
  expireUnpaidCheckouts,
  recheckLivingMemberships,
  recheckOpenCheckouts,
  reconcilePendingStop,
  reconcileSubscription,
  refundLateCheckout,
  suspendOverdueAccess,
} from './memberships.js';
import { END_REASONS } from '../domain/membership-states.js';
import { loadWalkIn, walkInIdOfIntent } from '../adapters/db/walk-ins.js';
import { expireWalkIns, reconcileWalkInRefunds, refundWalkIn, settleWalkInPayment } from './walk-ins.js';
import {
  BillingStepFailed,
  endStay,
  expireStay,
  currentRefundAttempt,
  inBilling,
  reconcileRefunds,
  settleRefusedRefund,
  repairIntent,
  settleFromObservation,
  type StayDeps,
} from './stays.js';

/** 15 minutes: Stripe retries a webhook for days, so a refund pending longer than this without one is worth a read. */
export const DEFAULT_RECONCILE_MS = 15 * 60_000;

export interface BillingWorkerOptions extends BackoffPolicy {
  readonly pollMs: number;
  readonly leaseMs: number;
  readonly batch: number;
  /** A stay still pending this long past its hold is an alarm (STAY_HOLD_OVERDUE). */
  readonly holdSlackMs: number;
  /** How long an approved application's checkout stays open unpaid (config MEMBERSHIP_CHECKOUT_DEADLINE_MS). */
  readonly checkoutDeadlineMs: number;
  /** How often an open checkout's subscription is re-read from Stripe (config MEMBERSHIP_CHECKOUT_RECHECK_MS). */
  readonly checkoutRecheckMs: number;
  /**
   * How long a refund may stay pending at Stripe, or an ended stay's intent open, before it is re-read from
   * Stripe, and how often after that (config BILLING_RECONCILE_MS): the bound on a lost webhook.
   */
  readonly reconcileMs: number;
}

export const DEFAULT_BILLING_WORKER_OPTIONS: BillingWorkerOptions = Object.freeze({
  pollMs: 2_000,
  leaseMs: 60_000,
  batch: 20,
  holdSlackMs: 10 * 60_000,
  checkoutDeadlineMs: DEFAULT_CHECKOUT_DEADLINE_MS,
  checkoutRecheckMs: DEFAULT_CHECKOUT_RECHECK_MS,
  reconcileMs: DEFAULT_RECONCILE_MS,
  baseMs: 2_000,
  maxMs: 10 * 60_000,
  maxAttempts: 12,
});

/** What one pass did (tests and the demo read it). */
export interface BillingPass {
  readonly events: number;
  readonly jobs: number;
  readonly expired: number;
  readonly ended: number;
  /** pending stays past hold + slack, after this pass's sweep */
  readonly overdue: number;
  /** past-due memberships whose door access was suspended this pass (their plan's grace is over) */
  readonly suspended: number;
  /** unpaid walk-ins released this pass (their intent cancelled in Stripe first, the quota use given back) */
  readonly walkInsExpired: number;
  /** approved applications ended unpaid at their checkout deadline this pass (`checkout_expired`) */
  readonly checkoutsExpired: number;
  /** open checkouts whose subscription was re-read from Stripe this pass (their webhooks late or lost) */
  readonly checkoutsRechecked: number;
  /** refunds pending at Stripe re-read this pass (their webhook late or lost), and those found ended and recorded */
  readonly refundsRechecked: number;
  readonly refundsReconciled: number;
  /** open intents of ended stays re-read (and cancelled) at Stripe this pass, and those whose payment moved */
  readonly intentsRechecked: number;
  readonly intentsReconciled: number;
  /** living memberships whose subscription was re-read from Stripe this pass (their webhooks may be lost) */
  readonly membershipsRechecked: number;
}

const ID = z.string().min(1);
const PaymentJob = z.object({ paymentId: ID });
const RefundJob = z.object({ refundId: ID });
const WalkInRefundJob = z.object({ walkInId: ID });
const MembershipRefundJob = z.object({ membershipId: ID });
const NotifyJob = z.object({ notice: z.string(), stayId: ID });
const PendingStopJob = z.object({
  membershipId: ID,
  reason: z.enum(END_REASONS),
  actor: z.string().nullable(),
  note: z.string().nullable(),
  billing: z.enum(['cancel_now', 'cancel_at_period_end']),
});
const IntentObject = z.object({ id: ID, metadata: z.record(z.string(), z.string()).nullish() });
// the refund events Stripe sends (refund.* for every refund since API 2024-10-28; charge.refund.updated carries a refund too)
const REFUND_EVENTS: ReadonlySet<string> = new Set([
  'charge.refunded',
  'charge.refund.updated',
  'refund.created',
  'refund.updated',
  'refund.failed',
]);
const RefundOrCharge = z.object({
  id: ID,
  object: z.enum(['charge', 'refund']),
  payment_intent: z.union([ID, z.object({ id: ID })]).nullish(),
});
const EventPayload = z.object({ data: z.object({ object: z.unknown() }) });
const Metadata = z.record(z.string(), z.string()).nullish();
const SubscriptionObject = z.object({ id: ID, object: z.literal('subscription'), metadata: Metadata });
// API 2025-03-31 and later: an invoice names its subscription (and a copy of its metadata) under parent.subscription_details
const InvoiceObject = z.object({
  id: ID,
  parent: z
    .object({ subscription_details: z.object({ subscription: z.union([ID, z.object({ id: ID })]), metadata: Metadata }).nullish() })
    .nullish(),
});
/** The membership a subscription's metadata names, when its purpose says it is one of ours. */
const subjectOf = (m: Record<string, string> | null | undefined): string | undefined =>
  m?.purpose === 'membership_initial' || m?.purpose === 'membership_renewal' ? m.subject_id : undefined;

/** Step result: done with a code, or a classified failure. */
type Step =
  | { readonly ok: true; readonly code: string }
  | { readonly ok: false; readonly code: OutcomeCode; readonly permanent: boolean; readonly error: string };

const done = (code: string): Step => ({ ok: true, code });

async function guarded(run: () => Promise<Step>): Promise<Step> {
  try {
    return await run();
  } catch (e) {
    if (e instanceof BillingStepFailed) return { ok: false, code: e.code, permanent: e.permanent, error: e.message };
    if (e instanceof SimulatedCrash) throw e;
    // a Stripe error that escaped a call site is classified; anything else is a bug, retried with backoff and logged
    try {
      const f = classifyStripeError(e);
      return { ok: false, code: f.code, permanent: f.kind === 'permanent', error: f.message };
    } catch {
      return { ok: false, code: 'BILLING_UNAVAILABLE', permanent: false, error: e instanceof Error ? e.message : String(e) };
    }
  }
}

/**
 * The billing worker: the Stripe webhook inbox, the billing job queue, the
 * hold-expiry sweep and the automatic check-out, one pass at a time. Each
 * item is claimed with a lease, run, then marked done or failed with capped
 * backoff (permanent failures dead with their code). Guarantee: at least
 * once per item; every effect is idempotent by itself (Stripe idempotency
 * keys stored before the call, decisions on the intent's current status,
 * CAS on the stay), so an item run twice has one effect.
 */
export class BillingWorker {
  readonly #d: StayDeps & { readonly stripe: Stripe; readonly random: () => number };
  readonly #o: BillingWorkerOptions;
  #timer: NodeJS.Timeout | undefined;
  #current: Promise<unknown> = Promise.resolve();
  #stopped = true;
  /** A woken pass is queued and has not begun: further wakes join it. */
  #wakeQueued = false;

  constructor(deps: StayDeps & { readonly stripe: Stripe; readonly random: () => number }, options: Partial<BillingWorkerOptions> = {}) {
    this.#d = deps;
    this.#o = { ...DEFAULT_BILLING_WORKER_OPTIONS, ...options };
  }

  start(): void {
    this.#stopped = false;
    this.#schedule();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#current.catch(() => {});
  }

  /** Runs a pass now (after any running one); resolves with what it did. */
  runOnce(): Promise<BillingPass> {
    const next = this.#current.catch(() => {}).then(() => this.#pass());
    this.#current = next;
    return next;
  }

  /**
   * Runs a pass at once instead of at the next poll (a verified Stripe webhook was just stored in this
   * process); the poll stays the fallback for events stored by another process. Wakes while a woken pass is
   * still queued join it; a wake during a pass queues one more, so what was stored during it is seen.
   */
  wake(): void {
    if (this.#stopped || this.#wakeQueued) return;
    this.#wakeQueued = true;
    this.#tick();
  }

  #tick(): void {
    this.runOnce()
      .catch((e: unknown) => this.#d.log.error({ err: String(e), part: 'billing-worker' }, 'billing pass failed'))
      .finally(() => this.#schedule());
  }

  /** One timer at a time: whichever pass ends last sets the next poll. */
  #schedule(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#stopped) return;
    this.#timer = setTimeout(() => this.#tick(), this.#o.pollMs);
    this.#timer.unref();
  }

  async #pass(): Promise<BillingPass> {
    this.#wakeQueued = false;
    const events = await this.#events();
    const jobs = await this.#jobs();
    const { expired, overdue } = await this.#holds();
    const ended = await this.#ends();
    const suspended = await suspendOverdueAccess(this.#d, this.#o.batch);
    const walkInsExpired = await expireWalkIns(this.#d, this.#o.batch);
    const checkoutsExpired = await expireUnpaidCheckouts(this.#d, this.#o.batch, this.#o.checkoutDeadlineMs);
    const checkoutsRechecked = await recheckOpenCheckouts(this.#d, this.#o.batch, this.#o.checkoutRecheckMs);
    const refunds = await recheckPendingRefunds(this.#d, this.#o.batch, this.#o.reconcileMs);
    const intents = await recheckOpenIntents(this.#d, this.#o.batch, this.#o.reconcileMs);
    const membershipsRechecked = await recheckLivingMemberships(this.#d, this.#o.batch, this.#o.reconcileMs);
    return {
      events,
      jobs,
      expired,
      ended,
      overdue,
      suspended,
      walkInsExpired,
      checkoutsExpired,
      checkoutsRechecked,
      refundsRechecked: refunds.checked,
      refundsReconciled: refunds.moved,
      intentsRechecked: intents.checked,
      intentsReconciled: intents.moved,
      membershipsRechecked,
    };
  }

  // ------------------------------------------------------------ webhook inbox

  async #events(): Promise<number> {
    const d = this.#d;
    const token = randomUUID();
    const claimed = await d.db.transaction((tx) =>
      claimWebhookEvents(tx, { token, now: d.clock.now(), leaseMs: this.#o.leaseMs, limit: this.#o.batch }),
    );
    for (const e of claimed) {
      const cid = CorrelationId.parse(e.cid);
      const log = withCorrelation(d.log, cid, { part: 'billing-worker', eventId: e.eventId, type: e.type });
      const step = await guarded(() => this.processWebhookEvent(e, cid));
      if (step.ok) {
        await d.db.transaction((tx) => markWebhookProcessed(tx, { eventId: e.eventId, leaseToken: token }, d.clock.now()));
        log.info({ code: step.code }, 'webhook event processed');
      } else {
        const status = await d.db.transaction((tx) =>
          failWebhookEvent(tx, { eventId: e.eventId, leaseToken: token, attempts: e.attempts }, step, d.clock.now(), this.#o, d.random()),
        );
        const line = { code: step.code, status, attempts: e.attempts, detail: step.error };
        if (status === 'dead') log.error({ ...line, alarm: true }, 'webhook event dead-lettered');
        else log.warn(line, 'webhook event failed; retrying');
      }
    }
    return claimed.length;
  }

  /**
   * One verified event: the PaymentIntent it names is re-read from Stripe and
   * the payment settled on that current status (never on the event's order
   * or its copy of the object); `charge.refunded` records the charge's
   * refunded total (monotone). Other types are stored and ignored.
   */
  async processWebhookEvent(e: StoredWebhookEvent, cid: CorrelationId): Promise<Step> {
    const d = this.#d;
    const payload = EventPayload.safeParse(e.payload);
    if (!payload.success) return { ok: false, code: 'WEBHOOK_MALFORMED', permanent: true, error: 'no data.object' };
    if (e.type.startsWith('payment_intent.')) {
      const obj = IntentObject.safeParse(payload.data.data.object);
      if (!obj.success) return { ok: false, code: 'WEBHOOK_MALFORMED', permanent: true, error: 'not a PaymentIntent' };
      // an intent whose answer a crash lost is not recorded yet: its metadata names the payment
      const byIntent = await loadPaymentByIntent(d.db, obj.data.id);
      const paymentId = byIntent?.id ?? obj.data.metadata?.payment_id;
      const payment = paymentId === undefined ? null : await loadPayment(d.db, paymentId);
      const walkInId = obj.data.metadata?.purpose === 'walk_in' ? obj.data.metadata.subject_id : undefined;
      if (!payment && walkInId !== undefined) {
        // a walk-in at the front desk (app/walk-ins.ts): settled on the intent re-read now, like a stay's payment
        const now = await retrievePaymentIntent(d.stripe, obj.data.id);
        if (!now.ok) return { ok: false, code: now.failure.code, permanent: now.failure.kind === 'permanent', error: now.failure.message };
        const walkIn = await loadWalkIn(d.db, walkInId);
        return done(await settleWalkInPayment(d, walkInId, now.value, this.#subjectCid(cid, walkIn?.cid, e.eventId)));
      }
      if (!payment) return done('PAYMENT_NOT_FOUND'); // not one of ours (another system on the account)
      const now = await retrievePaymentIntent(d.stripe, obj.data.id);
      if (!now.ok) return { ok: false, code: now.failure.code, permanent: now.failure.kind === 'permanent', error: now.failure.message };
      const r = await settleFromObservation(d, payment.id, now.value, this.#subjectCid(cid, payment.cid, e.eventId));
      return done(r.stay ?? r.payment);
    }
    if (REFUND_EVENTS.has(e.type)) {
      // refunds from any source: the intent's refunds are re-read from Stripe, never the amounts the event carried
      const obj = RefundOrCharge.safeParse(payload.data.data.object);
      if (!obj.success) return { ok: false, code: 'WEBHOOK_MALFORMED', permanent: true, error: 'not a charge or a refund' };
      const pi = obj.data.payment_intent;
      const intentId = pi === null || pi === undefined ? null : typeof pi === 'string' ? pi : pi.id;
      if (intentId === null) return done('EVENT_IGNORED'); // a refund of no PaymentIntent is none of ours
      const payment = await loadPaymentByIntent(d.db, intentId);
      if (!payment) {
        // a walk-in's intent (app/walk-ins.ts): its refunds re-read and recorded the same way
        const walkInId = await walkInIdOfIntent(d.db, intentId);
        if (walkInId === null) return done('PAYMENT_NOT_FOUND');
        const refunds = await listRefundsOfIntent(d.stripe, intentId);
        if (!refunds.ok)
          return { ok: false, code: refunds.failure.code, permanent: refunds.failure.kind === 'permanent', error: refunds.failure.message };
        return done(await reconcileWalkInRefunds(d, walkInId, refunds.value, cid));
      }
      const refunds = await listRefundsOfIntent(d.stripe, intentId);
      if (!refunds.ok)
        return { ok: false, code: refunds.failure.code, permanent: refunds.failure.kind === 'permanent', error: refunds.failure.message };
      // Stripe refunds only money it received: a refund's event ahead of the payment's own (reordered, lost)
      // means the intent is re-read and the payment settled first, so the refund lands on money the ledger holds
      const refunded = refunds.value.filter((r) => r.status !== 'failed').reduce((n, r) => n + r.amount, 0);
      if (refunded > payment.amountReceived) {
        const now = await retrievePaymentIntent(d.stripe, intentId);
        if (!now.ok) return { ok: false, code: now.failure.code, permanent: now.failure.kind === 'permanent', error: now.failure.message };
        await settleFromObservation(d, payment.id, now.value, this.#subjectCid(cid, payment.cid, e.eventId));
      }
      return done(await reconcileRefunds(d, payment.id, refunds.value, cid));
    }
    if (e.type.startsWith('customer.subscription.') || e.type.startsWith('invoice.')) {
      // memberships: the subscription is re-read and decided on its current status (app/memberships.ts)
      const sub = SubscriptionObject.safeParse(payload.data.data.object);
      const inv = sub.success ? null : InvoiceObject.safeParse(payload.data.data.object);
      const details = inv?.success ? inv.data.parent?.subscription_details : undefined;
      const named = details?.subscription;
      const subscriptionId = sub.success ? sub.data.id : typeof named === 'string' ? named : named?.id;
      if (subscriptionId === undefined) return done('EVENT_IGNORED');
      const subject = subjectOf(sub.success ? sub.data.metadata : details?.metadata);
      return done(await reconcileSubscription(d, subscriptionId, cid, subject));
    }
    return done('EVENT_IGNORED');
  }

  /**
   * The correlation id a payment's settlement runs under: the one its
   * booking (or sale) stored on the payment row, not the webhook's own,
   * which is Stripe's request and knows nothing of the booking. So the
   * confirmation, the key it issues, the grant the gateway stores and every
   * door decision of that key carry the booking's `X-Correlation-Id`; one
   * log line under each id ties the event to it.
   */
  #subjectCid(eventCid: CorrelationId, subjectCid: CorrelationId | undefined, eventId: string): CorrelationId {
    if (subjectCid === undefined || subjectCid === eventCid) return eventCid;
    const log = withCorrelation(this.#d.log, eventCid, { part: 'billing-worker', eventId });
    log.info({ code: 'SETTLED_UNDER_SUBJECT_CID', subjectCid }, 'the payment is settled under the correlation id of its booking');
    withCorrelation(this.#d.log, subjectCid, { part: 'billing-worker', eventId }).info(
      { code: 'SETTLED_UNDER_SUBJECT_CID', eventCid },
      'a Stripe event settles this booking',
    );
    return subjectCid;
  }

  // ------------------------------------------------------------ billing jobs

  async #jobs(): Promise<number> {
    const d = this.#d;
    const token = randomUUID();
    const claimed = await d.db.transaction((tx) =>
      claimBillingJobs(tx, { token, now: d.clock.now(), leaseMs: this.#o.leaseMs, limit: this.#o.batch }),
    );
    for (const j of claimed) {
      const cid = CorrelationId.parse(j.cid);
      const log = withCorrelation(d.log, cid, { part: 'billing-worker', job: j.kind, jobId: j.id, subjectId: j.subjectId });
      const step = await guarded(() => this.runJob(j, cid));
      if (step.ok) {
        await d.db.transaction((tx) => markBillingJobDone(tx, { id: j.id, leaseToken: token }, d.clock.now(), step.code));
        log.info({ code: step.code }, 'billing job done');
      } else {
        const status = await d.db.transaction((tx) =>
          failBillingJob(tx, { id: j.id, leaseToken: token, attempts: j.attempts }, step, d.clock.now(), this.#o, d.random()),
        );
        const line = { code: step.code, status, attempts: j.attempts, detail: step.error };
        if (status === 'dead') log.error({ ...line, alarm: true }, 'billing job dead-lettered');
        else log.warn(line, 'billing job failed; retrying with backoff');
      }
    }
    return claimed.length;
  }

  async runJob(j: BillingJob, cid: CorrelationId): Promise<Step> {
    const d = this.#d;
    switch (j.kind) {
      case 'create_intent':
        return done(await repairIntent(d, PaymentJob.parse(j.body).paymentId, cid));
      case 'cancel_intent': {
        const p = await loadPayment(d.db, PaymentJob.parse(j.body).paymentId);
        if (!p) return done('PAYMENT_NOT_FOUND');
        // an intent never recorded was never shown to anyone: nobody can pay it
        if (p.intentId === null) return done('PAYMENT_NOT_SETTLED');
        const r = await cancelPaymentIntent(d.stripe, p.intentId);
        if (!r.ok) return { ok: false, code: r.failure.code, permanent: r.failure.kind === 'permanent', error: r.failure.message };
        // canceled → the payment fails; already succeeded → the stay has ended, so the money is refunded
        const s = await settleFromObservation(d, p.id, r.value, cid);
        return done(s.stay ?? s.payment);
      }
      case 'refund':
        return this.#refund(RefundJob.parse(j.body).refundId, cid);
      case 'notify': {
        const n = NotifyJob.parse(j.body);
        // the guest notification channel is still to come: the notice is this log line (never the PIN)
        withCorrelation(d.log, cid, { part: 'notify' }).info(
          { code: 'GUEST_NOTIFIED', notice: n.notice, stayId: n.stayId },
          'guest notice',
        );
        return done('GUEST_NOTIFIED');
      }
      case 'reconcile_membership':
        // a billing stop Stripe gave no answer to: read the subscription back and converge on it
        return done(await reconcilePendingStop(d, PendingStopJob.parse(j.body), cid));
      case 'issue_stay_key':
        // keys are issued in the confirming transaction (app/stays.ts); no job of this kind is written
        return done('NOTHING_TO_DO');
      case 'walk_in_refund':
        return done(await refundWalkIn(d, WalkInRefundJob.parse(j.body).walkInId, cid));
      case 'membership_refund':
        // money that landed for an application its checkout deadline ended
        return done(await refundLateCheckout(d, MembershipRefundJob.parse(j.body).membershipId, cid));
      default: {
        const never: never = j.kind;
        throw new Error(`unhandled billing job ${String(never)}`);
      }
    }
  }

  /**
   * The refund call with the key stored before it: Stripe answers a retry with the refund it already made
   * (exactly once). The payment's refunds are then re-read from Stripe and recorded with their own status:
   * a pending refund is done here and waits for refund.updated; a failed one is dead for an operator,
   * whose retry is a new attempt with a new key (`currentRefundAttempt`).
   */
  async #refund(refundId: string, cid: CorrelationId, depth = 0): Promise<Step> {
    const d = this.#d;
    const first = await loadRefund(d.db, refundId);
    if (!first) return done('PAYMENT_NOT_FOUND');
    const p = await loadPayment(d.db, first.paymentId);
    if (!p?.intentId) return { ok: false, code: 'PAYMENT_NOT_FOUND', permanent: true, error: 'the refunded payment has no intent' };
    const refund = await currentRefundAttempt(d, first, cid);
    if (refund.status === 'succeeded') return done('REFUND_ALREADY_RECORDED');
    const r = await createRefund(d.stripe, {
      intentId: p.intentId,
      amount: refund.amount,
      idempotencyKey: refund.idempotencyKey,
      refundId: refund.id,
      reason: 'requested_by_customer',
    });
    if (!r.ok) {
      const permanent = r.failure.kind === 'permanent';
      if (permanent) {
        // a refusal may only mean Stripe already gave the money back (the dashboard raced us, its webhooks
        // maybe lost): the intent's refunds are re-read and recorded, and ours settled against them
        const all = await listRefundsOfIntent(d.stripe, p.intentId);
        if (!all.ok) return { ok: false, code: all.failure.code, permanent: all.failure.kind === 'permanent', error: all.failure.message };
        await reconcileRefunds(d, p.id, all.value, cid);
        const seen = await loadRefund(d.db, refund.id);
        if (seen?.status === 'succeeded') return done('REFUND_ALREADY_RECORDED');
        if (seen?.status === 'pending' && seen.stripeRefundId !== null) return done('REFUND_PENDING');
        const s = await settleRefusedRefund(d, refund, p.amountReceived, all.value, `${r.failure.code}: ${r.failure.message}`, cid);
        if (s.outcome === 'satisfied') return done('REFUND_ALREADY_RECORDED');
        // the smaller rest under its own key; bounded, so a Stripe that keeps refusing ends on the dead-letter list
        if (s.outcome === 'rest' && depth < 2) return this.#refund(refundId, cid, depth + 1);
      }
      // its own verb: a permanent error moves the refund to failed, which only this write may do
      await inBilling(d, 'noteRefundError', (tx) =>
        noteRefundError(tx, refund.id, `${r.failure.code}: ${r.failure.message}`, permanent, d.clock.now()),
      );
      return { ok: false, code: r.failure.code, permanent, error: r.failure.message };
    }
    d.crash('afterRefundBeforeRecord');
    const all = await listRefundsOfIntent(d.stripe, p.intentId);
    if (!all.ok) return { ok: false, code: all.failure.code, permanent: all.failure.kind === 'permanent', error: all.failure.message };
    const code = await reconcileRefunds(d, p.id, all.value, cid);
    const after = await loadRefund(d.db, refund.id);
    if (after?.status === 'pending') return done('REFUND_PENDING');
    if (after?.status === 'failed')
      return { ok: false, code: 'REFUND_FAILED', permanent: true, error: `Stripe failed refund ${r.value.stripeRefundId}` };
    return done(code);
  }

  // ------------------------------------------------------------ sweeps

  async #holds(): Promise<{ expired: number; overdue: number }> {
    const d = this.#d;
    const cid = newCorrelationId();
    const log = withCorrelation(d.log, cid, { part: 'hold-sweep' });
    let expired = 0;
    for (const id of await listExpiredHolds(d.db, d.clock.now(), this.#o.batch)) {
      try {
        const r = await expireStay(d, id, cid);
        if (r.status === 'applied') expired += 1;
      } catch (e) {
        log.warn({ stayId: id, err: String(e) }, 'hold expiry failed');
      }
    }
    const overdue = await countOverdueHolds(d.db, d.clock.now() - this.#o.holdSlackMs);
    if (overdue > 0) log.error({ alarm: true, code: 'STAY_HOLD_OVERDUE', count: overdue }, 'ALARM: stays pending past their hold');
    return { expired, overdue };
  }

  async #ends(): Promise<number> {
    const d = this.#d;
    const cid = newCorrelationId();
    // each site's own calendar: the last check-out date that is over there now (endStay still checks the instant)
    const now = d.clock.now();
    const due = (await listSitesWithStaysUnderway(d.db)).map((s) => ({
      siteId: s.siteId,
      lastDate: lastCheckOutDue(now, s.checkOutTime, s.timeZone),
    }));
    let ended = 0;
    for (const id of await listStaysEnding(d.db, due, this.#o.batch)) {
      try {
        const r = await endStay(d, id, cid);
        if (r.status === 'applied') ended += 1;
      } catch (e) {
        withCorrelation(d.log, cid, { part: 'stay-end' }).warn({ stayId: id, err: String(e) }, 'automatic check-out failed');
      }
    }
    return ended;
  }
}
