import type Stripe from 'stripe';
import type { SubscriptionObservation } from '../../domain/memberships.js';
import type { Plan } from '../../domain/plans.js';
import { billingCall, type BillingFailure, type BillingResult } from './errors.js';

/**
 * THE one place a Subscription is created (one factory, as for
 * PaymentIntents; a test greps cloud/src for the SDK
 * call and finds it here only). Every subscription carries
 * `metadata.purpose` (`membership_initial` | `membership_renewal`) and
 * `metadata.subject_id` (the membership), and is created with the
 * idempotency key `purpose:subjectId:attempt` the caller stored in the
 * membership row BEFORE calling: a retry gets the same subscription back.
 */
export type SubscriptionPurpose = 'membership_initial' | 'membership_renewal';

export interface CreateSubscriptionRequest {
  readonly purpose: SubscriptionPurpose;
  /** the membership */
  readonly subjectId: string;
  readonly customerId: string;
  readonly priceId: string;
  /** the stored `purpose:subjectId:attempt` */
  readonly idempotencyKey: string;
}

export interface CreatedSubscription {
  readonly observation: SubscriptionObservation;
  /** the first invoice, open until the member pays it */
  readonly invoiceId: string | null;
}

const STATUSES = ['incomplete', 'incomplete_expired', 'active', 'past_due', 'unpaid', 'canceled'] as const;

/** The membership's view of a subscription: what `observeSubscription` decides on. */
export function observeSubscription(s: Stripe.Subscription): SubscriptionObservation {
  const end = s.items.data[0]?.current_period_end ?? 0;
  const reason: string | null | undefined = s.cancellation_details?.reason;
  return {
    subscriptionId: s.id,
    status: STATUSES.find((k) => k === s.status) ?? 'other',
    currentPeriodEnd: end * 1000,
    cancelAtPeriodEnd: s.cancel_at_period_end,
    canceledFor: reason === 'payment_failed' ? 'payment_failed' : reason === 'cancellation_requested' ? 'cancellation_requested' : null,
  };
}

const idOf = (x: string | { id: string } | null): string | null => (x === null ? null : typeof x === 'string' ? x : x.id);

/** The plan's recurring Price, once per plan (key `price:<planId>`: a retry gets the same Price). */
export async function createPlanPrice(stripe: Stripe, plan: Plan): Promise<BillingResult<string>> {
  const res = await billingCall(() =>
    stripe.prices.create(
      {
        currency: plan.currency,
        unit_amount: plan.amount,
        recurring: { interval: plan.interval, interval_count: plan.intervalCount },
        product_data: { name: plan.name },
        metadata: { plan_id: plan.id },
      },
      { idempotencyKey: `price:${plan.id}` },
    ),
  );
  return res.ok ? { ok: true, value: res.value.id } : res;
}

/** The member's Stripe customer, once per membership (key `customer:<membershipId>`). */
export async function createMemberCustomer(
  stripe: Stripe,
  c: { readonly membershipId: string; readonly personId: string },
): Promise<BillingResult<string>> {
  const res = await billingCall(() =>
    stripe.customers.create(
      { metadata: { membership_id: c.membershipId, person_id: c.personId } },
      { idempotencyKey: `customer:${c.membershipId}` },
    ),
  );
  return res.ok ? { ok: true, value: res.value.id } : res;
}

export async function createSubscription(stripe: Stripe, r: CreateSubscriptionRequest): Promise<BillingResult<CreatedSubscription>> {
  if (!r.idempotencyKey.startsWith(`${r.purpose}:${r.subjectId}:`)) {
    throw new Error(`idempotency key ${r.idempotencyKey} is not ${r.purpose}:${r.subjectId}:<attempt>`);
  }
  const res = await billingCall(() =>
    stripe.subscriptions.create(
      {
        customer: r.customerId,
        items: [{ price: r.priceId }],
        // the first invoice waits for the member's payment; the subscription is `incomplete` until then
        payment_behavior: 'default_incomplete',
        metadata: { purpose: r.purpose, subject_id: r.subjectId, membership_id: r.subjectId },
      },
      { idempotencyKey: r.idempotencyKey },
    ),
  );
  if (!res.ok) return res;
  return { ok: true, value: { observation: observeSubscription(res.value), invoiceId: idOf(res.value.latest_invoice) } };
}

/** A paid payment of an invoice: the PaymentIntent its money came through. */
export interface InvoicePaymentObservation {
  readonly intentId: string;
  readonly amount: number;
  readonly currency: string;
}

