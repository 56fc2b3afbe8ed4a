import type Stripe from 'stripe';
import { INTENT_STATUSES, type IntentObservation, type IntentStatus } from '../../domain/payments.js';
import type { PaymentPurpose } from '../../domain/stays.js';
import { billingCall, type BillingResult } from './errors.js';

/**
 * THE one place a PaymentIntent is created (a test greps
 * cloud/src for the SDK call and finds it here only). Every intent carries
 * `metadata.purpose` and `metadata.subject_id`, and is created with the
 * idempotency key `purpose:subjectId:attempt` the caller stored in the
 * payment row BEFORE calling: a retry — the SDK's own, or ours after a crash
 * or a lost answer — gets the same intent back from Stripe, never a second one.
 */
export interface CreateIntentRequest {
  /** a stay's payment, or a walk-in day pass at the front desk (app/walk-ins.ts) */
  readonly purpose: PaymentPurpose | 'walk_in';
  /** the stay (or other subject) the money is for */
  readonly subjectId: string;
  /** the payment row's id, for finding it from a webhook */
  readonly paymentId: string;
  readonly amount: number;
  readonly currency: string;
  /** the stored `purpose:subjectId:attempt` */
  readonly idempotencyKey: string;
  readonly description?: string;
}

export interface CreatedIntent {
  readonly intentId: string;
  readonly clientSecret: string;
  readonly observation: IntentObservation;
}

export function expectedIdempotencyKey(r: Pick<CreateIntentRequest, 'purpose' | 'subjectId'>, attempt: number): string {
  return `${r.purpose}:${r.subjectId}:${attempt}`;
}

/** The ledger's view of an intent: what `settlePayment` decides on. */
export function observe(pi: Stripe.PaymentIntent): IntentObservation {
  return {
    intentId: pi.id,
    status: INTENT_STATUSES.find((k): k is IntentStatus => k === pi.status) ?? 'other',
    amount: pi.amount,
    amountReceived: pi.amount_received,
    currency: pi.currency,
    declined: pi.last_payment_error !== null && pi.last_payment_error !== undefined,
  };
}

export async function createPaymentIntent(stripe: Stripe, r: CreateIntentRequest): Promise<BillingResult<CreatedIntent>> {
  if (!r.idempotencyKey.startsWith(`${r.purpose}:${r.subjectId}:`)) {
    throw new Error(`idempotency key ${r.idempotencyKey} is not ${r.purpose}:${r.subjectId}:<attempt>`);
  }
  const res = await billingCall(() =>
    stripe.paymentIntents.create(
      {
        amount: r.amount,
        currency: r.currency,
        automatic_payment_methods: { enabled: true },
        metadata: { purpose: r.purpose, subject_id: r.subjectId, payment_id: r.paymentId },
        ...(r.description === undefined ? {} : { description: r.description }),
      },
      { idempotencyKey: r.idempotencyKey },
    ),
  );
  if (!res.ok) return res;
  const pi = res.value;
  if (pi.client_secret === null) throw new Error(`PaymentIntent ${pi.id} came back without a client_secret`);
  return { ok: true, value: { intentId: pi.id, clientSecret: pi.client_secret, observation: observe(pi) } };
}

/** Re-reads an intent: decisions use its current status, never the order events arrived in. */
export async function retrievePaymentIntent(stripe: Stripe, intentId: string): Promise<BillingResult<IntentObservation>> {
  const res = await billingCall(() => stripe.paymentIntents.retrieve(intentId));
  return res.ok ? { ok: true, value: observe(res.value) } : res;
}

/**
 * Cancels an intent (a stay that failed or expired: nothing may be charged).
 * Idempotent by its key `cancel:<intentId>`; an intent that is already
 * canceled counts as done. One that already succeeded is answered with its
 * observation, so the caller refunds instead.
 */
export async function cancelPaymentIntent(stripe: Stripe, intentId: string): Promise<BillingResult<IntentObservation>> {
  const res = await billingCall(() =>
    stripe.paymentIntents.cancel(intentId, { cancellation_reason: 'abandoned' }, { idempotencyKey: `cancel:${intentId}` }),
  );
  if (res.ok) return { ok: true, value: observe(res.value) };
  if (res.failure.stripeCode === 'payment_intent_unexpected_state') return retrievePaymentIntent(stripe, intentId);
  return res;
}
