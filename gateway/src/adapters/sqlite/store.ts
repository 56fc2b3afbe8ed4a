import {
  DownlinkMessage,
  KeyGrant,
  newMessageId,
  type CorrelationId,
  type CredentialType,
  type MessageId,
  type UnverifiedClaims,
  type UplinkMessage,
} from '@tobira/shared';
import { z } from 'zod';
import type { KeyCandidate, KeySetView } from '../../domain/decide.js';
import type { KeySlot } from '../../domain/keyset.js';
import { noSiteLockout, type LockoutState, type SiteLockoutState } from '../../domain/lockout.js';
import type { WritableDb } from './db.js';

/**
 * SQL verbs of the gateway, all synchronous. Callers that need several verbs
 * to commit together wrap them in `db.transaction(fn).immediate()` (never an
 * `await` inside). Rows read back are validated; a row that cannot be a valid
 * domain object is a `CorruptRow` error, not a half-built object.
 */
import { CorruptRow } from '@tobira/shared';

export { CorruptRow };

export type SiteMode = 'normal' | 'lockdown';

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

/** What a heartbeat's uplink acknowledgement did: rows acknowledged now, or `foreign` (its jti is not ours at that seq: another history). */
export type UplinkAckResult = { readonly acked: number } | { readonly foreign: true; readonly ourJti: string | null };

const SettingsRow = z.object({
  applied_seq: z.int(),
  lease_expires_at: z.int().nullable(),
  max_iat_ms: z.int(),
  high_water_ms: z.int(),
  mode: z.enum(['normal', 'lockdown']),
  next_uplink_seq: z.int(),
  last_resync_at: z.int().nullable(),
  snapshot_seq: z.int(),
  seq_conflict_at: z.int().nullable(),
  cloud_last_seq: z.int().nullable(),
  behind_hb_seq: z.int().nullable(),
  behind_hb_iat_ms: z.int().nullable(),
  uplink_acked_seq: z.int(),
});

export interface InboxRow {
  readonly id: number;
  readonly jti: string;
  readonly type: DownlinkMessage['type'];
  readonly seq: number | null;
  readonly cid: string;
  readonly message: DownlinkMessage;
  readonly attempts: number;
}

/** Uplink types that go through the outbox (resync requests are sent directly: they carry no seq). */
export type OutboxType = Exclude<UplinkMessage['type'], 'resync.request'>;
export type OutboxBody<T extends OutboxType> = Extract<UplinkMessage, { type: T }>['body'];

export interface OutboxRow {
  readonly seq: number;
  readonly jti: MessageId;
  readonly type: OutboxType;
  readonly cid: CorrelationId;
  readonly body: unknown;
}

export interface LockRow extends LockoutState {
  readonly lockId: string;
  readonly doorId: string | null;
  readonly online: boolean;
  readonly bolt: string | null;
  readonly door: string | null;
  readonly battery: number | null;
  readonly stateAt: number | null;
}

export interface AccessRow {
  readonly eventId: string;
  readonly lockId: string;
  readonly requestId: string;
  readonly doorId: string | null;
  readonly at: number;
  readonly allowed: boolean;
  readonly code: string;
  readonly keyId: string | null;
  readonly keyVersion: number | null;
  readonly personId: string | null;
  readonly credentialType: string | null;
  readonly commandId: string | null;
  readonly commandExpiresAt: number | null;
  readonly holdMs: number | null;
  readonly cid: string;
}

export interface OutboxLimits {
  /** Pending rows above which non-essential rows (gateway.status, heartbeat acks) are refused. */
  readonly maxRows: number;
}

/**
 * Bounds of the diagnostic tables (not audit): lock_refusals and rejected each
 * keep their newest `…MaxRows` rows (pruned on insert) and none older than
 * `…MaxAgeMs` (pruned by the hourly purge).
 */
