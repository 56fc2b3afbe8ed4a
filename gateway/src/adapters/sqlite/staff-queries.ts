import { pageOf, parseRow, parseRows, type Page, type PageQuery } from '@tobira/shared';
import { z } from 'zod';
import { countOf, flag, type ReadableDb } from './db.js';
import { siteNames } from './staff-keys.js';
import { AccessLogColumns, accessLogFields } from './access-log.js';
import type { LockRefusal } from './diagnostics.js';
import { listKeysOnSite, type KeyFilter, type StaffKey } from './staff-keys.js';

/**
 * Read-only queries of the staff read API (docs/gateway.md "Staff read API").
 * Every list is newest first and keyset-paginated on its sort key (never
 * OFFSET, so rows inserted meanwhile neither repeat nor skip a row across
 * pages): the page asks for `limit + 1` rows, and the last row's key becomes
 * the opaque `nextCursor`. Rows read back are validated with zod; a row that
 * does not fit is a `CorruptRow` (a 500 at the HTTP edge, details logged).
 * Nothing here writes (acknowledging an alarm is `alarms.ts` `ackAlarm`).
 */

const Ms = z.int().nonnegative();
/** (time, integer id): access log, rejected downlinks, lock refusals, failed inbox rows. */
export const TimeIdCursor = z.tuple([Ms, z.int().positive()]);
/** (closed?, time, alarm id): alarms, open ones first. */
export const AlarmCursor = z.tuple([z.union([z.literal(0), z.literal(1)]), Ms, z.string().min(1).max(128)]);

const nullableText = z.string().nullable();
const nullableInt = z.int().nullable();

// ---------------------------------------------------------------- locks

const LockRowSchema = z.object({
  lock_id: z.string(),
  door_id: nullableText,
  online: flag,
  bolt: nullableText,
  door: nullableText,
  battery: nullableInt,
  state_at: nullableInt,
  failures: z.int(),
  locked_out_until: nullableInt,
  updated_at: z.int(),
  open_alarms: z.int(),
});

export interface StaffLock {
  readonly lockId: string;
  readonly doorId: string | null;
  /** The door's display name, from the site's grants (null: none names it). */
  readonly doorName: string | null;
  /** From the lock's retained presence (an empty or missing one is offline). */
  readonly online: boolean;
  /** The last state the lock reported (null until it reports one); `stateAt` is the lock's own time. */
  readonly state: {
    readonly bolt: string | null;
    readonly door: string | null;
    readonly battery: number | null;
    readonly at: number | null;
  };
  readonly lockout: { readonly failures: number; readonly lockedOutUntil: number | null; readonly lockedOut: boolean };
  readonly openAlarms: number;
  readonly updatedAt: number;
}

/** Every lock the gateway knows (configured now or before), by lock id. */
export function listLocks(db: ReadableDb, now: number): StaffLock[] {
  const rows = db
    .prepare(
      `SELECT l.*, (SELECT count(*) FROM alarms a WHERE a.lock_id = l.lock_id AND a.closed_at IS NULL) AS open_alarms
         FROM locks l ORDER BY l.lock_id`,
    )
    .all();
  const names = siteNames(db);
  return parseRows('locks', LockRowSchema, rows).map((r) => ({
    lockId: r.lock_id,
    doorId: r.door_id,
    doorName: r.door_id === null ? null : (names.doors.get(r.door_id) ?? null),
    online: r.online,
    state: { bolt: r.bolt, door: r.door, battery: r.battery, at: r.state_at },
    lockout: {
      failures: r.failures,
      lockedOutUntil: r.locked_out_until,
      lockedOut: r.locked_out_until !== null && now < r.locked_out_until,
    },
    openAlarms: r.open_alarms,
    updatedAt: r.updated_at,
  }));
}

// ---------------------------------------------------------------- access log

const AccessRowSchema = AccessLogColumns.extend({ id: z.int() });

/**
 * One door decision. The access log holds no credential value and no digest
 * (only the credential type), so nothing here helps guess a PIN.
 */
