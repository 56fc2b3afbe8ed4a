import {
  KeySetSnapshotMessage,
  asKeyId,
  assertNever,
  newCorrelationId,
  newId,
  withCorrelation,
  type MessageId,
  type Outcome,
  type ResyncReason,
  type SnapshotModes,
  type SnapshotTrustedKeys,
} from '@tobira/shared';
import { onHeartbeat } from '../domain/freshness.js';
import { applyKeySetUpdate, type TrustedKey } from '../domain/trusted-keys.js';
import { loadTrustedKeys, saveTrustedKeys } from '../adapters/sqlite/trusted-keys.js';
import { applyGrant, applyRevoke, type KeySlot } from '../domain/keyset.js';
import {
  applyInboxRow,
  claimInbox,
  failInboxRow,
  hasGap,
  nextInbox,
  reclaimExpired,
  type InboxRow,
  type Settled,
} from '../adapters/sqlite/inbox.js';
import {
  addSnapshotPart,
  dropActiveKeys,
  dropSnapshot,
  firstSnapshotField,
  loadSlot,
  saveSlot,
  snapshotPartField,
  snapshotPartList,
} from '../adapters/sqlite/keyset.js';
import { ackUplink, enqueue, requeueUnacked } from '../adapters/sqlite/outbox.js';
import {
  markSeqConflict,
  raiseTimeFloor,
  readSettings,
  setAppliedSeq,
  setBehindHeartbeat,
  setCloudLastSeq,
  setLastResyncAt,
  setLease,
  setSnapshotApplied,
} from '../adapters/sqlite/settings.js';
import { nowOf, type AppContext } from './context.js';
import { applySiteMode } from './site-mode.js';
import { applyUplinkKeyActivate, applyUplinkKeyRotate } from './uplink-keys.js';

/**
 * The inbox writer: applies pending inbox rows one at a time, sequenced rows
 * in `seq` order. It is the only code that changes the key set, the applied
 * seq and the lease. Each apply, its inbox mark and its ack(s) in the outbox
 * commit in one synchronous transaction, so a crash leaves either nothing
 * or everything (and the ack is then sent by the uplink sender).
 */
export interface ApplyOptions {
  readonly offlineGraceSeconds: number;
  /** Attempts before a row is marked failed. */
  readonly maxAttempts: number;
  /** How long a claim holds before another pass may reclaim it. */
  readonly claimLeaseMs: number;
  /** Minimum time between two resync requests. */
  readonly resyncIntervalMs: number;
  /** An uplink the broker took this long ago that a heartbeat still does not acknowledge is sent again. */
  readonly uplinkAckTimeoutMs: number;
}

export type { ResyncReason };

export interface ApplyDeps extends AppContext {
  readonly options: ApplyOptions;
  /** Sends a signed resync.request (not through the outbox: it carries no seq and the next heartbeat repeats it). */
  readonly requestResync: (reason: ResyncReason, lastAppliedSeq: number, cid: string, requestId: string) => void;
  /** Process-local rate limit of resync requests. */
  readonly resyncThrottle: { lastMono: number };
  /** Test seam: throw here to make an apply fail. */
  readonly beforeApply?: (row: InboxRow) => void;
  /** Called when a keyset.update changed the trusted cloud keys (the downlink verifier reloads them). */
  readonly trustedKeysChanged?: () => void;
  /** Called when an uplink_key.activate switched this gateway's uplink signing key (the sender re-reads it). */
  readonly uplinkKeyChanged?: () => void;
}

interface AckDraft extends Settled {
  readonly keyId: string | null;
  readonly keyVersion: number | null;
}

type RowResult = Settled & {
  readonly resync?: ResyncReason;
  readonly resyncNow?: boolean;
  /** A heartbeat's seq against ours, logged with the result: what an outside checker needs to see a lease given over a gap. */
  readonly seqs?: { readonly lastSeq: number; readonly appliedSeq: number };
};

