import { BoltState, DoorState, parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import { noSiteLockout, type LockoutState, type SiteLockoutState } from '../../domain/lockout.js';
import { flag, type ReadableDb, type WritableDb, prepared } from './db.js';
import { memLockRow, memLockout, memSiteLockout } from './memory.js';

/**
 * The configured locks (`locks`: door, availability, last state, per-lock
 * lockout) and the site-wide lockout per credential type (`site_lockout`).
 * Single statements: each commits on its own or joins the caller's
 * transaction (a decision's lockout update joins `commitDecisions`).
 */
type Bolt = z.infer<typeof BoltState>;
type Door = z.infer<typeof DoorState>;

export interface LockRow extends LockoutState {
  readonly lockId: string;
  readonly doorId: string | null;
  readonly online: boolean;
  readonly bolt: Bolt | null;
  readonly door: Door | null;
  readonly battery: number | null;
  readonly stateAt: number | null;
}

const LockRowSchema = z
  .object({
    lock_id: z.string(),
    door_id: z.string().nullable(),
    online: flag,
    bolt: BoltState.nullable(),
    door: DoorState.nullable(),
    battery: z.number().nullable(),
    state_at: z.int().nullable(),
    failures: z.int(),
    locked_out_until: z.int().nullable(),
  })
  .transform((r): LockRow => ({
    lockId: r.lock_id,
    doorId: r.door_id,
    online: r.online,
    bolt: r.bolt,
    door: r.door,
    battery: r.battery,
    stateAt: r.state_at,
    failures: r.failures,
    lockedOutUntil: r.locked_out_until,
  }));

/** Pairs the configured locks (door mapping from config); state columns are kept. */
export function upsertLock(db: WritableDb, lockId: string, doorId: string, now: number): void {
  prepared(
    db,
    'INSERT INTO locks (lock_id, door_id, updated_at) VALUES (?, ?, ?) ON CONFLICT (lock_id) DO UPDATE SET door_id = excluded.door_id',
  ).run(lockId, doorId, now);
  memLockRow(db, lockId);
}
export function lockById(db: ReadableDb, lockId: string): LockRow | null {
  const r: unknown = prepared(db, 'SELECT * FROM locks WHERE lock_id = ?').get(lockId);
  return r === undefined ? null : parseRow('locks', LockRowSchema, r);
}
export function allLocks(db: ReadableDb): LockRow[] {
  return parseRows('locks', LockRowSchema, prepared(db, 'SELECT * FROM locks ORDER BY lock_id').all());
}
export function setLockout(db: WritableDb, lockId: string, s: LockoutState, now: number): void {
  prepared(db, 'UPDATE locks SET failures = ?, locked_out_until = ?, updated_at = ? WHERE lock_id = ?').run(
    s.failures,
    s.lockedOutUntil,
    now,
    lockId,
  );
  memLockout(db, lockId, s);
}
/** True when the availability changed. */
export function setLockOnline(db: WritableDb, lockId: string, online: boolean, now: number): boolean {
  return (
    prepared(db, 'UPDATE locks SET online = ?, updated_at = ? WHERE lock_id = ? AND online != ?').run(
      online ? 1 : 0,
      now,
      lockId,
      online ? 1 : 0,
    ).changes === 1
  );
}
/** Records the state a lock reported, unless a newer one (by the lock's own time) is already in; true when recorded. */
export function recordLockState(
  db: WritableDb,
  lockId: string,
  s: { bolt: Bolt; door: Door; battery: number; at: number },
  now: number,
): boolean {
  return (
    prepared(
      db,
      'UPDATE locks SET bolt = ?, door = ?, battery = ?, state_at = ?, updated_at = ? WHERE lock_id = ? AND (state_at IS NULL OR state_at <= ?)',
    ).run(s.bolt, s.door, s.battery, s.at, now, lockId, s.at).changes === 1
  );
}

// ------------------------------------------------------------ site-wide lockout

const SiteLockoutRow = z
  .object({ failures: z.int(), window_start: z.int().nullable(), locked_out_until: z.int().nullable() })
  .transform((r): SiteLockoutState => ({ failures: r.failures, windowStart: r.window_start, lockedOutUntil: r.locked_out_until }));

export function siteLockout(db: ReadableDb, credentialType: string): SiteLockoutState {
  const r: unknown = prepared(db, 'SELECT failures, window_start, locked_out_until FROM site_lockout WHERE credential_type = ?').get(
    credentialType,
  );
  return r === undefined ? noSiteLockout : parseRow('site_lockout', SiteLockoutRow, r);
}
export function setSiteLockout(db: WritableDb, credentialType: string, s: SiteLockoutState, now: number): void {
  prepared(
    db,
    `INSERT INTO site_lockout (credential_type, failures, window_start, locked_out_until, updated_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (credential_type) DO UPDATE SET failures = excluded.failures, window_start = excluded.window_start, locked_out_until = excluded.locked_out_until, updated_at = excluded.updated_at`,
  ).run(credentialType, s.failures, s.windowStart, s.lockedOutUntil, now);
  memSiteLockout(db, credentialType, s);
}
