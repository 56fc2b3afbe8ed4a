import type Stripe from 'stripe';
import { billingCall, type BillingResult } from './errors.js';

export interface RefundRequest {
  readonly intentId: string;
  readonly amount: number;
  /** the refund row's key, stored before this call: a retry after a crash or a lost answer gets the same refund */
  readonly idempotencyKey: string;
  readonly refundId: string;
  readonly reason: 'requested_by_customer' | 'duplicate' | 'fraudulent';
}

export interface MadeRefund {
  readonly stripeRefundId: string;
  readonly status: string;
  readonly amount: number;
  readonly currency: string;
}

/** A refund as Stripe holds it now; `requires_action` counts as pending and `canceled` as failed (no money moved). */
export interface RefundObservation {
  readonly stripeRefundId: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: 'pending' | 'succeeded' | 'failed';
  /** our refund row, when we made it (`metadata.refund_id`); absent for one made in Stripe directly */
  readonly refundId: string | null;
}

const statusOf = (s: string | null | undefined): RefundObservation['status'] =>
  s === 'succeeded' ? 'succeeded' : s === 'failed' || s === 'canceled' ? 'failed' : 'pending';

export function observeRefund(r: Stripe.Refund): RefundObservation {
  return {
    stripeRefundId: r.id,
    amount: r.amount,
    currency: r.currency,
    status: statusOf(r.status),
    refundId: r.metadata?.refund_id ?? null,
  };
}

/**
 * Every refund of a PaymentIntent, whoever made it, re-read from Stripe: what the ledger records, never
 * the amounts an event carried (a charge counts a pending refund as refunded until it fails).
 */
export async function listRefundsOfIntent(stripe: Stripe, intentId: string): Promise<BillingResult<RefundObservation[]>> {
  const res = await billingCall(async () => {
    const all: RefundObservation[] = [];
    for await (const r of stripe.refunds.list({ payment_intent: intentId, limit: 100 })) all.push(observeRefund(r));
    return all;
  });
  return res;
}

/** Creates one refund with the stored idempotency key (one refund per key, ever: Stripe replays the first answer). */
export async function createRefund(stripe: Stripe, r: RefundRequest): Promise<BillingResult<MadeRefund>> {
  const res = await billingCall(() =>
    stripe.refunds.create(
      { payment_intent: r.intentId, amount: r.amount, reason: r.reason, metadata: { refund_id: r.refundId } },
      { idempotencyKey: r.idempotencyKey },
    ),
  );
  if (!res.ok) return res;
  return {
    ok: true,
    value: { stripeRefundId: res.value.id, status: res.value.status ?? 'unknown', amount: res.value.amount, currency: res.value.currency },
  };
}

/** One refund as Stripe holds it now (`requires_action` counts as pending, `canceled` as failed). */
export async function retrieveRefund(stripe: Stripe, stripeRefundId: string): Promise<BillingResult<RefundObservation>> {
  const res = await billingCall(() => stripe.refunds.retrieve(stripeRefundId));
  return res.ok ? { ok: true, value: observeRefund(res.value) } : res;
}
