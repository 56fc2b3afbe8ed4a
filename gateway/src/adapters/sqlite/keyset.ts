import { CorruptRow, DATE_PATTERN, HHMM_PATTERN, MessageId, parseRow, parseRows, type CredentialType, type KeyGrant } from '@tobira/shared';
import { z } from 'zod';
import type { KeySetView } from '../../domain/decide.js';
import { STORED_KEY_STATUSES, type KeySlot, type StoredKey } from '../../domain/keyset.js';
import { knownTimeZone } from '../../domain/schedule.js';
import { countOf, jsonColumn, type ReadableDb, type WritableDb, prepared } from './db.js';

/**
 * The key set: `keys` (one row per key id), `tombstones` (per key the highest
 * version ever revoked; never deleted) and `snapshot_parts` (a snapshot's
 * parts until all have arrived). Every verb joins the caller's transaction
 * (the inbox writer's apply).
 */
/**
 * A grant is validated with the full `KeyGrant` schema once, when it arrives
 * (the inbox verifies the message); the row stores that grant. Reading it
 * back runs on every decision, so it is not parsed with zod again (the
 * profile showed that, with the time zone's Intl check, as the decision's
 * largest avoidable cost): a structural check of what the decision and the
 * apply rules read stands in, and a row that does not fit is still a
 * `CorruptRow`.
 */
const CREDENTIAL_TYPES: readonly unknown[] = ['pin', 'card', 'mobile'] satisfies CredentialType[];
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isText = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isInt = (v: unknown, min: number): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
const isDay = (v: unknown) => isInt(v, 0) && v <= 6;
const isDate = (v: unknown) => typeof v === 'string' && DATE_PATTERN.test(v);
const isList = (v: unknown, item: (x: unknown) => boolean) => Array.isArray(v) && v.length > 0 && v.every(item);
const isWindow = (w: unknown) =>
  isRecord(w) &&
  (w.days !== undefined || w.dates !== undefined) &&
  (w.days === undefined || isList(w.days, isDay)) &&
  (w.dates === undefined || isList(w.dates, isDate)) &&
  typeof w.start === 'string' &&
  HHMM_PATTERN.test(w.start) &&
  typeof w.end === 'string' &&
  HHMM_PATTERN.test(w.end);
const isSchedule = (s: unknown) =>
  s === null ||
  (isRecord(s) &&
    isText(s.timeZone) &&
    knownTimeZone(s.timeZone) &&
    Array.isArray(s.windows) &&
    s.windows.length > 0 &&
    s.windows.every(isWindow));

function isStoredGrant(g: unknown): g is KeyGrant {
  return (
    isRecord(g) &&
    isText(g.keyId) &&
    isInt(g.version, 1) &&
    isText(g.personId) &&
    isRecord(g.credential) &&
    CREDENTIAL_TYPES.includes(g.credential.type) &&
    isText(g.credential.digest) &&
    Array.isArray(g.doors) &&
    g.doors.length > 0 &&
    g.doors.every(isText) &&
    isInt(g.validFrom, 0) &&
    isInt(g.validUntil, 0) &&
    isSchedule(g.schedule) &&
    typeof g.offlineCapable === 'boolean' &&
    (g.offlineMaxSeconds === undefined || isInt(g.offlineMaxSeconds, 1)) &&
    (g.oneTime === undefined || g.oneTime === true) &&
    (g.staff === undefined || typeof g.staff === 'boolean')
  );
}

const KeyRowShape = z.object({ version: z.int(), status: z.enum(STORED_KEY_STATUSES), grant_json: z.string() });

function storedKey(raw: unknown): StoredKey {
  // the three columns by hand too: this runs per candidate key per decision
  if (
    !isRecord(raw) ||
    !isInt(raw.version, 0) ||
    (raw.status !== 'active' && raw.status !== 'revoked') ||
    typeof raw.grant_json !== 'string'
  )
    return corruptKey(raw);
  let grant: unknown;
  try {
    grant = JSON.parse(raw.grant_json);
  } catch {
    throw new CorruptRow('keys', 'grant_json: not JSON');
  }
  if (!isStoredGrant(grant)) throw new CorruptRow('keys', 'grant_json: not a key grant');
  let consumedAt: number | undefined;
  if (raw.consumed_at !== undefined && raw.consumed_at !== null) {
    if (!isInt(raw.consumed_at, 0)) throw new CorruptRow('consumed_keys', 'at: not a time');
    consumedAt = raw.consumed_at;
  }
  return {
    grant,
    version: raw.version,
    status: raw.status,
    ...(raw.signer_retired === 1 ? { signerRetired: true } : {}),
    ...(consumedAt === undefined ? {} : { consumedAt }),
  };
}
/** Names the columns that do not fit, as parseRow would. */
function corruptKey(raw: unknown): never {
  parseRow('keys', KeyRowShape, raw);
  throw new CorruptRow('keys', 'not a key row');
}

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
      json: JSON.stringify(g),
      cid: grantCid ?? '',
      now,
      signerKid,
    });
  }
  if (slot.tombstone !== null) {
    prepared(
      db,
      'INSERT INTO tombstones (key_id, version, at) VALUES (?, ?, ?) ON CONFLICT (key_id) DO UPDATE SET version = max(tombstones.version, excluded.version), at = excluded.at',
    ).run(keyId, slot.tombstone, now);
  }
}

