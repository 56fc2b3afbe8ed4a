import { AccessEventMessage, StaffBy, parseRow, parseRows, type AccessEvent } from '@tobira/shared';
import { z } from 'zod';
import { flag, jsonColumn, type ReadableDb, type WritableDb, prepared } from './db.js';

/**
 * The access log: every door decision, unique `(lock_id, request_id)`, with
 * the command it sent. A decision's row is written by `commitDecisions`
 * together with its lockout updates and its access.event outbox row.
 */
export type StoredAccessEvent = AccessEvent & {
  /** The unlock command's expiry and hold, to sign the same command again for a repeated request (null: no command). */
  readonly commandExpiresAt: number | null;
  readonly holdMs: number | null;
  /** The correlation id of the decision's work (its grant's cid when a key matched). */
  readonly cid: string;
};

/** The columns of an `access_log` row (the staff read API's list adds `id`), and the fields they become. */
export const AccessLogColumns = z.object({
  event_id: z.string(),
  lock_id: z.string(),
  request_id: z.string(),
  door_id: z.string().nullable(),
  at: z.int(),
  allowed: flag,
  code: z.string(),
  key_id: z.string().nullable(),
  key_version: z.int().nullable(),
  person_id: z.string().nullable(),
  credential_type: z.string().nullable(),
  command_id: z.string().nullable(),
  command_expires_at: z.int().nullable(),
  hold_ms: z.int().nullable(),
  cid: z.string(),
  /** A remote unlock's supervisor and reason (0008). */
  by_staff: jsonColumn(StaffBy).nullable(),
});
export const accessLogFields = (r: z.infer<typeof AccessLogColumns>) => ({
  eventId: r.event_id,
  requestId: r.request_id,
  lockId: r.lock_id,
  doorId: r.door_id,
  at: r.at,
  allowed: r.allowed,
  code: r.code,
  keyId: r.key_id,
  keyVersion: r.key_version,
  personId: r.person_id,
  credentialType: r.credential_type,
  commandId: r.command_id,
  commandExpiresAt: r.command_expires_at,
  holdMs: r.hold_ms,
  cid: r.cid,
});

const AccessRowSchema = AccessLogColumns.transform((r) => ({ fields: accessLogFields(r), by: r.by_staff }))
  // the event fields are the access.event body's, checked by its own schema
  .pipe(
    z.object({
      fields: AccessEventMessage.shape.body
        .omit({ by: true })
        .extend({ commandExpiresAt: z.int().nullable(), holdMs: z.int().nullable(), cid: z.string() }),
      by: StaffBy.nullable(),
    }),
  )
  .transform(({ fields, by }): StoredAccessEvent => (by === null ? fields : { ...fields, by }));

/** `outboxSeq`: the uplink seq of the row's access.event (retention keeps the row until that is delivered). */
export function insertAccess(db: WritableDb, a: StoredAccessEvent, outboxSeq: number | null = null): void {
  prepared(
    db,
    `INSERT INTO access_log (event_id, lock_id, request_id, door_id, at, allowed, code, key_id, key_version, person_id, credential_type, command_id, command_expires_at, hold_ms, cid, outbox_seq, by_staff)
     VALUES (@eventId, @lockId, @requestId, @doorId, @at, @allowed, @code, @keyId, @keyVersion, @personId, @credentialType, @commandId, @commandExpiresAt, @holdMs, @cid, @outboxSeq, @byStaff)`,
  ).run({ ...a, by: undefined, allowed: a.allowed ? 1 : 0, outboxSeq, byStaff: a.by === undefined ? null : JSON.stringify(a.by) });
}

export function findAccess(db: ReadableDb, lockId: string, requestId: string): StoredAccessEvent | null {
  const r: unknown = prepared(db, 'SELECT * FROM access_log WHERE lock_id = ? AND request_id = ?').get(lockId, requestId);
  return r === undefined ? null : parseRow('access_log', AccessRowSchema, r);
}

export function accessLog(db: ReadableDb, limit = 100): StoredAccessEvent[] {
  return parseRows('access_log', AccessRowSchema, prepared(db, 'SELECT * FROM access_log ORDER BY id DESC LIMIT ?').all(limit));
}

/**
 * Decisions that arrived together (group commit), in ONE synchronous
 * transaction: `decideAll` (the use case) reads the lock, lockouts and key
 * set and writes each decision's lockout updates, access-log row and
 * access.event outbox row, in arrival order so each sees what the previous
 * one left. One fsync covers them all; nothing is published before it.
 */
export function commitDecisions<T>(db: WritableDb, decideAll: () => T): T {
  return db.transaction(decideAll).immediate();
}

/**
 * Retention of the access log: rows older than `maxAgeMs` (by decision time)
 * or beyond the newest `maxRows` are deleted, but ONLY rows whose
 * access.event the cloud already has: a row whose outbox row is still
 * pending is kept however old, so a long outage can hold more than the bound
 * (DESIGN I2 wins; the disk headroom check bounds that). An outbox row is
 * deleted only once sent, so a row with no outbox row left (or none
 * recorded, from before 0007) was delivered.
 */
export function purgeAccessLog(db: WritableDb, now: number, bounds: { readonly maxRows: number; readonly maxAgeMs: number }): number {
  const overflow: unknown = prepared(db, 'SELECT id FROM access_log ORDER BY id DESC LIMIT 1 OFFSET ?').get(bounds.maxRows);
  const overflowId = overflow === undefined ? -1 : parseRow('access_log', z.object({ id: z.int() }), overflow).id;
  return prepared(
    db,
    `DELETE FROM access_log WHERE id IN (
         SELECT a.id FROM access_log a
         WHERE (a.at < @cutoff OR a.id <= @overflowId)
           AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.seq = a.outbox_seq AND o.acked_at IS NULL))`,
  ).run({ cutoff: now - bounds.maxAgeMs, overflowId }).changes;
}
