import { z } from 'zod';
import { MessageId, SiteMode, pageOf, parseRow, parseRows, type Jwks, type Page } from '@tobira/shared';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import type { SecretBox } from '../kek.js';
import { aadOf } from './sealed-secrets.js';
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

/** Registers a gateway (its pepper sealed with the KEK, never in clear) and starts its downlink counter at 0. Throws 23505 when the id is taken. */
export async function insertGateway(
  q: Queryable,
  box: SecretBox,
  g: { id: string; siteId: string; publicJwk: unknown; pepper: string; createdAt: number },
): Promise<void> {
  await q.query('INSERT INTO gateways (id, site_id, public_jwk, credential_pepper_sealed, created_at) VALUES ($1,$2,$3::jsonb,$4,$5)', [
    g.id,
    g.siteId,
    JSON.stringify(g.publicJwk),
    box.seal(g.pepper, aadOf('gateways.credential_pepper', g.id)),
    g.createdAt,
  ]);
  await q.query('INSERT INTO gateway_seq (gateway_id, last_seq) VALUES ($1, 0)', [g.id]);
  // its first uplink key (migration 0026): rotations add the later ones
  await q.query(
    `INSERT INTO gateway_uplink_keys (gateway_id, kid, public_jwk, status, added_at) VALUES ($1, $2::jsonb->>'kid', $2::jsonb, 'current', $3)`,
    [g.id, JSON.stringify(g.publicJwk), g.createdAt],
  );
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

/** The gateway's last status report; `cid` is the report's (the gateway.failing_closed webhook of migration 0015 carries it). */
export async function recordStatus(q: Queryable, gatewayId: string, status: unknown, at: number, cid: string | null = null): Promise<void> {
  await q.query('UPDATE gateways SET last_status = $2::jsonb, last_status_at = $3, last_status_cid = $4 WHERE id = $1', [
    gatewayId,
    JSON.stringify(status),
    at,
    cid,
  ]);
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
    // a restarted uplink history's lost pointer, while there is one (migration 0038): the gateway finds no
    // row of its own at it and handles it as a restore (GATEWAY_RESTORED)
    `SELECT g.id, COALESCE(s.last_seq, 0) AS last_seq, COALESCE(u.lost_seq, u.acked_seq) AS acked_seq,
            CASE WHEN u.lost_seq IS NULL THEN u.acked_jti ELSE u.lost_jti END AS acked_jti
       FROM gateways g LEFT JOIN gateway_seq s ON s.gateway_id = g.id LEFT JOIN uplink_seq u ON u.gateway_id = g.id
      WHERE g.online IS DISTINCT FROM false ORDER BY g.id`,
  );
  return parseRows('gateways', HeartbeatRow, r.rows);
}

// ---------------------------------------------------------------- health (the operator's view)

/** Why a gateway's last status report says it denies ordinary keys (migration 0015 gateway_fail_closed_reason). */
export const FAIL_CLOSED_REASONS = ['NO_LEASE', 'LEASE_EXPIRED', 'BEHIND_CLOUD'] as const;
export type FailClosedReason = (typeof FAIL_CLOSED_REASONS)[number];