/** Applies everything applicable now. Returns how many rows it settled. Synchronous. */
export function applyPending(deps: ApplyDeps): number {
  const { db } = deps.store;
  let settled = 0;
  for (;;) {
    const now = nowOf(deps);
    reclaimExpired(db, now);
    const settings = readSettings(db);
    const row = nextInbox(db, settings.appliedSeq, now);
    if (row === null) {
      if (hasGap(db, settings.appliedSeq)) maybeResync(deps, 'gap', newCorrelationId());
      return settled;
    }
    const log = withCorrelation(deps.log, row.cid, { jti: row.jti, type: row.type, seq: row.seq });
    if (row.attempts >= deps.options.maxAttempts) {
      // Its attempts were used up by claims that never finished: a message that kills the process
      // while being applied. Do not try it again (that would be a crash loop): fail it.
      failRow(deps, row, 'attempts exhausted by claims that never finished (process died while applying)', now, true);
      log.error({ attempts: row.attempts }, 'inbox message failed for good');
      settled++;
      continue;
    }
    if (!claimInbox(db, row.id, now + deps.options.claimLeaseMs)) continue;
    let r: RowResult;
    try {
      deps.beforeApply?.(row);
      r = applyInboxRow(db, row.id, now, () => applyRow(deps, row, now));
    } catch (e) {
      const attempts = row.attempts + 1;
      const failed = attempts >= deps.options.maxAttempts;
      deps.metrics.applyFailures.inc();
      log.error({ err: e, attempts, failed }, failed ? 'inbox message failed for good' : 'inbox apply failed; will retry');
      failRow(deps, row, e instanceof Error ? e.message : String(e), now, failed);
      if (!failed) return settled; // retried on the next pass
      continue;
    }
    // Committed: an error from here on is not a failed apply (it must not fail the row or ack it
    // refused); it reaches the caller, and the next pass goes on with the rows after this one.
    deps.crash('afterApplyBeforeAck');
    deps.metrics.applied.inc({ type: row.type, result: r.result });
    log.info({ result: r.result, code: r.code, ...r.seqs }, 'inbox message applied');
    settled++;
    deps.outboxWritten();
    if (r.resync !== undefined) maybeResync(deps, r.resync, row.cid, r.resyncNow);
  }
}

/** Releases the claim with the error; when `failed`, marks the row failed and acks it refused. */
function failRow(deps: ApplyDeps, row: InboxRow, error: string, now: number, failed: boolean): void {
  const { db } = deps.store;
  failInboxRow(db, row.id, error, failed, now, () => {
    ack(deps, row, { result: 'refused', code: 'APPLY_FAILED', ...keyOf(row) }, now);
    // A grant that cannot be applied leaves the key inactive, which is safe: move on.
    // A revoke that cannot be applied must not be skipped: the seq stays stuck, the
    // lease cannot be renewed, and the site fails closed.
    if (row.type === 'key.grant' && row.seq === readSettings(db).appliedSeq + 1) setAppliedSeq(db, row.seq);
  });
  deps.outboxWritten();
}

function keyOf(row: InboxRow): { keyId: string | null; keyVersion: number | null } {
  const m = row.message;
  switch (m.type) {
    case 'key.grant':
      return { keyId: m.body.key.keyId, keyVersion: m.body.key.version };
    case 'key.revoke':
      return { keyId: m.body.keyId, keyVersion: m.body.version };
    case 'heartbeat':
    case 'resync.answer':
    case 'keyset.snapshot':
    case 'keyset.update':
    case 'site.mode':
    case 'uplink_key.rotate':
    case 'uplink_key.activate':
      return { keyId: null, keyVersion: null };
    default:
      return assertNever(m, 'downlink type');
  }
}

/** Acks of sequenced messages and snapshots are essential; heartbeat and resync-answer acks are not (see docs/gateway.md). */
function ack(deps: ApplyDeps, row: InboxRow, a: AckDraft, now: number, ackOf: MessageId = row.jti): void {
  const essential =
    row.type === 'key.grant' ||
    row.type === 'key.revoke' ||
    row.type === 'keyset.snapshot' ||
    row.type === 'keyset.update' ||
    row.type === 'site.mode' ||
    row.type === 'uplink_key.rotate' ||
    row.type === 'uplink_key.activate';
  const r = enqueue(
    deps.store.db,
    deps.store.limits,
    'ack',
    { ackOf, ackSeq: row.seq, result: a.result, code: a.code, keyId: a.keyId === null ? null : asKeyId(a.keyId), keyVersion: a.keyVersion },
    row.cid,
    essential,
    now,
  );
  if ('refused' in r) deps.metrics.outboxRefused.inc({ type: 'ack' });
}