export type AccessEventView = Readonly<Omit<ReturnType<typeof accessLogFields>, 'holdMs'>> & {
  /** A remote unlock's supervisor and reason; null on decisions made at a lock. */
  readonly by: { readonly accountId: string; readonly name: string; readonly reason: string } | null;
  /** Display names from the site's grants as they are now (null: none names the person / door). */
  readonly personName: string | null;
  readonly doorName: string | null;
};

/** The filters of a list by time: `since` inclusive, `until` exclusive (ms). */
interface TimeFilters {
  code: string;
  since: number;
  until: number;
}
export type AccessFilter = PageQuery<TimeFilters & { door: string; lock: string; allowed: boolean }, [number, number]>;

/** Door decisions newest first, keyset on (at, id). */
export function listAccessEvents(db: ReadableDb, f: AccessFilter): Page<AccessEventView> {
  const rows = db
    .prepare(
      `SELECT * FROM access_log
        WHERE (@door IS NULL OR door_id = @door) AND (@lock IS NULL OR lock_id = @lock)
          AND (@allowed IS NULL OR allowed = @allowed) AND (@code IS NULL OR code = @code)
          AND (@since IS NULL OR at >= @since) AND (@until IS NULL OR at < @until)
          AND (@cAt IS NULL OR (at, id) < (@cAt, @cId))
        ORDER BY at DESC, id DESC LIMIT @n`,
    )
    .all({
      door: f.door ?? null,
      lock: f.lock ?? null,
      allowed: f.allowed === undefined ? null : f.allowed ? 1 : 0,
      ...timeParams(f),
    });
  const parsed = parseRows('access_log', AccessRowSchema, rows);
  const names = siteNames(db);
  return mapPage(
    pageOf(parsed, f.limit, (r) => [r.at, r.id]),
    (r): AccessEventView => {
      const { holdMs: _holdMs, ...view } = accessLogFields(r);
      return {
        ...view,
        by: r.by_staff,
        personName: view.personId === null ? null : (names.persons.get(view.personId) ?? null),
        doorName: view.doorId === null ? null : (names.doors.get(view.doorId) ?? null),
      };
    },
  );
}

function mapPage<A, B>(p: Page<A>, f: (a: A) => B): Page<B> {
  return { items: p.items.map(f), nextCursor: p.nextCursor };
}

// ---------------------------------------------------------------- alarms

const AlarmRowSchema = z.object({
  alarm_id: z.string(),
  lock_id: z.string(),
  door_id: nullableText,
  kind: z.string(),
  at: z.int(),
  received_at: z.int(),
  closed_at: nullableInt,
  closed_by: nullableText,
  count: z.int(),
  last_seen_at: nullableInt,
  ended_at: nullableInt,
});

export interface StaffAlarm {
  readonly alarmId: string;
  readonly lockId: string;
  readonly doorId: string | null;
  readonly kind: string;
  readonly status: 'open' | 'closed';
  /** The lock's time of the alarm. */
  readonly at: number;
  readonly receivedAt: number;
  readonly closedAt: number | null;
  readonly closedBy: string | null;
  /** How many times the lock reported it while it was open (repeats are counted on the open alarm, not stored apart). */
  readonly count: number;
  /** The gateway's time of the first and of the latest report (firstSeenAt is receivedAt). */
  readonly firstSeenAt: number;
  readonly lastSeenAt: number;
  /** When its condition ended on its own (LOCK_EVENTS_THROTTLED: the lock back under budget); null otherwise. */
  readonly endedAt: number | null;
}

export interface AlarmFilter {
  readonly status: 'open' | 'all';
  readonly lock?: string | undefined;
  readonly cursor: readonly [0 | 1, number, string] | null;
  readonly limit: number;
}

