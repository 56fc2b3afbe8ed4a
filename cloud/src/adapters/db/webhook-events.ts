import { z } from 'zod';
import { CorrelationId, decodeCursor, pageOf, parseRow, type Page } from '@tobira/shared';
import { backoffMs, type BackoffPolicy } from '../outbox/fail.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * The Stripe webhook inbox (`payment_webhook_events`): the HTTP route
 * stores a verified event and answers 200; the worker claims, processes and
 * marks it. Received and processed are kept apart; the event id is the
 * dedupe key, so Stripe's retries and duplicates have one effect.
 */

export interface StoredWebhookEvent {
  readonly eventId: string;
  readonly type: string;
  readonly objectId: string | null;
  readonly payload: unknown;
  readonly cid: string;
  readonly receivedAt: number;
  readonly status: 'pending' | 'processing' | 'processed' | 'dead';
  readonly processedAt: number | null;
  readonly attempts: number;
  readonly nextAttemptAt: number;
  readonly leaseToken: string | null;
  readonly lastError: string | null;
  readonly deadCode: string | null;
}

const EventRow = z.object({
  event_id: z.string().min(1),
  type: z.string().min(1),
  object_id: z.string().nullable(),
  payload: z.unknown(),
  cid: CorrelationId,
  received_at: z.number().int(),
  status: z.enum(['pending', 'processing', 'processed', 'dead']),
  processed_at: z.number().int().nullable(),
  attempts: z.number().int().nonnegative(),
  next_attempt_at: z.number().int(),
  lease_token: z.string().nullable(),
  last_error: z.string().nullable(),
  dead_code: z.string().nullable(),
});

function eventOf(raw: unknown): StoredWebhookEvent {
  const r = parseRow('payment_webhook_events', EventRow, raw);
  return {
    eventId: r.event_id,
    type: r.type,
    objectId: r.object_id,
    payload: r.payload,
    cid: r.cid,
    receivedAt: r.received_at,
    status: r.status,
    processedAt: r.processed_at,
    attempts: r.attempts,
    nextAttemptAt: r.next_attempt_at,
    leaseToken: r.lease_token,
    lastError: r.last_error,
    deadCode: r.dead_code,
  };
}

/**
 * Store: insert-or-ignore by Stripe's event id. Guarantee: an event is
 * stored once however often Stripe delivers it; 'duplicate' means an
 * earlier delivery already stored it (the route still answers 200).
 */
export async function storeWebhookEvent(
  q: Queryable,
  e: { eventId: string; type: string; objectId: string | null; payload: unknown; cid: string; now: number },
): Promise<'stored' | 'duplicate'> {
  const r = await q.query(
    `INSERT INTO payment_webhook_events (event_id, type, object_id, payload, cid, received_at, next_attempt_at)
     VALUES ($1,$2,$3,$4::jsonb,$5,$6,$6) ON CONFLICT (event_id) DO NOTHING`,
    [e.eventId, e.type, e.objectId, JSON.stringify(e.payload), e.cid, e.now],
  );
  return r.rowCount === 1 ? 'stored' : 'duplicate';
}

export async function loadWebhookEvent(q: Queryable, eventId: string): Promise<StoredWebhookEvent | null> {
  const r = await q.query('SELECT * FROM payment_webhook_events WHERE event_id = $1', [eventId]);
  return r.rows[0] === undefined ? null : eventOf(r.rows[0]);
}

/**
 * Claim: up to `limit` due events — pending and due, or processing with a
 * lapsed lease — with FOR UPDATE SKIP LOCKED, stamped with this claim's
 * lease token, oldest received first. Guarantee: while a lease holds nobody
 * else processes the event; after it lapses someone may (at-least-once, so
 * processing must be idempotent — it is: decisions re-read current status).
 */
export async function claimWebhookEvents(
  q: Queryable,
  o: { token: string; now: number; leaseMs: number; limit: number },
): Promise<StoredWebhookEvent[]> {
  const r = await q.query(
    `UPDATE payment_webhook_events e
        SET status = 'processing', lease_token = $1, lease_until = $2 + $3, attempts = e.attempts + 1
       FROM (SELECT event_id FROM payment_webhook_events
              WHERE (status = 'pending' AND next_attempt_at <= $2) OR (status = 'processing' AND lease_until <= $2)
              ORDER BY received_at, event_id LIMIT $4 FOR UPDATE SKIP LOCKED) c
      WHERE e.event_id = c.event_id
      RETURNING e.*`,
    [o.token, o.now, o.leaseMs, o.limit],
  );
  return r.rows.map(eventOf).sort((a, b) => a.receivedAt - b.receivedAt || (a.eventId < b.eventId ? -1 : 1));
}

