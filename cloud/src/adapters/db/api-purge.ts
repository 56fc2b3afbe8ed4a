import type { Queryable } from './db.js';

/** How long a finished Idempotency-Key answers replays (docs/api.md). */
export const IDEMPOTENCY_RETENTION_MS = 24 * 3_600_000;
/** How long delivered webhook rows and their delivery log are kept. */
export const WEBHOOK_RETENTION_MS = 7 * 24 * 3_600_000;

/**
 * Retention of the API's own tables: finished idempotency keys after a day
 * (an in-progress one is never purged: its holder may still be running), and
 * delivered webhook rows with their attempts after a week. Dead webhook rows
 * stay for an operator. Returns the rows deleted per table.
 */
export async function purgeApiTables(db: Queryable, now: number): Promise<{ idempotencyKeys: number; webhookRows: number }> {
  const idem = await db.query(`DELETE FROM idempotency_keys WHERE state = 'done' AND created_at < $1`, [now - IDEMPOTENCY_RETENTION_MS]);
  const cutoff = now - WEBHOOK_RETENTION_MS;
  await db.query(
    `DELETE FROM webhook_deliveries d USING webhook_outbox o WHERE d.outbox_id = o.id AND o.status = 'delivered' AND o.delivered_at < $1`,
    [cutoff],
  );
  const wh = await db.query(`DELETE FROM webhook_outbox WHERE status = 'delivered' AND delivered_at < $1`, [cutoff]);
  return { idempotencyKeys: idem.rowCount, webhookRows: wh.rowCount };
}
