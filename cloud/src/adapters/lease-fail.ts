import { backoffMs, type BackoffPolicy } from './backoff.js';
import type { Queryable } from './db/db.js';

/** The leased queues: gateway downlinks (`outbox`), webhooks (`webhook_outbox`) and notifications (`notification_outbox`); each leases a row by token while `sending`. */
export type LeasedQueue = 'outbox' | 'webhook_outbox' | 'notification_outbox';

/**
 * Fail: releases the claim after a failed attempt. Below `maxAttempts` the
 * row goes back to pending with its next attempt pushed out by the shared
 * capped backoff; at `maxAttempts` it is dead. Names the lease token (only a
 * `sending` row holds one), so a lost lease changes nothing. The downlink
 * outbox stamps a dead row's next_attempt_at with the time it died (the
 * dead-letter webhook's `at`); the webhook queue reads nothing there, and
 * keeps the backoff it always wrote. Returns the new status, or null when
 * the lease was lost. One function per queue, made here.
 */
export function failLeased(queue: LeasedQueue) {
  return async function fail(
    q: Queryable,
    row: { id: number; leaseToken: string; attempts: number },
    error: string,
    now: number,
    p: BackoffPolicy,
    random: number,
  ): Promise<'pending' | 'dead' | null> {
    const status = row.attempts >= p.maxAttempts ? 'dead' : 'pending';
    const dueAt = status === 'dead' && queue === 'outbox' ? now : now + backoffMs(row.attempts, p, random);
    const r = await q.query(
      `UPDATE ${queue} SET status = $3, next_attempt_at = $4, lease_token = NULL, lease_until = NULL, last_error = $5
      WHERE id = $1 AND lease_token = $2 AND status = 'sending'`,
      [row.id, row.leaseToken, status, dueAt, error.slice(0, 500)],
    );
    return r.rowCount === 1 ? status : null;
  };
}
