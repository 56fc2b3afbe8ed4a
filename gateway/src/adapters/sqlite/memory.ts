import { CorruptRow, type CredentialType, type KeyGrant } from '@tobira/shared';
import type Database from 'better-sqlite3';
import type { StoredKey, StoredKeyStatus } from '../../domain/keyset.js';
import type { LockoutState, SiteLockoutState } from '../../domain/lockout.js';
import { storedKey } from './key-rows.js';
import { readSettingsRow, type Settings } from './settings-row.js';
import { prepared } from './statements.js';

/**
 * What a door decision reads, held in memory: the key set by
 * credential and by key id (with each key's one-time consumption and whether
 * the cloud key that signed its grant is retired), the locks' lockout, door
 * and privacy, the site-wide lockout per credential type, and the settings
 * row. SQLite stays the durable truth: the memory is filled from it when first
 * used (the gateway loads it at start, in gateway.ts, so a restart or a crash rebuilds it
 * from what was committed), and written through by the same adapter functions
 * that write the rows, after their statement ran, in the same transaction.
 *
 * Commit and rollback: every change made inside a transaction is journalled
 * with its undo. `openDatabase` wraps the handle's `transaction()` so that a
 * transaction (or a nested savepoint) that throws undoes its changes before
 * the error leaves it, and a failed COMMIT undoes the whole transaction: after
 * a rollback the memory equals the database again. Changes become visible to
 * the rest of the process only when the transaction commits, because
 * better-sqlite3 transactions are synchronous: nothing else runs on this
 * thread until the COMMIT returned or the transaction rolled back; inside the
 * transaction its own later statements see them, exactly as they see the
 * transaction's own rows in SQLite (a batch's second decision sees the first
 * one's lockout and consumption).
 *
 * Every writer of the tables held here goes through the functions of this
 * folder (keyset.ts, locks.ts, modes.ts, settings.ts, outbox.ts,
 * trusted-keys.ts): a statement written elsewhere would leave the memory
 * behind. `memoryMatchesDatabase` (tests) compares it with a fresh load.
 */

/** A lock as the decision reads it. */
export interface LockMemory extends LockoutState {
  readonly lockId: string;
  readonly doorId: string | null;
  readonly privacySince: number | null;
}

/**
 * One key, compact (with the parsed grant object per key the key
 * set took ≈ 890 bytes of heap per key at 100,000 simple keys; held like this,
 * ≈ 480-540, bench/keyset-memory.ts). The grant is held as JSON
 * (`decisionJson`), validated when it was stored or loaded, and parsed only
 * when a decision reads the key: one or two candidate keys per decision, a
 * few microseconds each.
 */
interface KeyMemory {
  readonly version: number;
  readonly status: StoredKeyStatus;
  /** The row's grant as `decisionJson` holds it. */
  readonly grantJson: string;
  /** Its credential as the `byCredential` key (the same string object as that map's key). */
  readonly credential: string;
  /** '' stored for keys no grant made: null here. */
  readonly grantCid: string | null;
  readonly signerKid: string | null;
}

/** The ids of a credential's keys: one id (nearly every credential), or a set when several keys share it. */
type KeyIds = string | Set<string>;

interface State {
  settings: Settings;
  readonly locks: Map<string, LockMemory>;
  readonly siteLockouts: Map<string, SiteLockoutState>;
  /** Replaced whole by a snapshot's drop of the active keys (memDropActiveKeys), so its undo is one swap. */
  keys: Map<string, KeyMemory>;
  /** `${type}\u0000${digest}` → key ids. */
  byCredential: Map<string, KeyIds>;
  /** key id → when its one-time entry was used. */
  readonly consumed: Map<string, number>;
  /** kid → status of the trusted_keys rows. */
  readonly trusted: Map<string, 'trusted' | 'retired'>;
}

/** A part of the memory that one undo can restore whole. */
type Whole = 'settings' | 'keys';

