import { Schedule, parseRows } from '@tobira/shared';
import { z } from 'zod';
import { Int8 } from './columns.js';
import { enterVerb, type Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * Mode requests (`mode_requests`, migration 0025): one row per gateway a
 * request went to, written in the transaction that queues its `site.mode`
 * outbox row, settled by that gateway's ack (matched by the message's jti)
 * in the uplink inbox's transaction. Pending rows only move to applied or
 * refused, once (the UPDATE names `status = 'pending'`; 0 rows: already settled).
 * Each writer names its verb (`tobira.verb`): the verb guard refuses a row or
 * a status written under any other (MODE_REQUEST_TRANSITIONS).
 */

export interface PassageEntry {
  readonly doorId: string;
  readonly schedule: Schedule | null;
}

export interface ModeRequestRow {
  readonly requestId: string;
  readonly gatewayId: string;
  readonly siteId: string;
  readonly mode: 'normal' | 'lockdown' | null;
  readonly passage: readonly PassageEntry[];
  readonly requestedBy: string;
  readonly reason: string | null;
  readonly jti: string;
  readonly seq: number;
  readonly cid: string;
  readonly status: 'pending' | 'applied' | 'refused';
  readonly code: string | null;
  readonly requestedAt: number;
  readonly settledAt: number | null;
}

/** The gateways of the sites (null: every site), with their doors. */
export async function gatewaysWithDoors(q: Queryable, sites: SiteScope): Promise<{ gatewayId: string; siteId: string; doors: string[] }[]> {
  const r = await q.query<{ gateway_id: string; site_id: string; doors: string[] | null }>(
    `SELECT g.id AS gateway_id, g.site_id, array_remove(array_agg(d.id ORDER BY d.id), NULL) AS doors
       FROM gateways g LEFT JOIN doors d ON d.gateway_id = g.id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1::text[]))
      GROUP BY g.id, g.site_id ORDER BY g.site_id, g.id`,
    [scopeParam(sites)],
  );
  return r.rows.map((x) => ({ gatewayId: x.gateway_id, siteId: x.site_id, doors: x.doors ?? [] }));
}

/** The doors among `doorIds` the caller may see, with their gateway. */
export async function doorsIn(q: Queryable, doorIds: readonly string[], sites: SiteScope): Promise<Map<string, string>> {
  const r = await q.query<{ id: string; gateway_id: string }>(
    `SELECT id, gateway_id FROM doors WHERE id = ANY($1::text[]) AND ($2::text[] IS NULL OR site_id = ANY($2::text[]))`,
    [[...doorIds], scopeParam(sites)],
  );
  return new Map(r.rows.map((x) => [x.id, x.gateway_id]));
}

export async function insertModeRequest(q: Queryable, r: Omit<ModeRequestRow, 'status' | 'code' | 'settledAt'>): Promise<void> {
  await enterVerb(q, 'requestMode');
  await q.query(
    `INSERT INTO mode_requests (request_id, gateway_id, site_id, mode, passage, requested_by, reason, jti, seq, cid, requested_at)
     VALUES ($1,$2,$3,$4,$5::jsonb,$6,$7,$8,$9,$10,$11)`,
    [r.requestId, r.gatewayId, r.siteId, r.mode, JSON.stringify(r.passage), r.requestedBy, r.reason, r.jti, r.seq, r.cid, r.requestedAt],
  );
}

/**
 * A gateway's ack of a site.mode message: settles its row once. Returns
 * 'settled', 'already' (settled before: a redelivered ack) or 'unknown' (no
 * mode request has this jti for this gateway: the ack is of something else).
 */
export async function settleModeRequest(
  q: Queryable,
  a: { gatewayId: string; jti: string; result: 'applied' | 'noop' | 'refused'; code: string; at: number },
): Promise<'settled' | 'already' | 'unknown'> {
  await enterVerb(q, 'settleModeRequest');
  const r = await q.query(
    `UPDATE mode_requests SET status = $3, code = $4, settled_at = $5
      WHERE gateway_id = $1 AND jti = $2 AND status = 'pending'`,
    [a.gatewayId, a.jti, a.result === 'refused' ? 'refused' : 'applied', a.code, a.at],
  );
  if (r.rowCount === 1) return 'settled';
  const e = await q.query('SELECT 1 FROM mode_requests WHERE gateway_id = $1 AND jti = $2', [a.gatewayId, a.jti]);
  return e.rows.length > 0 ? 'already' : 'unknown';
}

const Row = z
  .object({
    request_id: z.string(),
    gateway_id: z.string(),
    site_id: z.string(),
    mode: z.enum(['normal', 'lockdown']).nullable(),
    passage: z.array(z.object({ doorId: z.string(), schedule: Schedule.nullable() })),
    requested_by: z.string(),
    reason: z.string().nullable(),
    jti: z.string(),
    seq: Int8,
    cid: z.string(),
    status: z.enum(['pending', 'applied', 'refused']),
    code: z.string().nullable(),
    requested_at: Int8,
    settled_at: Int8.nullable(),
  })
  .transform((x): ModeRequestRow => ({
    requestId: x.request_id,
    gatewayId: x.gateway_id,
    siteId: x.site_id,
    mode: x.mode,
    passage: x.passage,
    requestedBy: x.requested_by,
    reason: x.reason,
    jti: x.jti,
    seq: x.seq,
    cid: x.cid,
    status: x.status,
    code: x.code,
    requestedAt: x.requested_at,
    settledAt: x.settled_at,
  }));

/** The rows of one request the caller may see (another site's rows are not found). */
export async function modeRequestRows(q: Queryable, requestId: string, sites: SiteScope): Promise<ModeRequestRow[]> {
  const r = await q.query(
    `SELECT * FROM mode_requests WHERE request_id = $1 AND ($2::text[] IS NULL OR site_id = ANY($2::text[])) ORDER BY site_id, gateway_id`,
    [requestId, scopeParam(sites)],
  );
  return parseRows('mode_requests', Row, r.rows);
}

/** The newest requests of one site (newest first, at most `limit` rows). */
export async function siteModeRows(q: Queryable, siteId: string, limit: number): Promise<ModeRequestRow[]> {
  const r = await q.query(`SELECT * FROM mode_requests WHERE site_id = $1 ORDER BY requested_at DESC, gateway_id LIMIT $2`, [
    siteId,
    limit,
  ]);
  return parseRows('mode_requests', Row, r.rows);
}
