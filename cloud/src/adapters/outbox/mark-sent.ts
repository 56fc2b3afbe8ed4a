import type { Queryable } from '../db/db.js';
import { ASYNC_COMMIT } from './async-commit.js';

/**
 * Mark sent: called only after the broker's PUBACK. It names the lease token,
 * so a dispatcher whose lease ran out (and whose row someone else claimed)
 * changes nothing: 1 = marked, 0 = lease lost (the row is someone else's).
 * Commits without waiting for its flush (async-commit.ts): a lost mark
 * only sends the row again under its jti.
 */
export async function markSent(q: Queryable, id: number, token: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE outbox SET status = 'sent', sent_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL
       FROM ${ASYNC_COMMIT}
      WHERE id = $1 AND lease_token = $2 AND status = 'sending'`,
    [id, token, now],
  );
  return r.rowCount;
}