/**
 * The paid payments of an invoice (`GET /v1/invoice_payments?invoice=…&status=paid`; API 2025-03-31 and
 * later pay an invoice through a PaymentIntent an InvoicePayment names). Every page is read.
 */
export async function listPaidInvoicePayments(stripe: Stripe, invoiceId: string): Promise<BillingResult<InvoicePaymentObservation[]>> {
  const res = await billingCall(() =>
    stripe.invoicePayments.list({ invoice: invoiceId, status: 'paid', limit: 100 }).autoPagingToArray({ limit: 1000 }),
  );
  if (!res.ok) return res;
  return {
    ok: true,
    value: res.value.flatMap((p) => {
      const pi = p.payment.payment_intent;
      const intentId = typeof pi === 'string' ? pi : pi?.id;
      return intentId === undefined ? [] : [{ intentId, amount: p.amount_paid ?? 0, currency: p.currency }];
    }),
  };
}

/**
 * Refunds all that remains of an invoice's PaymentIntent, with the caller's stored key (one refund per key,
 * ever: a retry after a lost answer gets the same refund).
 */
export async function refundInvoicePayment(
  stripe: Stripe,
  r: { readonly intentId: string; readonly idempotencyKey: string; readonly membershipId: string },
): Promise<
  BillingResult<{ readonly stripeRefundId: string; readonly amount: number; readonly currency: string; readonly status: string }>
> {
  const res = await billingCall(() =>
    stripe.refunds.create(
      { payment_intent: r.intentId, reason: 'requested_by_customer', metadata: { membership_id: r.membershipId } },
      { idempotencyKey: r.idempotencyKey },
    ),
  );
  if (!res.ok) return res;
  return {
    ok: true,
    value: { stripeRefundId: res.value.id, amount: res.value.amount, currency: res.value.currency, status: res.value.status ?? 'unknown' },
  };
}

/** Re-reads a subscription: decisions use its current status, never the order events arrived in. */
export async function retrieveSubscription(stripe: Stripe, id: string): Promise<BillingResult<SubscriptionObservation>> {
  const res = await billingCall(() => stripe.subscriptions.retrieve(id));
  return res.ok ? { ok: true, value: observeSubscription(res.value) } : res;
}

/**
 * Cancels now (key `cancel:<id>`). On any error the subscription is re-read:
 * Stripe has no "already canceled" code (a cancel of an ended subscription
 * is 404 `resource_missing`, though a GET still returns it), so a
 * subscription the re-read finds canceled counts as done (another staff
 * member, or Stripe, got there first). Otherwise the cancel's own failure.
 */
export async function cancelSubscriptionNow(stripe: Stripe, id: string): Promise<BillingResult<SubscriptionObservation>> {
  const res = await billingCall(() => stripe.subscriptions.cancel(id, {}, { idempotencyKey: `cancel:${id}` }));
  if (res.ok) return { ok: true, value: observeSubscription(res.value) };
  return stoppedAnyway(stripe, id, res.failure, (o) => o.status === 'canceled' || o.status === 'incomplete_expired');
}

/**
 * Schedules the cancellation at the period end: billing stops, access runs to the end. The key is
 * `cancel_at_period_end:<id>` for the membership's own stop, or one naming the attempt when a stop Stripe
 * lost is asserted again (the first key's saved answer would be replayed, changing nothing). On an error
 * the subscription is re-read, as for a cancel: one already set to end (or ended) counts as done.
 */
export async function scheduleSubscriptionEnd(
  stripe: Stripe,
  id: string,
  idempotencyKey = `cancel_at_period_end:${id}`,
): Promise<BillingResult<SubscriptionObservation>> {
  const res = await billingCall(() => stripe.subscriptions.update(id, { cancel_at_period_end: true }, { idempotencyKey }));
  if (res.ok) return { ok: true, value: observeSubscription(res.value) };
  return stoppedAnyway(stripe, id, res.failure, (o) => o.cancelAtPeriodEnd || o.status === 'canceled');
}

/** The re-read after a failed stop: done when Stripe shows the stop, else the call's own failure (its outcome kept). */
async function stoppedAnyway(
  stripe: Stripe,
  id: string,
  failure: BillingFailure,
  stopped: (o: SubscriptionObservation) => boolean,
): Promise<BillingResult<SubscriptionObservation>> {
  const now = await retrieveSubscription(stripe, id);
  if (now.ok && stopped(now.value)) return now;
  return { ok: false, failure };
}
