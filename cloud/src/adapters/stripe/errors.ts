import Stripe from 'stripe';
import type { OutcomeCode } from '@tobira/shared';

/**
 * What a failed Stripe call means for the caller: `transient` is retried
 * with backoff and the same idempotency key (the payment stays visibly
 * pending); `permanent` will not get better by retrying and goes to a
 * dead-letter list or a refusal with its code.
 */
export type BillingFailure = {
  readonly kind: 'transient' | 'permanent';
  readonly code: OutcomeCode;
  /** Stripe's own error code (`card_declined`, `amount_too_large`, ...) when it gave one */
  readonly stripeCode: string | null;
  readonly message: string;
  /**
   * Whether Stripe may have acted on the request although the caller got no
   * answer: a timeout or a lost connection, a 5xx other than 503, or a 409
   * `idempotency_key_in_use` (the first request with the key is still running).
   * A caller must then record the effect as pending and reconcile it from
   * Stripe's objects, never report "nothing changed". A 503 or 429 is Stripe
   * refusing before any endpoint ran, and every 4xx is an answer: both false.
   */
  readonly outcomeUnknown: boolean;
};

/** The answer of every call in this folder: the object, or the classified failure. Never a throw for a Stripe error. */
export type BillingResult<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly failure: BillingFailure };

/** Classifies an error thrown by the SDK; anything that is not a Stripe error is a bug and is rethrown. */
export function classifyStripeError(e: unknown): BillingFailure {
  if (!(e instanceof Stripe.errors.StripeError)) throw e;
  const stripeCode = e.code ?? null;
  const message = e.message.slice(0, 300);
  if (
    e instanceof Stripe.errors.StripeConnectionError ||
    e instanceof Stripe.errors.StripeAPIError ||
    e instanceof Stripe.errors.StripeRateLimitError ||
    (e.statusCode !== undefined && (e.statusCode >= 500 || e.statusCode === 409 || e.statusCode === 429))
  ) {
    const outcomeUnknown =
      e instanceof Stripe.errors.StripeConnectionError ||
      (e.statusCode !== undefined && e.statusCode >= 500 && e.statusCode !== 503) ||
      stripeCode === 'idempotency_key_in_use';
    return { kind: 'transient', code: 'BILLING_UNAVAILABLE', stripeCode, message, outcomeUnknown };
  }
  const outcomeUnknown = false;
  if (e instanceof Stripe.errors.StripeCardError)
    return { kind: 'permanent', code: 'PAYMENT_DECLINED', stripeCode, message, outcomeUnknown };
  if (e instanceof Stripe.errors.StripeIdempotencyError)
    return { kind: 'permanent', code: 'BILLING_IDEMPOTENCY_CONFLICT', stripeCode, message, outcomeUnknown };
  if (e instanceof Stripe.errors.StripeAuthenticationError || e instanceof Stripe.errors.StripePermissionError) {
    return { kind: 'permanent', code: 'BILLING_AUTH_FAILED', stripeCode, message, outcomeUnknown };
  }
  return { kind: 'permanent', code: 'BILLING_REQUEST_INVALID', stripeCode, message, outcomeUnknown };
}

/** Runs one SDK call and turns a Stripe error into a `BillingResult`. */
export async function billingCall<T>(call: () => Promise<T>): Promise<BillingResult<T>> {
  try {
    return { ok: true, value: await call() };
  } catch (e) {
    return { ok: false, failure: classifyStripeError(e) };
  }
}
