/**
 * Idempotency keys, implemented as Stripe documents them for API v1
 * (https://docs.stripe.com/api/idempotent_requests and /error-low-level#idempotency):
 *
 * - "Stripe saves the status code and body of the first request made with a
 *   given idempotency key after endpoint execution begins. Retries with the
 *   same key return the saved response, including 500 errors." → once a verb
 *   has run, its answer is stored whatever its status (200, 402 card_error,
 *   400 payment_intent_unexpected_state, 404, 500) and replayed with
 *   `Idempotent-Replayed: true`.
 * - "If incoming parameters fail validation, or the request conflicts with
 *   another that's executing concurrently, we don't save the idempotent result
 *   because no API endpoint initiates execution." → a parameter validation
 *   400, an authentication 401, the `unavailable` fault's 503 (answered before
 *   any endpoint runs) and the 409 for a key still in flight are NOT stored, so
 *   a retry with the same key runs for real.
 * - "The idempotency layer compares incoming parameters to those of the
 *   original request and errors if they're not the same" → the same key with a
 *   different method, path or decoded parameters is a 400 `idempotency_error`
 *   (stripe-node: `StripeIdempotencyError`).
 * - A replay carries `Idempotent-Replayed: true` and `Original-Request: req_…`
 *   (the request that ran), a fresh `Request-Id` of its own.
 * - "You can remove keys from the system automatically after they're at least
 *   24 hours old" → a key older than 24 h (by the injected clock) is forgotten
 *   and the next request with it runs anew.
 * - Keys are scoped to the secret key that sent them; only POST requests are
 *   keyed (GET is idempotent by definition and Stripe ignores the header there).
 */
import type { ApiAnswer } from './objects.js';
import type { Clock } from './ledger.js';

export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

interface Entry {
  fingerprint: string;
  createdAt: number;
  /** undefined while the first request is still executing */
  answer: ApiAnswer | undefined;
  /** the `Request-Id` of the request that ran; replays name it in `Original-Request` */
  requestId: string;
}

export type Claim =
  { kind: 'fresh' } | { kind: 'replay'; answer: ApiAnswer; originalRequest: string } | { kind: 'mismatch' } | { kind: 'in_flight' };

export class IdempotencyStore {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly clock: Clock) {}

  private static slot(scope: string, key: string): string {
    return `${scope}\u0000${key}`;
  }

  /** Reserves the key for this request, or says why it cannot run. */
  claim(scope: string, key: string, fingerprint: string, requestId: string): Claim {
    const slot = IdempotencyStore.slot(scope, key);
    const now = this.clock.now();
    const entry = this.entries.get(slot);
    if (entry && now - entry.createdAt < IDEMPOTENCY_TTL_MS) {
      if (entry.fingerprint !== fingerprint) return { kind: 'mismatch' };
      return entry.answer === undefined
        ? { kind: 'in_flight' }
        : { kind: 'replay', answer: entry.answer, originalRequest: entry.requestId };
    }
    this.entries.set(slot, { fingerprint, createdAt: now, answer: undefined, requestId });
    return { kind: 'fresh' };
  }

  /** The endpoint ran: its answer is what every retry with this key gets. */
  save(scope: string, key: string, answer: ApiAnswer): void {
    const entry = this.entries.get(IdempotencyStore.slot(scope, key));
    if (entry) entry.answer = answer;
  }

  /** The endpoint never began (validation failed): the key is free again. */
  release(scope: string, key: string): void {
    const slot = IdempotencyStore.slot(scope, key);
    if (this.entries.get(slot)?.answer === undefined) this.entries.delete(slot);
  }
}
