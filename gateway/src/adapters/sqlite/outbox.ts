import { newMessageId, parseRow, parseRows, CorrelationId, MessageId, type UplinkMessage } from '@tobira/shared';
import { z } from 'zod';
import { countOf, jsonColumn, withoutFsync, type ReadableDb, type WritableDb, prepared } from './db.js';
import { memSettings } from './memory.js';
import { readSettings } from './settings.js';

/**
 * The outbox (uplink): gap-free `seq`, own `jti`, pending → sent (broker
 * PUBACK) → acknowledged (a heartbeat's `uplinkAck`). The uplink sender is
 * claim (`pendingOutbox`) → send → mark (`markSent`); only acknowledged rows
 * are ever deleted.
 */

/** Uplink types that go through the outbox (resync requests are sent directly: they carry no seq). */
export type OutboxType = Exclude<UplinkMessage['type'], 'resync.request'>;
export type OutboxBody<T extends OutboxType> = Extract<UplinkMessage, { type: T }>['body'];

export interface OutboxRow {
  readonly seq: number;
  readonly jti: MessageId;
  readonly type: OutboxType;
  readonly cid: CorrelationId;
  readonly body: unknown;
}

export interface OutboxLimits {
  /** Pending rows above which non-essential rows (gateway.status, heartbeat acks) are refused. */
  readonly maxRows: number;
}
export const DEFAULT_OUTBOX_LIMITS: OutboxLimits = Object.freeze({ maxRows: 100_000 });

export type EnqueueResult = { readonly seq: number; readonly jti: MessageId } | { readonly refused: 'OUTBOX_FULL' };

const OUTBOX_TYPES = [
  'ack',
  'access.event',
  'alarm',
  'gateway.status',
  'staff.action',
  'uplink_key.proposal',
] as const satisfies readonly OutboxType[];

const NextSeq = z.object({ seq: z.int() });
function nextSeqOf(r: unknown): number {
  const seq = typeof r === 'object' && r !== null ? (r as { seq?: unknown }).seq : undefined;
  return typeof seq === 'number' && Number.isSafeInteger(seq) ? seq : parseRow('settings', NextSeq, r).seq;
}

const OutboxRowSchema = z.object({
  seq: z.int(),
  jti: MessageId,
  type: z.enum(OUTBOX_TYPES),
  cid: CorrelationId,
  body: jsonColumn(z.unknown()),
});

/**
 * Enqueue: takes the next gap-free uplink seq in the caller's transaction.
 * Essential rows (acks of sequenced messages, access events, alarms) are
 * always written; non-essential rows are refused once `maxRows` rows are
 * pending, so the outbox never drops anything silently (see docs/gateway.md).
 */
export function enqueue<T extends OutboxType>(
  db: WritableDb,
  limits: OutboxLimits,
  type: T,
  body: OutboxBody<T>,
  cid: string,
  essential: boolean,
  now: number,
): EnqueueResult {
  if (!essential && outboxDepth(db) >= limits.maxRows) return { refused: 'OUTBOX_FULL' };
  // one statement takes the seq and advances the counter; read back by hand (no zod: the decision path enqueues per request)
  const taken: unknown = prepared(
    db,
    'UPDATE settings SET next_uplink_seq = next_uplink_seq + 1 WHERE id = 1 RETURNING next_uplink_seq - 1 AS seq',
  ).get();
  const seq = nextSeqOf(taken);
  memSettings(db, (s) => ({ ...s, nextUplinkSeq: seq + 1 }));
  const jti = newMessageId();
  prepared(db, 'INSERT INTO outbox (seq, jti, type, cid, body, essential, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)').run(
    seq,
    jti,
    type,
    cid,
    JSON.stringify(body),
    essential ? 1 : 0,
    now,
  );
  return { seq, jti };
}

/** `enqueue` of a body built from what `build` reads, in its own transaction: the row reflects one consistent state. */
export function enqueueBuilt<T extends OutboxType>(
  db: WritableDb,
  limits: OutboxLimits,
  type: T,
  build: () => OutboxBody<T>,
  cid: string,
  essential: boolean,
  now: number,
): EnqueueResult {
  return db.transaction(() => enqueue(db, limits, type, build(), cid, essential, now)).immediate();
}

/** Claim for sending: the oldest pending rows in seq order (one sender per process, so no lease is needed). */
export function pendingOutbox(db: ReadableDb, limit: number): OutboxRow[] {
  return parseRows(
    'outbox',
    OutboxRowSchema,
    prepared(db, "SELECT seq, jti, type, cid, body FROM outbox WHERE status = 'pending' ORDER BY seq LIMIT ?").all(limit),
  );
}

