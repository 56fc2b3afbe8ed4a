import { SiteMode, parseRow } from '@tobira/shared';
import type Database from 'better-sqlite3';
import { z } from 'zod';
import { prepared } from './statements.js';

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

/** The settings row read from SQLite (the memory's load). */
export function readSettingsRow(db: Database.Database): Settings {
  return parseRow('settings', SettingsRow, prepared(db, 'SELECT * FROM settings WHERE id = 1').get());
}
