import { z } from 'zod';
import { pageOf, parseRow, parseRows, type Page } from '@tobira/shared';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, timePageParams, type SiteScope } from './scope.js';

/**
 * The uplink inbox's tables: `uplink_inbox` (dedupe by jti, in the
 * transaction of the message's effect), `uplink_seq` (per gateway: highest
 * seq seen, purge floor, and the acknowledgement pointer heartbeats carry)
 * and `rejected_uplinks` (what failed verification, bounded).
 */

/** Claims a message's jti as received: false when it was already (a redelivery or a resend). */
export async function claimInbox(
  q: Queryable,
  m: { jti: string; gatewayId: string; type: string; seq: number | null; cid: string; receivedAt: number },
): Promise<boolean> {
  const r = await q.query(
    `INSERT INTO uplink_inbox (jti, gateway_id, type, seq, cid, result, code, received_at) VALUES ($1,$2,$3,$4,$5,'received','MESSAGE_APPLIED',$6)
     ON CONFLICT (jti) DO NOTHING`,
    [m.jti, m.gatewayId, m.type, m.seq, m.cid, m.receivedAt],
  );
  return r.rowCount === 1;
}

/** Whether another message of the gateway already came with this seq. */
export async function seqTakenByOther(q: Queryable, gatewayId: string, seq: number, jti: string): Promise<boolean> {
  const r = await q.query('SELECT 1 FROM uplink_inbox WHERE gateway_id = $1 AND seq = $2 AND jti <> $3 LIMIT 1', [gatewayId, seq, jti]);
  return r.rowCount > 0;
}

/** The inbox row's final result and code, once the message was applied. */
export async function recordInboxResult(q: Queryable, jti: string, result: string, code: string): Promise<void> {
  await q.query('UPDATE uplink_inbox SET result = $2, code = $3 WHERE jti = $1', [jti, result, code]);
}

/** The gateway's seq row, locked for the transaction (zeros before its first sequenced message). */
export async function lockUplinkSeq(q: Queryable, gatewayId: string): Promise<{ maxSeq: number; ackedSeq: number }> {
  const r = await q.query('SELECT max_seq, acked_seq FROM uplink_seq WHERE gateway_id = $1 FOR UPDATE', [gatewayId]);
  if (r.rows[0] === undefined) return { maxSeq: 0, ackedSeq: 0 };
  const row = parseRow('uplink_seq', z.object({ max_seq: Int8, acked_seq: Int8 }), r.rows[0]);
  return { maxSeq: row.max_seq, ackedSeq: row.acked_seq };
}

/** The seq row a batch works on, locked for the transaction (null before the gateway's first sequenced message). */
export interface UplinkSeqRow {
  maxSeq: number;
  ackedSeq: number;
  ackedJti: string | null;
  /** the pointer a restarted history replaced, named by heartbeats until the gateway resyncs for it (migration 0038) */
  lostSeq: number | null;
  lostJti: string | null;
}
export async function lockUplinkSeqRow(q: Queryable, gatewayId: string): Promise<UplinkSeqRow | null> {
  const r = await q.query('SELECT max_seq, acked_seq, acked_jti, lost_seq, lost_jti FROM uplink_seq WHERE gateway_id = $1 FOR UPDATE', [
    gatewayId,
  ]);
  if (r.rows[0] === undefined) return null;
  const row = parseRow(
    'uplink_seq',
    z.object({
      max_seq: Int8,
      acked_seq: Int8,
      acked_jti: z.string().nullable(),
      lost_seq: Int8.nullable(),
      lost_jti: z.string().nullable(),
    }),
    r.rows[0],
  );
  return { maxSeq: row.max_seq, ackedSeq: row.acked_seq, ackedJti: row.acked_jti, lostSeq: row.lost_seq, lostJti: row.lost_jti };
}

/**
 * Writes back the seq row a batch computed under `lockUplinkSeqRow`'s lock:
 * the highest seq, `received` more messages, and the acknowledgement pointer
 * (one statement for the batch instead of three per message).
 */
export async function saveUplinkSeq(q: Queryable, gatewayId: string, row: UplinkSeqRow, received: number): Promise<void> {
  await q.query(
    `INSERT INTO uplink_seq (gateway_id, max_seq, received, acked_seq, acked_jti, lost_seq, lost_jti) VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (gateway_id) DO UPDATE SET max_seq = GREATEST(uplink_seq.max_seq, EXCLUDED.max_seq),
       received = uplink_seq.received + EXCLUDED.received, acked_seq = EXCLUDED.acked_seq, acked_jti = EXCLUDED.acked_jti,
       lost_seq = EXCLUDED.lost_seq, lost_jti = EXCLUDED.lost_jti`,
    [gatewayId, row.maxSeq, received, row.ackedSeq, row.ackedJti, row.lostSeq, row.lostJti],
  );
}