interface Memory {
  state: State;
  /** Undo of every change made in the open transaction, in order. */
  readonly journal: (() => void)[];
  /**
   * Per part, the journal index of an undo that restores that part whole as
   * it was before it (-1: none known). A later change of the part inside the
   * same savepoint journals no undo of its own: every rollback that reaches
   * the change runs that undo too. Issue #14: a 100,000-key snapshot apply
   * journalled an undo per key and per ack (a copy of the settings each),
   * ≈ 60 MB held until its commit.
   */
  readonly whole: Record<Whole, number>;
  /** Loaded inside a transaction: that load saw its uncommitted rows, so a rollback drops the memory. */
  provisional: boolean;
}

const memories = new WeakMap<Database.Database, Memory>();
/** Per handle, the journal length at the start of each open transaction and savepoint, innermost last. */
const savepointMarks = new WeakMap<Database.Database, number[]>();
const noWhole = (): Record<Whole, number> => ({ settings: -1, keys: -1 });

// ------------------------------------------------------------ loading

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;
const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);
const intOrNull = (table: string, column: string, v: unknown): number | null => {
  if (v === null) return null;
  if (!isInt(v)) throw new CorruptRow(table, `${column}: not an integer`);
  return v;
};
const textOrNull = (table: string, column: string, v: unknown): string | null => {
  if (v === null) return null;
  if (typeof v !== 'string') throw new CorruptRow(table, `${column}: not text`);
  return v;
};
const credentialKey = (type: string, digest: string) => `${type}\u0000${digest}`;

/**
 * The same text as one flat string. V8 may return a string built from pieces
 * (JSON.stringify, concatenation), which holds the pieces too: ≈ 140 bytes
 * more per grant held (measured with bench/keyset-memory.ts). A copy through
 * a Buffer is a plain string of the text's length.
 */
const flat = (s: string): string => Buffer.from(s).toString();

function loadState(db: Database.Database): State {
  const locks = new Map<string, LockMemory>();
  for (const r of db.prepare('SELECT lock_id, door_id, failures, locked_out_until, privacy_since FROM locks').all()) {
    if (!isRecord(r) || typeof r.lock_id !== 'string') throw new CorruptRow('locks', 'lock_id: not text');
    locks.set(r.lock_id, lockMemoryOf(r));
  }
  const siteLockouts = new Map<string, SiteLockoutState>();
  for (const r of db.prepare('SELECT credential_type, failures, window_start, locked_out_until FROM site_lockout').all()) {
    if (!isRecord(r) || typeof r.credential_type !== 'string' || !isInt(r.failures))
      throw new CorruptRow('site_lockout', 'not a site lockout row');
    siteLockouts.set(r.credential_type, {
      failures: r.failures,
      windowStart: intOrNull('site_lockout', 'window_start', r.window_start),
      lockedOutUntil: intOrNull('site_lockout', 'locked_out_until', r.locked_out_until),
    });
  }
  const keys = new Map<string, KeyMemory>();
  const byCredential = new Map<string, KeyIds>();
  const strings = interner();
  for (const r of db.prepare(KEY_ROWS).iterate()) {
    const { keyId, key } = keyMemoryOf(r, strings);
    keys.set(keyId, key);
    indexKey(byCredential, keyId, key);
  }
  const consumed = new Map<string, number>();
  for (const r of db.prepare('SELECT key_id, at FROM consumed_keys').all()) {
    if (!isRecord(r) || typeof r.key_id !== 'string' || !isInt(r.at)) throw new CorruptRow('consumed_keys', 'not a consumption row');
    consumed.set(r.key_id, r.at);
  }
  return { settings: readSettingsRow(db), locks, siteLockouts, keys, byCredential, consumed, trusted: loadTrusted(db) };
}

const KEY_ROWS = 'SELECT key_id, version, status, grant_json, grant_cid, signer_kid FROM keys';

function lockMemoryOf(r: Record<string, unknown>): LockMemory {
  if (typeof r.lock_id !== 'string' || !isInt(r.failures)) throw new CorruptRow('locks', 'not a lock row');
  return {
    lockId: r.lock_id,
    doorId: textOrNull('locks', 'door_id', r.door_id),
    failures: r.failures,
    lockedOutUntil: intOrNull('locks', 'locked_out_until', r.locked_out_until),
    privacySince: intOrNull('locks', 'privacy_since', r.privacy_since),
  };
}

