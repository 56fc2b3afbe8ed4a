import { Schedule, parseRow, parseRows, type SnapshotModes, type SnapshotTrustedKeys } from '@tobira/shared';
import { z } from 'zod';
import { Int8 } from './columns.js';
import { enterVerb, type Queryable } from './db.js';
import { listSigningKeys } from './signing-keys.js';

/**
 * What a resync snapshot carries beside the key set,
 * read in the snapshot's REPEATABLE READ transaction, and the record of each
 * snapshot sent (`resync_snapshots`, migration 0027) that the gateway's ack
 * of the whole snapshot settles.
 */

/**
 * The cloud signing keys gateways trust now: published, signing and previous
 * keys to add (with their nbf), retired kids to retire. Staged keys are not
 * trusted yet and are left out. Null when the table is empty (nothing to say).
 */
export async function trustedKeysForSnapshot(q: Queryable): Promise<SnapshotTrustedKeys | null> {
  const rows = (await listSigningKeys(q)).filter((k) => k.status !== 'staged');
  if (rows.length === 0) return null;
  return {
    add: rows.filter((k) => k.status !== 'retired').map((k) => ({ jwk: k.publicJwk, notBefore: k.notBefore ?? k.createdAt })),
    retire: rows.filter((k) => k.status === 'retired').map((k) => ({ kid: k.kid, at: k.retireAfter ?? k.updatedAt })),
  };
}

const ModeRow = z.object({
  request_id: z.string(),
  seq: Int8,
  mode: z.enum(['normal', 'lockdown']),
  requested_by: z.string(),
  reason: z.string().nullable(),
});
const PassageRow = z.object({
  request_id: z.string(),
  seq: Int8,
  door_id: z.string(),
  schedule: Schedule.nullable(),
  requested_by: z.string(),
  reason: z.string().nullable(),
});

/**
 * The last site mode and the last passage schedule of each door the cloud
 * sent this gateway up to `asOfSeq` (its newest `site.mode` rows, whatever
 * their ack), each with that row's seq: the gateway applies what its applied
 * seq had not reached. Null when the cloud never sent it a mode. At most the
 * 256 doors with the newest entries (the schema's bound).
 */
export async function modesForSnapshot(q: Queryable, gatewayId: string, asOfSeq: number): Promise<SnapshotModes | null> {
  const m = await q.query(
    `SELECT request_id, seq, mode, requested_by, reason FROM mode_requests
      WHERE gateway_id = $1 AND seq <= $2 AND mode IS NOT NULL ORDER BY seq DESC LIMIT 1`,
    [gatewayId, asOfSeq],
  );
  const p = await q.query(
    `SELECT * FROM (
       SELECT DISTINCT ON (e->>'doorId') m.request_id, m.seq, e->>'doorId' AS door_id, e->'schedule' AS schedule, m.requested_by, m.reason
         FROM mode_requests m CROSS JOIN LATERAL jsonb_array_elements(m.passage) e
        WHERE m.gateway_id = $1 AND m.seq <= $2
        ORDER BY e->>'doorId', m.seq DESC) x
      ORDER BY seq DESC, door_id LIMIT 256`,
    [gatewayId, asOfSeq],
  );
  const origin = (r: { request_id: string; seq: number; requested_by: string; reason: string | null }) => ({
    seq: r.seq,
    requestId: r.request_id,
    by: r.requested_by.slice(0, 100),
    reason: r.reason,
  });
  const mode = m.rows[0] === undefined ? null : parseRow('mode_requests', ModeRow, m.rows[0]);
  const passage = parseRows('mode_requests', PassageRow, p.rows);
  if (mode === null && passage.length === 0) return null;
  return {
    mode: mode === null ? null : { ...origin(mode), mode: mode.mode },
    passage: passage.map((r) => ({ ...origin(r), doorId: r.door_id as never, schedule: r.schedule })),
  };
}

/** Records a snapshot sent, before its first part is published (so its ack always finds the row). */
export async function recordSnapshotSent(
  q: Queryable,
  s: { jti: string; gatewayId: string; snapshotId: string; asOfSeq: number; keyset: boolean },
  now: number,
): Promise<void> {
  await q.query(`INSERT INTO resync_snapshots (jti, gateway_id, snapshot_id, as_of_seq, keyset, sent_at) VALUES ($1, $2, $3, $4, $5, $6)`, [
    s.jti,
    s.gatewayId,
    s.snapshotId,
    s.asOfSeq,
    s.keyset,
    now,
  ]);
}

/** The code a gateway acks a whole snapshot with when everything in it was applied (shared/src/codes.ts). */
export const SNAPSHOT_APPLIED = 'SNAPSHOT_APPLIED';

/**
 * The gateway's ack of a whole snapshot (ackOf: its first part's jti, no key),
 * in the uplink inbox's transaction. The first ack counts: it settles, as
 * `applied` with MODE_SNAPSHOT_COVERED, every pending mode request of that
 * gateway whose seq the snapshot covers (the snapshot carried the modes, and
 * the gateway applies them whatever its trusted-key set did); and when the
 * snapshot carried trusted keys that the gateway applied (SNAPSHOT_APPLIED),
 * the signing-key deliveries it covers that no ack has applied yet
 * (SNAPSHOT_COVERED). 'unknown': no snapshot of this gateway has this jti.
 */
export async function settleSnapshotAck(
  q: Queryable,
  a: { gatewayId: string; jti: string; code: string; at: number },
): Promise<{ kind: 'settled'; modeRequests: number; deliveries: number } | { kind: 'already' | 'unknown' }> {
  const r = await q.query(
    `UPDATE resync_snapshots SET acked_at = $3, ack_code = $4 WHERE jti = $1 AND gateway_id = $2 AND acked_at IS NULL
     RETURNING as_of_seq, keyset`,
    [a.jti, a.gatewayId, a.at, a.code],
  );
  const row = r.rows[0];
  if (row === undefined) {
    const e = await q.query('SELECT 1 FROM resync_snapshots WHERE jti = $1 AND gateway_id = $2', [a.jti, a.gatewayId]);
    return { kind: e.rows.length > 0 ? 'already' : 'unknown' };
  }
  const s = parseRow('resync_snapshots', z.object({ as_of_seq: Int8, keyset: z.boolean() }), row);
  await enterVerb(q, 'settleModeRequest');
  const m = await q.query(
    `UPDATE mode_requests SET status = 'applied', code = 'MODE_SNAPSHOT_COVERED', settled_at = $3
      WHERE gateway_id = $1 AND status = 'pending' AND seq <= $2`,
    [a.gatewayId, s.as_of_seq, a.at],
  );
  let deliveries = 0;
  if (s.keyset && a.code === SNAPSHOT_APPLIED) {
    const d = await q.query(
      `UPDATE signing_key_deliveries SET acked_at = $3, result = 'applied', code = 'SNAPSHOT_COVERED'
        WHERE gateway_id = $1 AND seq <= $2 AND NOT coalesce(result = 'applied' OR code = 'KEYSET_UNCHANGED', false)`,
      [a.gatewayId, s.as_of_seq, a.at],
    );
    deliveries = d.rowCount;
  }
  return { kind: 'settled', modeRequests: m.rowCount, deliveries };
}
