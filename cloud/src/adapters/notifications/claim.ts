import { parseRows } from '@tobira/shared';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { NOTIFICATION_CHANNELS, NOTIFICATION_LOCALES } from '../../domain/notifications.js';
import type { Queryable } from '../db/db.js';

const ClaimedRow = z.object({
  id: z.number().int(),
  dedupe_key: z.string(),
  site_id: z.string(),
  person_id: z.string(),
  channel: z.enum(NOTIFICATION_CHANNELS),
  address: z.string().nullable(),
  locale: z.enum(NOTIFICATION_LOCALES),
  template: z.string(),
  subject: z.string(),
  body: z.string(),
  /** what the body's {{pin}} stands for, filled in at send time only */
  secret: z.string().nullable(),
  cid: z.string(),
  attempts: z.number().int(),
  lease_token: z.string(),
});
export type ClaimedNotification = z.infer<typeof ClaimedRow>;

/**
 * Claim: up to `batch` due rows (pending and due, or sending with an expired
 * lease: its worker died) under a fresh lease token, counting the attempt.
 * An e-mail queued while its person had no address takes the address the
 * person has now, so the operator's retry after adding it reaches them.
 * FOR UPDATE SKIP LOCKED lets dispatchers share the work without taking the
 * same row (PostgreSQL and PGlite run the same SQL).
 */
export async function claimDueNotifications(
  db: Queryable,
  now: number,
  o: { readonly batch: number; readonly leaseMs: number; readonly workerId: string },
): Promise<ClaimedNotification[]> {
  const r = await db.query(
    `UPDATE notification_outbox n SET status = 'sending', lease_token = $1, lease_until = $2, claimed_by = $5,
            attempts = n.attempts + 1, updated_at = $3,
            address = CASE WHEN n.channel = 'smtp' AND n.address IS NULL
                           THEN (SELECT p.email FROM people p WHERE p.id = n.person_id) ELSE n.address END
       FROM (SELECT id FROM notification_outbox
              WHERE (status = 'pending' AND next_attempt_at <= $3) OR (status = 'sending' AND lease_until <= $3)
              ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) due
      WHERE n.id = due.id
      RETURNING n.id, n.dedupe_key, n.site_id, n.person_id, n.channel, n.address, n.locale, n.template, n.subject, n.body, n.secret, n.cid,
                n.attempts, n.lease_token`,
    [randomUUID(), now + o.leaseMs, now, o.batch, o.workerId],
  );
  return parseRows('notification_outbox', ClaimedRow, r.rows);
}