/** Open alarms first (newest first), then closed ones (newest first); keyset on (closed?, at, alarm_id). */
export function listAlarms(db: ReadableDb, f: AlarmFilter): Page<StaffAlarm> {
  const rows = db
    .prepare(
      `SELECT * FROM (
         SELECT a.*, (a.closed_at IS NOT NULL) AS grp, l.door_id FROM alarms a LEFT JOIN locks l ON l.lock_id = a.lock_id
          WHERE (@open = 0 OR a.closed_at IS NULL) AND (@lock IS NULL OR a.lock_id = @lock))
        WHERE @cGrp IS NULL OR grp > @cGrp OR (grp = @cGrp AND (at < @cAt OR (at = @cAt AND alarm_id < @cId)))
        ORDER BY grp, at DESC, alarm_id DESC LIMIT @n`,
    )
    .all({
      open: f.status === 'open' ? 1 : 0,
      lock: f.lock ?? null,
      cGrp: f.cursor?.[0] ?? null,
      cAt: f.cursor?.[1] ?? null,
      cId: f.cursor?.[2] ?? null,
      n: f.limit + 1,
    });
  const parsed = parseRows('alarms', AlarmRowSchema, rows);
  return mapPage(
    pageOf(parsed, f.limit, (r) => [r.closed_at === null ? 0 : 1, r.at, r.alarm_id]),
    toStaffAlarm,
  );
}

/** One alarm by id (null when there is none). */
export function getAlarm(db: ReadableDb, alarmId: string): StaffAlarm | null {
  const row = db
    .prepare('SELECT a.*, l.door_id FROM alarms a LEFT JOIN locks l ON l.lock_id = a.lock_id WHERE a.alarm_id = ?')
    .get(alarmId);
  if (row === undefined) return null;
  return toStaffAlarm(parseRow('alarms', AlarmRowSchema, row));
}

const toStaffAlarm = (r: z.infer<typeof AlarmRowSchema>): StaffAlarm => ({
  alarmId: r.alarm_id,
  lockId: r.lock_id,
  doorId: r.door_id,
  kind: r.kind,
  status: r.closed_at === null ? 'open' : 'closed',
  at: r.at,
  receivedAt: r.received_at,
  closedAt: r.closed_at,
  closedBy: r.closed_by,
  count: r.count,
  firstSeenAt: r.received_at,
  lastSeenAt: r.last_seen_at ?? r.received_at,
  endedAt: r.ended_at,
});

// ---------------------------------------------------------------- failed inbox rows

const FailedRowSchema = z.object({
  id: z.int(),
  jti: z.string(),
  type: z.string(),
  seq: nullableInt,
  cid: z.string(),
  message: z.string(),
  attempts: z.int(),
  last_error: nullableText,
  code: nullableText,
  received_at: z.int(),
  processed_at: z.int(),
});

/** The key a grant or revoke names; read leniently: a failed row is shown even if its message no longer parses. */
const KeyOfMessage = z.union([
  z
    .object({ body: z.object({ key: z.object({ keyId: z.string(), version: z.int() }) }) })
    .transform((m) => ({ keyId: m.body.key.keyId, keyVersion: m.body.key.version })),
  z
    .object({ body: z.object({ keyId: z.string(), version: z.int() }) })
    .transform((m) => ({ keyId: m.body.keyId, keyVersion: m.body.version })),
]);

function keyOf(message: string): { keyId: string | null; keyVersion: number | null } {
  try {
    const r = KeyOfMessage.safeParse(JSON.parse(message));
    return r.success ? r.data : { keyId: null, keyVersion: null };
  } catch {
    return { keyId: null, keyVersion: null };
  }
}

export interface StaffFailedInboxRow {
  readonly jti: string;
  readonly type: string;
  readonly seq: number | null;
  readonly keyId: string | null;
  readonly keyVersion: number | null;
  readonly attempts: number;
  readonly code: string | null;
  readonly lastError: string | null;
  readonly receivedAt: number;
  /** When it was marked failed. */
  readonly failedAt: number;
  readonly cid: string;
}

export type TimePageFilter = PageQuery<TimeFilters, [number, number]>;

