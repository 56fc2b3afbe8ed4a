import { SiteMode, parseRow } from '@tobira/shared';
import { z } from 'zod';
import { withoutFsync, type ReadableDb, type WritableDb, prepared } from './db.js';
import { memSettings, memorySettings } from './memory.js';

/**
 * The `settings` row: the gateway's sync position, lease, trusted-time floor,
 * site mode and uplink counters. Setters here are single statements that join
 * the caller's transaction (the inbox writer's, or an adapter writer's);
 * `setMode` and `touchHighWater` commit on their own.
 */
export interface Settings {
  readonly appliedSeq: number;
  readonly leaseExpiresAt: number | null;
  readonly maxIatMs: number;
  readonly highWaterMs: number;
  readonly mode: SiteMode;
  readonly nextUplinkSeq: number;
  readonly lastResyncAt: number | null;
  /** asOfSeq of the last applied snapshot: seqs up to it are settled by the snapshot. */
  readonly snapshotSeq: number;
  /** When a message showed that the cloud's history differs from ours (SEQ_CONFLICT); null: none open. */
  readonly seqConflictAt: number | null;
  /** The last seq a heartbeat named: the cloud has handed out up to it (null: no heartbeat yet). */
  readonly cloudLastSeq: number | null;
  /** The newest heartbeat that found us behind; its proof of freshness counts once we applied up to its seq. */
  readonly behindHeartbeat: { readonly seq: number; readonly iatMs: number } | null;
  /** The highest uplink seq the cloud has acknowledged applying. */
  readonly uplinkAckedSeq: number;
}

const SettingsRow = z
  .object({
    applied_seq: z.int(),
    lease_expires_at: z.int().nullable(),
    max_iat_ms: z.int(),
    high_water_ms: z.int(),
    mode: SiteMode,
    next_uplink_seq: z.int(),
    last_resync_at: z.int().nullable(),
    snapshot_seq: z.int(),
    seq_conflict_at: z.int().nullable(),
    cloud_last_seq: z.int().nullable(),
    behind_hb_seq: z.int().nullable(),
    behind_hb_iat_ms: z.int().nullable(),
    uplink_acked_seq: z.int(),
  })
  .transform((r): Settings => ({
    appliedSeq: r.applied_seq,
    leaseExpiresAt: r.lease_expires_at,
    maxIatMs: r.max_iat_ms,
    highWaterMs: r.high_water_ms,
    mode: r.mode,
    nextUplinkSeq: r.next_uplink_seq,
    lastResyncAt: r.last_resync_at,
    snapshotSeq: r.snapshot_seq,
    seqConflictAt: r.seq_conflict_at,
    cloudLastSeq: r.cloud_last_seq,
    behindHeartbeat: r.behind_hb_seq === null || r.behind_hb_iat_ms === null ? null : { seq: r.behind_hb_seq, iatMs: r.behind_hb_iat_ms },
    uplinkAckedSeq: r.uplink_acked_seq,
  }));

/** The settings row, from memory (memory.ts: loaded from the row, written through by the setters below). */
export function readSettings(db: ReadableDb): Settings {
  return memorySettings(db);
}
/** The settings row read from SQLite (the memory's load). */
export function readSettingsRow(db: ReadableDb): Settings {
  return parseRow('settings', SettingsRow, prepared(db, 'SELECT * FROM settings WHERE id = 1').get());
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
 * The periodic high-water update, not fsynced: a power cut can lose at most
 * the last few seconds of it, and the next FULL commit (any decision or
 * apply) makes it durable. Saves the gateway's flash storage one fsync a second.
 */
export function touchHighWater(db: WritableDb, now: number): void {
  withoutFsync(db, () => raiseTimeFloor(db, 0, now));
}
