import { backoffMs, type BackoffPolicy } from '../backoff.js';
import type { Queryable } from '../db/db.js';

export { backoffMs, type BackoffPolicy } from '../backoff.js';

/**
 * Fail: releases the claim after a failed publish. Below `maxAttempts` the
 * row goes back to pending with its next attempt pushed out by the backoff;
 * at `maxAttempts` it is dead-lettered (visible through listDeadLetters, and
 * still replayed on a gateway's resync). Names the lease token like markSent.
 * Returns the new status, or null when the lease was lost.
 */
export async function failRow(
  q: Queryable,
  row: { id: number; leaseToken: string; attempts: number },
  error: string,
  now: number,
  p: BackoffPolicy,
  random: number,
): Promise<'pending' | 'dead' | null> {
  const status = row.attempts >= p.maxAttempts ? 'dead' : 'pending';
  const r = await q.query(
    `UPDATE outbox SET status = $3, next_attempt_at = $4, lease_token = NULL, lease_until = NULL, last_error = $5
      WHERE id = $1 AND lease_token = $2 AND status = 'sending'`,
    // a dead row is not due again: its next_attempt_at records when it died (the dead-letter webhook's `at`)
    [row.id, row.leaseToken, status, status === 'dead' ? now : now + backoffMs(row.attempts, p, random), error.slice(0, 500)],
  );
  return r.rowCount === 1 ? status : null;
}

/** After the broker connection came back, rows waiting out a backoff become due at once. */
export async function expediteAfterReconnect(q: Queryable, now: number): Promise<number> {
  const r = await q.query(`UPDATE outbox SET next_attempt_at = $1 WHERE status = 'pending' AND next_attempt_at > $1`, [now]);
  return r.rowCount;
}

/**
 * Release unspent: the broker connection went away mid-batch, so the rows of
 * this claim that were not published (and the one whose publish the outage
 * broke) go back to pending, due at once, and the attempt their claim counted
 * is given back: an outage is not the row's fault and must not walk it
 * towards the dead letter (dispatching resumes when the link reconnects).
 * Names the lease token like markSent, so a row someone else claimed in the
 * meantime is left alone. Returns how many rows were released.
 */
export async function releaseUnspent(q: Queryable, ids: readonly number[], token: string, now: number): Promise<number> {
  if (ids.length === 0) return 0;
  const r = await q.query(
    `UPDATE outbox SET status = 'pending', attempts = GREATEST(attempts - 1, 0), next_attempt_at = $3, lease_token = NULL, lease_until = NULL
      WHERE id = ANY($1::bigint[]) AND lease_token = $2 AND status = 'sending'`,
    [ids, token, now],
  );
  return r.rowCount;
}
