import type { DownlinkMessage } from '@tobira/shared';
import type { KeySlot } from '../../domain/keyset.js';
import type { LockoutState, SiteLockoutState } from '../../domain/lockout.js';
import * as access from './access-log.js';
import * as alarms from './alarms.js';
import type { WritableDb } from './db.js';
import * as diag from './diagnostics.js';
import * as inbox from './inbox.js';
import * as keys from './keyset.js';
import * as locks from './locks.js';
import * as outbox from './outbox.js';
import * as trusted from './trusted-keys.js';
import { readSettings } from './settings.js';

export { CorruptRow } from '@tobira/shared';
export type { Settings } from './settings.js';
export type { InboxRow } from './inbox.js';
export type { StoredAccessEvent } from './access-log.js';
export type { LockRow } from './locks.js';
export type { OutboxLimits, OutboxType, OutboxBody, OutboxRow, EnqueueResult, UplinkAckResult } from './outbox.js';
export { DEFAULT_RETENTION, type RetentionLimits, type RejectedDownlink, type LockRefusal } from './diagnostics.js';

/**
 * The opened store: the writable handle and the bounds its tables keep
 * (outbox depth, diagnostics and access-log retention). The SQL lives in one
 * module per table (settings, inbox, keyset, locks, alarms, access-log,
 * outbox, diagnostics); the daemon's code calls those, and the writers there
 * own their transactions. The one-line methods below are the same verbs
 * bound to this handle, for tests and for the e2e suites that look into a
 * running gateway (`gateway.store`).
 */
export class GatewayStore {
  readonly retention: diag.RetentionLimits;
  constructor(
    readonly db: WritableDb,
    readonly limits: outbox.OutboxLimits = outbox.DEFAULT_OUTBOX_LIMITS,
    /** Missing limits take DEFAULT_RETENTION's. */
    retention: Partial<diag.RetentionLimits> = {},
  ) {
    this.retention = { ...diag.DEFAULT_RETENTION, ...retention };
  }

  settings = () => readSettings(this.db);
  /** The cloud keys this gateway trusts, and the retired ones (signing-key rotation). */
  trustedKeys = () => trusted.loadTrustedKeys(this.db);
  insertInbox = (m: DownlinkMessage, receivedAt: number) => inbox.insertInbox(this.db, m, receivedAt);
  nextInbox = (appliedSeq: number, now: number) => inbox.nextInbox(this.db, appliedSeq, now);
  claimInbox = (id: number, until: number) => inbox.claimInbox(this.db, id, until);
  markProcessed = (id: number, result: string, code: string, now: number) => inbox.markProcessed(this.db, id, result, code, now);
  failInbox = (id: number, error: string, failed: boolean, now: number) => inbox.failInbox(this.db, id, error, failed, now);
  reclaimExpired = (now: number) => inbox.reclaimExpired(this.db, now);
  releaseAllClaims = () => inbox.releaseAllClaims(this.db);
  inboxDepth = () => inbox.inboxDepth(this.db);
  inboxByStatus = () => inbox.inboxByStatus(this.db);
  purgeProcessed = (olderThan: number) => inbox.purgeProcessed(this.db, olderThan);
  loadSlot = (keyId: string): KeySlot => keys.loadSlot(this.db, keyId);
  keyCounts = () => keys.keyCounts(this.db);
  addSnapshotPart = (p: Parameters<typeof keys.addSnapshotPart>[1], now: number) => keys.addSnapshotPart(this.db, p, now);
  snapshotParts = (snapshotId: string) => keys.snapshotPartList(this.db, snapshotId);
  purgeIncompleteSnapshots = (olderThan: number) => keys.purgeIncompleteSnapshots(this.db, olderThan);
  upsertLock = (lockId: string, doorId: string, now: number) => locks.upsertLock(this.db, lockId, doorId, now);
  lock = (lockId: string) => locks.lockById(this.db, lockId);
  locks = () => locks.allLocks(this.db);
  setLockout = (lockId: string, s: LockoutState, now: number) => locks.setLockout(this.db, lockId, s, now);
  setLockOnline = (lockId: string, online: boolean, now: number) => locks.setLockOnline(this.db, lockId, online, now);
  setLockState = (lockId: string, s: Parameters<typeof locks.recordLockState>[2], now: number) =>
    locks.recordLockState(this.db, lockId, s, now);
  siteLockout = (credentialType: string) => locks.siteLockout(this.db, credentialType);
  setSiteLockout = (credentialType: string, s: SiteLockoutState, now: number) => locks.setSiteLockout(this.db, credentialType, s, now);
  insertAlarm = (a: Parameters<typeof alarms.insertAlarm>[1], now: number) => alarms.insertAlarm(this.db, a, now);
  ackAlarm = (alarmId: string, by: string, now: number) => alarms.ackAlarm(this.db, alarmId, by, now);
  insertAccess = (a: access.StoredAccessEvent, outboxSeq: number | null = null) => access.insertAccess(this.db, a, outboxSeq);
  findAccess = (lockId: string, requestId: string) => access.findAccess(this.db, lockId, requestId);
  accessLog = (limit?: number) => access.accessLog(this.db, limit);
  purgeAccessLog = (now: number) =>
    access.purgeAccessLog(this.db, now, { maxRows: this.retention.accessLogMaxRows, maxAgeMs: this.retention.accessLogMaxAgeMs });
  enqueue = <T extends outbox.OutboxType>(type: T, body: outbox.OutboxBody<T>, cid: string, essential: boolean, now: number) =>
    outbox.enqueue(this.db, this.limits, type, body, cid, essential, now);
  pendingOutbox = (limit: number) => outbox.pendingOutbox(this.db, limit);
  markSent = (seqs: readonly number[], now: number) => outbox.markSent(this.db, seqs, now);
  outboxDepth = () => outbox.outboxDepth(this.db);
  outboxUnacked = () => outbox.outboxUnacked(this.db);
  ackUplink = (seq: number, jti: string, now: number) => outbox.ackUplink(this.db, seq, jti, now);
  requeueUnacked = (sentBefore: number, now: number) => outbox.requeueUnacked(this.db, sentBefore, now);
  purgeSentOutbox = (olderThan: number) => outbox.purgeSentOutbox(this.db, olderThan);
  recordRejected = (r: diag.RejectedDownlink, at: number) => diag.recordRejected(this.db, this.retention.rejectedMaxRows, r, at);
  purgeRejected = (now: number) => diag.purgeRejected(this.db, now, this.retention.rejectedMaxAgeMs);
  rejectedCount = () => diag.rejectedCount(this.db);
  recordLockRefusal = (r: diag.LockRefusal, at: number) => diag.recordLockRefusal(this.db, this.retention.lockRefusalsMaxRows, r, at);
  purgeLockRefusals = (now: number) => diag.purgeLockRefusals(this.db, now, this.retention.lockRefusalsMaxAgeMs);
}