/** Keeps what a grant or revoke outcome left (applied or noop) and acks it; a snapshot acks every key under its first part's jti (`ackOf`). */
function settleKey(
  deps: ApplyDeps,
  row: InboxRow,
  keyId: string,
  o: Outcome<KeySlot>,
  version: number,
  grantCid: string | null,
  now: number,
  ackOf: MessageId = row.jti,
): RowResult {
  // the signer is noted for the grant that made the key, or the same grant again (a re-sign after a key rotation)
  const signerKid = o.code === 'KEY_ACTIVATED' || o.code === 'KEY_ALREADY_ACTIVE' ? row.kid : null;
  if (o.status === 'applied' || o.status === 'noop') saveSlot(deps.store.db, keyId, o.state, grantCid, now, signerKid);
  const result = o.status === 'conflict' ? 'refused' : o.status;
  ack(deps, row, { result, code: o.code, keyId, keyVersion: version }, now, ackOf);
  return { result, code: o.code };
}

/** The use case of one row, inside `applyInboxRow`'s transaction (which then marks the row and raises the time floor). */
function applyRow(deps: ApplyDeps, row: InboxRow, now: number): RowResult {
  const { db } = deps.store;
  const settings = readSettings(db);
  const m = row.message;
  let r: RowResult;
  switch (m.type) {
    case 'key.grant':
    case 'key.revoke':
    case 'keyset.update':
    case 'site.mode':
    case 'uplink_key.rotate':
    case 'uplink_key.activate': {
      if (m.seq <= settings.snapshotSeq) {
        // Covered by a snapshot (a message still in flight when the snapshot was taken): never re-applied.
        r = { result: 'noop', code: 'DUPLICATE_MESSAGE' };
        ack(deps, row, { ...r, ...keyOf(row) }, now);
        break;
      }
      if (m.seq <= settings.appliedSeq) {
        // This seq was applied here one message at a time, under another id (a redelivery of the
        // same id never reaches the inbox): the cloud handed out a seq we already used, so its
        // history and ours differ (its database was restored to an earlier point). Neither this
        // message nor our key set can be trusted against the other: fail closed and ask for a
        // snapshot. No ack: the key stays pending in the cloud until the snapshot's acks settle it.
        markSeqConflict(db, now);
        deps.metrics.seqConflicts.inc();
        withCorrelation(deps.log, m.cid, { jti: m.jti, seq: m.seq }).error(
          { code: 'SEQ_CONFLICT', appliedSeq: settings.appliedSeq, snapshotSeq: settings.snapshotSeq },
          'the cloud sent a seq this gateway already applied under another id; failing closed until a snapshot',
        );
        // the first conflict asks at once (whatever the rate limit); later ones and heartbeats keep to it
        r = { result: 'refused', code: 'SEQ_CONFLICT', resync: 'conflict', resyncNow: settings.seqConflictAt === null };
        break;
      }
      if (m.type === 'keyset.update') {
        r = applyKeySetRow(deps, row, m, now);
      } else if (m.type === 'site.mode') {
        // The same rules as a mode set at the gateway (app/site-mode.ts); passage follows on the next evaluation.
        r = applySiteMode(deps, m, now);
        ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
      } else if (m.type === 'uplink_key.rotate') {
        r = applyUplinkKeyRotate(deps, m, now);
        ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
      } else if (m.type === 'uplink_key.activate') {
        r = applyUplinkKeyActivate(deps, m, now);
        // the ack is queued after the switch: it is the first uplink signed with the new key
        ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
        if (r.result === 'applied') deps.uplinkKeyChanged?.();
      } else if (m.type === 'key.grant') {
        const g = m.body.key;
        r = settleKey(deps, row, g.keyId, applyGrant(loadSlot(db, g.keyId), g), g.version, m.cid, now);
      } else {
        r = settleKey(deps, row, m.body.keyId, applyRevoke(loadSlot(db, m.body.keyId), m.body), m.body.version, null, now);
      }
      setAppliedSeq(db, m.seq);
      break;
    }
    case 'heartbeat': {
      setCloudLastSeq(db, m.body.lastSeq);
      const foreign = settleUplinks(deps, row, m.body.uplinkAck, now);
      if (foreign) {
        // The cloud acknowledged uplinks this store does not hold: this gateway's own database was
        // restored from a backup (or reset). What it holds may predate revokes and one-time entries
        // it already acted on, so it cannot prove it is in sync: fail closed, as for a seq conflict,
        // and resync in full (a snapshot replaces the key set).
        markSeqConflict(db, now);
        deps.metrics.seqConflicts.inc();
        withCorrelation(deps.log, m.cid).error(
          { code: 'GATEWAY_RESTORED', appliedSeq: settings.appliedSeq, ackSeq: m.body.uplinkAck?.seq },
          "the cloud acknowledged uplinks this gateway's store does not have (restored from a backup?); failing closed until a snapshot",
        );
        r = { result: 'noop', code: 'SEQ_CONFLICT', resync: 'conflict', resyncNow: settings.seqConflictAt === null };
        ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
        break;
      }
      if (settings.seqConflictAt !== null) {
        // an open seq conflict: no lease until a snapshot settles it; each heartbeat asks again (rate-limited)
        r = { result: 'noop', code: 'SEQ_CONFLICT', resync: 'conflict' };
        ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
        break;
      }
      const v = onHeartbeat(
        { lastSeq: m.body.lastSeq, iatMs: m.iat * 1000 },
        settings.appliedSeq,
        settings.leaseExpiresAt,
        deps.options.offlineGraceSeconds,
      );
      if (v.kind === 'extend') {
        setLease(db, v.leaseExpiresAt);
        // Since the start no answer has proven the time (the startup request or its answer was
        // lost, or refused by the cloud's rate limit): the lease does not count yet, so ask again.
        const unproven: Pick<RowResult, 'resync'> = deps.time.proven ? {} : { resync: 'startup' };
        // The cloud names a last seq below ours: its database may have been restored to an earlier
        // point (or this heartbeat was overtaken by a newer message). Ask, so a cloud that lost our
        // history moves past it and sends its key set; the lease stands, the answer settles which.
        r =
          m.body.lastSeq < settings.appliedSeq
            ? { result: 'applied', code: 'MESSAGE_APPLIED', resync: 'ahead' }
            : { result: 'applied', code: 'MESSAGE_APPLIED', ...unproven };
      } else {
        // Behind: the cloud has handed out a seq we do not have (in flight, held in its backoff,
        // or dead-lettered). No lease from it now; we ask, and once the missing rows are applied
        // this heartbeat's proof counts (settleBehindHeartbeat).
        setBehindHeartbeat(db, { seq: m.body.lastSeq, iatMs: m.iat * 1000 });
        r = { result: 'noop', code: 'REPORT_IGNORED', resync: 'gap' };
      }
      ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
      r = { ...r, seqs: { lastSeq: m.body.lastSeq, appliedSeq: settings.appliedSeq } };
      break;
    }
    case 'resync.answer': {
      // The answer to a request this process sent proves the time after a restart (TrustedTime.proven).
      const proof = deps.time.answered(m.body.requestId, m.iat * 1000);
      if (proof.kind === 'proven') {
        raiseTimeFloor(db, 0, proof.floorMs);
        // the answer names the cloud's last seq: a store behind it (restored from a backup, or off while messages
        // were sent) is behind until the replay or snapshot that follows is applied, whatever lease it holds
        deps.time.catchUp(m.body.toSeq, settings.appliedSeq);
        if (m.body.toSeq > settings.appliedSeq && (settings.cloudLastSeq ?? 0) < m.body.toSeq) setCloudLastSeq(db, m.body.toSeq);
        withCorrelation(deps.log, m.cid).info(
          { code: 'TIME_PROVEN', floorMs: proof.floorMs, roundTripMs: proof.roundTripMs },
          'the cloud answered our resync: trusted time proven',
        );
      } else if (proof.kind === 'late') {
        withCorrelation(deps.log, m.cid).warn(
          { code: 'TIME_PROOF_LATE', roundTripMs: proof.roundTripMs },
          'the answer to our resync came too late to prove the time; asking again',
        );
      }
      r = { result: 'applied', code: 'MESSAGE_APPLIED' };
      ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
      break;
    }
    case 'keyset.snapshot':
      r = applySnapshotPart(deps, row, m, now);
      break;
    default:
      return assertNever(m, 'downlink type');
  }
  settleBehindHeartbeat(deps, row.cid);
  return r;
}

