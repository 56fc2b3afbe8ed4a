/**
 * The wire shapes this server answers with: the subset of Stripe's
 * `payment_intent`, `charge`, `refund`, `event` and error objects Tobira reads,
 * field names and value sets as in Stripe's OpenAPI spec (stripe/openapi,
 * `spec3.json`) for the API version the pinned SDK sends. Fields Tobira never
 * reads are left out rather than faked.
 */

export type PaymentIntentStatus =
  'requires_payment_method' | 'requires_confirmation' | 'requires_action' | 'processing' | 'requires_capture' | 'canceled' | 'succeeded';

export type CancellationReason = 'duplicate' | 'fraudulent' | 'requested_by_customer' | 'abandoned';
export type RefundReason = 'duplicate' | 'fraudulent' | 'requested_by_customer';
export type Metadata = Record<string, string>;

export interface LastPaymentError {
  type: 'card_error';
  code: string;
  decline_code: string;
  message: string;
  charge: string;
  payment_method: { id: string; object: 'payment_method'; type: 'card' };
}

export interface PaymentIntent {
  id: string;
  object: 'payment_intent';
  allowed_payment_method_types: string[] | null;
  amount: number;
  amount_capturable: number;
  amount_received: number;
  automatic_payment_methods: { enabled: boolean } | null;
  canceled_at: number | null;
  cancellation_reason: CancellationReason | null;
  capture_method: 'automatic';
  client_secret: string;
  confirmation_method: 'automatic';
  created: number;
  currency: string;
  customer: string | null;
  description: string | null;
  last_payment_error: LastPaymentError | null;
  latest_charge: string | null;
  livemode: false;
  metadata: Metadata;
  next_action: null;
  payment_method: string | null;
  payment_method_types: string[];
  receipt_email: string | null;
  status: PaymentIntentStatus;
}

export interface Charge {
  id: string;
  object: 'charge';
  amount: number;
  amount_captured: number;
  amount_refunded: number;
  captured: boolean;
  created: number;
  currency: string;
  failure_code: string | null;
  failure_message: string | null;
  livemode: false;
  metadata: Metadata;
  outcome: { network_status: string; reason: string | null; type: string; seller_message: string } | null;
  paid: boolean;
  payment_intent: string;
  payment_method: string;
  refunded: boolean;
  status: 'succeeded' | 'pending' | 'failed';
}

/** Stripe's Refund (the SDK's `Stripe.Refund`): what `refunds.retrieve` and the refund events carry. */
export interface Refund {
  id: string;
  object: 'refund';
  amount: number;
  /** no balance transactions here */
  balance_transaction: null;
  charge: string;
  created: number;
  currency: string;
  customer: null;
  /** set once a refund failed (Stripe's values; here always `unknown`) */
  failure_reason?: 'unknown';
  metadata: Metadata;
  payment_intent: string;
  payment_method: string;
  /** set while the refund is pending */
  pending_reason?: 'processing';
  /** set while the refund waits for the customer (`requires_action`): Stripe e-mailed them for their details */
  next_action?: {
    type: 'display_details';
    display_details: { email_sent: { email_sent_at: number; email_sent_to: string }; expires_at: number };
  };
  reason: RefundReason | null;
  receipt_number: null;
  source_transfer_reversal: null;
  status: 'pending' | 'requires_action' | 'succeeded' | 'failed' | 'canceled';
  transfer_reversal: null;
}

export type EventType =
  | 'payment_intent.created'
  | 'payment_intent.processing'
  | 'payment_intent.succeeded'
  | 'payment_intent.payment_failed'
  | 'payment_intent.canceled'
  | 'charge.pending'
  | 'charge.succeeded'
  | 'charge.failed'
  | 'charge.refunded'
  | 'refund.created'
  | 'refund.updated'
  | 'refund.failed'
  | 'charge.refund.updated'
  | 'customer.created'
  | 'customer.subscription.created'
  | 'customer.subscription.updated'
  | 'customer.subscription.deleted'
  | 'invoice.created'
  | 'invoice.finalized'
  | 'invoice.paid'
  | 'invoice.payment_succeeded'
  | 'invoice.payment_failed';

export type StripeObject = PaymentIntent | Charge | Refund | Customer | Subscription | Invoice;

export interface StripeEvent {
  id: string;
  object: 'event';
  api_version: string;
  created: number;
  data: { object: StripeObject; previous_attributes?: Record<string, unknown> };
  livemode: false;
  pending_webhooks: number;
  request: { id: string | null; idempotency_key: string | null };
  type: EventType;
}

