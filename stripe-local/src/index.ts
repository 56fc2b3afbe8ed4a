export { startStripeLocal, DEFAULT_SECRET_KEY, type StripeLocal, type StripeLocalOptions } from './server.js';
export { stripeClient, type StripeClientOptions } from './client.js';
export { TEST_CARDS, type Clock } from './ledger.js';
export { type ApiFaults, noFaults } from './faults.js';
export { IDEMPOTENCY_TTL_MS } from './idempotency.js';
export {
  DEFAULT_WEBHOOK_RETRY,
  type WebhookEndpoint,
  type WebhookRetry,
  type WebhookFaults,
  type ReleaseOrder,
  type DeliveryAttempt,
} from './webhooks.js';
export type {
  PaymentIntent,
  Charge,
  Refund,
  StripeEvent,
  EventType,
  StripeErrorBody,
  Customer,
  Price,
  Subscription,
  Invoice,
} from './objects.js';
export { periodEnd, type RenewalOutcome } from './subscriptions.js';