/** One string object per distinct value: the rows of a load repeat a few grant cids and signer kids many times. */
function interner(): (s: string) => string {
  const seen = new Map<string, string>();
  return (s) => {
    const have = seen.get(s);
    if (have !== undefined) return have;
    seen.set(s, s);
    return s;
  };
}

/** A key row loaded: validated whole (`storedKey`, a `CorruptRow` fails the load as before), kept compact. */
function keyMemoryOf(r: unknown, intern: (s: string) => string): { keyId: string; key: KeyMemory } {
  if (!isRecord(r) || typeof r.key_id !== 'string' || typeof r.grant_cid !== 'string' || typeof r.grant_json !== 'string')
    throw new CorruptRow('keys', 'not a key row');
  const { grant, version, status } = storedKey(r);
  const signerKid = textOrNull('keys', 'signer_kid', r.signer_kid);
  return {
    keyId: r.key_id,
    key: {
      version,
      status,
      grantJson: decisionJson(grant, r.grant_json),
      credential: flat(credentialKey(grant.credential.type, grant.credential.digest)),
      grantCid: r.grant_cid === '' ? null : intern(r.grant_cid),
      signerKid: signerKid === null ? null : intern(signerKid),
    },
  };
}

function indexKey(byCredential: Map<string, KeyIds>, keyId: string, k: KeyMemory): void {
  const ids = byCredential.get(k.credential);
  if (ids === undefined) byCredential.set(k.credential, keyId);
  else if (typeof ids === 'string') byCredential.set(k.credential, new Set([ids, keyId]));
  else ids.add(keyId);
}
function unindexKey(byCredential: Map<string, KeyIds>, keyId: string, k: KeyMemory): void {
  const ids = byCredential.get(k.credential);
  if (ids === keyId) byCredential.delete(k.credential);
  else if (typeof ids === 'object') {
    ids.delete(keyId);
    // back to the single-id form, so the memory has one shape whatever order the keys came and went in
    const [only] = ids;
    if (ids.size === 1 && only !== undefined) byCredential.set(k.credential, only);
  }
}

function loadTrusted(db: Database.Database): Map<string, 'trusted' | 'retired'> {
  const trusted = new Map<string, 'trusted' | 'retired'>();
  for (const r of prepared(db, 'SELECT kid, status FROM trusted_keys').all()) {
    if (!isRecord(r) || typeof r.kid !== 'string' || (r.status !== 'trusted' && r.status !== 'retired'))
      throw new CorruptRow('trusted_keys', 'not a trusted key row');
    trusted.set(r.kid, r.status);
  }
  return trusted;
}

function memoryOf(db: Database.Database): Memory {
  let m = memories.get(db);
  if (m === undefined) {
    m = { state: loadState(db), journal: [], whole: noWhole(), provisional: db.inTransaction };
    memories.set(db, m);
  }
  return m;
}

/** Fills the memory from SQLite now (the gateway calls it at start), unless it already is. */
export function loadMemory(db: Database.Database): void {
  memoryOf(db);
}

// ------------------------------------------------------------ transactions

type TransactionFn = ((...args: unknown[]) => unknown) & {
  deferred: (...args: unknown[]) => unknown;
  immediate: (...args: unknown[]) => unknown;
  exclusive: (...args: unknown[]) => unknown;
};

function undoTo(m: Memory, mark: number): void {
  while (m.journal.length > mark) m.journal.pop()?.();
  for (const part of ['settings', 'keys'] as const) if (m.whole[part] >= mark) m.whole[part] = -1;
}

/**
 * Wraps the handle's `transaction()` (openDatabase calls it once per handle):
 * the changes a transaction made to the memory are undone when it rolls back
 * (its function threw, or its COMMIT failed), kept when it commits; a nested
 * transaction (a savepoint) that throws undoes only its own changes.
 */
