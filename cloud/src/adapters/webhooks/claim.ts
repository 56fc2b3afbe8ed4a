import { parseRows } from '@tobira/shared';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { Queryable } from '../db/db.js';

const ClaimedRow = z.object({
  id: z.number(),
  endpoint_id: z.string(),
  event_id: z.string(),
  type: z.string(),
  body: z.unknown(),
  cid: z.string().nullable(),
  attempts: z.number(),
  lease_token: z.string(),
  url: z.string(),
  secret: z.string().nullable(),
  secret_sealed: z.string().nullable(),
  created_at: z.number(),
});
export type ClaimedWebhook = z.infer<typeof ClaimedRow>;

/**
 * Claim: takes up to `batch` due rows (pending and due, or sending with an
 * expired lease) under a fresh lease token, counting the attempt. FOR UPDATE
 * SKIP LOCKED lets replicas share the work without taking the same row; a
 * worker that dies mid-delivery loses its lease and the row is claimed again
 * after `leaseMs`, so delivery is at least once (receivers dedupe by event id).
 */
export async function claimDue(
  db: Queryable,
  now: number,
  o: { readonly batch: number; readonly leaseMs: number },
): Promise<ClaimedWebhook[]> {
  const r = await db.query(
    `UPDATE webhook_outbox w SET status = 'sending', lease_token = $1, lease_until = $2, attempts = w.attempts + 1
       FROM (SELECT id FROM webhook_outbox
              WHERE (status = 'pending' AND next_attempt_at <= $3) OR (status = 'sending' AND lease_until <= $3)
              ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) due, webhook_endpoints e
      WHERE w.id = due.id AND e.id = w.endpoint_id
      RETURNING w.id, w.endpoint_id, w.event_id, w.type, w.body, w.cid, w.attempts, w.lease_token, e.url, e.secret, e.secret_sealed, w.created_at`,
    [randomUUID(), now + o.leaseMs, now, o.batch],
  );
  return parseRows('webhook_outbox', ClaimedRow, r.rows);
}
