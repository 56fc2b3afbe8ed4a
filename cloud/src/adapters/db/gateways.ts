import { z } from 'zod';
import { MessageId, parseRow, parseRows, type Jwks } from '@tobira/shared';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * The `gateways` table and its per-gateway counter `gateway_seq` (the last
 * downlink seq handed out): registration, what the uplink inbox learns of a
 * gateway (presence, status, clock skew), and the reads of the admin API,
 * the heartbeat and the metrics.
 */
export interface GatewayView {
  readonly id: string;
  readonly siteId: string;
  readonly online: boolean | null;
  readonly lastStatusAt: number | null;
  readonly createdAt: number;
  readonly clockSkewMs: number | null;
  readonly clockSkewAt: number | null;
  readonly lastSeq: number;
  readonly deadLetters: number;
}
const GatewayRow = z
  .object({
    id: z.string(),
    site_id: z.string(),
    online: z.boolean().nullable(),
    last_status_at: Int8.nullable(),
    created_at: Int8,
    clock_skew_ms: Int8.nullable(),
    clock_skew_at: Int8.nullable(),
    last_seq: Int8,
    dead_letters: Int8,
  })
  .transform((r): GatewayView => ({
    id: r.id,
    siteId: r.site_id,
    online: r.online,
    lastStatusAt: r.last_status_at,
    createdAt: r.created_at,
    clockSkewMs: r.clock_skew_ms,
    clockSkewAt: r.clock_skew_at,
    lastSeq: r.last_seq,
    deadLetters: r.dead_letters,
  }));
const GATEWAY_COLUMNS = `g.id, g.site_id, g.online, g.last_status_at, g.created_at, g.clock_skew_ms, g.clock_skew_at,
  COALESCE((SELECT last_seq FROM gateway_seq s WHERE s.gateway_id = g.id), 0) AS last_seq,
  (SELECT count(*) FROM outbox o WHERE o.gateway_id = g.id AND o.status = 'dead') AS dead_letters`;

export async function listGateways(q: Queryable, scope: SiteScope, f: { siteId?: string | undefined }): Promise<GatewayView[]> {
  const r = await q.query(
    `SELECT ${GATEWAY_COLUMNS} FROM gateways g
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) ORDER BY g.id LIMIT 1000`,
    [scopeParam(scope), f.siteId ?? null],
  );
  return parseRows('gateways', GatewayRow, r.rows);
}

/** A gateway visible to the scope (default: any), or null. */
export async function getGateway(q: Queryable, scope: SiteScope, id: string): Promise<GatewayView | null> {
  const r = await q.query(`SELECT ${GATEWAY_COLUMNS} FROM gateways g WHERE g.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))`, [
    scopeParam(scope),
    id,
  ]);
  return r.rows[0] === undefined ? null : parseRow('gateways', GatewayRow, r.rows[0]);
}

/** Registers a gateway and starts its downlink counter at 0. Throws 23505 when the id is taken. */
export async function insertGateway(
  q: Queryable,
  g: { id: string; siteId: string; publicJwk: unknown; pepper: string; createdAt: number },
): Promise<void> {
  await q.query('INSERT INTO gateways (id, site_id, public_jwk, credential_pepper, created_at) VALUES ($1,$2,$3::jsonb,$4,$5)', [
    g.id,
    g.siteId,
    JSON.stringify(g.publicJwk),
    g.pepper,
    g.createdAt,
  ]);
  await q.query('INSERT INTO gateway_seq (gateway_id, last_seq) VALUES ($1, 0)', [g.id]);
}

/** The registered public key the gateway's uplinks are verified with, or null for an unknown gateway. */
export async function gatewayPublicJwk(q: Queryable, gatewayId: string): Promise<Jwks['keys'][number] | null> {
  const r = await q.query('SELECT public_jwk FROM gateways WHERE id = $1', [gatewayId]);
  if (r.rows[0] === undefined) return null;
  // the key is checked by KeySet.fromJwks where it is used; here only its shape as a JWK object
  return parseRow('gateways', z.object({ public_jwk: z.looseObject({ kty: z.string() }) }), r.rows[0]).public_jwk;
}

