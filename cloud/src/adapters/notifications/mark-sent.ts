import type { Queryable } from '../db/db.js';

/**
 * Mark sent: names the lease token, so a dispatcher whose lease ran out (and
 * whose row another one claimed and sends again) changes nothing. Returns
 * whether the row was marked. A delivered row keeps no secret (a drawn PIN
 * it carried): the mark clears it, and the table's CHECK holds that.
 */
export async function markNotificationSent(db: Queryable, row: { id: number; leaseToken: string }, now: number): Promise<boolean> {
  const r = await db.query(
    `UPDATE notification_outbox SET status = 'sent', sent_at = $3, updated_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL,
            secret = NULL
      WHERE id = $1 AND lease_token = $2`,
    [row.id, row.leaseToken, now],
  );
  return r.rowCount === 1;
}
