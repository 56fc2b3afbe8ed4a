import type Stripe from 'stripe';
import type { OutcomeCode } from '@tobira/shared';

/** Stripe's default, and what DESIGN.md §7 asks for: a signature older than this is refused. */
export const WEBHOOK_TOLERANCE_SECONDS = 300;

export interface VerifiedEvent {
  readonly eventId: string;
  readonly type: string;
  /** id of `data.object` (a PaymentIntent, a charge, a refund) */
  readonly objectId: string | null;
  readonly event: Stripe.Event;
}

export type WebhookVerdict =
  | { readonly status: 'verified'; readonly event: VerifiedEvent }
  | {
      readonly status: 'refused';
      readonly code: Extract<OutcomeCode, 'WEBHOOK_SIGNATURE_INVALID' | 'WEBHOOK_TIMESTAMP_STALE' | 'WEBHOOK_MALFORMED'>;
      readonly detail: string;
    };

const timestampOf = (header: string): number | null => {
  const m = /(?:^|,)\s*t=(\d+)/.exec(header);
  return m ? Number(m[1]) : null;
};

/**
 * Verifies `Stripe-Signature` on the RAW body (the bytes as received: a
 * re-serialized body fails) with the SDK's `constructEvent`, and the
 * timestamp against the injected clock. Every refusal is a code, not an
 * exception. The signature is checked first with the SDK's tolerance off so
 * that a forged header is never reported as merely stale.
 */
export function verifyWebhook(
  stripe: Stripe,
  raw: Buffer | string,
  header: string | undefined,
  secret: string,
  now: number,
  toleranceSeconds = WEBHOOK_TOLERANCE_SECONDS,
): WebhookVerdict {
  if (header === undefined || header === '')
    return { status: 'refused', code: 'WEBHOOK_SIGNATURE_INVALID', detail: 'no Stripe-Signature header' };
  let event: Stripe.Event;
  try {
    // tolerance 0 = signature only; the age is judged below on the same header
    event = stripe.webhooks.constructEvent(raw, header, secret, 0);
  } catch (e) {
    if (e instanceof SyntaxError) return { status: 'refused', code: 'WEBHOOK_MALFORMED', detail: 'body is not JSON' };
    return {
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
      detail: e instanceof Error ? (e.message.split('\n')[0] ?? '') : 'unverifiable',
    };
  }
  const t = timestampOf(header);
  if (t === null) return { status: 'refused', code: 'WEBHOOK_SIGNATURE_INVALID', detail: 'no timestamp in the header' };
  const age = Math.floor(now / 1000) - t;
  if (age > toleranceSeconds) return { status: 'refused', code: 'WEBHOOK_TIMESTAMP_STALE', detail: `signed ${age} s ago` };
  if (typeof event.id !== 'string' || typeof event.type !== 'string')
    return { status: 'refused', code: 'WEBHOOK_MALFORMED', detail: 'not a Stripe event' };
  const obj: unknown = event.data.object;
  const objectId = typeof obj === 'object' && obj !== null && 'id' in obj && typeof obj.id === 'string' ? obj.id : null;
  return { status: 'verified', event: { eventId: event.id, type: event.type, objectId, event } };
}
