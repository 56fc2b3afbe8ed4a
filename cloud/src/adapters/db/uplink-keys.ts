import { PublicSigningJwk, parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import { UPLINK_KEY_ROTATION_STATUSES, type UplinkKeyRotation } from '../../domain/uplink-keys.js';
import type { Queryable } from './db.js';

/**
 * The `gateway_uplink_keys` and `gateway_uplink_key_rotations` tables
 * (migration 0026): every uplink key a gateway has had, and each rotation.
 * Every function joins the caller's transaction; status writes need tobira.verb.
 */
export type UplinkKeyStatus = 'current' | 'previous' | 'retired';
export interface UplinkKeyRow {
  readonly kid: string;
  readonly publicJwk: PublicSigningJwk;
  readonly status: UplinkKeyStatus;
}

const Int = z.coerce.number().int();
const KeyRow = z.object({
  kid: z.string(),
  public_jwk: z.looseObject({ kty: z.string(), crv: z.string(), x: z.string(), kid: z.string() }),
  status: z.enum(['current', 'previous', 'retired']),
});
const toKey = (r: z.infer<typeof KeyRow>): UplinkKeyRow => ({
  kid: r.kid,
  publicJwk: PublicSigningJwk.parse({ kty: r.public_jwk.kty, crv: r.public_jwk.crv, x: r.public_jwk.x, kid: r.public_jwk.kid }),
  status: r.status,
});

/** Every uplink key of the gateway (empty for an unknown gateway). */
export async function uplinkKeys(q: Queryable, gatewayId: string): Promise<UplinkKeyRow[]> {
  const r = await q.query('SELECT kid, public_jwk, status FROM gateway_uplink_keys WHERE gateway_id = $1', [gatewayId]);
  return parseRows('gateway_uplink_keys', KeyRow, r.rows).map(toKey);
}

/**
 * Inside the uplink transaction: the status of the key a message verified
 * with, and the kid of a `previous` key waiting to be retired (one indexed
 * read; the row of the key is share-locked so a retirement waits for it).
 */
export async function uplinkKidState(
  q: Queryable,
  gatewayId: string,
  kid: string,
): Promise<{ status: UplinkKeyStatus | null; previousKid: string | null }> {
  const r = await q.query(
    `SELECT k.status, (SELECT p.kid FROM gateway_uplink_keys p WHERE p.gateway_id = $1 AND p.status = 'previous') AS previous_kid
       FROM (SELECT 1) one LEFT JOIN gateway_uplink_keys k ON k.gateway_id = $1 AND k.kid = $2`,
    [gatewayId, kid],
  );
  const row = parseRow(
    'gateway_uplink_keys',
    z.object({ status: z.enum(['current', 'previous', 'retired']).nullable(), previous_kid: z.string().nullable() }),
    r.rows[0],
  );
  return { status: row.status, previousKid: row.previous_kid };
}

/** current → previous, the new key current (and copied to gateways.public_jwk), in one transaction. */
export async function installUplinkKey(
  q: Queryable,
  gatewayId: string,
  jwk: PublicSigningJwk,
  rotationId: string,
  now: number,
): Promise<void> {
  const moved = await q.query(`UPDATE gateway_uplink_keys SET status = 'previous' WHERE gateway_id = $1 AND status = 'current'`, [
    gatewayId,
  ]);
  if (moved.rowCount !== 1) throw new Error(`gateway ${gatewayId} has no current uplink key`);
  await q.query(
    `INSERT INTO gateway_uplink_keys (gateway_id, kid, public_jwk, status, rotation_id, added_at) VALUES ($1, $2, $3::jsonb, 'current', $4, $5)`,
    [gatewayId, jwk.kid, JSON.stringify(jwk), rotationId, now],
  );
  await q.query('UPDATE gateways SET public_jwk = $2::jsonb WHERE id = $1', [gatewayId, JSON.stringify(jwk)]);
}

/** previous → retired (0 rows: none waiting). */
export async function retirePreviousUplinkKey(q: Queryable, gatewayId: string, now: number): Promise<string | null> {
  const r = await q.query(
    `UPDATE gateway_uplink_keys SET status = 'retired', retired_at = $2 WHERE gateway_id = $1 AND status = 'previous' RETURNING kid`,
    [gatewayId, now],
  );
  return r.rows[0] === undefined ? null : parseRow('gateway_uplink_keys', z.object({ kid: z.string() }), r.rows[0]).kid;
}

const RotationRow = z.object({
  id: z.string(),
  gateway_id: z.string(),
  status: z.enum(UPLINK_KEY_ROTATION_STATUSES),
  old_kid: z.string(),
  new_kid: z.string().nullable(),
  code: z.string().nullable(),
  requested_by: z.string(),
  rotate_seq: Int,
  activate_seq: Int.nullable(),
  requested_at: Int,
  proposed_at: Int.nullable(),
  settled_at: Int.nullable(),
});
export interface UplinkKeyRotationRow extends UplinkKeyRotation {
  readonly requestedBy: string;
  readonly rotateSeq: number;
  readonly activateSeq: number | null;
  readonly requestedAt: number;
  readonly proposedAt: number | null;
  readonly settledAt: number | null;
}
const toRotation = (r: z.infer<typeof RotationRow>): UplinkKeyRotationRow => ({
  id: r.id,
  gatewayId: r.gateway_id,
  status: r.status,
  oldKid: r.old_kid,
  newKid: r.new_kid,
  code: r.code,
  requestedBy: r.requested_by,
  rotateSeq: r.rotate_seq,
  activateSeq: r.activate_seq,
  requestedAt: r.requested_at,
  proposedAt: r.proposed_at,
  settledAt: r.settled_at,
});
const ROTATION_COLUMNS =
  'id, gateway_id, status, old_kid, new_kid, code, requested_by, rotate_seq, activate_seq, requested_at, proposed_at, settled_at';

/** The gateway's open rotation (requested or proposed), locked, or null. */
export async function lockOpenRotation(q: Queryable, gatewayId: string): Promise<UplinkKeyRotationRow | null> {
  const r = await q.query(
    `SELECT ${ROTATION_COLUMNS} FROM gateway_uplink_key_rotations WHERE gateway_id = $1 AND status IN ('requested', 'proposed') FOR UPDATE`,
    [gatewayId],
  );
  return r.rows[0] === undefined ? null : toRotation(parseRow('gateway_uplink_key_rotations', RotationRow, r.rows[0]));
}

/** One rotation of this gateway, locked, or null (another gateway's id reads as null). */
export async function lockRotation(q: Queryable, gatewayId: string, id: string): Promise<UplinkKeyRotationRow | null> {
  const r = await q.query(`SELECT ${ROTATION_COLUMNS} FROM gateway_uplink_key_rotations WHERE id = $1 AND gateway_id = $2 FOR UPDATE`, [
    id,
    gatewayId,
  ]);
  return r.rows[0] === undefined ? null : toRotation(parseRow('gateway_uplink_key_rotations', RotationRow, r.rows[0]));
}

/** The gateway's rotations, newest first. */
export async function listRotations(q: Queryable, gatewayId: string, limit = 20): Promise<UplinkKeyRotationRow[]> {
  const r = await q.query(
    `SELECT ${ROTATION_COLUMNS} FROM gateway_uplink_key_rotations WHERE gateway_id = $1 ORDER BY requested_at DESC, id LIMIT $2`,
    [gatewayId, limit],
  );
  return parseRows('gateway_uplink_key_rotations', RotationRow, r.rows).map(toRotation);
}

export async function insertRotation(
  q: Queryable,
  r: { id: string; gatewayId: string; oldKid: string; requestedBy: string; cid: string; jti: string; seq: number; now: number },
): Promise<void> {
  await q.query(
    `INSERT INTO gateway_uplink_key_rotations (id, gateway_id, status, old_kid, requested_by, cid, rotate_jti, rotate_seq, requested_at)
     VALUES ($1, $2, 'requested', $3, $4, $5, $6, $7, $8)`,
    [r.id, r.gatewayId, r.oldKid, r.requestedBy, r.cid, r.jti, r.seq, r.now],
  );
}

/** Compare-and-set on the status: 1 row = written. */
export async function saveRotation(
  q: Queryable,
  r: UplinkKeyRotation,
  from: UplinkKeyRotation['status'],
  extra: { activateJti?: string; activateSeq?: number; now: number },
): Promise<number> {
  const res = await q.query(
    `UPDATE gateway_uplink_key_rotations
        SET status = $3, new_kid = $4, code = $5,
            activate_jti = COALESCE($6, activate_jti), activate_seq = COALESCE($7, activate_seq),
            proposed_at = CASE WHEN $3 = 'proposed' THEN $8 ELSE proposed_at END,
            settled_at = CASE WHEN $3 IN ('active', 'failed') THEN $8 ELSE settled_at END
      WHERE id = $1 AND status = $2`,
    [r.id, from, r.status, r.newKid, r.code, extra.activateJti ?? null, extra.activateSeq ?? null, extra.now],
  );
  return res.rowCount;
}
