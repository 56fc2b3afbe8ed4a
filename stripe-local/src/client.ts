/**
 * The one place a `stripe` SDK client pointed at the local server is built
 * (tests, the demo, and later the cloud when STRIPE_API_HOST is set), so the
 * host / port / protocol override is spelled once.
 */
import Stripe from 'stripe';

export interface StripeClientOptions {
  /** the SDK retries connection errors, 409 and 5xx with the same idempotency key */
  maxNetworkRetries?: number;
  /** per request, ms */
  timeout?: number;
}

export function stripeClient(local: { secretKey: string; host: string; port: number }, options: StripeClientOptions = {}): Stripe {
  return new Stripe(local.secretKey, {
    host: local.host,
    port: local.port,
    protocol: 'http',
    maxNetworkRetries: options.maxNetworkRetries ?? 2,
    timeout: options.timeout ?? 10_000,
    telemetry: false,
  });
}