/** Of `seqs`, those another message of the gateway (a jti not in `jtis`) already came with. */
export async function seqsTakenByOthers(
  q: Queryable,
  gatewayId: string,
  seqs: readonly number[],
  jtis: readonly string[],
): Promise<Set<number>> {
  const r = await q.query(
    'SELECT DISTINCT seq FROM uplink_inbox WHERE gateway_id = $1 AND seq = ANY($2::bigint[]) AND NOT (jti::text = ANY($3::text[]))',
    [gatewayId, seqs, jtis],
  );
  return new Set(parseRows('uplink_inbox', z.object({ seq: Int8 }), r.rows).map((x) => x.seq));
}

/**
 * The gateway's uplink history started again at `seq` (a new message at a seq already acknowledged):
 * acknowledgement restarts just below it, and the pointer it replaced is kept as the lost one (the first,
 * if the history restarted again before the gateway resynced). Just below, not from nothing: a store put
 * back from a backup goes on from the backup's last seq, and everything below that is the old history the
 * pointer had passed (the same messages, acknowledged already), so the pointer can move on from there; it
 * names no jti until it does, as only the new message's is known to be in the restored store.
 */
export async function resetUplinkAck(q: Queryable, gatewayId: string, seq: number): Promise<void> {
  await q.query(
    `UPDATE uplink_seq SET
       lost_seq = CASE WHEN lost_seq IS NULL AND acked_jti IS NOT NULL AND acked_seq > 0 THEN acked_seq ELSE lost_seq END,
       lost_jti = CASE WHEN lost_seq IS NULL AND acked_jti IS NOT NULL AND acked_seq > 0 THEN acked_jti ELSE lost_jti END,
       acked_seq = $2, acked_jti = NULL
     WHERE gateway_id = $1`,
    [gatewayId, Math.max(0, seq - 1)],
  );
}

/** In a batch's row: the same as resetUplinkAck. */
export function restartUplinkAck(row: UplinkSeqRow, seq: number): void {
  if (row.lostSeq === null && row.ackedJti !== null && row.ackedSeq > 0) {
    row.lostSeq = row.ackedSeq;
    row.lostJti = row.ackedJti;
  }
  row.ackedSeq = Math.max(0, seq - 1);
  row.ackedJti = null;
}

/**
 * The gateway asked for a resync because it saw its store lost acknowledged uplinks: heartbeats stop
 * naming them. With `unackedFrom` (the lowest uplink seq its store has not had acknowledged, or its next
 * seq), acknowledgement restarts just below that, from the gateway's own word instead of the guess made
 * from the one message that showed the restart (which may have overtaken earlier ones): no jti until the
 * pointer moves over the next message, and never past the highest seq seen. Only while a lost pointer is
 * held, so a stale request cannot move a pointer the new history has walked since.
 */
export async function clearLostUplinks(q: Queryable, gatewayId: string, unackedFrom?: number): Promise<boolean> {
  const r = await q.query(
    `UPDATE uplink_seq SET lost_seq = NULL, lost_jti = NULL,
       acked_seq = CASE WHEN $2::bigint IS NULL THEN acked_seq ELSE LEAST($2::bigint - 1, max_seq) END,
       acked_jti = CASE WHEN $2::bigint IS NULL THEN acked_jti ELSE NULL END
     WHERE gateway_id = $1 AND lost_seq IS NOT NULL`,
    [gatewayId, unackedFrom ?? null],
  );
  return (r.rowCount ?? 0) > 0;
}

/** Counts a sequenced message and raises the highest seq seen. */
export async function noteUplinkSeq(q: Queryable, gatewayId: string, seq: number): Promise<void> {
  await q.query(
    `INSERT INTO uplink_seq (gateway_id, max_seq, received) VALUES ($1, $2, 1)
     ON CONFLICT (gateway_id) DO UPDATE SET max_seq = GREATEST(uplink_seq.max_seq, EXCLUDED.max_seq), received = uplink_seq.received + 1`,
    [gatewayId, seq],
  );
}

/** Moves the acknowledgement pointer onto `seq` only when it is the next one (0 rows otherwise). */
export async function advanceUplinkAck(q: Queryable, gatewayId: string, seq: number, jti: string): Promise<void> {
  await q.query('UPDATE uplink_seq SET acked_seq = $2, acked_jti = $3 WHERE gateway_id = $1 AND acked_seq = $2 - 1', [gatewayId, seq, jti]);
}