/**
 * Mark: sent once the broker acked it (QoS 1 PUBACK). At-least-once: a crash
 * before this resends with the same jti. Not fsynced: losing a 'sent' mark in
 * a power cut only resends the row with the same jti, which the cloud
 * deduplicates.
 */
export function markSent(db: WritableDb, seqs: readonly number[], now: number): void {
  const stmt = prepared(db, "UPDATE outbox SET status = 'sent', sent_at = ? WHERE seq = ? AND status = 'pending'");
  withoutFsync(db, () => seqs.forEach((s) => stmt.run(now, s)));
}

export function outboxDepth(db: ReadableDb): number {
  return countOf(db, 'outbox', "SELECT count(*) AS n FROM outbox WHERE status = 'pending'");
}

/** Rows the broker took (PUBACK) that the cloud has not acknowledged applying yet. */
export function outboxUnacked(db: ReadableDb): number {
  return countOf(db, 'outbox', "SELECT count(*) AS n FROM outbox WHERE status = 'sent' AND acked_at IS NULL");
}

/** What a heartbeat's uplink acknowledgement did: rows acknowledged now, or `foreign` (its jti is not ours at that seq: another history). */
export type UplinkAckResult = { readonly acked: number } | { readonly foreign: true; readonly ourJti: string | null };

/**
 * The cloud acknowledged applying every uplink up to `seq`, whose message is
 * `jti`. Only if our row at `seq` is that message (a store that was reset
 * or restored has another history under the same seqs): then every row up
 * to it is done, whether sent or waiting to be sent again. In the caller's transaction.
 */
export function ackUplink(db: WritableDb, seq: number, jti: string, now: number): UplinkAckResult {
  const row: unknown = prepared(db, 'SELECT jti FROM outbox WHERE seq = ?').get(seq);
  const ours = row === undefined ? undefined : parseRow('outbox', z.object({ jti: z.string() }), row);
  if (ours === undefined && seq <= readSettings(db).uplinkAckedSeq) return { acked: 0 }; // acknowledged before, and purged since
  if (ours?.jti !== jti) return { foreign: true, ourJti: ours?.jti ?? null };
  const r = prepared(
    db,
    "UPDATE outbox SET status = 'sent', sent_at = COALESCE(sent_at, ?), acked_at = ? WHERE seq <= ? AND acked_at IS NULL",
  ).run(now, now, seq);
  prepared(db, 'UPDATE settings SET uplink_acked_seq = max(uplink_acked_seq, ?) WHERE id = 1').run(seq);
  memSettings(db, (s) => (seq <= s.uplinkAckedSeq ? s : { ...s, uplinkAckedSeq: seq }));
  return { acked: r.changes };
}

/**
 * Rows the broker took before `sentBefore` that the cloud still has not
 * acknowledged go back to pending, to be sent again with the same jti and
 * seq (the broker lost them, or the cloud could not apply them yet; the
 * cloud deduplicates). So do rows stamped after `now`: a clock that ran
 * ahead stamped them (or a store put back from a backup kept such a stamp),
 * and waiting for trusted time to pass that stamp could hold them, and the
 * cloud's acknowledgement pointer behind them, for as long as the clock was
 * ahead. In the caller's transaction. Returns how many.
 */
export function requeueUnacked(db: WritableDb, sentBefore: number, now: number): number {
  return prepared(
    db,
    "UPDATE outbox SET status = 'pending' WHERE status = 'sent' AND acked_at IS NULL AND (sent_at < ? OR sent_at > ?)",
  ).run(sentBefore, now).changes;
}

/**
 * The lowest uplink seq this store has not had acknowledged, or the next seq when every row was: what a
 * resync request for a restore names, so the cloud acknowledges from this store's own history.
 */
export function unackedFrom(db: ReadableDb): number {
  const r: unknown = prepared(db, 'SELECT min(seq) AS seq FROM outbox WHERE acked_at IS NULL').get();
  const lowest = parseRow('outbox', z.object({ seq: z.int().nullable() }), r).seq;
  return lowest ?? readSettings(db).nextUplinkSeq;
}

/** Only rows the cloud acknowledged are ever deleted. */
export function purgeSentOutbox(db: WritableDb, olderThan: number): number {
  return prepared(db, 'DELETE FROM outbox WHERE acked_at IS NOT NULL AND acked_at < ?').run(olderThan).changes;
}
