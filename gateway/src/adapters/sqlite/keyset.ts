import { MessageId, parseRow, parseRows, type CredentialType } from '@tobira/shared';
import { z } from 'zod';
import type { KeySetView } from '../../domain/decide.js';
import type { KeySlot, StoredKey } from '../../domain/keyset.js';
import { countOf, jsonColumn, type ReadableDb, type WritableDb, prepared } from './db.js';
import { storedKey } from './key-rows.js';
import { memConsumed, memDropActiveKeys, memKeySaved, memoryGrantCid, memoryKeyById, memoryKeysByCredential } from './memory.js';

/**
 * The key set: `keys` (one row per key id), `tombstones` (per key the highest
 * version ever revoked; never deleted) and `snapshot_parts` (a snapshot's
 * parts until all have arrived). Every verb joins the caller's transaction
 * (the inbox writer's apply).
 */
const Tombstone = z.object({ version: z.int() });

export function loadSlot(db: ReadableDb, keyId: string): KeySlot {
  const k: unknown = prepared(db, 'SELECT version, status, grant_json FROM keys WHERE key_id = ?').get(keyId);
  const t: unknown = prepared(db, 'SELECT version FROM tombstones WHERE key_id = ?').get(keyId);
  return {
    key: k === undefined ? null : storedKey(k),
    tombstone: t === undefined ? null : parseRow('tombstones', Tombstone, t).version,
  };
}

/**
 * Writes a slot back. `grantCid` is the cid of the grant that made the key
 * (kept for access-event attribution); `signerKid` the kid of the cloud key
 * that signed the message the grant came in (null: keep the stored one).
 */
export function saveSlot(
  db: WritableDb,
  keyId: string,
  slot: KeySlot,
  grantCid: string | null,
  now: number,
  signerKid: string | null = null,
): void {
  if (slot.key !== null) {
    const g = slot.key.grant;
    const grantJson = JSON.stringify(g);
    prepared(
      db,
      `INSERT INTO keys (key_id, version, status, person_id, credential_type, credential_digest, grant_json, grant_cid, updated_at, signer_kid)
       VALUES (@keyId, @version, @status, @personId, @type, @digest, @json, @cid, @now, @signerKid)
       ON CONFLICT (key_id) DO UPDATE SET version = excluded.version, status = excluded.status, person_id = excluded.person_id,
         signer_kid = coalesce(excluded.signer_kid, keys.signer_kid),
         credential_type = excluded.credential_type, credential_digest = excluded.credential_digest, grant_json = excluded.grant_json,
         grant_cid = CASE WHEN excluded.status = 'active' THEN excluded.grant_cid ELSE keys.grant_cid END, updated_at = excluded.updated_at`,
    ).run({
      keyId,
      version: slot.key.version,
      status: slot.key.status,
      personId: g.personId,
      type: g.credential.type,
      digest: g.credential.digest,
      json: grantJson,
      cid: grantCid ?? '',
      now,
      signerKid,
    });
    memKeySaved(db, keyId, { version: slot.key.version, status: slot.key.status, grant: g, grantJson }, grantCid, signerKid);
  }
  if (slot.tombstone !== null) {
    prepared(
      db,
      'INSERT INTO tombstones (key_id, version, at) VALUES (?, ?, ?) ON CONFLICT (key_id) DO UPDATE SET version = max(tombstones.version, excluded.version), at = excluded.at',
    ).run(keyId, slot.tombstone, now);
  }
}

/**
 * The key set as `decide` reads it, plus the cid of the grant that made a
 * key: from the in-memory key set (memory.ts), which holds each key's
 * one-time consumption and whether the cloud key that signed its grant is
 * retired (retired signer; a grant stored before signers were noted counts as
 * retired once any key was retired: every live grant is re-sent under the new
 * key before a retire, so one still unnoted is one the cloud did not re-send).
 */
