import type { SiteMode } from '@tobira/shared';
import { withoutFsync, type ReadableDb, type WritableDb, prepared } from './db.js';
import { memSettings, memorySettings } from './memory.js';
import type { Settings } from './settings-row.js';

export { readSettingsRow, type Settings } from './settings-row.js';

/**
 * The `settings` row: the gateway's sync position, lease, trusted-time floor,
 * site mode and uplink counters. Setters here are single statements that join
 * the caller's transaction (the inbox writer's, or an adapter writer's);
 * `setMode` and `touchHighWater` commit on their own.
 */

/** The settings row, from memory (memory.ts: loaded from the row, written through by the setters below). */
export function readSettings(db: ReadableDb): Settings {
  return memorySettings(db);
}

export function setAppliedSeq(db: WritableDb, seq: number): void {
  prepared(db, 'UPDATE settings SET applied_seq = ? WHERE id = 1').run(seq);
  memSettings(db, (s) => ({ ...s, appliedSeq: seq }));
}
/** A snapshot replaced the key set as of `asOfSeq`: it is the applied seq and the snapshot seq, and it settles an open seq conflict. */
export function setSnapshotApplied(db: WritableDb, asOfSeq: number): void {
  prepared(db, 'UPDATE settings SET applied_seq = ?, snapshot_seq = ?, seq_conflict_at = NULL WHERE id = 1').run(asOfSeq, asOfSeq);
  memSettings(db, (s) => ({ ...s, appliedSeq: asOfSeq, snapshotSeq: asOfSeq, seqConflictAt: null }));
}
/** The cloud's history differs from ours: the lease ends now (fail closed) and stays unrenewed until a snapshot. */
export function markSeqConflict(db: WritableDb, at: number): void {
  prepared(db, 'UPDATE settings SET seq_conflict_at = COALESCE(seq_conflict_at, ?), lease_expires_at = NULL WHERE id = 1').run(at);
  memSettings(db, (s) => ({ ...s, seqConflictAt: s.seqConflictAt ?? at, leaseExpiresAt: null }));
}
export function setCloudLastSeq(db: WritableDb, seq: number): void {
  prepared(db, 'UPDATE settings SET cloud_last_seq = ? WHERE id = 1').run(seq);
  memSettings(db, (s) => ({ ...s, cloudLastSeq: seq }));
}
export function setBehindHeartbeat(db: WritableDb, hb: { seq: number; iatMs: number } | null): void {
  prepared(db, 'UPDATE settings SET behind_hb_seq = ?, behind_hb_iat_ms = ? WHERE id = 1').run(hb?.seq ?? null, hb?.iatMs ?? null);
  memSettings(db, (s) => ({ ...s, behindHeartbeat: hb === null ? null : { seq: hb.seq, iatMs: hb.iatMs } }));
}
export function setLease(db: WritableDb, expiresAt: number): void {
  prepared(db, 'UPDATE settings SET lease_expires_at = ? WHERE id = 1').run(expiresAt);
  memSettings(db, (s) => ({ ...s, leaseExpiresAt: expiresAt }));
}
export function setLastResyncAt(db: WritableDb, at: number): void {
  prepared(db, 'UPDATE settings SET last_resync_at = ? WHERE id = 1').run(at);
  memSettings(db, (s) => ({ ...s, lastResyncAt: at }));
}

/** Sets the site mode in its own transaction; false when it already was that mode (nothing written). */
export function setMode(db: WritableDb, mode: SiteMode): boolean {
  return db
    .transaction(() => {
      if (readSettings(db).mode === mode) return false;
      prepared(db, 'UPDATE settings SET mode = ? WHERE id = 1').run(mode);
      memSettings(db, (s) => ({ ...s, mode }));
      return true;
    })
    .immediate();
}

/** Raises (never lowers) the trusted-time floor. */
export function raiseTimeFloor(db: WritableDb, maxIatMs: number, highWaterMs: number): void {
  prepared(db, 'UPDATE settings SET max_iat_ms = max(max_iat_ms, ?), high_water_ms = max(high_water_ms, ?) WHERE id = 1').run(
    maxIatMs,
    highWaterMs,
  );
  memSettings(db, (s) =>
    maxIatMs <= s.maxIatMs && highWaterMs <= s.highWaterMs
      ? s
      : { ...s, maxIatMs: Math.max(s.maxIatMs, maxIatMs), highWaterMs: Math.max(s.highWaterMs, highWaterMs) },
  );
}

/**
 * Lowers the high-water mark to `capMs` when it is above it. Only for a time
 * the cloud has just proven (a resync answer to this process's request plus
 * the tolerance): a mark above that came from a wall clock that ran ahead,
 * and left alone it would keep trusted time ahead after the clock is fixed.
 * True when it was lowered.
 */
export function capHighWater(db: WritableDb, capMs: number): boolean {
  const changed = prepared(db, 'UPDATE settings SET high_water_ms = ? WHERE id = 1 AND high_water_ms > ?').run(capMs, capMs).changes === 1;
  if (changed) memSettings(db, (s) => ({ ...s, highWaterMs: capMs }));
  return changed;
}

/**
 * The periodic high-water update, not fsynced: a power cut can lose at most
 * the last few seconds of it, and the next FULL commit (any decision or
 * apply) makes it durable. Saves the gateway's flash storage one fsync a second.
 */
export function touchHighWater(db: WritableDb, now: number): void {
  withoutFsync(db, () => raiseTimeFloor(db, 0, now));
}