/** Stripe's error `type` values (API reference "Errors"). */
export type ErrorType = 'api_error' | 'card_error' | 'idempotency_error' | 'invalid_request_error';

export interface StripeErrorBody {
  type: ErrorType;
  message: string;
  code?: string;
  decline_code?: string;
  param?: string;
  charge?: string;
  payment_intent?: PaymentIntent;
  doc_url?: string;
}

/** An answer as it goes on the wire: what the idempotency layer stores and replays. */
export interface ApiAnswer {
  status: number;
  body: unknown;
}

export function errorAnswer(status: number, error: StripeErrorBody): ApiAnswer {
  const docUrl = error.code ? { doc_url: `https://stripe.com/docs/error-codes/${error.code.replaceAll('_', '-')}` } : {};
  return { status, body: { error: { ...error, ...docUrl } } };
}

// ---------------------------------------------------------------- billing (subscriptions)

export interface Customer {
  id: string;
  object: 'customer';
  created: number;
  description: string | null;
  email: string | null;
  livemode: false;
  metadata: Metadata;
  name: string | null;
  /** the card the first invoice was paid with: what renewals charge (`invoice_settings.default_payment_method`) */
  invoice_settings: { default_payment_method: string | null };
}

export type RecurringInterval = 'day' | 'week' | 'month' | 'year';

export interface Price {
  id: string;
  object: 'price';
  active: boolean;
  created: number;
  currency: string;
  livemode: false;
  metadata: Metadata;
  product: string;
  recurring: { interval: RecurringInterval; interval_count: number } | null;
  type: 'recurring' | 'one_time';
  unit_amount: number;
}

export interface SubscriptionItem {
  id: string;
  object: 'subscription_item';
  created: number;
  /** since API 2025-03-31 the period lives on the item, not the subscription */
  current_period_start: number;
  current_period_end: number;
  metadata: Metadata;
  price: Price;
  quantity: number;
  subscription: string;
}

export type SubscriptionStatus = 'incomplete' | 'incomplete_expired' | 'active' | 'past_due' | 'canceled' | 'unpaid';

export interface Subscription {
  id: string;
  object: 'subscription';
  billing_cycle_anchor: number;
  cancel_at: number | null;
  cancel_at_period_end: boolean;
  canceled_at: number | null;
  cancellation_details: { comment: string | null; feedback: string | null; reason: 'cancellation_requested' | 'payment_failed' | null };
  collection_method: 'charge_automatically';
  created: number;
  currency: string;
  customer: string;
  ended_at: number | null;
  items: { object: 'list'; data: SubscriptionItem[]; has_more: false; url: string };
  latest_invoice: string | null;
  livemode: false;
  metadata: Metadata;
  start_date: number;
  status: SubscriptionStatus;
}

export type InvoiceStatus = 'draft' | 'open' | 'paid' | 'uncollectible' | 'void';

/**
 * One payment of an invoice (API 2025-03-31: an invoice is paid through a PaymentIntent the
 * InvoicePayment names; `GET /v1/invoice_payments?invoice=`). A refund of the invoice's money is a
 * refund of that PaymentIntent.
 */
export interface InvoicePayment {
  id: string;
  object: 'invoice_payment';
  amount_paid: number | null;
  amount_requested: number;
  created: number;
  currency: string;
  invoice: string;
  is_default: boolean;
  livemode: false;
  payment: { type: 'payment_intent'; payment_intent: string };
  status: 'open' | 'paid' | 'canceled';
  status_transitions: { canceled_at: number | null; paid_at: number | null };
}

export interface Invoice {
  id: string;
  object: 'invoice';
  amount_due: number;
  amount_paid: number;
  amount_remaining: number;
  attempt_count: number;
  attempted: boolean;
  billing_reason: 'subscription_create' | 'subscription_cycle';
  collection_method: 'charge_automatically';
  /** the client secret of the invoice's payment (API 2025-03-31: replaces `payment_intent`) */
  confirmation_secret: { client_secret: string; type: 'payment_intent' } | null;
  created: number;
  currency: string;
  customer: string;
  livemode: false;
  metadata: Metadata;
  next_payment_attempt: number | null;
  parent: { type: 'subscription_details'; subscription_details: { metadata: Metadata; subscription: string } };
  period_start: number;
  period_end: number;
  status: InvoiceStatus;
  status_transitions: { finalized_at: number | null; paid_at: number | null };
  total: number;
}