export function guardTransactions(db: Database.Database): void {
  const original = db.transaction.bind(db) as (fn: (...args: unknown[]) => unknown) => TransactionFn;
  const wrap = (run: (...args: unknown[]) => unknown) =>
    function (this: unknown, ...args: unknown[]): unknown {
      if (db.inTransaction) return run.apply(this, args); // a savepoint: the body below undoes its own changes
      try {
        const result = run.apply(this, args);
        const m = memories.get(db);
        if (m !== undefined) {
          m.journal.length = 0;
          Object.assign(m.whole, noWhole());
          m.provisional = false;
        }
        return result;
      } catch (e) {
        const m = memories.get(db);
        if (m !== undefined) {
          undoTo(m, 0);
          if (m.provisional) memories.delete(db);
        }
        throw e;
      }
    };
  const transaction = (fn: (...args: unknown[]) => unknown) => {
    const t = original(function (this: unknown, ...args: unknown[]): unknown {
      const mark = memories.get(db)?.journal.length ?? 0;
      const marks = savepointMarks.get(db) ?? [];
      savepointMarks.set(db, marks);
      marks.push(mark);
      try {
        return fn.apply(this, args);
      } catch (e) {
        const m = memories.get(db);
        if (m !== undefined) undoTo(m, Math.min(mark, m.journal.length));
        throw e;
      } finally {
        marks.pop();
      }
    });
    // the same shape as better-sqlite3's: each variant carries every variant and the database
    const variants = { default: wrap(t), deferred: wrap(t.deferred), immediate: wrap(t.immediate), exclusive: wrap(t.exclusive) };
    const properties = {
      default: { value: variants.default },
      deferred: { value: variants.deferred },
      immediate: { value: variants.immediate },
      exclusive: { value: variants.exclusive },
      database: { value: db, enumerable: true },
    };
    for (const v of Object.values(variants)) Object.defineProperties(v, properties);
    return variants.default;
  };
  (db as unknown as { transaction: unknown }).transaction = transaction;
}

/**
 * Applies a change to the memory (when loaded); inside a transaction,
 * journals its undo, unless the change is to `part` and an undo journalled
 * in the innermost open savepoint restores that part whole already.
 * `restoresWhole`: this change's undo restores the whole `part` as it was.
 */
function change(db: Database.Database, apply: (s: State) => (() => void) | undefined, part?: Whole, restoresWhole = false): void {
  const m = memories.get(db);
  if (m === undefined) return; // not loaded yet: the load will read the row
  const undo = apply(m.state);
  if (!db.inTransaction || undo === undefined) return;
  if (part !== undefined && wholeUndoSince(m, savepointMarks.get(db)?.at(-1) ?? 0, part)) return;
  if (part !== undefined && restoresWhole) m.whole[part] = m.journal.length;
  m.journal.push(undo);
}

const wholeUndoSince = (m: Memory, mark: number, part: Whole): boolean => m.whole[part] >= 0 && m.whole[part] >= mark;

function setEntry<K, V>(map: Map<K, V>, key: K, value: V | undefined): () => void {
  const before = map.get(key);
  const had = map.has(key);
  if (value === undefined) map.delete(key);
  else map.set(key, value);
  return () => {
    if (had) map.set(key, before as V);
    else map.delete(key);
  };
}

// ------------------------------------------------------------ write-through (called by the adapters after their statement)

export function memSettings(db: Database.Database, next: (s: Settings) => Settings): void {
  change(
    db,
    (s) => {
      const before = s.settings;
      s.settings = next(before);
      return () => {
        s.settings = before;
      };
    },
    'settings',
    true,
  );
}

/** Re-reads one lock's row (pairing, lockout, privacy): the row as this transaction sees it. */
export function memLockRow(db: Database.Database, lockId: string): void {
  change(db, (s) => {
    const r: unknown = db
      .prepare('SELECT lock_id, door_id, failures, locked_out_until, privacy_since FROM locks WHERE lock_id = ?')
      .get(lockId);
    return setEntry(s.locks, lockId, isRecord(r) ? lockMemoryOf(r) : undefined);
  });
}

