/**
 * Fault knobs of the API side. A plain mutable object: tests set a field,
 * the control route `POST /_local/faults` merges a JSON patch into it.
 */
import { z } from 'zod';

export const ApiFaults = z.strictObject({
  /** every /v1 request fails before any endpoint runs (so nothing is stored under its idempotency key) */
  unavailable: z.boolean(),
  /** only the next N /v1 requests fail that way, then the API is up again (to watch the SDK's retries win) */
  unavailableRequests: z.number().int().min(0),
  /** how "unavailable" looks: a 503 `api_error`, or the connection reset with no answer */
  unavailableMode: z.enum(['error', 'reset']),
  /** every /v1 answer waits this long (after the idempotency key is claimed, so a retry meanwhile sees it in flight) */
  delayMs: z.number().int().min(0),
  /** the next N confirms are declined (`generic_decline`) whatever the card */
  declineNextConfirms: z.number().int().min(0),
  /** confirms of a good card stop at `processing`; `settle(id, outcome)` ends them */
  processing: z.boolean(),
  /**
   * the next N mutating POSTs take effect and their real answer is stored
   * under the idempotency key, but the caller gets a 500 / a reset instead:
   * the answer lost between Stripe and us. A retry with the same key gets
   * the stored real answer.
   */
  failAfterEffect: z.number().int().min(0),
  failAfterEffectMode: z.enum(['500', 'reset']),
  /**
   * refunds are created `pending` (as bank-debit and some card refunds are on
   * Stripe) and stay so until `settleRefund(id, 'succeeded' | 'failed')`
   */
  refundsPending: z.boolean(),
  /**
   * refunds are created `requires_action` (Stripe asks the customer for the
   * details to send the money to, as for bank-transfer payments) and stay so
   * until the customer answers (`settleRefund(id, 'succeeded')`), the request
   * runs out (`settleRefund(id, 'canceled')`) or `POST /v1/refunds/:id/cancel`
   */
  refundsRequireAction: z.boolean(),
  /**
   * the next N refund creations are refused 400 `balance_insufficient` after
   * the endpoint ran, so the error is saved under the idempotency key and a
   * retry with the same key gets it back
   */
  failNextRefunds: z.number().int().min(0),
});
export type ApiFaults = z.infer<typeof ApiFaults>;

export function noFaults(): ApiFaults {
  return {
    unavailable: false,
    unavailableRequests: 0,
    unavailableMode: 'error',
    delayMs: 0,
    declineNextConfirms: 0,
    processing: false,
    failAfterEffect: 0,
    failAfterEffectMode: '500',
    refundsPending: false,
    refundsRequireAction: false,
    failNextRefunds: 0,
  };
}
