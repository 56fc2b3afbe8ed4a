import {
  KeySet,
  Presence,
  UplinkEnvelope,
  type UplinkMessage,
  checkUplinkBatch,
  asGatewayId,
  asKeyId,
  filters,
  parsePayload,
  parseTopic,
  fullBucket,
  takeToken,
  verifyMessage,
  withCorrelation,
  type Bucket,
  type RatePolicy,
  type MessageOf,
  type OutcomeCode,
  type BatchableUplink,
  type UplinkBatchMessage,
} from '@tobira/shared';
import { insertAccessEvent, insertAlarm, namesAnotherGateway } from '../adapters/db/audit.js';
import { insertStaffAction } from '../adapters/db/staff-actions.js';
import { settleModeRequest } from '../adapters/db/modes.js';
import { settleSnapshotAck } from '../adapters/db/snapshots.js';
import { pgErrorCode, type Queryable } from '../adapters/db/db.js';
import { recordClockSkew, recordPresence, recordStatus } from '../adapters/db/gateways.js';
import { uplinkKeys } from '../adapters/db/uplink-keys.js';
import {
  advanceUplinkAck,
  claimInbox,
  lockUplinkSeq,
  lockUplinkSeqRow,
  noteUplinkSeq,
  saveUplinkSeq,
  seqsTakenByOthers,
  recordInboxResult,
  recordRejected,
  resetUplinkAck,
  restartUplinkAck,
  clearLostUplinks,
  seqTakenByOther,
  type UplinkSeqRow,
} from '../adapters/db/uplinks.js';
import type { MqttLink } from '../adapters/mqtt/link.js';
import type { CloudSigner } from '../adapters/signer.js';
import { SimulatedCrash } from './crash.js';
import type { AppDeps } from './deps.js';
import { noTelemetry, type Telemetry } from './telemetry.js';
import { recordGatewayReport, recordKeyUse } from './keys.js';
import { answerResync } from './resync.js';
import { recordDeliveryAck } from '../adapters/db/signing-keys.js';
import { applyUplinkKeyProposal, noteUplinkKid } from './uplink-keys.js';

/**
 * Codes of rejected uplinks: every verification code of shared VERIFY_CODES,
 * every batch code of shared UPLINK_BATCH_CODES (a batch rejected as a whole),
 * plus the ones only the cloud inbox can tell.
 */
export const UPLINK_REJECT_CODES = Object.freeze({
  BAD_TOPIC: 'The topic is not a gateway uplink topic.',
  UNKNOWN_GATEWAY: 'No gateway with the id in the topic is registered.',
  APPLY_FAILED: 'The message verified, but the database refused its data (it would fail the same way on every redelivery).',
});

const DEFAULT_RESYNC_RATE: RatePolicy = { burst: 5, perSecond: 0.5 };
const DEFAULT_REJECTED_MAX_ROWS = 10_000;

/** A gateway clock further off than this is logged (CLOCK_SKEW); its messages are applied all the same. */
export const SKEW_WARN_MS = 60_000;
const SKEW_RESOLUTION_MS = 1_000;
const SKEW_REFRESH_MS = 60_000;

export interface UplinkOptions {
  /** Where uplinks come in (a replica's inbox link). */
  readonly link: MqttLink;
  /** Where resync answers go out (a replica's publishing link); default: `link`. */
  readonly publishLink?: MqttLink;
  readonly signer: CloudSigner;
  readonly replayMax: number;
  readonly publishTimeoutMs: number;
  /** Resync requests answered per gateway (default: burst 5, then one every 2 s). */
  readonly resyncRate?: RatePolicy;
  /** Resync answers built at once across all gateways (default 4). */
  readonly resyncMaxConcurrent?: number;
  /** rejected_uplinks keeps at most this many rows, the newest (default 10,000; the purge also drops them by age). */
  readonly rejectedMaxRows?: number;
  /** Uplinks by result and code (GET /metrics); default: reported nowhere. */
  readonly telemetry?: Telemetry;
}