export function memLockout(db: Database.Database, lockId: string, lockout: LockoutState): void {
  change(db, (s) => {
    const l = s.locks.get(lockId);
    if (l === undefined) return undefined; // UPDATE of no row
    return setEntry(s.locks, lockId, { ...l, failures: lockout.failures, lockedOutUntil: lockout.lockedOutUntil });
  });
}

export function memPrivacy(db: Database.Database, lockId: string, since: number | null): void {
  change(db, (s) => {
    const l = s.locks.get(lockId);
    if (l === undefined) return undefined;
    return setEntry(s.locks, lockId, { ...l, privacySince: since });
  });
}

export function memSiteLockout(db: Database.Database, credentialType: string, lockout: SiteLockoutState): void {
  change(db, (s) =>
    setEntry(s.siteLockouts, credentialType, {
      failures: lockout.failures,
      windowStart: lockout.windowStart,
      lockedOutUntil: lockout.lockedOutUntil,
    }),
  );
}

/** What `saveSlot` wrote to a key's row: the key's version, status and grant, and the grant's JSON (`grant_json`). */
export interface SavedKey {
  readonly version: number;
  readonly status: StoredKeyStatus;
  readonly grant: KeyGrant;
  readonly grantJson: string;
}

/**
 * A grant as the memory holds it: its JSON without the display names
 * (`personName`, `doorNames`: a decision never reads them, and the staff UI
 * reads them from the `keys` rows), which can be longer than the rest; a
 * grant without names is held as its row's JSON (`rowJson`), as one flat string.
 */
function decisionJson(grant: KeyGrant, rowJson: string): string {
  if (grant.personName === undefined && grant.doorNames === undefined) return flat(rowJson);
  const { personName: _person, doorNames: _doors, ...decision } = grant;
  return flat(JSON.stringify(decision));
}

/**
 * A key's row was written by `saveSlot` (grant, revoke, re-sign): the same
 * rules as its SQL — the grant cid is replaced only by an active key (a new
 * row takes it either way; '' is none), the signer only by a non-null one.
 */
export function memKeySaved(db: Database.Database, keyId: string, key: SavedKey, grantCid: string | null, signerKid: string | null): void {
  change(
    db,
    (s) => {
      const before = s.keys.get(keyId);
      const credential = credentialKey(key.grant.credential.type, key.grant.credential.digest);
      const next: KeyMemory = {
        version: key.version,
        status: key.status,
        grantJson: decisionJson(key.grant, key.grantJson),
        credential: before?.credential === credential ? before.credential : flat(credential),
        grantCid: before === undefined || key.status === 'active' ? grantCid || null : before.grantCid,
        signerKid: signerKid ?? before?.signerKid ?? null,
      };
      return replaceKey(s, keyId, next);
    },
    'keys',
  );
}

function replaceKey(s: State, keyId: string, next: KeyMemory | undefined): () => void {
  const before = s.keys.get(keyId);
  if (before !== undefined) unindexKey(s.byCredential, keyId, before);
  const undoEntry = setEntry(s.keys, keyId, next);
  if (next !== undefined) indexKey(s.byCredential, keyId, next);
  return () => {
    if (next !== undefined) unindexKey(s.byCredential, keyId, next);
    undoEntry();
    if (before !== undefined) indexKey(s.byCredential, keyId, before);
  };
}

/** Snapshot apply dropped every active key: the revoked ones move to new maps, and the undo puts the old maps back. */
export function memDropActiveKeys(db: Database.Database): void {
  change(
    db,
    (s) => {
      const { keys, byCredential } = s;
      s.keys = new Map([...keys].filter(([, k]) => k.status !== 'active'));
      s.byCredential = new Map();
      for (const [keyId, k] of s.keys) indexKey(s.byCredential, keyId, k);
      return () => {
        s.keys = keys;
        s.byCredential = byCredential;
      };
    },
    'keys',
    true,
  );
}