/** Presence from the gateway's retained presence topic (its last will says offline). */
export async function recordPresence(q: Queryable, gatewayId: string, online: boolean, at: number): Promise<void> {
  await q.query('UPDATE gateways SET online = $2, presence_at = $3 WHERE id = $1', [gatewayId, online, at]);
}

export async function recordStatus(q: Queryable, gatewayId: string, status: unknown, at: number): Promise<void> {
  await q.query('UPDATE gateways SET last_status = $2::jsonb, last_status_at = $3 WHERE id = $1', [gatewayId, JSON.stringify(status), at]);
}

export async function recordClockSkew(q: Queryable, gatewayId: string, skewMs: number, at: number): Promise<void> {
  await q.query('UPDATE gateways SET clock_skew_ms = $2, clock_skew_at = $3 WHERE id = $1', [gatewayId, skewMs, at]);
}

// ---------------------------------------------------------------- downlink seq

/** The last downlink seq handed out to the gateway (0 before the first). */
export async function lastSeqOf(q: Queryable, gatewayId: string): Promise<number> {
  const r = await q.query('SELECT last_seq FROM gateway_seq WHERE gateway_id = $1', [gatewayId]);
  return r.rows[0] === undefined ? 0 : parseRow('gateway_seq', z.object({ last_seq: Int8 }), r.rows[0]).last_seq;
}

/** Moves the counter past `seenSeq` (and past itself): seqs are never handed out twice. Returns the new last seq, or null for no counter. */
export async function bumpSeqPast(q: Queryable, gatewayId: string, seenSeq: number): Promise<number | null> {
  const r = await q.query('UPDATE gateway_seq SET last_seq = GREATEST(last_seq, $2) + 1 WHERE gateway_id = $1 RETURNING last_seq', [
    gatewayId,
    seenSeq,
  ]);
  return r.rows[0] === undefined ? null : parseRow('gateway_seq', z.object({ last_seq: Int8 }), r.rows[0]).last_seq;
}

// ---------------------------------------------------------------- heartbeat and metrics

/** What a heartbeat tells a gateway: the last seq handed out, and the uplink acknowledgement pointer. */
export interface HeartbeatTarget {
  readonly gatewayId: string;
  readonly lastSeq: number;
  readonly ackedSeq: number;
  readonly ackedJti: MessageId | null;
}
const HeartbeatRow = z
  .object({ id: z.string(), last_seq: Int8, acked_seq: Int8.nullable(), acked_jti: MessageId.nullable() })
  .transform((r): HeartbeatTarget => ({ gatewayId: r.id, lastSeq: r.last_seq, ackedSeq: r.acked_seq ?? 0, ackedJti: r.acked_jti }));

/** Every gateway not known to be offline (never heard counts as maybe online), by id. */
export async function heartbeatTargets(q: Queryable): Promise<HeartbeatTarget[]> {
  const r = await q.query(
    `SELECT g.id, COALESCE(s.last_seq, 0) AS last_seq, u.acked_seq, u.acked_jti
       FROM gateways g LEFT JOIN gateway_seq s ON s.gateway_id = g.id LEFT JOIN uplink_seq u ON u.gateway_id = g.id
      WHERE g.online IS DISTINCT FROM false ORDER BY g.id`,
  );
  return parseRows('gateways', HeartbeatRow, r.rows);
}

export interface GatewayGauges {
  readonly gatewayId: string;
  readonly clockSkewMs: number | null;
  readonly deadLetters: number;
}
const GaugeRow = z
  .object({ id: z.string(), clock_skew_ms: Int8.nullable(), dead_letters: Int8 })
  .transform((r): GatewayGauges => ({ gatewayId: r.id, clockSkewMs: r.clock_skew_ms, deadLetters: r.dead_letters }));

/** Per gateway, what GET /metrics reports: its clock skew and its dead-lettered downlinks. */
export async function gatewayGauges(q: Queryable): Promise<GatewayGauges[]> {
  const r = await q.query(
    `SELECT g.id, g.clock_skew_ms, (SELECT count(*) FROM outbox o WHERE o.gateway_id = g.id AND o.status = 'dead') AS dead_letters
       FROM gateways g ORDER BY g.id`,
  );
  return parseRows('gateways', GaugeRow, r.rows);
}
