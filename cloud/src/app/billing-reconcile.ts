import { CorrelationId, withCorrelation, type Logger } from '@tobira/shared';
import { claimOpenIntentsOfEndedStays, claimPendingRefundsToRecheck, loadPayment } from '../adapters/db/payments.js';
import { claimPendingWalkInRefundsToRecheck } from '../adapters/db/walk-ins.js';
import { cancelPaymentIntent } from '../adapters/stripe/payment-intents.js';
import { listRefundsOfIntent, retrieveRefund } from '../adapters/stripe/refunds.js';
import { BillingStepFailed, reconcileRefunds, settleFromObservation, type StayDeps } from './stays.js';
import { reconcileWalkInRefunds } from './walk-ins.js';

/**
 * Outcomes Stripe tells only by webhook, re-read from Stripe when the webhook never came (lost, or the
 * endpoint down longer than Stripe retries): docs/payments.md "Outcomes whose webhook was lost". Each
 * outcome is applied through the verb its webhook runs, so a webhook that turns up later finds it
 * recorded and changes nothing (each refund once, each notice once).
 */

/** What one sweep did: rows re-read from Stripe, and those Stripe had moved on (applied now). */
export interface RecheckCount {
  readonly checked: number;
  readonly moved: number;
}

/** A row the sweep could not re-read on this pass stays claimed until the next interval: logged, never thrown. */
function skipped(log: Logger, e: unknown, what: string): void {
  const code = e instanceof BillingStepFailed ? e.code : 'INTERNAL';
  log.warn({ code, err: String(e) }, `${what} not re-read on this pass`);
}

/**
 * Refunds Stripe holds `pending` (a stay's, ours or one made in Stripe directly; then the desk's walk-in
 * refunds), unchanged for `intervalMs` and not re-read for as long: each is re-read (`refunds.retrieve`);
 * one that has ended (succeeded, failed, canceled) is recorded by `reconcileRefunds` (a walk-in's by
 * `reconcileWalkInRefunds`) from the intent's refunds as Stripe lists them, exactly as `refund.updated`
 * would, under the refund's own correlation id (the request that asked for it). One still pending waits
 * for the next interval.
 */
export async function recheckPendingRefunds(deps: StayDeps, limit: number, intervalMs: number): Promise<RecheckCount> {
  const stripe = deps.stripe;
  if (!stripe) return { checked: 0, moved: 0 };
  const due = await claimPendingRefundsToRecheck(deps.db, { now: deps.clock.now(), minAgeMs: intervalMs, intervalMs, limit });
  let moved = 0;
  for (const r of due) {
    const cid = CorrelationId.parse(r.cid);
    const log = withCorrelation(deps.log, cid, { part: 'refund-recheck', refundId: r.id, paymentId: r.paymentId });
    try {
      if (r.stripeRefundId === null) continue;
      const one = await retrieveRefund(stripe, r.stripeRefundId);
      if (!one.ok) throw new BillingStepFailed(one.failure.code, one.failure.kind === 'permanent', one.failure.message);
      if (one.value.status === 'pending') {
        log.info({ code: 'REFUND_PENDING', stripeRefundId: r.stripeRefundId, pendingSince: r.updatedAt }, 'refund still pending at Stripe');
        continue;
      }
      const p = await loadPayment(deps.db, r.paymentId);
      if (!p || p.intentId === null) continue;
      const all = await listRefundsOfIntent(stripe, p.intentId);
      if (!all.ok) throw new BillingStepFailed(all.failure.code, all.failure.kind === 'permanent', all.failure.message);
      const code = await reconcileRefunds(deps, p.id, all.value, cid);
      moved += 1;
      log.warn(
        { code: 'REFUND_RECONCILED', stripeRefundId: r.stripeRefundId, outcome: one.value.status, paymentCode: code },
        'a pending refund had ended at Stripe with no webhook: recorded from Stripe',
      );
    } catch (e) {
      skipped(log, e, 'pending refund');
    }
  }
  const walkIns = await claimPendingWalkInRefundsToRecheck(deps.db, { now: deps.clock.now(), minAgeMs: intervalMs, intervalMs, limit });
  for (const r of walkIns) {
    const log = withCorrelation(deps.log, r.cid, { part: 'refund-recheck', walkInId: r.walkInId, stripeRefundId: r.stripeRefundId });
    try {
      const one = await retrieveRefund(stripe, r.stripeRefundId);
      if (!one.ok) throw new BillingStepFailed(one.failure.code, one.failure.kind === 'permanent', one.failure.message);
      if (one.value.status === 'pending' || r.intentId === null) {
        log.info({ code: 'REFUND_PENDING' }, 'walk-in refund still pending at Stripe');
        continue;
      }
      const all = await listRefundsOfIntent(stripe, r.intentId);
      if (!all.ok) throw new BillingStepFailed(all.failure.code, all.failure.kind === 'permanent', all.failure.message);
      const code = await reconcileWalkInRefunds(deps, r.walkInId, all.value, r.cid);
      moved += 1;
      log.warn(
        { code: 'REFUND_RECONCILED', outcome: one.value.status, walkInCode: code },
        'a pending walk-in refund had ended at Stripe with no webhook: recorded from Stripe',
      );
    } catch (e) {
      skipped(log, e, 'pending walk-in refund');
    }
  }
  return { checked: due.length + walkIns.length, moved };
}

/**
 * Intents still open in the ledger for stays that ended at least `intervalMs` ago: the stay's
 * `cancel_intent` job may have given up while Stripe could not be reached, or the guest paid and the
 * webhook was lost. Each is cancelled at Stripe with the job's own key (`cancelPaymentIntent`: an intent
 * already paid answers its status) and settled by `settleFromObservation`, as the job does: cancelled →
 * the payment is known unpaid; paid → `PAYMENT_AFTER_STAY_ENDED` and refunded in full, once (the
 * payment's compare-and-set lets one settlement through, whoever runs first).
 */
export async function recheckOpenIntents(deps: StayDeps, limit: number, intervalMs: number): Promise<RecheckCount> {
  const stripe = deps.stripe;
  if (!stripe) return { checked: 0, moved: 0 };
  const due = await claimOpenIntentsOfEndedStays(deps.db, { now: deps.clock.now(), minAgeMs: intervalMs, intervalMs, limit });
  let moved = 0;
  for (const p of due) {
    const log = withCorrelation(deps.log, p.cid, { part: 'intent-recheck', paymentId: p.id, stayId: p.stayId });
    try {
      if (p.intentId === null) continue;
      const r = await cancelPaymentIntent(stripe, p.intentId);
      if (!r.ok) throw new BillingStepFailed(r.failure.code, r.failure.kind === 'permanent', r.failure.message);
      const s = await settleFromObservation(deps, p.id, r.value, p.cid);
      const after = await loadPayment(deps.db, p.id);
      if (after?.status !== p.status) moved += 1;
      log.warn(
        { code: 'INTENT_RECONCILED', intentId: p.intentId, intentStatus: r.value.status, paymentCode: s.payment, stayCode: s.stay },
        'an open intent of a stay that ended was re-read from Stripe',
      );
    } catch (e) {
      skipped(log, e, 'open intent');
    }
  }
  return { checked: due.length, moved };
}
