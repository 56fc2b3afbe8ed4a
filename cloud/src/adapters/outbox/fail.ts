import { failLeased } from '../lease-fail.js';
import type { Queryable } from '../db/db.js';

export { backoffMs, type BackoffPolicy } from '../backoff.js';

/**
 * Fail for the downlink outbox (see failLeased): a dead row stays visible
 * through listDeadLetters and is still replayed on a gateway's resync.
 */
export const failRow = failLeased('outbox');

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