/** The key a verified message was signed with, and the gateway's keys it was checked against. */
type SignedBy = { kid: string; keys: GatewayKeys };
type Sequenced = Exclude<UplinkMessage, { type: 'resync.request' }>;
type Applied = { result: 'applied' | 'noop' | 'refused'; code: string; wake?: boolean };
/** A gateway's accepted uplink keys as last read (current and previous), and its retired kids. */
type GatewayKeys = { keys: KeySet; retired: ReadonlySet<string>; at: number };
/** A kid not in the cached keys re-reads them, at most this often per gateway (a rotation on another replica). */
const KEY_RELOAD_MS = 1_000;
/** A batch's view of the gateway's seq row while its items are applied (null: no row yet). */
type BatchSeq = { row: UplinkSeqRow | null; received: number };

/**
 * The uplink inbox. Every message on `gw/+/up` is verified against the
 * registered key of the gateway named in the topic (issuer = that gateway,
 * audience = the cloud); a bad one is recorded in rejected_uplinks with its
 * code, logged, and never applied. A good one is deduplicated by jti in the
 * same transaction as its effect. The MQTT PUBACK goes out after the commit.
 */
export class Uplink {
  readonly #app: AppDeps;
  readonly #o: UplinkOptions;
  readonly #keys = new Map<string, GatewayKeys>();
  readonly #skew = new Map<string, { skewMs: number; at: number }>();
  /** Per gateway: resync requests it may still have answered (RESYNC_BURST, RESYNC_PER_MINUTE). */
  readonly #resyncBuckets = new Map<string, Bucket>();
  /** Gateways whose resync answer is being built and published now: one at a time each. */
  readonly #answering = new Set<string>();
  readonly #pending = new Set<Promise<void>>();

  constructor(app: AppDeps, o: UplinkOptions) {
    this.#app = app;
    this.#o = o;
  }

  #onSubscribed: () => void = () => {};
  /** Resolves after the first successful subscription. */
  readonly subscribed = new Promise<void>((resolve) => {
    this.#onSubscribed = resolve;
  });

  /** Registers the handler (before anything can arrive) and subscribes on every connect. */
  start(): void {
    this.#o.link.onMessage((topic, payload) => this.handle(topic, payload));
    const subscribe = () =>
      Promise.all([this.#o.link.subscribe(filters.allGatewaysUp), this.#o.link.subscribe(filters.allGatewaysPresence)]).then(
        () => this.#onSubscribed(),
        (e: unknown) => this.#app.log.warn({ err: String(e) }, 'subscribe failed; retried on the next connect'),
      );
    this.#o.link.onConnect(() => void subscribe());
    if (this.#o.link.connected) void subscribe();
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#pending]);
  }

  /** Handles one incoming message. Throws only when the database is unreachable (then no PUBACK: the broker redelivers). */
  async handle(topic: string, payload: Buffer): Promise<void> {
    const t = parseTopic(topic);
    if (t?.kind === 'gateway' && t.channel === 'presence') return this.#presence(t.gatewayId, payload);
    if (t?.kind !== 'gateway' || t.channel !== 'up') return this.#reject(null, topic, 'BAD_TOPIC', 'not a gateway uplink topic');
    const gatewayId = t.gatewayId;
    let keys = await this.#keysOf(gatewayId);
    if (!keys) return this.#reject(gatewayId, topic, 'UNKNOWN_GATEWAY', `gateway ${gatewayId}`);
    // anySkew: a verified, correctly addressed message is never dropped for the gateway's clock
    // (its access events would be lost for good); the skew is recorded instead, and replays are
    // refused by the jti dedupe below.
    const verify = (k: GatewayKeys) =>
      verifyMessage(payload, {
        keys: k.keys,
        retiredKids: k.retired,
        issuer: gatewayId,
        audience: this.#o.signer.issuer,
        schema: UplinkEnvelope,
        clock: this.#app.clock,
        anySkew: true,
      });
    let v = await verify(keys);
    if (!v.ok && v.code === 'UNKNOWN_KID' && this.#app.clock.now() - keys.at >= KEY_RELOAD_MS) {
      // the gateway's key may have been rotated through another replica since we read it
      this.#keys.delete(gatewayId);
      keys = await this.#keysOf(gatewayId);
      if (!keys) return this.#reject(gatewayId, topic, 'UNKNOWN_GATEWAY', `gateway ${gatewayId}`);
      v = await verify(keys);
    }
    if (!v.ok) return this.#reject(gatewayId, topic, v.code, v.detail);
    const signed = { kid: v.kid, keys };
    if (v.message.type === 'uplink.batch') return this.#handleBatch(gatewayId, topic, v.message, signed);
    return this.#handleOne(gatewayId, topic, v.message, signed);
  }

  /**
   * The key a verified message was signed with, checked against the table in
   * the message's transaction (not this replica's cache): a retired kid is
   * refused, and the first message under a rotated key retires the old one.
   */
  async #noteKid(tx: Queryable, gatewayId: string, kid: string, now: number): Promise<{ refusedKid: string } | { retired: string | null }> {
    const k = await noteUplinkKid(tx, gatewayId, kid, now);
    return k.ok ? { retired: k.retired } : { refusedKid: k.code };
  }

  /** After a message's transaction: a refused kid is rejected; a rotation that took effect is logged and the cached keys dropped. Returns true when rejected. */
  async #afterKid(
    gatewayId: string,
    topic: string,
    signed: SignedBy,
    noted: { refusedKid: string } | { retired: string | null },
    wake: boolean,
    log: AppDeps['log'],
  ): Promise<boolean> {
    if ('refusedKid' in noted) {
      this.#keys.delete(gatewayId);
      await this.#reject(gatewayId, topic, noted.refusedKid, `kid ${signed.kid.slice(0, 80)}`, log);
      return true;
    }
    if (noted.retired !== null)
      log.warn(
        { code: 'UPLINK_KEY_ACTIVATED', retiredKid: noted.retired, kid: signed.kid },
        'gateway uplink key rotated; the old key is retired',
      );
    // the gateway's keys changed (a proposal accepted, the old key retired), or it signed with one not current: read them again
    if (noted.retired !== null || signed.kid !== signed.keys.keys.kids[0] || wake) this.#keys.delete(gatewayId);
    if (wake) this.#app.wake();
    return false;
  }

