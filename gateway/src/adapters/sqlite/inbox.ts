import { DownlinkMessage, parseRow, parseRows, type MessageId } from '@tobira/shared';
import { z } from 'zod';
import { countOf, jsonColumn, type ReadableDb, type WritableDb, prepared, withoutFsync } from './db.js';
import { raiseTimeFloor } from './settings.js';

/**
 * The inbox: every verified downlink message, applied by one writer
 * (app/apply.ts) through `applyInboxRow` / `failInboxRow`, which own the
 * transaction of one apply (claim → apply → mark).
 */
export interface InboxRow {
  readonly id: number;
  readonly jti: MessageId;
  readonly type: DownlinkMessage['type'];
  readonly seq: number | null;
  readonly cid: string;
  readonly message: DownlinkMessage;
  readonly attempts: number;
  /** The kid of the cloud key that signed it (null: stored before migration 0009, or a test's row). */
  readonly kid: string | null;
}

/** What an apply settled a row as (the inbox mark and the ack report it). */
export interface Settled {
  readonly result: 'applied' | 'noop' | 'refused';
  readonly code: string;
}

const InboxRowSchema = z
  .object({
    id: z.int(),
    jti: z.string(),
    type: z.string(),
    seq: z.int().nullable(),
    cid: z.string(),
    message: jsonColumn(DownlinkMessage),
    attempts: z.int(),
    kid: z.string().nullable().default(null),
  })
  .refine((r) => r.message.type === r.type && r.message.jti === r.jti, 'message does not match columns')
  .transform((r): InboxRow => ({
    id: r.id,
    jti: r.message.jti,
    type: r.message.type,
    seq: r.seq,
    cid: r.cid,
    message: r.message,
    attempts: r.attempts,
    kid: r.kid,
  }));

/**
 * Inserts a verified downlink message and raises the newest-verified-iat
 * floor, in one transaction. Duplicate jti: nothing inserted.
 * Guarantee: once this commits, the message will be applied (at least once
 * attempted, exactly once in effect) even if the process dies right after.
 */
export function insertInbox(db: WritableDb, m: DownlinkMessage, receivedAt: number, kid: string | null = null): 'inserted' | 'duplicate' {
  return db
    .transaction(() => {
      const r = prepared(
        db,
        `INSERT INTO inbox (jti, type, seq, cid, iat, message, received_at, kid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (jti) DO NOTHING`,
      ).run(m.jti, m.type, 'seq' in m ? m.seq : null, m.cid, m.iat, JSON.stringify(m), receivedAt, kid);
      raiseTimeFloor(db, m.iat * 1000, 0);
      return r.changes === 1 ? ('inserted' as const) : ('duplicate' as const);
    })
    .immediate();
}

/** Claims made before a crash are released: one process owns the file, so at startup nobody else holds a claim. */
export function releaseAllClaims(db: WritableDb): void {
  prepared(db, "UPDATE inbox SET claimed_until = NULL WHERE status = 'pending'").run();
}

/** Reclaims claims whose lease ran out (the claimer died or hung). */
export function reclaimExpired(db: WritableDb, now: number): number {
  return prepared(db, "UPDATE inbox SET claimed_until = NULL WHERE status = 'pending' AND claimed_until <= ?").run(now).changes;
}

/**
 * The next row the writer should look at, in this order: a sequenced row at
 * or below the applied seq (a duplicate to settle), the row right after the
 * applied seq, then unsequenced rows in arrival order. Claimed rows are skipped.
 */
export function nextInbox(db: ReadableDb, appliedSeq: number, now: number): InboxRow | null {
  const free = '(claimed_until IS NULL OR claimed_until <= @now)';
  const row: unknown =
    prepared(
      db,
      `SELECT * FROM inbox WHERE status = 'pending' AND seq IS NOT NULL AND seq <= @applied AND ${free} ORDER BY seq, id LIMIT 1`,
    ).get({ applied: appliedSeq, now }) ??
    prepared(db, `SELECT * FROM inbox WHERE status = 'pending' AND seq = @next AND ${free} ORDER BY id LIMIT 1`).get({
      next: appliedSeq + 1,
      now,
    }) ??
    prepared(db, `SELECT * FROM inbox WHERE status = 'pending' AND seq IS NULL AND ${free} ORDER BY id LIMIT 1`).get({ now });
  return row === undefined ? null : parseRow('inbox', InboxRowSchema, row);
}