export function memConsumed(db: Database.Database, keyId: string, at: number): void {
  change(db, (s) => (s.consumed.has(keyId) ? undefined : setEntry(s.consumed, keyId, at)));
}

/** Re-reads the trusted_keys statuses (a seed or a rotation changed them; a handful of rows). */
export function memTrustedKeys(db: Database.Database): void {
  change(db, (s) => {
    const before = new Map(s.trusted);
    const now = loadTrusted(db);
    s.trusted.clear();
    for (const [k, v] of now) s.trusted.set(k, v);
    return () => {
      s.trusted.clear();
      for (const [k, v] of before) s.trusted.set(k, v);
    };
  });
}

// ------------------------------------------------------------ reads (the decision path)

export function memorySettings(db: Database.Database): Settings {
  return memoryOf(db).state.settings;
}

export function memoryLock(db: Database.Database, lockId: string): LockMemory | null {
  return memoryOf(db).state.locks.get(lockId) ?? null;
}

export function memorySiteLockout(db: Database.Database, credentialType: string): SiteLockoutState | null {
  return memoryOf(db).state.siteLockouts.get(credentialType) ?? null;
}

/** A key as `decide` reads it: its grant parsed from the held JSON (validated when stored or loaded), with its derived marks. */
function viewOf(s: State, keyId: string, k: KeyMemory): StoredKey {
  // signer retired: the grant's signer is retired; a grant stored before signers were noted, when any key was retired since
  const retired = k.signerKid === null ? [...s.trusted.values()].includes('retired') : s.trusted.get(k.signerKid) === 'retired';
  const consumedAt = s.consumed.get(keyId);
  return {
    grant: JSON.parse(k.grantJson) as KeyGrant,
    version: k.version,
    status: k.status,
    ...(retired ? { signerRetired: true } : {}),
    ...(consumedAt === undefined ? {} : { consumedAt }),
  };
}

/** The key set as `decide` reads it (keySetView), from memory. */
export function memoryKeysByCredential(db: Database.Database, type: CredentialType, digest: string): readonly StoredKey[] {
  const s = memoryOf(db).state;
  const ids = s.byCredential.get(credentialKey(type, digest));
  if (ids === undefined) return [];
  const out: StoredKey[] = [];
  for (const id of typeof ids === 'string' ? [ids] : ids) {
    const k = s.keys.get(id);
    if (k !== undefined) out.push(viewOf(s, id, k));
  }
  return out;
}
export function memoryKeyById(db: Database.Database, keyId: string): StoredKey | null {
  const s = memoryOf(db).state;
  const k = s.keys.get(keyId);
  return k === undefined ? null : viewOf(s, keyId, k);
}
export function memoryGrantCid(db: Database.Database, keyId: string): string | null {
  return memoryOf(db).state.keys.get(keyId)?.grantCid ?? null;
}

// ------------------------------------------------------------ checks

/** The memory in a comparable form (sorted), for tests and diagnostics. */
function canonical(s: State): unknown {
  const sorted = <V>(m: Map<string, V>) => [...m.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return {
    settings: s.settings,
    locks: sorted(s.locks),
    siteLockouts: sorted(s.siteLockouts),
    keys: sorted(s.keys).map(([id, k]) => [id, { ...k, key: viewOf(s, id, k) }]),
    byCredential: sorted(s.byCredential).map(([c, ids]) => [c, typeof ids === 'string' ? ids : [...ids].sort()]),
    consumed: sorted(s.consumed),
    trusted: sorted(s.trusted),
  };
}

/**
 * The memory and a fresh load from the database, both in comparable form
 * (tests: they must be deep-equal whenever no transaction is open). null
 * memory: not loaded.
 */
export function memoryAgainstDatabase(db: Database.Database): { memory: unknown; database: unknown } {
  const m = memories.get(db);
  return { memory: m === undefined ? null : canonical(m.state), database: canonical(loadState(db)) };
}

/** Whether the memory is loaded for this handle (tests). */
export function memoryLoaded(db: Database.Database): boolean {
  return memories.has(db);
}