/**
 * A heartbeat that found us behind proves freshness as of its `iat` once
 * everything up to its seq is applied: the lease it would have given is
 * granted then (never beyond iat + grace, so never longer than in order).
 */
function settleBehindHeartbeat(deps: ApplyDeps, cid: string): void {
  const { db } = deps.store;
  const s = readSettings(db);
  const hb = s.behindHeartbeat;
  if (hb === null || s.appliedSeq < hb.seq || s.seqConflictAt !== null) return;
  const v = onHeartbeat({ lastSeq: hb.seq, iatMs: hb.iatMs }, s.appliedSeq, s.leaseExpiresAt, deps.options.offlineGraceSeconds);
  if (v.kind === 'extend') {
    setLease(db, v.leaseExpiresAt);
    // the same fields as a heartbeat's apply line: a lease given here is a renewal too
    withCorrelation(deps.log, cid).info(
      { lastSeq: hb.seq, appliedSeq: s.appliedSeq, leaseExpiresAt: v.leaseExpiresAt },
      'behind heartbeat settled: lease extended',
    );
  }
  setBehindHeartbeat(db, null);
}

/**
 * The heartbeat's uplink acknowledgement: rows up to its seq are done. On
 * every heartbeat, with an acknowledgement or not, rows the broker took over
 * `uplinkAckTimeoutMs` ago and still not acknowledged go again (the broker
 * lost them, or the cloud could not apply them, or its pointer restarted
 * after our restore and names no message yet: our resends are what move it
 * on). An acknowledgement of another history (our store was reset or
 * restored) is ignored: our rows stay and are sent again, and the cloud
 * restarts its count. True for such an acknowledgement: the caller fails
 * closed and resyncs in full.
 */
