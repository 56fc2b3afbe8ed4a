import { KeyGrant, MessageId, parseRow, parseRows, type CredentialType } from '@tobira/shared';
import { z } from 'zod';
import type { KeySetView } from '../../domain/decide.js';
import { STORED_KEY_STATUSES, type KeySlot, type StoredKey } from '../../domain/keyset.js';
import { countOf, jsonColumn, type ReadableDb, type WritableDb } from './db.js';

/**
 * The key set: `keys` (one row per key id), `tombstones` (per key the highest
 * version ever revoked; never deleted) and `snapshot_parts` (a snapshot's
 * parts until all have arrived). Every verb joins the caller's transaction
 * (the inbox writer's apply).
 */
const KeyRow = z
  .object({ version: z.int(), status: z.enum(STORED_KEY_STATUSES), grant_json: jsonColumn(KeyGrant) })
  .transform((r): StoredKey => ({ grant: r.grant_json, version: r.version, status: r.status }));
const Tombstone = z.object({ version: z.int() });

export function loadSlot(db: ReadableDb, keyId: string): KeySlot {
  const k: unknown = db.prepare('SELECT version, status, grant_json FROM keys WHERE key_id = ?').get(keyId);
  const t: unknown = db.prepare('SELECT version FROM tombstones WHERE key_id = ?').get(keyId);
  return {
    key: k === undefined ? null : parseRow('keys', KeyRow, k),
    tombstone: t === undefined ? null : parseRow('tombstones', Tombstone, t).version,
  };
}

/** Writes a slot back. `grantCid` is the cid of the grant that made the key (kept for access-event attribution). */
export function saveSlot(db: WritableDb, keyId: string, slot: KeySlot, grantCid: string | null, now: number): void {
  if (slot.key !== null) {
    const g = slot.key.grant;
    db.prepare(
      `INSERT INTO keys (key_id, version, status, person_id, credential_type, credential_digest, grant_json, grant_cid, updated_at)
       VALUES (@keyId, @version, @status, @personId, @type, @digest, @json, @cid, @now)
       ON CONFLICT (key_id) DO UPDATE SET version = excluded.version, status = excluded.status, person_id = excluded.person_id,
         credential_type = excluded.credential_type, credential_digest = excluded.credential_digest, grant_json = excluded.grant_json,
         grant_cid = CASE WHEN excluded.status = 'active' THEN excluded.grant_cid ELSE keys.grant_cid END, updated_at = excluded.updated_at`,
    ).run({
      keyId,
      version: slot.key.version,
      status: slot.key.status,
      personId: g.personId,
      type: g.credential.type,
      digest: g.credential.digest,
      json: JSON.stringify(g),
      cid: grantCid ?? '',
      now,
    });
  }
  if (slot.tombstone !== null) {
    db.prepare(
      'INSERT INTO tombstones (key_id, version, at) VALUES (?, ?, ?) ON CONFLICT (key_id) DO UPDATE SET version = max(tombstones.version, excluded.version), at = excluded.at',
    ).run(keyId, slot.tombstone, now);
  }
}

const GrantCid = z.object({ grant_cid: z.string() });

/** The key set as `decide` reads it, plus the cid of the grant that made a key. Use inside the decision transaction. */
export function keySetView(db: ReadableDb): KeySetView & { grantCid(keyId: string): string | null } {
  return {
    byCredential: (type: CredentialType, digest: string): readonly StoredKey[] =>
      parseRows(
        'keys',
        KeyRow,
        db.prepare('SELECT version, status, grant_json FROM keys WHERE credential_type = ? AND credential_digest = ?').all(type, digest),
      ),
    grantCid: (keyId: string) => {
      const r: unknown = db.prepare('SELECT grant_cid FROM keys WHERE key_id = ?').get(keyId);
      // '' is stored for keys no grant made (snapshot revokes): no cid to carry on
      return r === undefined ? null : parseRow('keys', GrantCid, r).grant_cid || null;
    },
  };
}

/** Snapshot apply: drops every active key (revoked rows and tombstones stay), to be refilled from the snapshot. */
export function dropActiveKeys(db: WritableDb): void {
  db.prepare("DELETE FROM keys WHERE status = 'active'").run();
}

export function keyCounts(db: ReadableDb): { active: number; revoked: number; tombstones: number } {
  const k = parseRow(
    'keys',
    z.object({ a: z.int().nullable(), r: z.int().nullable() }),
    db.prepare("SELECT sum(status = 'active') AS a, sum(status = 'revoked') AS r FROM keys").get(),
  );
  return { active: k.a ?? 0, revoked: k.r ?? 0, tombstones: countOf(db, 'tombstones', 'SELECT count(*) AS n FROM tombstones') };
}

// ------------------------------------------------------------ snapshot parts

export interface SnapshotPart<B> {
  readonly part: number;
  readonly jti: MessageId;
  readonly cid: string;
  readonly body: B;
}

const SnapshotPartRow = z.object({ part: z.int(), jti: MessageId, cid: z.string(), body: z.string() });

/** Keeps one part (a redelivered part is not stored twice); returns how many parts of its snapshot are in. */
export function addSnapshotPart(
  db: WritableDb,
  p: { snapshotId: string; part: number; parts: number; asOfSeq: number; jti: string; cid: string; body: unknown },
  now: number,
): number {
  db.prepare(
    'INSERT INTO snapshot_parts (snapshot_id, part, parts, as_of_seq, jti, cid, body, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
  ).run(p.snapshotId, p.part, p.parts, p.asOfSeq, p.jti, p.cid, JSON.stringify(p.body), now);
  return countOf(db, 'snapshot_parts', 'SELECT count(*) AS n FROM snapshot_parts WHERE snapshot_id = ?', p.snapshotId);
}
/** A snapshot's parts in order, each body read back with `body` (the schema it was verified with on arrival). */
export function snapshotParts<S extends z.ZodType>(db: ReadableDb, snapshotId: string, body: S): SnapshotPart<z.infer<S>>[] {
  const rows = parseRows(
    'snapshot_parts',
    SnapshotPartRow,
    db.prepare('SELECT part, jti, cid, body FROM snapshot_parts WHERE snapshot_id = ? ORDER BY part').all(snapshotId),
  );
  return rows.map((r) => ({ part: r.part, jti: r.jti, cid: r.cid, body: parseRow('snapshot_parts', jsonColumn(body), r.body) }));
}
/** Drops parts of snapshots that never completed (by their newest part's arrival). */
export function purgeIncompleteSnapshots(db: WritableDb, olderThan: number): number {
  return db
    .prepare(
      'DELETE FROM snapshot_parts WHERE snapshot_id IN (SELECT snapshot_id FROM snapshot_parts GROUP BY snapshot_id HAVING max(received_at) < ?)',
    )
    .run(olderThan).changes;
}
export function dropSnapshot(db: WritableDb, snapshotId: string): void {
  db.prepare('DELETE FROM snapshot_parts WHERE snapshot_id = ?').run(snapshotId);
}

/** A part body read back without a schema (tests, tools). */
export const AnyBody = z.unknown();