/** Missing uplink seqs of a gateway, as ranges between the purge floor and the highest seq seen (late arrivals fill them). */
export async function listUplinkGaps(q: Queryable, gatewayId: string): Promise<{ fromSeq: number; toSeq: number }[]> {
  const r = await q.query(
    `SELECT seq + 1 AS from_seq, next - 1 AS to_seq FROM (
        SELECT seq, lead(seq) OVER (ORDER BY seq) AS next FROM (
          SELECT COALESCE((SELECT floor FROM uplink_seq WHERE gateway_id = $1), 0) AS seq
          UNION ALL SELECT seq FROM uplink_inbox WHERE gateway_id = $1 AND seq IS NOT NULL
            AND seq > COALESCE((SELECT floor FROM uplink_seq WHERE gateway_id = $1), 0)) a) s
      WHERE next > seq + 1 ORDER BY seq`,
    [gatewayId],
  );
  return parseRows('uplink_inbox', z.object({ from_seq: Int8, to_seq: Int8 }), r.rows).map((x) => ({
    fromSeq: x.from_seq,
    toSeq: x.to_seq,
  }));
}

// ---------------------------------------------------------------- rejected

export interface RejectedUplink {
  readonly id: number;
  readonly gatewayId: string | null;
  readonly topic: string;
  readonly code: string;
  readonly detail: string;
  readonly at: number;
}
const RejectedRow = z
  .object({ id: Int8, gateway_id: z.string().nullable(), topic: z.string(), code: z.string(), detail: z.string(), at: Int8 })
  .transform((r): RejectedUplink => ({ id: r.id, gatewayId: r.gateway_id, topic: r.topic, code: r.code, detail: r.detail, at: r.at }));

/** Records a rejected uplink and keeps only the newest `maxRows`: a flood of garbage stays bounded (the purge drops them by age too). */
export async function recordRejected(q: Queryable, x: Omit<RejectedUplink, 'id'>, maxRows: number): Promise<void> {
  await q.query('INSERT INTO rejected_uplinks (gateway_id, topic, code, detail, at) VALUES ($1,$2,$3,$4,$5)', [
    x.gatewayId,
    x.topic,
    x.code,
    x.detail,
    x.at,
  ]);
  await q.query('DELETE FROM rejected_uplinks WHERE id <= (SELECT id FROM rejected_uplinks ORDER BY id DESC OFFSET $1 LIMIT 1)', [maxRows]);
}

export async function listRejectedUplinks(q: Queryable, f: { gatewayId?: string; limit?: number }): Promise<RejectedUplink[]> {
  const r = await q.query(
    `SELECT id, gateway_id, topic, code, detail, at FROM rejected_uplinks WHERE ($1::text IS NULL OR gateway_id = $1) ORDER BY id LIMIT $2`,
    [f.gatewayId ?? null, f.limit ?? 500],
  );
  return parseRows('rejected_uplinks', RejectedRow, r.rows);
}

export interface RejectedFilter {
  readonly gatewayId?: string | undefined;
  readonly code?: string | undefined;
  readonly from?: number | undefined;
  readonly to?: number | undefined;
  /** The last row's (at, id) of the previous page. */
  readonly cursor: readonly [number, number] | null;
  readonly limit: number;
}

/**
 * Rejected uplinks newest first, keyset-paginated on (at, id) descending; `from` inclusive, `to` exclusive.
 * A scoped caller sees only rows of gateways of its sites: a row whose topic named no registered
 * gateway (UNKNOWN_GATEWAY, BAD_TOPIC) belongs to no site, so only an unscoped token sees it.
 */
export async function listRejectedPage(q: Queryable, scope: SiteScope, f: RejectedFilter): Promise<Page<RejectedUplink>> {
  const r = await q.query(
    `SELECT r.id, r.gateway_id, r.topic, r.code, r.detail, r.at FROM rejected_uplinks r
      WHERE ($1::text[] IS NULL OR r.gateway_id IN (SELECT id FROM gateways WHERE site_id = ANY($1)))
        AND ($2::text IS NULL OR r.gateway_id = $2) AND ($3::text IS NULL OR r.code = $3)
        AND ($4::bigint IS NULL OR r.at >= $4) AND ($5::bigint IS NULL OR r.at < $5)
        AND ($6::bigint IS NULL OR (r.at, r.id) < ($6::bigint, $7::bigint))
      ORDER BY r.at DESC, r.id DESC LIMIT $8`,
    [scopeParam(scope), f.gatewayId ?? null, f.code ?? null, ...timePageParams(f)],
  );
  return pageOf(parseRows('rejected_uplinks', RejectedRow, r.rows), f.limit, (x) => [x.at, x.id]);
}
