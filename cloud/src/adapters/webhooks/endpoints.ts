import { randomBytes } from 'node:crypto';
import { newId, parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import type { Queryable } from '../db/db.js';
import { aadOf } from '../db/sealed-secrets.js';
import type { SecretBox } from '../kek.js';
import type { DeliveryCode, WebhookEvent } from './events.js';

/**
 * The webhook endpoints a site registered and their delivery log. Endpoints
 * are read within the caller's site scope (null: every site), so a token
 * never learns of another site's endpoint.
 */

const EndpointRow = z.object({
  id: z.string(),
  site_id: z.string(),
  url: z.string(),
  events: z.array(z.string()),
  enabled: z.boolean(),
  created_at: z.number(),
});
const toWebhook = (r: z.infer<typeof EndpointRow>) => ({
  id: r.id,
  siteId: r.site_id,
  url: r.url,
  events: r.events,
  enabled: r.enabled,
  createdAt: r.created_at,
});
export type Webhook = ReturnType<typeof toWebhook>;

const scopeParam = (scope: readonly string[] | null): string[] | null => (scope === null ? null : [...scope]);

/** Registers an endpoint with a fresh signing secret (returned once; receivers check signatures with it; stored sealed with the KEK). */
export async function createWebhook(
  db: Queryable,
  box: SecretBox,
  input: { siteId: string; url: string; events: readonly WebhookEvent[] },
  now: number,
) {
  const id = newId();
  const secret = `whsec_${randomBytes(32).toString('base64url')}`;
  await db.query('INSERT INTO webhook_endpoints (id, site_id, url, secret_sealed, events, created_at) VALUES ($1,$2,$3,$4,$5,$6)', [
    id,
    input.siteId,
    input.url,
    box.seal(secret, aadOf('webhook_endpoints.secret', id)),
    [...input.events],
    now,
  ]);
  return { id, siteId: input.siteId, url: input.url, events: [...input.events], enabled: true, createdAt: now, secret };
}

/** The endpoint when it exists and is within `scope`, else undefined. */
export async function findWebhook(db: Queryable, scope: readonly string[] | null, id: string): Promise<Webhook | undefined> {
  const r = await db.query(
    'SELECT id, site_id, url, events, enabled, created_at FROM webhook_endpoints WHERE id = $2 AND ($1::text[] IS NULL OR site_id = ANY($1))',
    [scopeParam(scope), id],
  );
  return r.rows[0] === undefined ? undefined : toWebhook(parseRow('webhook_endpoints', EndpointRow, r.rows[0]));
}

/** Endpoints within `scope` (and of `siteId` when given), oldest first, at most 1000. */
export async function listWebhooks(db: Queryable, scope: readonly string[] | null, siteId: string | null): Promise<Webhook[]> {
  const r = await db.query(
    `SELECT id, site_id, url, events, enabled, created_at FROM webhook_endpoints
      WHERE ($1::text[] IS NULL OR site_id = ANY($1)) AND ($2::text IS NULL OR site_id = $2) ORDER BY created_at, id LIMIT 1000`,
    [scopeParam(scope), siteId],
  );
  return parseRows('webhook_endpoints', EndpointRow, r.rows).map(toWebhook);
}

/** Stops new events for the endpoint (rows already queued are still delivered). False: it was disabled already. */
export async function disableWebhook(db: Queryable, id: string): Promise<boolean> {
  return (await db.query('UPDATE webhook_endpoints SET enabled = false WHERE id = $1 AND enabled', [id])).rowCount === 1;
}

const DeliveryRow = z.object({
  outbox_id: z.number(),
  event_id: z.string(),
  type: z.string(),
  attempt: z.number(),
  status_code: z.number().nullable(),
  error: z.string().nullable(),
  code: z.string().nullable(),
  at: z.number(),
  status: z.string(),
});

/** The delivery log of an endpoint, newest attempt first. */
export async function listDeliveries(db: Queryable, endpointId: string, limit: number) {
  const r = await db.query(
    `SELECT d.outbox_id, o.event_id, o.type, d.attempt, d.status_code, d.error, d.code, d.at, o.status FROM webhook_deliveries d
       JOIN webhook_outbox o ON o.id = d.outbox_id WHERE d.endpoint_id = $1 ORDER BY d.id DESC LIMIT $2`,
    [endpointId, limit],
  );
  return parseRows('webhook_deliveries', DeliveryRow, r.rows).map((x) => ({
    outboxId: x.outbox_id,
    eventId: x.event_id,
    type: x.type,
    attempt: x.attempt,
    statusCode: x.status_code,
    error: x.error,
    code: x.code,
    at: x.at,
    eventStatus: x.status,
  }));
}

/**
 * Log attempt: one webhook_deliveries row per attempt, success or failure,
 * written before the outbox row is marked, so the log never misses an
 * attempt whose mark was lost with its lease.
 */
export async function logAttempt(
  db: Queryable,
  a: { outboxId: number; endpointId: string; attempt: number; statusCode: number | null; error: string | null; code: DeliveryCode | null },
  now: number,
): Promise<void> {
  await db.query(
    'INSERT INTO webhook_deliveries (outbox_id, endpoint_id, attempt, status_code, error, code, at) VALUES ($1,$2,$3,$4,$5,$6,$7)',
    [a.outboxId, a.endpointId, a.attempt, a.statusCode, a.error, a.code, now],
  );
}
