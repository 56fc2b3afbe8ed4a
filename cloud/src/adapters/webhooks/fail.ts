import { backoffMs, type BackoffPolicy } from '../backoff.js';
import type { Queryable } from '../db/db.js';

/**
 * Fail: releases the claim after a failed attempt. Below `maxAttempts` the
 * row goes back to pending with its next attempt pushed out by the shared
 * capped backoff; at `maxAttempts` it is dead (no more attempts; the delivery
 * log keeps every one). Names the lease token like markDelivered, so a lost
 * lease changes nothing. Returns the new status, or null when the lease was lost.
 */
export async function failDelivery(
  db: Queryable,
  row: { id: number; leaseToken: string; attempts: number },
  error: string,
  now: number,
  p: BackoffPolicy,
  random: number,
): Promise<'pending' | 'dead' | null> {
  const status = row.attempts >= p.maxAttempts ? 'dead' : 'pending';
  const r = await db.query(
    `UPDATE webhook_outbox SET status = $3, next_attempt_at = $4, last_error = $5, lease_token = NULL, lease_until = NULL WHERE id = $1 AND lease_token = $2`,
    [row.id, row.leaseToken, status, now + backoffMs(row.attempts, p, random), error.slice(0, 500)],
  );
  return r.rowCount === 1 ? status : null;
}
