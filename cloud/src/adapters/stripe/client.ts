import Stripe from 'stripe';

export interface StripeSettings {
  readonly secretKey: string | undefined;
  readonly host: string | undefined;
  readonly port: number | undefined;
  readonly protocol: 'http' | 'https' | undefined;
}

/**
 * The cloud's Stripe client from its settings, or null without a secret key
 * (stays are then not available). Host, port and protocol point the real SDK
 * at the local Stripe; unset, it talks to api.stripe.com.
 */
export function stripeFromSettings(s: StripeSettings): Stripe | null {
  if (s.secretKey === undefined) return null;
  return new Stripe(s.secretKey, {
    ...(s.host === undefined ? {} : { host: s.host }),
    ...(s.port === undefined ? {} : { port: s.port }),
    ...(s.protocol === undefined ? {} : { protocol: s.protocol }),
    // the SDK retries connection errors, 409 and 5xx itself, with the same idempotency key
    maxNetworkRetries: 2,
    timeout: 20_000,
    telemetry: false,
  });
}