export function keySetView(db: ReadableDb): KeySetView & { grantCid(keyId: string): string | null } {
  return {
    byCredential: (type: CredentialType, digest: string): readonly StoredKey[] => memoryKeysByCredential(db, type, digest),
    byKeyId: (keyId: string): StoredKey | null => memoryKeyById(db, keyId),
    grantCid: (keyId: string) => memoryGrantCid(db, keyId),
  };
}

/**
 * Records that a one-time key's entry was used, in the caller's decision
 * transaction. Returns false when it was already consumed (0 rows: the
 * caller's decision must not have allowed it, which `decide` guarantees
 * because it reads the same row inside the same transaction).
 */
export function consumeKey(db: WritableDb, c: { keyId: string; version: number; lockId: string; requestId: string }, now: number): boolean {
  const consumed =
    prepared(
      db,
      'INSERT INTO consumed_keys (key_id, version, lock_id, request_id, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key_id) DO NOTHING',
    ).run(c.keyId, c.version, c.lockId, c.requestId, now).changes === 1;
  if (consumed) memConsumed(db, c.keyId, now);
  return consumed;
}

/** Whether this one-time key's use was the one by this lock's request (a retry of the request that used it). */
export function consumedBy(db: ReadableDb, keyId: string, lockId: string, requestId: string): boolean {
  return (
    prepared(db, 'SELECT 1 FROM consumed_keys WHERE key_id = ? AND lock_id = ? AND request_id = ?').get(keyId, lockId, requestId) !==
    undefined
  );
}

/** Whether a mobile token was used by another request than this lock's one (a retry of the request that used it is not another use). */
export function mobileTokenUsedElsewhere(db: ReadableDb, jti: string, lockId: string, requestId: string): boolean {
  return (
    prepared(db, 'SELECT 1 FROM mobile_token_uses WHERE jti = ? AND NOT (lock_id = ? AND request_id = ?)').get(jti, lockId, requestId) !==
    undefined
  );
}

/** Whether a mobile token with this jti has already opened a door (an index probe on the decision path). */
export function mobileTokenUsed(db: ReadableDb, jti: string): boolean {
  return prepared(db, 'SELECT 1 FROM mobile_token_uses WHERE jti = ?').get(jti) !== undefined;
}

/** Records a mobile token's one use, in the allowing decision's transaction; false when it was already used. */
export function useMobileToken(
  db: WritableDb,
  u: { jti: string; expiresAt: number; lockId: string; requestId: string },
  now: number,
): boolean {
  return (
    prepared(
      db,
      'INSERT INTO mobile_token_uses (jti, expires_at, lock_id, request_id, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (jti) DO NOTHING',
    ).run(u.jti, u.expiresAt, u.lockId, u.requestId, now).changes === 1
  );
}

/** Uses of tokens that have expired: an expired token is refused as such, so its jti need not be kept. */
export function purgeMobileTokenUses(db: WritableDb, now: number): number {
  return prepared(db, 'DELETE FROM mobile_token_uses WHERE expires_at < ?').run(now).changes;
}

/** Snapshot apply: drops every active key (revoked rows and tombstones stay), to be refilled from the snapshot. */
export function dropActiveKeys(db: WritableDb): void {
  prepared(db, "DELETE FROM keys WHERE status = 'active'").run();
  memDropActiveKeys(db);
}

export function keyCounts(db: ReadableDb): { active: number; revoked: number; tombstones: number } {
  const k = parseRow(
    'keys',
    z.object({ a: z.int().nullable(), r: z.int().nullable() }),
    prepared(db, "SELECT sum(status = 'active') AS a, sum(status = 'revoked') AS r FROM keys").get(),
  );
  return { active: k.a ?? 0, revoked: k.r ?? 0, tombstones: countOf(db, 'tombstones', 'SELECT count(*) AS n FROM tombstones') };
}

// ------------------------------------------------------------ snapshot parts

/** A stored part of a snapshot without its body: the apply reads the bodies part by part (`snapshotPartField`). */
export interface SnapshotPart {
  readonly part: number;
  readonly jti: MessageId;
  readonly cid: string;
}

const SnapshotPartRow = z.object({ part: z.int(), jti: MessageId, cid: z.string() });

