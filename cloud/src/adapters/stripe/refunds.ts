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