const GrantCid = z.object({ grant_cid: z.string() });

/**
 * 1 when the cloud key that signed the key's grant is retired (trusted_keys);
 * for a grant stored before signers were noted (null), when any key was
 * retired since: every live grant is re-sent under the new key before a
 * retire, so one still unnoted is one the cloud did not re-send.
 */
const SIGNER_RETIRED = `(CASE WHEN keys.signer_kid IS NULL THEN EXISTS (SELECT 1 FROM trusted_keys WHERE status = 'retired')
  ELSE EXISTS (SELECT 1 FROM trusted_keys t WHERE t.kid = keys.signer_kid AND t.status = 'retired') END)`;

/** The key set as `decide` reads it, plus the cid of the grant that made a key. Use inside the decision transaction. */
export function keySetView(db: ReadableDb): KeySetView & { grantCid(keyId: string): string | null } {
  return {
    byCredential: (type: CredentialType, digest: string): readonly StoredKey[] =>
      prepared(
        db,
        `SELECT keys.version, keys.status, keys.grant_json, ${SIGNER_RETIRED} AS signer_retired, c.at AS consumed_at
         FROM keys LEFT JOIN consumed_keys c ON c.key_id = keys.key_id WHERE keys.credential_type = ? AND keys.credential_digest = ?`,
      )
        .all(type, digest)
        .map(storedKey),
    byKeyId: (keyId: string): StoredKey | null => {
      const r: unknown = prepared(
        db,
        `SELECT keys.version, keys.status, keys.grant_json, ${SIGNER_RETIRED} AS signer_retired, c.at AS consumed_at
         FROM keys LEFT JOIN consumed_keys c ON c.key_id = keys.key_id WHERE keys.key_id = ?`,
      ).get(keyId);
      return r === undefined ? null : storedKey(r);
    },
    grantCid: (keyId: string) => {
      const r: unknown = prepared(db, 'SELECT grant_cid FROM keys WHERE key_id = ?').get(keyId);
      // '' is stored for keys no grant made (snapshot revokes): no cid to carry on
      return r === undefined ? null : parseRow('keys', GrantCid, r).grant_cid || null;
    },
  };
}

/**
 * Records that a one-time key's entry was used, in the caller's decision
 * transaction. Returns false when it was already consumed (0 rows: the
 * caller's decision must not have allowed it, which `decide` guarantees
 * because it reads the same row inside the same transaction).
 */
export function consumeKey(db: WritableDb, c: { keyId: string; version: number; lockId: string; requestId: string }, now: number): boolean {
  return (
    prepared(
      db,
      'INSERT INTO consumed_keys (key_id, version, lock_id, request_id, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key_id) DO NOTHING',
    ).run(c.keyId, c.version, c.lockId, c.requestId, now).changes === 1
  );
}

/** Snapshot apply: drops every active key (revoked rows and tombstones stay), to be refilled from the snapshot. */
export function dropActiveKeys(db: WritableDb): void {
  prepared(db, "DELETE FROM keys WHERE status = 'active'").run();
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
  prepared(
    db,
    'INSERT INTO snapshot_parts (snapshot_id, part, parts, as_of_seq, jti, cid, body, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
  ).run(p.snapshotId, p.part, p.parts, p.asOfSeq, p.jti, p.cid, JSON.stringify(p.body), now);
  return countOf(db, 'snapshot_parts', 'SELECT count(*) AS n FROM snapshot_parts WHERE snapshot_id = ?', p.snapshotId);
}
/** A snapshot's parts in order, each body read back with `body` (the schema it was verified with on arrival). */
export function snapshotParts<S extends z.ZodType>(db: ReadableDb, snapshotId: string, body: S): SnapshotPart<z.infer<S>>[] {
  const rows = parseRows(
    'snapshot_parts',
    SnapshotPartRow,
    prepared(db, 'SELECT part, jti, cid, body FROM snapshot_parts WHERE snapshot_id = ? ORDER BY part').all(snapshotId),
  );
  return rows.map((r) => ({ part: r.part, jti: r.jti, cid: r.cid, body: parseRow('snapshot_parts', jsonColumn(body), r.body) }));
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

/** A part body read back without a schema (tests, tools). */
export const AnyBody = z.unknown();