/** Processed: names the lease token, so a worker that lost its lease changes nothing (0 rows). */
export async function markWebhookProcessed(q: Queryable, e: { eventId: string; leaseToken: string }, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE payment_webhook_events SET status = 'processed', processed_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL
      WHERE event_id = $1 AND lease_token = $2 AND status = 'processing'`,
    [e.eventId, e.leaseToken, now],
  );
  return r.rowCount;
}

/**
 * Fail: a transient error goes back to pending after capped backoff; a
 * permanent one (or the last attempt) is dead with its code, in the
 * operator's dead-letter list. Names the lease token. Returns the new
 * status, or null when the lease was lost.
 */
export async function failWebhookEvent(
  q: Queryable,
  e: { eventId: string; leaseToken: string; attempts: number },
  err: { error: string; code: string; permanent: boolean },
  now: number,
  p: BackoffPolicy,
  random: number,
): Promise<'pending' | 'dead' | null> {
  const status = err.permanent || e.attempts >= p.maxAttempts ? 'dead' : 'pending';
  const r = await q.query(
    `UPDATE payment_webhook_events SET status = $3, next_attempt_at = $4, lease_token = NULL, lease_until = NULL, last_error = $5, dead_code = $6
      WHERE event_id = $1 AND lease_token = $2 AND status = 'processing'`,
    [
      e.eventId,
      e.leaseToken,
      status,
      status === 'dead' ? now : now + backoffMs(e.attempts, p, random),
      err.error.slice(0, 500),
      status === 'dead' ? err.code : null,
    ],
  );
  return r.rowCount === 1 ? status : null;
}

const DeadCursor = z.tuple([z.number().int(), z.string()]);

/** The dead-letter list, oldest first, keyset-paginated on (received_at, event_id). */
/**
 * Dead events, oldest first, each with the site of the payment it names (by its intent, a charge's intent, or
 * the intent's `metadata.payment_id`); null when it names none of ours. Scoped like every list: a caller
 * limited to some sites sees only events of payments at one of them.
 */
export async function listDeadWebhookEvents(
  q: Queryable,
  scope: SiteScope,
  o: { limit: number; cursor?: string; siteId?: string },
): Promise<Page<StoredWebhookEvent & { readonly siteId: string | null }> | 'bad_cursor'> {
  const after = decodeCursor(DeadCursor, o.cursor);
  if (after === 'bad') return 'bad_cursor';
  const r = await q.query(
    `SELECT * FROM (
       SELECT e.*, (SELECT s.site_id FROM payments p JOIN stays s ON s.id = p.stay_id
                     WHERE p.intent_id IN (e.object_id, e.payload->'data'->'object'->>'payment_intent')
                        OR p.id = e.payload->'data'->'object'->'metadata'->>'payment_id'
                     ORDER BY p.id LIMIT 1) AS site_id
         FROM payment_webhook_events e
        WHERE e.status = 'dead' AND ($1::bigint IS NULL OR (e.received_at, e.event_id) > ($1::bigint, $2::text))) x
      WHERE ($3::text[] IS NULL OR x.site_id = ANY($3)) AND ($4::text IS NULL OR x.site_id = $4)
      ORDER BY x.received_at, x.event_id LIMIT $5`,
    [after?.[0] ?? null, after?.[1] ?? null, scopeParam(scope), o.siteId ?? null, o.limit + 1],
  );
  const Site = z.object({ site_id: z.string().nullable() });
  const rows = r.rows.map((raw) => ({ ...eventOf(raw), siteId: parseRow('payment_webhook_events', Site, raw).site_id }));
  return pageOf(rows, o.limit, (e) => [e.receivedAt, e.eventId]);
}

/** Operator retry of a dead event: pending and due at once, attempts counted afresh, its code cleared. */
export async function retryDeadWebhookEvent(q: Queryable, eventId: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE payment_webhook_events SET status = 'pending', attempts = 0, next_attempt_at = $2, dead_code = NULL
      WHERE event_id = $1 AND status = 'dead'`,
    [eventId, now],
  );
  return r.rowCount;
}
