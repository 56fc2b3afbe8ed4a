import { Schedule, SiteMode, parseJson, parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import { prepared, type ReadableDb, type WritableDb } from './db.js';
import { recordLockState } from './locks.js';
import { memPrivacy, memSettings } from './memory.js';

/**
 * Operating modes beyond the site mode column (migration 0011): where the
 * site mode came from, the passage schedules per door, and per lock whether
 * the gateway holds it open for passage and whether the guest inside has
 * privacy on. Single statements that join the caller's transaction.
 */
export type ModeOrigin = 'gateway' | 'cloud';

export interface SiteModeInfo {
  readonly mode: SiteMode;
  readonly origin: ModeOrigin;
  /** Who set it: a staff display name, "API token", or the cloud's operator label; null before anyone did. */
  readonly by: string | null;
  readonly at: number | null;
  /** The cloud's mode request id (origin cloud only). */
  readonly requestId: string | null;
}

const ModeRow = z
  .object({
    mode: SiteMode,
    mode_origin: z.enum(['gateway', 'cloud']),
    mode_by: z.string().nullable(),
    mode_at: z.int().nullable(),
    mode_request_id: z.string().nullable(),
  })
  .transform((r): SiteModeInfo => ({ mode: r.mode, origin: r.mode_origin, by: r.mode_by, at: r.mode_at, requestId: r.mode_request_id }));

export function readSiteMode(db: ReadableDb): SiteModeInfo {
  return parseRow(
    'settings',
    ModeRow,
    prepared(db, 'SELECT mode, mode_origin, mode_by, mode_at, mode_request_id FROM settings WHERE id = 1').get(),
  );
}

/** Sets the mode and its origin (inside the caller's transaction); false when the mode already was `mode` (the origin is not rewritten then). */
export function writeSiteMode(db: WritableDb, m: Omit<SiteModeInfo, 'at'> & { readonly at: number }): boolean {
  const changed =
    prepared(
      db,
      'UPDATE settings SET mode = ?, mode_origin = ?, mode_by = ?, mode_at = ?, mode_request_id = ? WHERE id = 1 AND mode != ?',
    ).run(m.mode, m.origin, m.by, m.at, m.requestId, m.mode).changes === 1;
  if (changed) memSettings(db, (s) => ({ ...s, mode: m.mode }));
  return changed;
}

/**
 * The cloud sets a lockdown the site is already in (staff locked down first):
 * the lockdown becomes the cloud's, so only the cloud or a supervisor with a
 * reason can lift it. The mode does not change (false when already the cloud's).
 */
export function claimLockdownForCloud(db: WritableDb, by: string, at: number, requestId: string): boolean {
  return (
    prepared(
      db,
      "UPDATE settings SET mode_origin = 'cloud', mode_by = ?, mode_at = ?, mode_request_id = ? WHERE id = 1 AND mode = 'lockdown' AND mode_origin != 'cloud'",
    ).run(by, at, requestId).changes === 1
  );
}

export interface PassageRow {
  readonly doorId: string;
  readonly schedule: Schedule;
  readonly origin: ModeOrigin;
  readonly setBy: string;
  readonly setAt: number;
  readonly requestId: string | null;
}

const ScheduleText = z.string().transform((t, ctx) => {
  const j = parseJson(t);
  const s = j.ok ? Schedule.safeParse(j.value) : null;
  if (s === null || !s.success) {
    ctx.addIssue({ code: 'custom', message: 'not a schedule' });
    return z.NEVER;
  }
  return s.data;
});

const PassageRowSchema = z
  .object({
    door_id: z.string(),
    schedule: ScheduleText,
    origin: z.enum(['gateway', 'cloud']),
    set_by: z.string(),
    set_at: z.int(),
    request_id: z.string().nullable(),
  })
  .transform((r): PassageRow => ({
    doorId: r.door_id,
    schedule: r.schedule,
    origin: r.origin,
    setBy: r.set_by,
    setAt: r.set_at,
    requestId: r.request_id,
  }));

export function allPassage(db: ReadableDb): PassageRow[] {
  return parseRows('passage', PassageRowSchema, prepared(db, 'SELECT * FROM passage ORDER BY door_id').all());
}

/** Sets (schedule) or clears (null) the passage schedule of a door; true when something changed. */
export function writePassage(
  db: WritableDb,
  doorId: string,
  p: {
    readonly schedule: Schedule | null;
    readonly origin: ModeOrigin;
    readonly by: string;
    readonly at: number;
    readonly requestId: string | null;
  },
): boolean {
  if (p.schedule === null) return prepared(db, 'DELETE FROM passage WHERE door_id = ?').run(doorId).changes === 1;
  const text = JSON.stringify(p.schedule);
  const row: unknown = prepared(db, 'SELECT schedule FROM passage WHERE door_id = ?').get(doorId);
  if (row !== undefined && parseRow('passage', z.object({ schedule: z.string() }), row).schedule === text) return false;
  prepared(
    db,
    `INSERT INTO passage (door_id, schedule, origin, set_by, set_at, request_id) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT (door_id) DO UPDATE SET schedule = excluded.schedule, origin = excluded.origin, set_by = excluded.set_by,
       set_at = excluded.set_at, request_id = excluded.request_id`,
  ).run(doorId, text, p.origin, p.by, p.at, p.requestId);
  return true;
}

export interface LockModes {
  readonly lockId: string;
  readonly doorId: string | null;
  readonly passageSince: number | null;
  readonly privacySince: number | null;
}

const LockModesRow = z
  .object({ lock_id: z.string(), door_id: z.string().nullable(), passage_since: z.int().nullable(), privacy_since: z.int().nullable() })
  .transform((r): LockModes => ({ lockId: r.lock_id, doorId: r.door_id, passageSince: r.passage_since, privacySince: r.privacy_since }));

export function lockModes(db: ReadableDb): LockModes[] {
  return parseRows(
    'locks',
    LockModesRow,
    prepared(db, 'SELECT lock_id, door_id, passage_since, privacy_since FROM locks ORDER BY lock_id').all(),
  );
}
export function lockModesOf(db: ReadableDb, lockId: string): LockModes | null {
  const r: unknown = prepared(db, 'SELECT lock_id, door_id, passage_since, privacy_since FROM locks WHERE lock_id = ?').get(lockId);
  return r === undefined ? null : parseRow('locks', LockModesRow, r);
}
export function setPassageSince(db: WritableDb, lockId: string, since: number | null): void {
  prepared(db, 'UPDATE locks SET passage_since = ? WHERE lock_id = ?').run(since, lockId);
}
/**
 * A lock's reported state and the privacy it carries, in one transaction: a
 * state older than the one stored (by the lock's own time) changes neither.
 */
export function recordStateWithPrivacy(
  db: WritableDb,
  lockId: string,
  s: Parameters<typeof recordLockState>[2] & { readonly privacy?: boolean | undefined },
  at: number,
): { readonly recorded: boolean; readonly privacyChanged: boolean } {
  return db
    .transaction(() => {
      if (!recordLockState(db, lockId, s, at)) return { recorded: false, privacyChanged: false };
      return { recorded: true, privacyChanged: s.privacy !== undefined && reportPrivacy(db, lockId, s.privacy, s.at, at).changed };
    })
    .immediate();
}

/**
 * A privacy report of the lock (a state carrying it, or a privacy event) made at `lockAt` by the lock's
 * own clock: off counts only when it is the newest report so far (an older one flushed late says nothing
 * about now); on always counts, the fail-closed side. `recorded`: it was taken; `changed`: privacy flipped.
 */
export function reportPrivacy(
  db: WritableDb,
  lockId: string,
  active: boolean,
  lockAt: number,
  now: number,
): { readonly recorded: boolean; readonly changed: boolean } {
  return db
    .transaction(() => {
      const newest =
        prepared(db, 'UPDATE locks SET privacy_at = ? WHERE lock_id = ? AND (privacy_at IS NULL OR privacy_at <= ?)').run(
          lockAt,
          lockId,
          lockAt,
        ).changes === 1;
      if (!newest && !active) return { recorded: false, changed: false };
      return { recorded: true, changed: setPrivacy(db, lockId, active, now) };
    })
    .immediate();
}

/** Privacy on (since `at`) or off (null); true when it changed. */
export function setPrivacy(db: WritableDb, lockId: string, active: boolean, at: number): boolean {
  const changed = active
    ? prepared(db, 'UPDATE locks SET privacy_since = ? WHERE lock_id = ? AND privacy_since IS NULL').run(at, lockId).changes === 1
    : prepared(db, 'UPDATE locks SET privacy_since = NULL WHERE lock_id = ? AND privacy_since IS NOT NULL').run(lockId).changes === 1;
  if (changed) memPrivacy(db, lockId, active ? at : null);
  return changed;
}
