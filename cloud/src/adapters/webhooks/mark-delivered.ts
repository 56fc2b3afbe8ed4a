import type { Queryable } from '../db/db.js';

/**
 * Mark delivered: names the lease token, so a worker whose lease ran out (and
 * whose row another worker claimed) changes nothing; the other worker then
 * delivers again (at least once). Returns whether the row was marked.
 */
export async function markDelivered(db: Queryable, row: { id: number; leaseToken: string }, now: number): Promise<boolean> {
  const r = await db.query(
    `UPDATE webhook_outbox SET status = 'delivered', delivered_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL WHERE id = $1 AND lease_token = $2`,
    [row.id, row.leaseToken, now],
  );
  return r.rowCount === 1;
}