function settleUplinks(deps: ApplyDeps, row: InboxRow, a: { seq: number; jti: string } | undefined, now: number): boolean {
  const r = a === undefined ? { acked: 0 } : ackUplink(deps.store.db, a.seq, a.jti, now);
  if (a !== undefined && 'foreign' in r) {
    withCorrelation(deps.log, row.cid).warn(
      { code: 'UPLINK_ACK_FOREIGN', ackSeq: a.seq, ackJti: a.jti, ourJti: r.ourJti },
      'the cloud acknowledged an uplink that is not ours at that seq; nothing dropped',
    );
  }
  const again = requeueUnacked(deps.store.db, now - deps.options.uplinkAckTimeoutMs, now);
  if (again > 0) {
    deps.metrics.uplinkResent.inc(again);
    withCorrelation(deps.log, row.cid).warn(
      { code: 'UPLINK_UNACKED', rows: again, ackedSeq: a?.seq ?? null },
      'uplinks the cloud has not acknowledged are sent again',
    );
  }
  return 'foreign' in r;
}

/**
 * A keyset.update (signing-key rotation): the trusted cloud keys change in
 * this transaction, in seq order with the grants around it; acked like a
 * grant. Refused (KEYSET_KID_RETIRED, KEYSET_SELF_RETIRE,
 * KEYSET_WOULD_BE_EMPTY, INVALID_PUBLIC_KEY): nothing changes, the seq moves on.
 */