/** Inbox rows that failed to apply (they stay until an operator deals with them), newest failure first. */
export function listFailedInbox(db: ReadableDb, f: TimePageFilter): Page<StaffFailedInboxRow> {
  const rows = db
    .prepare(
      `SELECT id, jti, type, seq, cid, message, attempts, last_error, code, received_at, processed_at FROM inbox
        WHERE status = 'failed' AND (@code IS NULL OR code = @code)
          AND (@since IS NULL OR processed_at >= @since) AND (@until IS NULL OR processed_at < @until)
          AND (@cAt IS NULL OR (processed_at, id) < (@cAt, @cId))
        ORDER BY processed_at DESC, id DESC LIMIT @n`,
    )
    .all(timeParams(f));
  const parsed = parseRows('inbox', FailedRowSchema, rows);
  return mapPage(
    pageOf(parsed, f.limit, (r) => [r.processed_at, r.id]),
    (r): StaffFailedInboxRow => ({
      jti: r.jti,
      type: r.type,
      seq: r.seq,
      ...keyOf(r.message),
      attempts: r.attempts,
      code: r.code,
      lastError: r.last_error,
      receivedAt: r.received_at,
      failedAt: r.processed_at,
      cid: r.cid,
    }),
  );
}

const timeParams = (f: TimePageFilter & { lock?: string | undefined }) => ({
  code: f.code ?? null,
  since: f.since ?? null,
  until: f.until ?? null,
  cAt: f.cursor?.[0] ?? null,
  cId: f.cursor?.[1] ?? null,
  n: f.limit + 1,
});

// ---------------------------------------------------------------- rejected downlinks

const RejectedRowSchema = z.object({
  id: z.int(),
  at: z.int(),
  topic: z.string(),
  code: z.string(),
  detail: z.string(),
  bytes: z.int(),
  claimed_jti: nullableText,
  claimed_cid: nullableText,
  claimed_type: nullableText,
  claimed_seq: nullableInt,
  claimed_issuer: nullableText,
});

/**
 * A downlink message refused by verification (its payload is not kept). The
 * `claimed…` fields are what the message said about itself, read WITHOUT
 * verifying it: UNVERIFIED, anyone who can publish on the downlink topic
 * chooses them. They say where to look in the cloud (outbox row by jti, log
 * lines by cid), never what happened. Null when the message did not decode
 * as a JWS or the claim was missing or not of its protocol form.
 */
export interface StaffRejected {
  readonly id: number;
  readonly at: number;
  readonly topic: string;
  readonly code: string;
  readonly detail: string;
  readonly bytes: number;
  readonly claimedJti: string | null;
  readonly claimedCid: string | null;
  readonly claimedType: string | null;
  readonly claimedSeq: number | null;
  readonly claimedIssuer: string | null;
}

/** `cid`: the correlation id the message claimed (to find the rejections of one cloud request). */
export type RejectedFilter = TimePageFilter & { readonly cid?: string | undefined };

export function listRejected(db: ReadableDb, f: RejectedFilter): Page<StaffRejected> {
  const rows = db
    .prepare(
      `SELECT * FROM rejected
        WHERE (@code IS NULL OR code = @code) AND (@cid IS NULL OR claimed_cid = @cid) AND (@since IS NULL OR at >= @since) AND (@until IS NULL OR at < @until)
          AND (@cAt IS NULL OR (at, id) < (@cAt, @cId))
        ORDER BY at DESC, id DESC LIMIT @n`,
    )
    .all({ ...timeParams(f), cid: f.cid ?? null });
  return mapPage(
    pageOf(parseRows('rejected', RejectedRowSchema, rows), f.limit, (r) => [r.at, r.id]),
    (r) => ({
      id: r.id,
      at: r.at,
      topic: r.topic,
      code: r.code,
      detail: r.detail,
      bytes: r.bytes,
      claimedJti: r.claimed_jti,
      claimedCid: r.claimed_cid,
      claimedType: r.claimed_type,
      claimedSeq: r.claimed_seq,
      claimedIssuer: r.claimed_issuer,
    }),
  );
}

// ---------------------------------------------------------------- lock refusals