/** The fields of a part's body the apply reads, one at a time. */
export type SnapshotField = 'keys' | 'revoked' | 'trustedKeys' | 'modes';

/** Keeps one part (a redelivered part is not stored twice); returns how many parts of its snapshot are in. */
export function addSnapshotPart(
  db: WritableDb,
  p: { snapshotId: string; part: number; parts: number; asOfSeq: number; jti: string; cid: string; body: unknown },
  now: number,
): number {
  prepared(
    db,
    'INSERT INTO snapshot_parts (snapshot_id, part, parts, as_of_seq, jti, cid, body, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
  ).run(p.snapshotId, p.part, p.parts, p.asOfSeq, p.jti, p.cid, JSON.stringify(p.body), now);
  return countOf(db, 'snapshot_parts', 'SELECT count(*) AS n FROM snapshot_parts WHERE snapshot_id = ?', p.snapshotId);
}
/** A snapshot's parts in order (number, jti, cid), without their bodies. */
export function snapshotPartList(db: ReadableDb, snapshotId: string): SnapshotPart[] {
  return parseRows(
    'snapshot_parts',
    SnapshotPartRow,
    prepared(db, 'SELECT part, jti, cid FROM snapshot_parts WHERE snapshot_id = ? ORDER BY part').all(snapshotId),
  );
}

/**
 * One field of one stored part's body, read back with `schema` (that field's
 * schema in the one the part was verified with on arrival; a field the part
 * does not have is read as undefined). SQLite extracts the field (`->`), so
 * only that field of that part is ever parsed in JavaScript: a 100,000-key
 * snapshot applies part by part instead of holding every part's keys at once
 *.
 */
export function snapshotPartField<S extends z.ZodType>(
  db: ReadableDb,
  snapshotId: string,
  part: number,
  field: SnapshotField,
  schema: S,
): z.infer<S> {
  const row: unknown = prepared(db, 'SELECT body -> ? AS v FROM snapshot_parts WHERE snapshot_id = ? AND part = ?').get(
    `$.${field}`,
    snapshotId,
    part,
  );
  const { v } = parseRow('snapshot_parts', SnapshotFieldRow, row);
  return v === null ? parseRow('snapshot_parts', schema, undefined) : parseRow('snapshot_parts', jsonColumn(schema), v);
}
const SnapshotFieldRow = z.object({ v: z.string().nullable() });

/**
 * A field that one part carries (`trustedKeys`, `modes`: the cloud puts them
 * on the first part), read back like `snapshotPartField` from the first part
 * that has it; undefined when none has. `instr` skips, without parsing them,
 * the parts whose text does not even contain the field's name (the body is
 * our own JSON.stringify, so a part that has the field contains `"name":`).
 */
export function firstSnapshotField<S extends z.ZodType>(
  db: ReadableDb,
  snapshotId: string,
  field: SnapshotField,
  schema: S,
): z.infer<S> | undefined {
  const row: unknown = prepared(
    db,
    `SELECT body -> @path AS v FROM snapshot_parts
     WHERE snapshot_id = @snapshotId AND instr(body, @name) > 0 AND body -> @path IS NOT NULL ORDER BY part LIMIT 1`,
  ).get({ path: `$.${field}`, snapshotId, name: `"${field}":` });
  return row === undefined
    ? undefined
    : parseRow('snapshot_parts', jsonColumn(schema), parseRow('snapshot_parts', SnapshotFieldRow, row).v);
}

/** Drops parts of snapshots that never completed (by their newest part's arrival). */
export function purgeIncompleteSnapshots(db: WritableDb, olderThan: number): number {
  return prepared(
    db,
    'DELETE FROM snapshot_parts WHERE snapshot_id IN (SELECT snapshot_id FROM snapshot_parts GROUP BY snapshot_id HAVING max(received_at) < ?)',
  ).run(olderThan).changes;
}
export function dropSnapshot(db: WritableDb, snapshotId: string): void {
  prepared(db, 'DELETE FROM snapshot_parts WHERE snapshot_id = ?').run(snapshotId);
}