function applyKeySetRow(
  deps: ApplyDeps,
  row: InboxRow,
  m: Extract<InboxRow['message'], { type: 'keyset.update' }>,
  now: number,
): RowResult {
  const o = applyKeySetUpdate(loadTrustedKeys(deps.store.db), m.body, row.kid, now);
  if (o.status === 'applied') {
    saveTrustedKeys(deps.store.db, o.state);
    deps.trustedKeysChanged?.();
    withCorrelation(deps.log, row.cid, { jti: row.jti, seq: row.seq }).info(
      {
        code: o.code,
        trusted: o.state.filter((k) => k.status === 'trusted').map((k) => k.kid),
        retired: o.state.filter((k) => k.status === 'retired').map((k) => k.kid),
      },
      'trusted cloud keys changed',
    );
  } else if (o.status === 'refused') {
    withCorrelation(deps.log, row.cid, { jti: row.jti, seq: row.seq }).warn({ code: o.code, detail: o.detail }, 'keyset.update refused');
  }
  const r: RowResult = { result: o.status === 'conflict' ? 'refused' : o.status, code: o.code };
  ack(deps, row, { ...r, keyId: null, keyVersion: null }, now);
  return r;
}

type SnapshotMessage = Extract<InboxRow['message'], { type: 'keyset.snapshot' }>;
/** The schema a part's body was verified with on arrival: its fields are read back with their part of it. */
const SnapshotBody = KeySetSnapshotMessage.shape.body.shape;

/**
 * Parts are kept until all have arrived; then the key set is replaced at once
 * (in this one transaction) and every key and tombstone is acked. The parts
 * are read back one at a time, a field at a time (a 100,000-key
 * snapshot held as objects all at once cost hundreds of MB): the tombstones
 * of every part, then the keys of every part.
 */
function applySnapshotPart(deps: ApplyDeps, row: InboxRow, m: SnapshotMessage, now: number): RowResult {
  const { db } = deps.store;
  const b = m.body;
  const count = addSnapshotPart(
    db,
    { snapshotId: b.snapshotId, part: b.part, parts: b.parts, asOfSeq: b.asOfSeq, jti: m.jti, cid: m.cid, body: b },
    now,
  );
  if (count < b.parts) return { result: 'applied', code: 'MESSAGE_APPLIED' };
  const id = b.snapshotId;
  const parts = snapshotPartList(db, id);
  if (b.asOfSeq < readSettings(db).appliedSeq) {
    dropSnapshot(db, id);
    return { result: 'noop', code: 'STALE_VERSION' };
  }
  const first = parts[0];
  const ackOf = first?.jti ?? m.jti;
  const cid = first?.cid ?? m.cid;
  const snapRow: InboxRow = { ...row, seq: null, cid };
  const appliedBefore = readSettings(db).appliedSeq;
  // The trusted cloud keys first: the grants below are noted under the snapshot's signer.
  const trusted = firstSnapshotField(db, id, 'trustedKeys', SnapshotBody.trustedKeys);
  const keyset = trusted === undefined ? null : applySnapshotKeySet(deps, snapRow, trusted, now);
  // Tombstones first, while the keys they revoke still have their rows (so doors can still say KEY_REVOKED).
  for (const p of parts) {
    for (const t of snapshotPartField(db, id, p.part, 'revoked', SnapshotBody.revoked)) {
      const o = applyRevoke(loadSlot(db, t.keyId), { keyId: t.keyId, version: t.version, reason: 'staff_revoked' });
      settleKey(deps, snapRow, t.keyId, o, t.version, null, now, ackOf);
    }
  }
  // Then the active set is exactly the snapshot's keys (tombstones still hold back stale versions).
  dropActiveKeys(db);
  for (const p of parts) {
    for (const g of snapshotPartField(db, id, p.part, 'keys', SnapshotBody.keys)) {
      settleKey(deps, snapRow, g.keyId, applyGrant(loadSlot(db, g.keyId), g), g.version, cid, now, ackOf);
    }
  }
  // The modes the cloud set in site.mode rows this snapshot skipped (their seq past what we had applied).
  const modes = firstSnapshotField(db, id, 'modes', SnapshotBody.modes);
  if (modes !== undefined) applySnapshotModes(deps, snapRow, modes, appliedBefore, now);
  dropSnapshot(db, id);
  setSnapshotApplied(db, b.asOfSeq);
  // The ack of the snapshot as a whole (the cloud settles the mode requests and key deliveries it
  // covered): SNAPSHOT_APPLIED, or refused with the code of its trusted-key set's refusal.
  const whole: AckDraft =
    keyset?.status === 'refused'
      ? { result: 'refused', code: keyset.code, keyId: null, keyVersion: null }
      : { result: 'applied', code: 'SNAPSHOT_APPLIED', keyId: null, keyVersion: null };
  ack(deps, snapRow, whole, now, ackOf);
  return { result: 'applied', code: 'MESSAGE_APPLIED' };
}