const RefusalRowSchema = z.object({
  id: z.int(),
  at: z.int(),
  origin: z.enum(['gateway', 'lock']),
  lock_id: nullableText,
  channel: z.string(),
  topic: z.string(),
  code: z.string(),
  detail: z.string(),
  bytes: z.int(),
});

export type StaffLockRefusal = LockRefusal & { readonly id: number; readonly at: number };

export function listLockRefusals(db: ReadableDb, f: RefusalFilter): Page<StaffLockRefusal> {
  const rows = db
    .prepare(
      `SELECT * FROM lock_refusals
        WHERE (@lock IS NULL OR lock_id = @lock) AND (@origin IS NULL OR origin = @origin) AND (@code IS NULL OR code = @code)
          AND (@since IS NULL OR at >= @since) AND (@until IS NULL OR at < @until)
          AND (@cAt IS NULL OR (at, id) < (@cAt, @cId))
        ORDER BY at DESC, id DESC LIMIT @n`,
    )
    .all({ ...timeParams(f), lock: f.lock ?? null, origin: f.origin ?? null });
  return mapPage(
    pageOf(parseRows('lock_refusals', RefusalRowSchema, rows), f.limit, (r) => [r.at, r.id]),
    (r) => ({
      id: r.id,
      at: r.at,
      origin: r.origin,
      lockId: r.lock_id,
      channel: r.channel,
      topic: r.topic,
      code: r.code,
      detail: r.detail,
      bytes: r.bytes,
    }),
  );
}

// ---------------------------------------------------------------- counts for /staff/status

export interface StaffCounts {
  readonly inboxPending: number;
  readonly inboxFailed: number;
  readonly outboxPending: number;
  readonly rejected: number;
  readonly lockRefusals: number;
  readonly openAlarms: number;
  readonly locks: number;
  readonly locksOnline: number;
}

export function staffCounts(db: ReadableDb): StaffCounts {
  const one = (sql: string) => countOf(db, 'staff counts', sql);
  return {
    inboxPending: one("SELECT count(*) AS n FROM inbox WHERE status = 'pending'"),
    inboxFailed: one("SELECT count(*) AS n FROM inbox WHERE status = 'failed'"),
    outboxPending: one("SELECT count(*) AS n FROM outbox WHERE status = 'pending'"),
    rejected: one('SELECT count(*) AS n FROM rejected'),
    lockRefusals: one('SELECT count(*) AS n FROM lock_refusals'),
    openAlarms: one('SELECT count(*) AS n FROM alarms WHERE closed_at IS NULL'),
    locks: one('SELECT count(*) AS n FROM locks'),
    locksOnline: one('SELECT count(*) AS n FROM locks WHERE online = 1'),
  };
}

// ---------------------------------------------------------------- the lists, bound to one database

export interface StaffLists {
  locks(): StaffLock[];
  accessEvents(f: AccessFilter): Page<AccessEventView>;
  alarms(f: AlarmFilter): Page<StaffAlarm>;
  failedInbox(f: TimePageFilter): Page<StaffFailedInboxRow>;
  rejected(f: RejectedFilter): Page<StaffRejected>;
  lockRefusals(f: RefusalFilter): Page<StaffLockRefusal>;
  /** The keys on site (staff-keys.ts), never the credential. */
  keys(f: KeyFilter): Page<StaffKey>;
}

export type RefusalFilter = TimePageFilter & { readonly lock?: string | undefined; readonly origin?: 'gateway' | 'lock' | undefined };

/** The staff lists over one database; `now` is the gateway's trusted now (for lockout state). */
export function staffLists(db: ReadableDb, now: () => number): StaffLists {
  return {
    locks: () => listLocks(db, now()),
    accessEvents: (f) => listAccessEvents(db, f),
    alarms: (f) => listAlarms(db, f),
    failedInbox: (f) => listFailedInbox(db, f),
    rejected: (f) => listRejected(db, f),
    lockRefusals: (f) => listLockRefusals(db, f),
    keys: (f) => listKeysOnSite(db, f, now()),
  };
}
