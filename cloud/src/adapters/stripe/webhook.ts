import type Stripe from 'stripe';
import { z } from 'zod';
import type { OutcomeCode } from '@tobira/shared';

/** Stripe's default: a signature older than this is refused. */
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

/** What is read of a verified event before it is stored (the billing worker reads the rest). */
const EventShape = z.object({
  id: z.string().min(1).max(255),
  type: z.string().min(1).max(255),
  data: z.object({ object: z.unknown() }).nullish(),
});

/** PostgreSQL text and jsonb cannot hold U+0000 (in a value or a key). */
function hasNul(v: unknown): boolean {
  if (typeof v === 'string') return v.includes('\u0000');
  if (Array.isArray(v)) return v.some(hasNul);
  if (typeof v === 'object' && v !== null) return Object.entries(v).some(([k, x]) => k.includes('\u0000') || hasNul(x));
  return false;
}

/**
 * Verifies `Stripe-Signature` on the RAW body (the bytes as received: a
 * re-serialized body fails) with the SDK's `constructEvent`, the age judged
 * by the SDK too, against the injected clock (its `receivedAt`). The SDK is
 * the only parser of the header: a header may repeat `t=`, and the age that
 * counts is that of the timestamp the signature was verified over, which
 * only the SDK's own parse knows. Every refusal is a code, not an exception.
 * The signature is checked first with the tolerance off, so that a forged
 * header is never reported as merely stale; the second call, with the
 * tolerance, can then only refuse the age.
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
  // the SDK reads a tolerance of 0 as "no age check": never let a caller's 0 turn it off
  if (!(toleranceSeconds > 0)) throw new Error('webhook tolerance must be positive');
  let event: Stripe.Event;
  try {
    event = stripe.webhooks.constructEvent(raw, header, secret, 0);
  } catch (e) {
    if (e instanceof SyntaxError) return { status: 'refused', code: 'WEBHOOK_MALFORMED', detail: 'body is not JSON' };
    return {
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
      detail: e instanceof Error ? (e.message.split('\n')[0] ?? '') : 'unverifiable',
    };
  }
  try {
    stripe.webhooks.constructEvent(raw, header, secret, toleranceSeconds, undefined, now);
  } catch {
    return { status: 'refused', code: 'WEBHOOK_TIMESTAMP_STALE', detail: `signed more than ${toleranceSeconds} s ago` };
  }
  // Signed is not well-formed: the body may be any JSON (null, an array, an event without data).
  const shape = EventShape.safeParse(event);
  if (!shape.success) return { status: 'refused', code: 'WEBHOOK_MALFORMED', detail: 'not a Stripe event' };
  if (hasNul(event)) return { status: 'refused', code: 'WEBHOOK_MALFORMED', detail: 'a string holds U+0000, which cannot be stored' };
  const obj = shape.data.data?.object;
  const objectId = typeof obj === 'object' && obj !== null && 'id' in obj && typeof obj.id === 'string' ? obj.id : null;
  return { status: 'verified', event: { eventId: event.id, type: event.type, objectId, event } };
}