/**
 * A snapshot's trusted cloud keys, applied like a keyset.update signed by the
 * snapshot's signer, idempotently: a kid already trusted or retired is
 * unchanged, a kid retired here is never trusted again (its add is dropped,
 * not refused), and a set that retires the snapshot's own signer (or leaves
 * no key) is refused whole: the trusted keys stay as they were, the rest of
 * the snapshot applies.
 */
function applySnapshotKeySet(deps: ApplyDeps, row: InboxRow, t: SnapshotTrustedKeys, now: number): Outcome<readonly TrustedKey[]> {
  const have = loadTrustedKeys(deps.store.db);
  const retiredHere = new Set(have.filter((k) => k.status === 'retired').map((k) => k.kid));
  const o = applyKeySetUpdate(have, { add: t.add.filter((a) => !retiredHere.has(a.jwk.kid)), retire: t.retire }, row.kid, now);
  const log = withCorrelation(deps.log, row.cid, { jti: row.jti });
  if (o.status === 'applied') {
    saveTrustedKeys(deps.store.db, o.state);
    deps.trustedKeysChanged?.();
    const after = loadTrustedKeys(deps.store.db);
    log.info(
      {
        code: o.code,
        trusted: after.filter((k) => k.status === 'trusted').map((k) => k.kid),
        retired: after.filter((k) => k.status === 'retired').map((k) => k.kid),
      },
      'trusted cloud keys changed by a resync snapshot',
    );
  } else if (o.status === 'refused') {
    log.error(
      { code: o.code, detail: o.detail, signedBy: row.kid },
      "a resync snapshot's trusted cloud keys refused; the trusted keys stay as they were",
    );
  }
  return o;
}

/**
 * A snapshot's modes: the site mode and each door's passage schedule whose
 * site.mode seq is past `appliedBefore` (the snapshot skipped that message)
 * are written as that message would have written them (origin `cloud`, its
 * operator and request id); older ones were applied here already and are
 * left alone, so a mode set at the gateway since then stands.
 */
function applySnapshotModes(deps: ApplyDeps, row: InboxRow, modes: SnapshotModes, appliedBefore: number, now: number): void {
  const mode = modes.mode !== null && modes.mode.seq > appliedBefore ? modes.mode : null;
  const passage = modes.passage.filter((p) => p.seq > appliedBefore);
  if (mode !== null)
    applySiteMode(
      deps,
      { cid: row.cid, body: { requestId: mode.requestId, mode: mode.mode, passage: [], by: mode.by, reason: mode.reason } },
      now,
    );
  for (const p of passage)
    applySiteMode(
      deps,
      {
        cid: row.cid,
        body: { requestId: p.requestId, mode: null, passage: [{ doorId: p.doorId, schedule: p.schedule }], by: p.by, reason: p.reason },
      },
      now,
    );
}

/**
 * Asks the cloud for a resync at most once per `resyncIntervalMs` of process
 * time (a rate limit, so it runs on the monotonic clock, not on trusted time);
 * `now` skips the limit (the first connect, a first seq conflict). Each
 * request's id is recorded: its answer proves the time after a restart.
 */
export function maybeResync(deps: ApplyDeps, reason: ResyncReason, cid: string, now = false): void {
  const mono = performance.now();
  if (!now && mono - deps.resyncThrottle.lastMono < deps.options.resyncIntervalMs) return;
  deps.resyncThrottle.lastMono = mono;
  const s = readSettings(deps.store.db);
  setLastResyncAt(deps.store.db, nowOf(deps));
  const requestId = newId();
  deps.time.asked(requestId);
  withCorrelation(deps.log, cid).info({ reason, lastAppliedSeq: s.appliedSeq, requestId }, 'requesting resync');
  deps.requestResync(reason, s.appliedSeq, cid, requestId);
}