/** A gateway's health as the cloud knows it: presence, its last status report, and the cloud's own counters. */
export interface GatewayHealth {
  readonly gatewayId: string;
  readonly siteId: string;
  readonly online: boolean | null;
  readonly presenceAt: number | null;
  readonly lastStatusAt: number | null;
  /** From the last status report (null fields when there was none). */
  readonly mode: SiteMode | null;
  readonly leaseExpiresAt: number | null;
  readonly appliedSeq: number | null;
  readonly outboxDepth: number | null;
  /** The last downlink seq handed out to it. */
  readonly lastSeq: number;
  readonly clockSkewMs: number | null;
  readonly clockSkewAt: number | null;
  readonly deadLetters: number;
  /** Its downlinks not yet delivered (pending or being sent). */
  readonly pendingDownlinks: number;
  /** Judged at the cloud's now on the gateway's clock; null when it never reported. */
  readonly failClosedReason: FailClosedReason | null;
}
const Status = z.object({ mode: SiteMode, appliedSeq: z.int(), leaseExpiresAt: z.int().nullable(), outboxDepth: z.int() }).nullable();
const HealthRow = z
  .object({
    id: z.string(),
    site_id: z.string(),
    online: z.boolean().nullable(),
    presence_at: Int8.nullable(),
    last_status_at: Int8.nullable(),
    last_status: Status,
    last_seq: Int8,
    clock_skew_ms: Int8.nullable(),
    clock_skew_at: Int8.nullable(),
    dead_letters: Int8,
    pending_downlinks: Int8,
    fail_closed_reason: z.enum(FAIL_CLOSED_REASONS).nullable(),
  })
  .transform((r): GatewayHealth => ({
    gatewayId: r.id,
    siteId: r.site_id,
    online: r.online,
    presenceAt: r.presence_at,
    lastStatusAt: r.last_status_at,
    mode: r.last_status?.mode ?? null,
    leaseExpiresAt: r.last_status?.leaseExpiresAt ?? null,
    appliedSeq: r.last_status?.appliedSeq ?? null,
    outboxDepth: r.last_status?.outboxDepth ?? null,
    lastSeq: r.last_seq,
    clockSkewMs: r.clock_skew_ms,
    clockSkewAt: r.clock_skew_at,
    deadLetters: r.dead_letters,
    pendingDownlinks: r.pending_downlinks,
    failClosedReason: r.fail_closed_reason,
  }));

/**
 * A gateway's health visible to the scope, or null. The failing-closed
 * reason is the database function the gateway.failing_closed webhook uses,
 * applied at `now` on the gateway's clock (now plus its last measured skew)
 * to the lease it last reported: a heartbeat since may have extended it.
 */
export async function getGatewayHealth(q: Queryable, scope: SiteScope, id: string, now: number): Promise<GatewayHealth | null> {
  const r = await q.query(`${HEALTH_SELECT} WHERE g.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))`, [scopeParam(scope), id, now]);
  return r.rows[0] === undefined ? null : parseRow('gateways', HealthRow, r.rows[0]);
}

/** A gateway's health, judged at `$3` (the cloud's now) on its clock; the caller adds the WHERE. */
const HEALTH_SELECT = `SELECT g.id, g.site_id, g.online, g.presence_at, g.last_status_at,
            CASE WHEN g.last_status IS NOT NULL THEN
              jsonb_build_object('mode', g.last_status->'mode', 'appliedSeq', g.last_status->'appliedSeq',
                                 'leaseExpiresAt', g.last_status->'leaseExpiresAt', 'outboxDepth', g.last_status->'outboxDepth') END AS last_status,
            s.last_seq, g.clock_skew_ms, g.clock_skew_at,
            (SELECT count(*) FROM outbox o WHERE o.gateway_id = g.id AND o.status = 'dead') AS dead_letters,
            (SELECT count(*) FROM outbox o WHERE o.gateway_id = g.id AND o.status IN ('pending', 'sending')) AS pending_downlinks,
            gateway_fail_closed_reason(g.last_status, $3::bigint + COALESCE(g.clock_skew_ms, 0), s.last_seq) AS fail_closed_reason
       FROM gateways g CROSS JOIN LATERAL (SELECT COALESCE((SELECT last_seq FROM gateway_seq WHERE gateway_id = g.id), 0) AS last_seq) s`;

export interface GatewayHealthFilter {
  readonly siteId?: string | undefined;
  /** true: only those whose last report says they fail closed; false: only those that reported and do not. */
  readonly failingClosed?: boolean | undefined;
  /** The last gateway id of the previous page. */
  readonly after: string | null;
  readonly limit: number;
}

/** The health of every gateway visible to the scope (the fleet view), by gateway id, keyset-paginated on the id. */
export async function listGatewayHealth(q: Queryable, scope: SiteScope, f: GatewayHealthFilter, now: number): Promise<Page<GatewayHealth>> {
  const r = await q.query(
    `SELECT * FROM (${HEALTH_SELECT}
       WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2)
         AND ($4::text IS NULL OR g.id > $4)) h
      WHERE $5::boolean IS NULL OR (h.last_status IS NOT NULL AND (h.fail_closed_reason IS NOT NULL) = $5)
      ORDER BY h.id LIMIT $6`,
    [scopeParam(scope), f.siteId ?? null, now, f.after, f.failingClosed ?? null, f.limit + 1],
  );
  return pageOf(parseRows('gateways', HealthRow, r.rows), f.limit, (x) => [x.gatewayId]);
}