/** True when sequenced rows wait beyond a missing seq. */
export function hasGap(db: ReadableDb, appliedSeq: number): boolean {
  return prepared(db, "SELECT 1 FROM inbox WHERE status = 'pending' AND seq > ? LIMIT 1").get(appliedSeq + 1) !== undefined;
}

/**
 * Claim: one attempt more, with a lease. 0 rows: someone else has it.
 * Committed without its own fsync (`withoutFsync`): the attempt count guards
 * against a crash loop, which is process deaths, and a process death keeps a
 * WAL commit without the fsync; a power cut may lose the last claim, which
 * only gives the row one more attempt. The apply's FULL commit right after
 * syncs it with the apply (one fsync per applied message less).
 */
export function claimInbox(db: WritableDb, id: number, until: number): boolean {
  return withoutFsync(
    db,
    () =>
      prepared(db, "UPDATE inbox SET attempts = attempts + 1, claimed_until = ? WHERE id = ? AND status = 'pending'").run(until, id)
        .changes === 1,
  );
}

/** Mark: processed with the result the ack reports. Runs in the apply transaction. */
export function markProcessed(db: WritableDb, id: number, result: string, code: string, now: number): void {
  prepared(db, "UPDATE inbox SET status = 'processed', result = ?, code = ?, processed_at = ?, claimed_until = NULL WHERE id = ?").run(
    result,
    code,
    now,
    id,
  );
}

/** Fail: release the claim with the error; after the allowed attempts the row is marked failed (visible to operators). */
export function failInbox(db: WritableDb, id: number, error: string, failed: boolean, now: number): void {
  prepared(
    db,
    "UPDATE inbox SET claimed_until = NULL, last_error = ?, status = CASE WHEN ? THEN 'failed' ELSE status END, code = CASE WHEN ? THEN 'APPLY_FAILED' ELSE code END, processed_at = CASE WHEN ? THEN ? ELSE processed_at END WHERE id = ?",
  ).run(error.slice(0, 500), failed ? 1 : 0, failed ? 1 : 0, failed ? 1 : 0, now, id);
}

/**
 * One apply of a claimed row, in ONE synchronous transaction: `apply` (the
 * use case: key set, settings, ack rows in the outbox) writes its effects,
 * then the row is marked processed with what `apply` settled and the time
 * floor is raised. A throw inside rolls all of it back (the claim stays).
 */
export function applyInboxRow<R extends Settled>(db: WritableDb, rowId: number, now: number, apply: () => R): R {
  return db
    .transaction(() => {
      const r = apply();
      markProcessed(db, rowId, r.result, r.code, now);
      raiseTimeFloor(db, 0, now);
      return r;
    })
    .immediate();
}

/**
 * A failed apply, in one transaction: the claim is released with the error;
 * when `failed` (no attempts left) the row is marked failed and
 * `onFailedForGood` (the use case: its refused ack, whether the seq moves on)
 * writes with it.
 */
export function failInboxRow(
  db: WritableDb,
  rowId: number,
  error: string,
  failed: boolean,
  now: number,
  onFailedForGood: () => void,
): void {
  db.transaction(() => {
    failInbox(db, rowId, error, failed, now);
    if (failed) onFailedForGood();
  }).immediate();
}

export function inboxDepth(db: ReadableDb): number {
  return countOf(db, 'inbox', "SELECT count(*) AS n FROM inbox WHERE status = 'pending'");
}

export function inboxByStatus(db: ReadableDb): Record<string, number> {
  const rows = parseRows(
    'inbox',
    z.object({ status: z.string(), n: z.int() }),
    prepared(db, 'SELECT status, count(*) AS n FROM inbox GROUP BY status').all(),
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** Purges processed inbox rows older than `olderThan` (30 days in production); failed rows stay for operators. */
export function purgeProcessed(db: WritableDb, olderThan: number): number {
  return prepared(db, "DELETE FROM inbox WHERE status = 'processed' AND processed_at < ?").run(olderThan).changes;
}
