import type { UnverifiedClaims } from '@tobira/shared';
import { countOf, withoutFsync, type ReadableDb, type WritableDb, prepared } from './db.js';

/**
 * Diagnostics, not audit: downlinks refused by verification (`rejected`) and
 * refused lock messages (`lock_refusals`). Each table keeps its newest
 * `…MaxRows` rows (pruned on insert, in the same transaction: ids only grow
 * and only the oldest are deleted, so `id <= newest - max` is the overflow)
 * and none older than `…MaxAgeMs` (the hourly purge). Their commits skip the
 * fsync (`withoutFsync`), so a flood of garbage costs no flash fsync per
 * message; a power cut loses at most the last few rows.
 */
export interface RetentionLimits {
  readonly lockRefusalsMaxRows: number;
  readonly lockRefusalsMaxAgeMs: number;
  readonly rejectedMaxRows: number;
  readonly rejectedMaxAgeMs: number;
  /** access_log (audit, not diagnostics): pruned beyond these by the hourly purge, but only rows the cloud already has. */
  readonly accessLogMaxRows: number;
  readonly accessLogMaxAgeMs: number;
  /** staff_actions (the staff audit): pruned beyond these by the hourly purge, but only rows the cloud already has. */
  readonly staffActionsMaxRows: number;
  readonly staffActionsMaxAgeMs: number;
}
export const DEFAULT_RETENTION: RetentionLimits = Object.freeze({
  lockRefusalsMaxRows: 10_000,
  lockRefusalsMaxAgeMs: 30 * 24 * 3600 * 1000,
  rejectedMaxRows: 10_000,
  rejectedMaxAgeMs: 30 * 24 * 3600 * 1000,
  accessLogMaxRows: 100_000,
  accessLogMaxAgeMs: 30 * 24 * 3600 * 1000,
  staffActionsMaxRows: 50_000,
  staffActionsMaxAgeMs: 90 * 24 * 3600 * 1000,
});

/** A downlink message refused by verification, as recorded (never its payload). */
export interface RejectedDownlink {
  readonly topic: string;
  readonly code: string;
  readonly detail: string;
  readonly bytes: number;
  /** What the message claimed about itself, UNVERIFIED (`readClaimsUnverified`); all null when it did not decode. */
  readonly claimed: UnverifiedClaims;
}

export interface LockRefusal {
  /** 'gateway': the gateway refused a message from a lock; 'lock': a lock reported refusing a gateway command. */
  readonly origin: 'gateway' | 'lock';
  /** The lock id as the topic claims it (null when the topic itself was unusable). */
  readonly lockId: string | null;
  readonly channel: string;
  readonly topic: string;
  readonly code: string;
  readonly detail: string;
  readonly bytes: number;
}

/**
 * Records a refused downlink with what it claimed about itself (unverified).
 * The claims are bounded by the caller's rule (`readClaimsUnverified`); the
 * slices here are a second fence only.
 */
export function recordRejected(db: WritableDb, maxRows: number, r: RejectedDownlink, at: number): void {
  const c = r.claimed;
  withoutFsync(db, () => {
    const { lastInsertRowid } = prepared(
      db,
      `INSERT INTO rejected (at, topic, code, detail, bytes, claimed_jti, claimed_cid, claimed_type, claimed_seq, claimed_issuer)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(
      at,
      r.topic.slice(0, 512),
      r.code.slice(0, 64),
      r.detail.slice(0, 500),
      r.bytes,
      c.jti?.slice(0, 36) ?? null,
      c.cid?.slice(0, 128) ?? null,
      c.type?.slice(0, 64) ?? null,
      c.seq,
      c.iss?.slice(0, 128) ?? null,
    );
    prepared(db, 'DELETE FROM rejected WHERE id <= ?').run(Number(lastInsertRowid) - maxRows);
  });
}

/** Age bound of rejected (hourly, with the other purges). */
export function purgeRejected(db: WritableDb, now: number, maxAgeMs: number): number {
  return prepared(db, 'DELETE FROM rejected WHERE at < ?').run(now - maxAgeMs).changes;
}

export function rejectedCount(db: ReadableDb): number {
  return countOf(db, 'rejected', 'SELECT count(*) AS n FROM rejected');
}

/** Records a refused lock message, or a refusal a lock reported (never the payload). Inside a caller's transaction it joins it. */
export function recordLockRefusal(db: WritableDb, maxRows: number, r: LockRefusal, at: number): void {
  withoutFsync(db, () => {
    const { lastInsertRowid } = prepared(
      db,
      'INSERT INTO lock_refusals (at, origin, lock_id, channel, topic, code, detail, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ).run(
      at,
      r.origin,
      r.lockId === null ? null : r.lockId.slice(0, 128),
      r.channel.slice(0, 32),
      r.topic.slice(0, 512),
      r.code.slice(0, 64),
      r.detail.slice(0, 500),
      r.bytes,
    );
    prepared(db, 'DELETE FROM lock_refusals WHERE id <= ?').run(Number(lastInsertRowid) - maxRows);
  });
}

/** Age bound of lock_refusals (hourly, with the other purges). */
export function purgeLockRefusals(db: WritableDb, now: number, maxAgeMs: number): number {
  return prepared(db, 'DELETE FROM lock_refusals WHERE at < ?').run(now - maxAgeMs).changes;
}