export interface RetentionLimits {
  readonly lockRefusalsMaxRows: number;
  readonly lockRefusalsMaxAgeMs: number;
  readonly rejectedMaxRows: number;
  readonly rejectedMaxAgeMs: number;
  /** access_log (audit, not diagnostics): pruned beyond these by the hourly purge, but only rows the cloud already has. */
  readonly accessLogMaxRows: number;
  readonly accessLogMaxAgeMs: number;
}
export const DEFAULT_RETENTION: RetentionLimits = Object.freeze({
  lockRefusalsMaxRows: 10_000,
  lockRefusalsMaxAgeMs: 30 * 24 * 3600 * 1000,
  rejectedMaxRows: 10_000,
  rejectedMaxAgeMs: 30 * 24 * 3600 * 1000,
  accessLogMaxRows: 100_000,
  accessLogMaxAgeMs: 30 * 24 * 3600 * 1000,
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

export type EnqueueResult = { readonly seq: number; readonly jti: MessageId } | { readonly refused: 'OUTBOX_FULL' };

export class GatewayStore {
  private readonly retention: RetentionLimits;
  constructor(
    readonly db: WritableDb,
    private readonly limits: OutboxLimits = { maxRows: 100_000 },
    /** Missing limits take DEFAULT_RETENTION's. */
    retention: Partial<RetentionLimits> = {},
  ) {
    this.retention = { ...DEFAULT_RETENTION, ...retention };
  }

  // ------------------------------------------------------------ settings

  settings(): Settings {
    const parsed = SettingsRow.safeParse(this.db.prepare('SELECT * FROM settings WHERE id = 1').get());
    if (!parsed.success) throw new CorruptRow('settings', parsed.error.message);
    const r = parsed.data;
    return {
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
    };
  }

  setAppliedSeq(seq: number): void {
    this.db.prepare('UPDATE settings SET applied_seq = ? WHERE id = 1').run(seq);
  }
  /** A snapshot replaced the key set as of `asOfSeq`: it is the applied seq and the snapshot seq, and it settles an open seq conflict. */
  setSnapshotApplied(asOfSeq: number): void {
    this.db.prepare('UPDATE settings SET applied_seq = ?, snapshot_seq = ?, seq_conflict_at = NULL WHERE id = 1').run(asOfSeq, asOfSeq);
  }
  /** The cloud's history differs from ours: the lease ends now (fail closed) and stays unrenewed until a snapshot. */
  markSeqConflict(at: number): void {
    this.db.prepare('UPDATE settings SET seq_conflict_at = COALESCE(seq_conflict_at, ?), lease_expires_at = NULL WHERE id = 1').run(at);
  }
  setCloudLastSeq(seq: number): void {
    this.db.prepare('UPDATE settings SET cloud_last_seq = ? WHERE id = 1').run(seq);
  }
  setBehindHeartbeat(hb: { seq: number; iatMs: number } | null): void {
    this.db.prepare('UPDATE settings SET behind_hb_seq = ?, behind_hb_iat_ms = ? WHERE id = 1').run(hb?.seq ?? null, hb?.iatMs ?? null);
  }
  setLease(expiresAt: number): void {
    this.db.prepare('UPDATE settings SET lease_expires_at = ? WHERE id = 1').run(expiresAt);
  }
  setMode(mode: SiteMode): void {
    this.db.prepare('UPDATE settings SET mode = ? WHERE id = 1').run(mode);
  }
  setLastResyncAt(at: number): void {
    this.db.prepare('UPDATE settings SET last_resync_at = ? WHERE id = 1').run(at);
  }
  /**
   * The periodic high-water update. Not fsynced (synchronous=NORMAL for this
   * commit): a power cut can lose at most the last few seconds of it, and the
   * next FULL commit (any decision or apply) makes it durable. Saves the
   * gateway's flash storage one fsync a second.
   */
  touchHighWater(now: number): void {
    this.db.pragma('synchronous = NORMAL');
    try {
      this.db.transaction(() => this.raiseTimeFloor(0, now)).immediate();
    } finally {
      this.db.pragma('synchronous = FULL');
    }
  }

  /** Raises (never lowers) the trusted-time floor. */
  raiseTimeFloor(maxIatMs: number, highWaterMs: number): void {
    this.db
      .prepare('UPDATE settings SET max_iat_ms = max(max_iat_ms, ?), high_water_ms = max(high_water_ms, ?) WHERE id = 1')
      .run(maxIatMs, highWaterMs);
  }

  // ------------------------------------------------------------ inbox

  /**
   * Inserts a verified downlink message. Duplicate jti: nothing written.
   * Guarantee: once this commits, the message will be applied (at least once
   * attempted, exactly once in effect) even if the process dies right after.
   */
  insertInbox(m: DownlinkMessage, receivedAt: number): 'inserted' | 'duplicate' {
    return this.db
      .transaction(() => {
        const r = this.db
          .prepare(
            `INSERT INTO inbox (jti, type, seq, cid, iat, message, received_at) VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (jti) DO NOTHING`,
          )
          .run(m.jti, m.type, 'seq' in m ? m.seq : null, m.cid, m.iat, JSON.stringify(m), receivedAt);
        this.raiseTimeFloor(m.iat * 1000, 0);
        return r.changes === 1 ? ('inserted' as const) : ('duplicate' as const);
      })
      .immediate();
  }

  /**
   * Records a downlink message refused by verification (never its payload)
   * with what it claimed about itself (unverified), and keeps the table to its
   * newest `rejectedMaxRows` rows in the same transaction (ids only grow and
   * only the oldest are deleted). Diagnostics, not audit: the commit skips the
   * fsync (synchronous=NORMAL, like recordLockRefusal), so a flood of garbage
   * on the downlink topic costs no flash fsync per message; a power cut loses
   * at most the last few rows. The claims are bounded by the caller's rule
   * (`readClaimsUnverified`); the slices here are a second fence only.
   */
  recordRejected(r: RejectedDownlink, at: number): void {
    const c = r.claimed;
    const write = () => {
      const { lastInsertRowid } = this.db
        .prepare(
          `INSERT INTO rejected (at, topic, code, detail, bytes, claimed_jti, claimed_cid, claimed_type, claimed_seq, claimed_issuer)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(at, r.topic.slice(0, 512), r.code.slice(0, 64), r.detail.slice(0, 500), r.bytes, c.jti?.slice(0, 36) ?? null, c.cid?.slice(0, 128) ?? null, c.type?.slice(0, 64) ?? null, c.seq, c.iss?.slice(0, 128) ?? null);
      this.db.prepare('DELETE FROM rejected WHERE id <= ?').run(Number(lastInsertRowid) - this.retention.rejectedMaxRows);
    };
    this.#writeDiagnostic(write);
  }

  /** Age bound of rejected (hourly, with the other purges). */
  purgeRejected(now: number): number {
    return this.db.prepare('DELETE FROM rejected WHERE at < ?').run(now - this.retention.rejectedMaxAgeMs).changes;
  }

  rejectedCount(): number {
    return (this.db.prepare('SELECT count(*) AS n FROM rejected').get() as { n: number }).n;
  }

  /** Claims made before a crash are released: one process owns the file, so at startup nobody else holds a claim. */
  releaseAllClaims(): void {
    this.db.prepare("UPDATE inbox SET claimed_until = NULL WHERE status = 'pending'").run();
  }

  /** Reclaims claims whose lease ran out (the claimer died or hung). */
  reclaimExpired(now: number): number {
    return this.db.prepare("UPDATE inbox SET claimed_until = NULL WHERE status = 'pending' AND claimed_until <= ?").run(now).changes;
  }

  /**
   * The next row the writer should look at, in this order: a sequenced row at
   * or below the applied seq (a duplicate to settle), the row right after the
   * applied seq, then unsequenced rows in arrival order. Claimed rows are skipped.
   */
  nextInbox(appliedSeq: number, now: number): InboxRow | null {
    const free = '(claimed_until IS NULL OR claimed_until <= @now)';
    const row =
      this.db.prepare(`SELECT * FROM inbox WHERE status = 'pending' AND seq IS NOT NULL AND seq <= @applied AND ${free} ORDER BY seq, id LIMIT 1`).get({ applied: appliedSeq, now }) ??
      this.db.prepare(`SELECT * FROM inbox WHERE status = 'pending' AND seq = @next AND ${free} ORDER BY id LIMIT 1`).get({ next: appliedSeq + 1, now }) ??
      this.db.prepare(`SELECT * FROM inbox WHERE status = 'pending' AND seq IS NULL AND ${free} ORDER BY id LIMIT 1`).get({ now });
    return row === undefined ? null : this.#inboxRow(row);
  }

  /** True when sequenced rows wait beyond a missing seq. */
  hasGap(appliedSeq: number): boolean {
    return this.db.prepare("SELECT 1 FROM inbox WHERE status = 'pending' AND seq > ? LIMIT 1").get(appliedSeq + 1) !== undefined;
  }

  /** Claim: one attempt more, with a lease. 0 rows: someone else has it. */
  claimInbox(id: number, until: number): boolean {
    return this.db.prepare("UPDATE inbox SET attempts = attempts + 1, claimed_until = ? WHERE id = ? AND status = 'pending'").run(until, id).changes === 1;
  }

  /** Mark: processed with the result the ack reports. Must run in the apply transaction. */
  markProcessed(id: number, result: string, code: string, now: number): void {
    this.db.prepare("UPDATE inbox SET status = 'processed', result = ?, code = ?, processed_at = ?, claimed_until = NULL WHERE id = ?").run(result, code, now, id);
  }

  /** Fail: release the claim with the error; after the allowed attempts the row is marked failed (visible to operators). */
  failInbox(id: number, error: string, failed: boolean, now: number): void {
    this.db
      .prepare("UPDATE inbox SET claimed_until = NULL, last_error = ?, status = CASE WHEN ? THEN 'failed' ELSE status END, code = CASE WHEN ? THEN 'APPLY_FAILED' ELSE code END, processed_at = CASE WHEN ? THEN ? ELSE processed_at END WHERE id = ?")
      .run(error.slice(0, 500), failed ? 1 : 0, failed ? 1 : 0, failed ? 1 : 0, now, id);
  }

  inboxDepth(): number {
    return (this.db.prepare("SELECT count(*) AS n FROM inbox WHERE status = 'pending'").get() as { n: number }).n;
  }

  inboxByStatus(): Record<string, number> {
    const rows = this.db.prepare('SELECT status, count(*) AS n FROM inbox GROUP BY status').all() as { status: string; n: number }[];
    return Object.fromEntries(rows.map((r) => [r.status, r.n]));
  }

  /** Purges processed inbox rows older than `olderThan` (30 days in production); failed rows stay for operators. */
  purgeProcessed(olderThan: number): number {
    return this.db.prepare("DELETE FROM inbox WHERE status = 'processed' AND processed_at < ?").run(olderThan).changes;
  }

  #inboxRow(raw: unknown): InboxRow {
    const r = raw as { id: number; jti: string; type: string; seq: number | null; cid: string; message: string; attempts: number };
    let parsed: ReturnType<typeof DownlinkMessage.safeParse>;
    try {
      parsed = DownlinkMessage.safeParse(JSON.parse(r.message));
    } catch {
      throw new CorruptRow('inbox', `id ${r.id}: unreadable message`);
    }
    if (!parsed.success) throw new CorruptRow('inbox', `id ${r.id}: ${parsed.error.message.slice(0, 200)}`);
    const message = parsed.data;
    if (message.type !== r.type || message.jti !== r.jti) throw new CorruptRow('inbox', `id ${r.id}: message does not match columns`);
    return { id: r.id, jti: r.jti, type: message.type, seq: r.seq, cid: r.cid, message, attempts: r.attempts };
  }

  // ------------------------------------------------------------ key set

  loadSlot(keyId: string): KeySlot {
    const k = this.db.prepare('SELECT version, status, grant_json FROM keys WHERE key_id = ?').get(keyId) as
      | { version: number; status: string; grant_json: string }
      | undefined;
    const t = this.db.prepare('SELECT version FROM tombstones WHERE key_id = ?').get(keyId) as { version: number } | undefined;
    return { key: k === undefined ? null : this.#candidate(k), tombstone: t?.version ?? null };
  }

  /** Writes a slot back. `grantCid` is the cid of the grant that made the key (kept for access-event attribution). */
  saveSlot(keyId: string, slot: KeySlot, grantCid: string | null, now: number): void {
    if (slot.key !== null) {
      const g = slot.key.grant;
      this.db
        .prepare(
          `INSERT INTO keys (key_id, version, status, person_id, credential_type, credential_digest, grant_json, grant_cid, updated_at)
           VALUES (@keyId, @version, @status, @personId, @type, @digest, @json, @cid, @now)
           ON CONFLICT (key_id) DO UPDATE SET version = excluded.version, status = excluded.status, person_id = excluded.person_id,
             credential_type = excluded.credential_type, credential_digest = excluded.credential_digest, grant_json = excluded.grant_json,
             grant_cid = CASE WHEN excluded.status = 'active' THEN excluded.grant_cid ELSE keys.grant_cid END, updated_at = excluded.updated_at`,
        )
        .run({ keyId, version: slot.key.version, status: slot.key.status, personId: g.personId, type: g.credential.type, digest: g.credential.digest, json: JSON.stringify(g), cid: grantCid ?? '', now });
    }
    if (slot.tombstone !== null) {
      this.db
        .prepare('INSERT INTO tombstones (key_id, version, at) VALUES (?, ?, ?) ON CONFLICT (key_id) DO UPDATE SET version = max(tombstones.version, excluded.version), at = excluded.at')
        .run(keyId, slot.tombstone, now);
    }
  }

  /** The key set as `decide` reads it. Use inside the decision transaction. */
  readonly keySet: KeySetView & { grantCid(keyId: string): string | null } = {
    byCredential: (type: CredentialType, digest: string): readonly KeyCandidate[] =>
      (this.db.prepare('SELECT version, status, grant_json FROM keys WHERE credential_type = ? AND credential_digest = ?').all(type, digest) as {
        version: number;
        status: string;
        grant_json: string;
      }[]).map((r) => this.#candidate(r)),
    grantCid: (keyId: string) => (this.db.prepare('SELECT grant_cid FROM keys WHERE key_id = ?').get(keyId) as { grant_cid: string } | undefined)?.grant_cid || null,
  };

  /** Snapshot apply: drops every active key (revoked rows and tombstones stay), to be refilled from the snapshot. */
  dropActiveKeys(): void {
    this.db.prepare("DELETE FROM keys WHERE status = 'active'").run();
  }

  keyCounts(): { active: number; revoked: number; tombstones: number } {
    const k = this.db.prepare("SELECT sum(status = 'active') AS a, sum(status = 'revoked') AS r FROM keys").get() as { a: number | null; r: number | null };
    const t = this.db.prepare('SELECT count(*) AS n FROM tombstones').get() as { n: number };
    return { active: k.a ?? 0, revoked: k.r ?? 0, tombstones: t.n };
  }

  #candidate(r: { version: number; status: string; grant_json: string }): KeyCandidate {
    const g = KeyGrant.safeParse(JSON.parse(r.grant_json));
    if (!g.success || (r.status !== 'active' && r.status !== 'revoked')) throw new CorruptRow('keys', 'invalid grant');
    return { grant: g.data, version: r.version, status: r.status };
  }

  // ------------------------------------------------------------ snapshots

  addSnapshotPart(p: { snapshotId: string; part: number; parts: number; asOfSeq: number; jti: string; cid: string; body: unknown }, now: number): number {
    this.db
      .prepare('INSERT INTO snapshot_parts (snapshot_id, part, parts, as_of_seq, jti, cid, body, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING')
      .run(p.snapshotId, p.part, p.parts, p.asOfSeq, p.jti, p.cid, JSON.stringify(p.body), now);
    return (this.db.prepare('SELECT count(*) AS n FROM snapshot_parts WHERE snapshot_id = ?').get(p.snapshotId) as { n: number }).n;
  }
  snapshotParts(snapshotId: string): { part: number; jti: string; cid: string; body: unknown }[] {
    return (this.db.prepare('SELECT part, jti, cid, body FROM snapshot_parts WHERE snapshot_id = ? ORDER BY part').all(snapshotId) as { part: number; jti: string; cid: string; body: string }[]).map(
      (r) => ({ ...r, body: JSON.parse(r.body) as unknown }),
    );
  }
  /** Drops parts of snapshots that never completed (by their newest part's arrival). */
  purgeIncompleteSnapshots(olderThan: number): number {
    return this.db.prepare('DELETE FROM snapshot_parts WHERE snapshot_id IN (SELECT snapshot_id FROM snapshot_parts GROUP BY snapshot_id HAVING max(received_at) < ?)').run(olderThan).changes;
  }
  dropSnapshot(snapshotId: string): void {
    this.db.prepare('DELETE FROM snapshot_parts WHERE snapshot_id = ?').run(snapshotId);
  }

  // ------------------------------------------------------------ locks

  /** Pairs the configured locks (door mapping from config); state columns are kept. */
  upsertLock(lockId: string, doorId: string, now: number): void {
    this.db
      .prepare('INSERT INTO locks (lock_id, door_id, updated_at) VALUES (?, ?, ?) ON CONFLICT (lock_id) DO UPDATE SET door_id = excluded.door_id')
      .run(lockId, doorId, now);
  }
  lock(lockId: string): LockRow | null {
    const r = this.db.prepare('SELECT * FROM locks WHERE lock_id = ?').get(lockId);
    return r === undefined ? null : this.#lockRow(r);
  }
  locks(): LockRow[] {
    return this.db.prepare('SELECT * FROM locks ORDER BY lock_id').all().map((r) => this.#lockRow(r));
  }
  setLockout(lockId: string, s: LockoutState, now: number): void {
    this.db.prepare('UPDATE locks SET failures = ?, locked_out_until = ?, updated_at = ? WHERE lock_id = ?').run(s.failures, s.lockedOutUntil, now, lockId);
  }
  setLockOnline(lockId: string, online: boolean, now: number): boolean {
    return this.db.prepare('UPDATE locks SET online = ?, updated_at = ? WHERE lock_id = ? AND online != ?').run(online ? 1 : 0, now, lockId, online ? 1 : 0).changes === 1;
  }
  setLockState(lockId: string, s: { bolt: string; door: string; battery: number; at: number }, now: number): void {
    this.db
      .prepare('UPDATE locks SET bolt = ?, door = ?, battery = ?, state_at = ?, updated_at = ? WHERE lock_id = ? AND (state_at IS NULL OR state_at <= ?)')
      .run(s.bolt, s.door, s.battery, s.at, now, lockId, s.at);
  }
  #lockRow(raw: unknown): LockRow {
    const r = raw as { lock_id: string; door_id: string | null; online: number; bolt: string | null; door: string | null; battery: number | null; state_at: number | null; failures: number; locked_out_until: number | null };
    return { lockId: r.lock_id, doorId: r.door_id, online: r.online === 1, bolt: r.bolt, door: r.door, battery: r.battery, stateAt: r.state_at, failures: r.failures, lockedOutUntil: r.locked_out_until };
  }

  // ------------------------------------------------------------ access log and alarms

  /** `outboxSeq`: the uplink seq of the row's access.event (retention keeps the row until that is delivered). */
  insertAccess(a: AccessRow, outboxSeq: number | null = null): void {
    this.db
      .prepare(
        `INSERT INTO access_log (event_id, lock_id, request_id, door_id, at, allowed, code, key_id, key_version, person_id, credential_type, command_id, command_expires_at, hold_ms, cid, outbox_seq)
         VALUES (@eventId, @lockId, @requestId, @doorId, @at, @allowed, @code, @keyId, @keyVersion, @personId, @credentialType, @commandId, @commandExpiresAt, @holdMs, @cid, @outboxSeq)`,
      )
      .run({ ...a, allowed: a.allowed ? 1 : 0, outboxSeq });
  }

  /**
   * Retention of the access log: rows older than `accessLogMaxAgeMs` (by
   * decision time) or beyond the newest `accessLogMaxRows` are deleted, but
   * ONLY rows whose access.event the cloud already has: a row whose outbox
   * row is still pending is kept however old, so a long outage can hold more
   * than the bound (DESIGN I2 wins; the disk headroom check bounds that).
   * An outbox row is deleted only once sent, so a row with no outbox row left
   * (or none recorded, from before 0007) was delivered.
   */
  purgeAccessLog(now: number): number {
    const overflow = this.db.prepare('SELECT id FROM access_log ORDER BY id DESC LIMIT 1 OFFSET ?').get(this.retention.accessLogMaxRows) as { id: number } | undefined;
    return this.db
      .prepare(
        `DELETE FROM access_log WHERE id IN (
           SELECT a.id FROM access_log a
           WHERE (a.at < @cutoff OR a.id <= @overflowId)
             AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.seq = a.outbox_seq AND o.acked_at IS NULL))`,
      )
      .run({ cutoff: now - this.retention.accessLogMaxAgeMs, overflowId: overflow?.id ?? -1 }).changes;
  }

  // ------------------------------------------------------------ site-wide lockout

  siteLockout(credentialType: string): SiteLockoutState {
    const r = this.db.prepare('SELECT failures, window_start, locked_out_until FROM site_lockout WHERE credential_type = ?').get(credentialType) as
      | { failures: number; window_start: number | null; locked_out_until: number | null }
      | undefined;
    return r === undefined ? noSiteLockout : { failures: r.failures, windowStart: r.window_start, lockedOutUntil: r.locked_out_until };
  }
  setSiteLockout(credentialType: string, s: SiteLockoutState, now: number): void {
    this.db
      .prepare(
        `INSERT INTO site_lockout (credential_type, failures, window_start, locked_out_until, updated_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (credential_type) DO UPDATE SET failures = excluded.failures, window_start = excluded.window_start, locked_out_until = excluded.locked_out_until, updated_at = excluded.updated_at`,
      )
      .run(credentialType, s.failures, s.windowStart, s.lockedOutUntil, now);
  }
  findAccess(lockId: string, requestId: string): AccessRow | null {
    const r = this.db.prepare('SELECT * FROM access_log WHERE lock_id = ? AND request_id = ?').get(lockId, requestId);
    return r === undefined ? null : this.#accessRow(r);
  }
  accessLog(limit = 100): AccessRow[] {
    return this.db.prepare('SELECT * FROM access_log ORDER BY id DESC LIMIT ?').all(limit).map((r) => this.#accessRow(r));
  }
  #accessRow(raw: unknown): AccessRow {
    const r = raw as Record<string, unknown>;
    return {
      eventId: r.event_id as string,
      lockId: r.lock_id as string,
      requestId: r.request_id as string,
      doorId: r.door_id as string | null,
      at: r.at as number,
      allowed: r.allowed === 1,
      code: r.code as string,
      keyId: r.key_id as string | null,
      keyVersion: r.key_version as number | null,
      personId: r.person_id as string | null,
      credentialType: r.credential_type as string | null,
      commandId: r.command_id as string | null,
      commandExpiresAt: r.command_expires_at as number | null,
      holdMs: r.hold_ms as number | null,
      cid: r.cid as string,
    };
  }

  /** Records an alarm once (by alarm id). Returns false for a redelivered alarm. */
  insertAlarm(a: { alarmId: string; lockId: string; kind: string; at: number }, now: number): boolean {
    return this.db.prepare('INSERT INTO alarms (alarm_id, lock_id, kind, at, received_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING').run(a.alarmId, a.lockId, a.kind, a.at, now).changes === 1;
  }

  /**
   * Acknowledges (closes) an alarm: sets closed_at/closed_by once. Judged by
   * rows affected: 1 is applied, 0 on an existing alarm is a noop (already
   * closed; the first acknowledgement is kept), 0 on no alarm is not_found.
   */
  ackAlarm(alarmId: string, by: string, now: number): 'applied' | 'noop' | 'not_found' {
    return this.db
      .transaction(() => {
        const r = this.db.prepare('UPDATE alarms SET closed_at = ?, closed_by = ? WHERE alarm_id = ? AND closed_at IS NULL').run(now, by.slice(0, 200), alarmId);
        if (r.changes === 1) return 'applied' as const;
        return this.db.prepare('SELECT 1 FROM alarms WHERE alarm_id = ?').get(alarmId) === undefined ? ('not_found' as const) : ('noop' as const);
      })
      .immediate();
  }

  // ------------------------------------------------------------ lock refusals

  /**
   * Records a refused lock message (never its payload) and keeps the table to
   * its newest `lockRefusalsMaxRows` rows in the same transaction: ids only
   * grow and only the oldest are deleted, so `id <= newest - max` is the
   * overflow. Diagnostics, not audit: the commit skips the fsync
   * (synchronous=NORMAL, like markSent), so a lock flooding the site broker
   * with garbage cannot cost the gateway one flash fsync per message; a power
   * cut loses at most the last few rows. Inside a caller's transaction it
   * simply joins it.
   */
  recordLockRefusal(r: LockRefusal, at: number): void {
    const write = () => {
      const { lastInsertRowid } = this.db
        .prepare('INSERT INTO lock_refusals (at, origin, lock_id, channel, topic, code, detail, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
        .run(at, r.origin, r.lockId === null ? null : r.lockId.slice(0, 128), r.channel.slice(0, 32), r.topic.slice(0, 512), r.code.slice(0, 64), r.detail.slice(0, 500), r.bytes);
      this.db.prepare('DELETE FROM lock_refusals WHERE id <= ?').run(Number(lastInsertRowid) - this.retention.lockRefusalsMaxRows);
    };
    this.#writeDiagnostic(write);
  }

  /**
   * A diagnostics row (a refusal, bounded by its own retention) commits
   * without waiting for the disk flush (synchronous=NORMAL for this one
   * transaction), so a flood of garbage cannot cost one flush per message; a
   * power cut loses at most the last few rows. Inside a caller's transaction
   * it simply joins it.
   */
  #writeDiagnostic(write: () => void): void {
    if (this.db.inTransaction) return write();
    this.db.pragma('synchronous = NORMAL');
    try {
      this.db.transaction(write).immediate();
    } finally {
      this.db.pragma('synchronous = FULL');
    }
  }

  /** Age bound of lock_refusals (hourly, with the other purges). */
  purgeLockRefusals(now: number): number {
    return this.db.prepare('DELETE FROM lock_refusals WHERE at < ?').run(now - this.retention.lockRefusalsMaxAgeMs).changes;
  }

  // ------------------------------------------------------------ outbox (uplink)

  /**
   * Enqueue: takes the next gap-free uplink seq in the caller's transaction.
   * Essential rows (acks of sequenced messages, access events, alarms) are
   * always written; non-essential rows are refused once `maxRows` rows are
   * pending, so the outbox never drops anything silently (see docs/gateway.md).
   */
  enqueue<T extends OutboxType>(type: T, body: OutboxBody<T>, cid: string, essential: boolean, now: number): EnqueueResult {
    if (!essential && this.outboxDepth() >= this.limits.maxRows) return { refused: 'OUTBOX_FULL' };
    const { next_uplink_seq: seq } = this.db.prepare('SELECT next_uplink_seq FROM settings WHERE id = 1').get() as { next_uplink_seq: number };
    const jti = newMessageId();
    this.db.prepare('INSERT INTO outbox (seq, jti, type, cid, body, essential, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)').run(seq, jti, type, cid, JSON.stringify(body), essential ? 1 : 0, now);
    this.db.prepare('UPDATE settings SET next_uplink_seq = ? WHERE id = 1').run(seq + 1);
    return { seq, jti };
  }

  /** Claim for sending: the oldest pending rows in seq order (one sender per process, so no lease is needed). */
  pendingOutbox(limit: number): OutboxRow[] {
    return (this.db.prepare("SELECT seq, jti, type, cid, body FROM outbox WHERE status = 'pending' ORDER BY seq LIMIT ?").all(limit) as { seq: number; jti: string; type: string; cid: string; body: string }[]).map((r) => ({
      seq: r.seq,
      jti: r.jti as MessageId,
      type: r.type as OutboxType,
      cid: r.cid as CorrelationId,
      body: JSON.parse(r.body) as unknown,
    }));
  }

  /** Mark: sent once the broker acked it (QoS 1 PUBACK). At-least-once: a crash before this resends with the same jti. */
  markSent(seqs: readonly number[], now: number): void {
    const stmt = this.db.prepare("UPDATE outbox SET status = 'sent', sent_at = ? WHERE seq = ? AND status = 'pending'");
    // This commit need not be durable: losing a 'sent' mark in a power cut only
    // resends the row with the same jti, which the cloud deduplicates. So it
    // skips the fsync (WAL + synchronous=NORMAL stays consistent), and the next
    // FULL commit makes it durable anyway. Every other commit stays FULL.
    this.db.pragma('synchronous = NORMAL');
    try {
      this.db.transaction(() => seqs.forEach((s) => stmt.run(now, s))).immediate();
    } finally {
      this.db.pragma('synchronous = FULL');
    }
  }

  outboxDepth(): number {
    return (this.db.prepare("SELECT count(*) AS n FROM outbox WHERE status = 'pending'").get() as { n: number }).n;
  }

  /** Rows the broker took (PUBACK) that the cloud has not acknowledged applying yet. */
  outboxUnacked(): number {
    return (this.db.prepare("SELECT count(*) AS n FROM outbox WHERE status = 'sent' AND acked_at IS NULL").get() as { n: number }).n;
  }

  /**
   * The cloud acknowledged applying every uplink up to `seq`, whose message is
   * `jti`. Only if our row at `seq` is that message (a store that was reset
   * or restored has another history under the same seqs): then every row up
   * to it is done, whether sent or waiting to be sent again. In the caller's transaction.
   */
  ackUplink(seq: number, jti: string, now: number): UplinkAckResult {
    const ours = this.db.prepare('SELECT jti FROM outbox WHERE seq = ?').get(seq) as { jti: string } | undefined;
    if (ours === undefined && seq <= this.settings().uplinkAckedSeq) return { acked: 0 }; // acknowledged before, and purged since
    if (ours?.jti !== jti) return { foreign: true, ourJti: ours?.jti ?? null };
    const r = this.db
      .prepare("UPDATE outbox SET status = 'sent', sent_at = COALESCE(sent_at, ?), acked_at = ? WHERE seq <= ? AND acked_at IS NULL")
      .run(now, now, seq);
    this.db.prepare('UPDATE settings SET uplink_acked_seq = max(uplink_acked_seq, ?) WHERE id = 1').run(seq);
    return { acked: r.changes };
  }

  /**
   * Rows the broker took longer than `sentBefore` ago that the cloud still has
   * not acknowledged go back to pending, to be sent again with the same jti
   * and seq (the broker lost them, or the cloud could not apply them yet; the
   * cloud deduplicates). In the caller's transaction. Returns how many.
   */
  requeueUnacked(sentBefore: number): number {
    return this.db.prepare("UPDATE outbox SET status = 'pending' WHERE status = 'sent' AND acked_at IS NULL AND sent_at < ?").run(sentBefore).changes;
  }

  /** Only rows the cloud acknowledged are ever deleted. */
  purgeSentOutbox(olderThan: number): number {
    return this.db.prepare('DELETE FROM outbox WHERE acked_at IS NOT NULL AND acked_at < ?').run(olderThan).changes;
  }
}