  /** One verified uplink message, applied in its own transaction. */
  async #handleOne(gatewayId: string, topic: string, m: UplinkMessage, signed: SignedBy): Promise<void> {
    const log = withCorrelation(this.#app.log, m.cid, { gatewayId, jti: m.jti, type: m.type });
    const now = this.#app.clock.now();
    let noted: { refusedKid: string } | { retired: string | null } = { retired: null };
    const outcome = await this.#withRetry(log, () =>
      this.#app.db.transaction(async (tx): Promise<Applied | 'duplicate' | 'refusedKid'> => {
        noted = await this.#noteKid(tx, gatewayId, signed.kid, now);
        if ('refusedKid' in noted) return 'refusedKid';
        return this.#applyInTx(tx, gatewayId, m, now, log, signed.kid);
      }),
    ).catch(unstorable);
    if (outcome === 'unstorable') return this.#reject(gatewayId, topic, 'APPLY_FAILED', `jti ${m.jti}: the database refused its data`, log);
    if (
      await this.#afterKid(
        gatewayId,
        topic,
        signed,
        noted,
        outcome !== 'duplicate' && outcome !== 'refusedKid' && outcome.wake === true,
        log,
      )
    )
      return;
    if (outcome === 'refusedKid') return;

    this.#report(log, outcome);
    if (outcome === 'duplicate') return;
    await this.#recordSkew(gatewayId, m.iat * 1000 - now, now, log);
    if (m.type === 'resync.request' && outcome.result === 'applied') {
      // One answer at a time per gateway, and a bounded number across gateways: a request
      // that finds either busy is dropped (logged); the gateway asks again on its next heartbeat.
      if (this.#answering.has(gatewayId) || this.#answering.size >= (this.#o.resyncMaxConcurrent ?? 4)) {
        log.warn(
          { code: 'RESYNC_BUSY', answering: this.#answering.size },
          'resync request not answered now (one in flight); the gateway asks again',
        );
        return;
      }
      this.#answering.add(gatewayId);
      // Answered outside the incoming-message pipeline: mqtt.js handles no
      // PUBACK while a handler is pending, so publishing from inside it would wait on itself.
      const p: Promise<void> = answerResync(this.#app, { ...this.#o, link: this.#o.publishLink ?? this.#o.link }, gatewayId, m)
        .then(() => undefined)
        .catch((e: unknown) => log.warn({ err: String(e) }, 'resync answer not sent; the gateway asks again'))
        .finally(() => {
          this.#answering.delete(gatewayId);
          this.#pending.delete(p);
        });
      this.#pending.add(p);
    }
  }

  /**
   * A verified batch: its items are checked as a whole (a batch
   * with a gap, a decrease, a duplicate item, a type that is never batched or
   * an item its own schema refuses is rejected with its code, and nothing of
   * it is applied), then applied in seq order in ONE transaction, each item
   * exactly as if it had come alone: deduplicated by its jti (a resend that
   * overlaps what was applied applies only the new items), its seq tracked,
   * the acknowledgement pointer walked on. The PUBACK goes out after the commit.
   * An item the database refuses as data would fail the whole transaction
   * forever: the items are then applied one at a time, as singles are, so only
   * that item is recorded APPLY_FAILED.
   */
  async #handleBatch(gatewayId: string, topic: string, batch: UplinkBatchMessage, signed: SignedBy): Promise<void> {
    const log = withCorrelation(this.#app.log, batch.cid, { gatewayId, jti: batch.jti, type: batch.type });
    const checked = checkUplinkBatch(batch);
    if (!checked.ok) return this.#reject(gatewayId, topic, checked.code, `batch ${batch.jti}: ${checked.detail}`, log);
    const items = checked.items.map((m) => ({
      m,
      log: withCorrelation(this.#app.log, m.cid, { gatewayId, jti: m.jti, type: m.type, batch: batch.jti }),
    }));
    const now = this.#app.clock.now();
    let noted: { refusedKid: string } | { retired: string | null } = { retired: null };
    const outcomes = await this.#withRetry(log, () =>
      this.#app.db.transaction(async (tx): Promise<(Applied | 'duplicate')[] | 'refusedKid'> => {
        noted = await this.#noteKid(tx, gatewayId, signed.kid, now);
        if ('refusedKid' in noted) return 'refusedKid';
        // The seq row is locked once and written once for the whole batch; in between, each item
        // moves it in memory exactly as #trackSeq / #advanceAck would (tested against the same rules).
        const row = await lockUplinkSeqRow(tx, gatewayId);
        const seqs: BatchSeq = { row, received: 0 };
        const taken = await seqsTakenByOthers(
          tx,
          gatewayId,
          items.map((it) => it.m.seq),
          items.map((it) => it.m.jti),
        );
        const out: (Applied | 'duplicate')[] = [];
        for (const it of items) out.push(await this.#applyBatchItem(tx, gatewayId, it.m, now, it.log, seqs, taken, signed.kid));
        if (seqs.row !== null) await saveUplinkSeq(tx, gatewayId, seqs.row, seqs.received);
        return out;
      }),
    ).catch(unstorable);
    if (outcomes === 'unstorable') {
      log.warn(
        { code: 'APPLY_FAILED', items: items.length },
        'the database refused an item of the batch; its items are applied one at a time',
      );
      for (const it of items) await this.#handleOne(gatewayId, topic, it.m, signed);
      return;
    }
    const wake = outcomes !== 'refusedKid' && outcomes.some((o) => o !== 'duplicate' && o.wake === true);
    if (await this.#afterKid(gatewayId, topic, signed, noted, wake, log)) return;
    if (outcomes === 'refusedKid') return;
    items.forEach((it, i) => this.#report(it.log, outcomes[i]!));
    const fresh = outcomes.filter((o) => o !== 'duplicate').length;
    log.info({ items: items.length, fresh, fromSeq: items[0]!.m.seq, toSeq: items[items.length - 1]!.m.seq }, 'uplink batch applied');
    if (fresh > 0) await this.#recordSkew(gatewayId, batch.iat * 1000 - now, now, log);
  }

  /**
   * One message's effect inside the caller's transaction: claim its jti (a
   * duplicate only walks the acknowledgement pointer), track its seq, apply,
   * record the result.
   */
  async #applyInTx(
    tx: Queryable,
    gatewayId: string,
    m: UplinkMessage,
    now: number,
    log: AppDeps['log'],
    kid: string,
  ): Promise<Applied | 'duplicate'> {
    const seq = m.type === 'resync.request' ? null : m.seq;
    if (!(await claimInbox(tx, { jti: m.jti, gatewayId, type: m.type, seq, cid: m.cid, receivedAt: now }))) {
      // a resend the gateway made because it had no acknowledgement yet: it may move the pointer on
      if (m.type !== 'resync.request') await this.#advanceAck(tx, gatewayId, m.seq, m.jti);
      return 'duplicate';
    }
    if (seq !== null) {
      // applied anyway (dedupe is by jti): most likely the gateway's store was reset and its seq started again
      if (await seqTakenByOther(tx, gatewayId, seq, m.jti))
        log.warn({ seq }, 'uplink seq reused by another message; applied, gap tracking may be off');
    }
    this.#app.crash('afterInboxInsertBeforeApply');
    if (m.type !== 'resync.request') await this.#trackSeq(tx, gatewayId, m, log);
    const applied = await this.#apply(tx, gatewayId, m, now, kid);
    await recordInboxResult(tx, m.jti, applied.result, applied.code);
    return applied;
  }

  /**
   * One item of a batch inside the batch's transaction: #applyInTx's steps,
   * with the seq bookkeeping (#trackSeq, #advanceAck) done on `seqs` in
   * memory: the highest seq, a gap logged, a restarted history, and the
   * acknowledgement pointer moving over the next seq only (duplicates too).
   */
  async #applyBatchItem(
    tx: Queryable,
    gatewayId: string,
    m: BatchableUplink,
    now: number,
    log: AppDeps['log'],
    seqs: BatchSeq,
    taken: ReadonlySet<number>,
    kid: string,
  ): Promise<Applied | 'duplicate'> {
    const advance = (row: UplinkSeqRow) => {
      if (row.ackedSeq === m.seq - 1) {
        row.ackedSeq = m.seq;
        row.ackedJti = m.jti;
      }
    };
    if (!(await claimInbox(tx, { jti: m.jti, gatewayId, type: m.type, seq: m.seq, cid: m.cid, receivedAt: now }))) {
      if (seqs.row !== null) advance(seqs.row);
      return 'duplicate';
    }
    if (taken.has(m.seq)) log.warn({ seq: m.seq }, 'uplink seq reused by another message; applied, gap tracking may be off');
    this.#app.crash('afterInboxInsertBeforeApply');
    const row = (seqs.row ??= { maxSeq: 0, ackedSeq: 0, ackedJti: null, lostSeq: null, lostJti: null });
    if (m.seq > row.maxSeq + 1) log.warn({ missingFrom: row.maxSeq + 1, missingTo: m.seq - 1 }, 'uplink seq gap');
    if (m.seq <= row.ackedSeq) {
      log.warn(
        { code: 'UPLINK_HISTORY_RESTARTED', seq: m.seq, ackedSeq: row.ackedSeq },
        "the gateway's uplink seq started again; acknowledgement restarts",
      );
      restartUplinkAck(row, m.seq);
    }
    row.maxSeq = Math.max(row.maxSeq, m.seq);
    seqs.received++;
    advance(row);
    const applied = await this.#apply(tx, gatewayId, m, now, kid);
    await recordInboxResult(tx, m.jti, applied.result, applied.code);
    return applied;
  }

  /** The log line and the counter of one message's outcome. */
  #report(log: AppDeps['log'], outcome: Applied | 'duplicate'): void {
    if (outcome === 'duplicate') {
      log.info({ code: 'DUPLICATE_MESSAGE' satisfies OutcomeCode }, 'duplicate uplink; not applied again');
      this.#telemetry.uplink('duplicate', 'DUPLICATE_MESSAGE');
      return;
    }
    log.info({ result: outcome.result, code: outcome.code }, 'uplink applied');
    this.#telemetry.uplink(outcome.result, outcome.code);
  }

  /**
   * A failed transaction (database briefly unreachable, serialization) is
   * retried a few times; after that the error propagates, no PUBACK is sent,
   * and the broker redelivers to the persistent session after a reconnect.
   * A simulated crash propagates at once, as a dying process would, and so
   * does data the database refuses (SQLSTATE class 22/23): it would fail the
   * same way again.
   */
  async #withRetry<T>(log: AppDeps['log'], fn: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (e) {
        const code = pgErrorCode(e);
        if (e instanceof SimulatedCrash || attempt >= 3 || code?.startsWith('22') || code?.startsWith('23')) throw e;
        log.warn({ err: e instanceof Error ? e.message : String(e), attempt }, 'uplink transaction failed; retrying');
        await new Promise((r) => setTimeout(r, 50 * attempt));
      }
    }
  }

  async #apply(tx: Queryable, gatewayId: string, m: UplinkMessage, now: number, kid: string): Promise<Applied> {
    switch (m.type) {
      case 'ack': {
        const b = m.body;
        if (b.keyId === null || b.keyVersion === null) {
          // An ack with no key: a site.mode's settles its mode request (pending -> applied / refused), once;
          // a whole resync snapshot's (SNAPSHOT_APPLIED) settles what the snapshot covered;
          // a keyset.update's settles its delivery (signing-key rotation; the switch step waits for it).
          const s = await settleModeRequest(tx, { gatewayId, jti: b.ackOf, result: b.result, code: b.code, at: now });
          if (s === 'settled') return { result: 'applied', code: 'REPORT_RECORDED' };
          if (s === 'already') return { result: 'noop', code: 'DUPLICATE_MESSAGE' };
          // the ack of a whole resync snapshot settles the mode requests (and key deliveries) it covered
          const snap = await settleSnapshotAck(tx, { gatewayId, jti: b.ackOf, code: b.code, at: now });
          if (snap.kind === 'settled') {
            withCorrelation(this.#app.log, m.cid, { gatewayId }).info(
              { code: b.code, modeRequests: snap.modeRequests, signingKeyDeliveries: snap.deliveries },
              'resync snapshot acked: what it covered is settled',
            );
            return { result: 'applied', code: 'REPORT_RECORDED' };
          }
          if (snap.kind === 'already') return { result: 'noop', code: 'DUPLICATE_MESSAGE' };
          const settled = await recordDeliveryAck(tx, { gatewayId, jti: b.ackOf, result: b.result, code: b.code }, now);
          return { result: settled > 0 ? 'applied' : 'noop', code: 'REPORT_RECORDED' };
        }
        const o = await recordGatewayReport(
          this.#app,
          {
            keyId: asKeyId(b.keyId),
            gatewayId: asGatewayId(gatewayId),
            keyVersion: b.keyVersion,
            result: b.result,
            code: b.code,
            cid: m.cid,
          },
          tx,
        );
        return { result: o.status === 'conflict' ? 'refused' : o.status, code: o.code };
      }
      case 'access.event': {
        const b = m.body;
        // one site's gateway cannot write another's audit trail (nor use up its one-time keys)
        if (await namesAnotherGateway(tx, gatewayId, b.doorId, b.keyId)) {
          withCorrelation(this.#app.log, m.cid, { gatewayId }).warn(
            { code: 'WRONG_GATEWAY', doorId: b.doorId, keyId: b.keyId, eventId: b.eventId },
            "access event names another gateway's door or key: refused",
          );
          return { result: 'refused', code: 'WRONG_GATEWAY' };
        }
        const inserted = await insertAccessEvent(tx, { ...b, gatewayId, seq: m.seq, jti: m.jti, cid: m.cid, receivedAt: now });
        if (!inserted) return { result: 'noop', code: 'DUPLICATE_MESSAGE' };
        // A one-time key's entry: the key is `used` in the same transaction as its audit row (other keys: noop).
        if (b.allowed && b.keyId !== null)
          await recordKeyUse(this.#app, { keyId: asKeyId(b.keyId), gatewayId: asGatewayId(gatewayId), at: b.at, cid: m.cid }, tx);
        return { result: 'applied', code: 'REPORT_RECORDED' };
      }
      case 'alarm': {
        const b = m.body;
        const inserted = await insertAlarm(tx, { ...b, gatewayId, cid: m.cid, receivedAt: now });
        return inserted ? { result: 'applied', code: 'REPORT_RECORDED' } : { result: 'noop', code: 'DUPLICATE_MESSAGE' };
      }
      case 'staff.action': {
        const inserted = await insertStaffAction(tx, { gatewayId, seq: m.seq, cid: m.cid, receivedAt: now, body: m.body });
        return inserted ? { result: 'applied', code: 'REPORT_RECORDED' } : { result: 'noop', code: 'DUPLICATE_MESSAGE' };
      }
      case 'gateway.status':
        await recordStatus(tx, gatewayId, m.body, now, m.cid);
        return { result: 'applied', code: 'REPORT_RECORDED' };
      case 'uplink_key.proposal': {
        const p = await applyUplinkKeyProposal(tx, gatewayId, m, kid, now);
        if (p.result === 'refused')
          withCorrelation(this.#app.log, m.cid, { gatewayId, rotationId: m.body.rotationId }).warn(
            { code: p.code },
            'uplink key proposal refused',
          );
        return { result: p.result, code: p.code, wake: p.queued };
      }
      case 'resync.request': {
        // The gateway saw the restore a heartbeat named (or another conflict) and fails closed until a
        // snapshot, whatever the rate limit does with this request: the lost history need not be named again.
        if (m.body.reason === 'conflict' && (await clearLostUplinks(tx, gatewayId, m.body.uplinkUnackedFrom)))
          withCorrelation(this.#app.log, m.cid, { gatewayId }).info(
            { code: 'UPLINK_LOST_HISTORY_CLEARED', unackedFrom: m.body.uplinkUnackedFrom ?? null },
            'the gateway resyncs after its restore: heartbeats name its own acknowledgements again',
          );
        // A storm of signed requests (a compromised or looping gateway) is cut here, before any
        // snapshot is built: recorded refused in the inbox, logged at its first refusal.
        const policy = this.#o.resyncRate ?? DEFAULT_RESYNC_RATE;
        const t = takeToken(this.#resyncBuckets.get(gatewayId) ?? fullBucket(policy, now), now, policy);
        this.#resyncBuckets.set(gatewayId, t.bucket);
        if (t.ok) return { result: 'applied', code: 'MESSAGE_APPLIED' };
        if (t.first)
          withCorrelation(this.#app.log, m.cid, { gatewayId }).warn(
            { code: 'RESYNC_RATE_LIMITED' },
            'resync requests over the rate limit are not answered',
          );
        return { result: 'refused', code: 'RESYNC_RATE_LIMITED' };
      }
      default: {
        const never: never = m;
        throw new Error(`unhandled uplink ${JSON.stringify(never)}`);
      }
    }
  }

  /**
   * Per-gateway uplink seq: the highest seen (a log line when one jumps past
   * the next expected), and the acknowledgement pointer heartbeats carry.
   */
  async #trackSeq(tx: Queryable, gatewayId: string, m: MessageOf<UplinkMessage, Sequenced['type']>, log: AppDeps['log']): Promise<void> {
    const { maxSeq: max, ackedSeq: acked } = await lockUplinkSeq(tx, gatewayId);
    if (m.seq > max + 1) log.warn({ missingFrom: max + 1, missingTo: m.seq - 1 }, 'uplink seq gap');
    if (m.seq <= acked) {
      // A new message (its jti is new) at a seq already acknowledged: the gateway's history
      // started again (its store was reset or restored). Acknowledge from the start of the new one.
      log.warn(
        { code: 'UPLINK_HISTORY_RESTARTED', seq: m.seq, ackedSeq: acked },
        "the gateway's uplink seq started again; acknowledgement restarts",
      );
      await resetUplinkAck(tx, gatewayId, m.seq);
    }
    await noteUplinkSeq(tx, gatewayId, m.seq);
    await this.#advanceAck(tx, gatewayId, m.seq, m.jti);
  }

  /**
   * The acknowledgement pointer moves over the next seq only, in the same
   * transaction as the message's effect: a message lost on the way (a broker
   * restarted without its queue) holds it until the gateway, seeing no
   * acknowledgement, sends it again, and its resends of the rest walk it on.
   */
  async #advanceAck(tx: Queryable, gatewayId: string, seq: number, jti: string): Promise<void> {
    await advanceUplinkAck(tx, gatewayId, seq, jti);
  }

  /**
   * The gateway's clock skew (its iat minus our now), written when it moved by
   * more than a second or a minute has passed, and logged (CLOCK_SKEW) when
   * over a minute: the message is applied whatever it is.
   */
  async #recordSkew(gatewayId: string, skewMs: number, now: number, log: AppDeps['log']): Promise<void> {
    const last = this.#skew.get(gatewayId);
    if (last !== undefined && Math.abs(last.skewMs - skewMs) < SKEW_RESOLUTION_MS && now - last.at < SKEW_REFRESH_MS) return;
    this.#skew.set(gatewayId, { skewMs, at: now });
    if (Math.abs(skewMs) > SKEW_WARN_MS)
      log.warn({ code: 'CLOCK_SKEW', skewMs }, "the gateway's clock is off; its messages are applied with its own times");
    await recordClockSkew(this.#app.db, gatewayId, skewMs, now);
  }

  async #presence(gatewayId: string, payload: Buffer): Promise<void> {
    const p = parsePayload(Presence, payload);
    if (!p.ok) return this.#reject(gatewayId, `presence/${gatewayId}`, p.code, p.detail);
    await recordPresence(this.#app.db, gatewayId, p.value.online, this.#app.clock.now());
  }

  /** The gateway's current key first, then a previous one still accepted; null for an unknown gateway. */
  async #keysOf(gatewayId: string): Promise<GatewayKeys | null> {
    const cached = this.#keys.get(gatewayId);
    if (cached) return cached;
    const rows = await uplinkKeys(this.#app.db, gatewayId);
    if (rows.length === 0) return null;
    const accepted = [...rows.filter((r) => r.status === 'current'), ...rows.filter((r) => r.status === 'previous')];
    const ks = await KeySet.fromJwks({ keys: accepted.map(({ publicJwk: j }) => ({ kty: j.kty, crv: j.crv, x: j.x, kid: j.kid })) });
    const g = { keys: ks, retired: new Set(rows.filter((r) => r.status === 'retired').map((r) => r.kid)), at: this.#app.clock.now() };
    this.#keys.set(gatewayId, g);
    return g;
  }

  get #telemetry(): Telemetry {
    return this.#o.telemetry ?? noTelemetry;
  }

  /** `log`: the message's correlated logger once it verified (APPLY_FAILED); before that there is no trusted cid. */
  async #reject(gatewayId: string | null, topic: string, code: string, detail: string, log = this.#app.log): Promise<void> {
    // details can quote the bad input (JSON.parse does), and PostgreSQL text refuses NUL: keep them printable
    const safeTopic = printable(topic, 512);
    const safeDetail = printable(detail, 1000);
    log.warn({ gatewayId, topic: safeTopic.slice(0, 200), code, detail: safeDetail }, 'uplink rejected');
    this.#telemetry.uplink('rejected', code);
    await recordRejected(
      this.#app.db,
      { gatewayId, topic: safeTopic, code, detail: safeDetail, at: this.#app.clock.now() },
      this.#o.rejectedMaxRows ?? DEFAULT_REJECTED_MAX_ROWS,
    );
  }
}

/**
 * A signed message the database refuses as data (SQLSTATE class 22/23: say a
 * NUL in a string) would fail the same way forever: it is recorded and
 * acknowledged instead of retried.
 */
function unstorable(e: unknown): 'unstorable' {
  const code = pgErrorCode(e);
  if (code !== undefined && (code.startsWith('22') || code.startsWith('23'))) return 'unstorable';
  throw e;
}

/** Control characters (NUL included) replaced, length bounded. */
function printable(s: string, max: number): string {
  // eslint-disable-next-line no-control-regex
  return s.slice(0, max).replace(/[\u0000-\u001f\u007f]/g, '?');
}
