import {
  KeySet,
  Presence,
  UplinkMessage,
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
} from '@tobira/shared';
import { insertAccessEvent, insertAlarm } from '../adapters/db/audit.js';
import { insertStaffAction } from '../adapters/db/staff-actions.js';
import { settleModeRequest } from '../adapters/db/modes.js';
import { settleSnapshotAck } from '../adapters/db/snapshots.js';
import { pgErrorCode, type Queryable } from '../adapters/db/db.js';
import { gatewayPublicJwk, recordClockSkew, recordPresence, recordStatus } from '../adapters/db/gateways.js';
import {
  advanceUplinkAck,
  claimInbox,
  lockUplinkSeq,
  noteUplinkSeq,
  recordInboxResult,
  recordRejected,
  resetUplinkAck,
  seqTakenByOther,
} from '../adapters/db/uplinks.js';
import type { MqttLink } from '../adapters/mqtt/link.js';
import type { CloudSigner } from '../adapters/signer.js';
import { SimulatedCrash } from './crash.js';
import type { AppDeps } from './deps.js';
import { noTelemetry, type Telemetry } from './telemetry.js';
import { recordGatewayReport, recordKeyUse } from './keys.js';
import { answerResync } from './resync.js';
import { recordDeliveryAck } from '../adapters/db/signing-keys.js';

/**
 * Codes of rejected uplinks: every verification code of shared VERIFY_CODES,
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
  readonly link: MqttLink;
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

type Sequenced = Exclude<UplinkMessage, { type: 'resync.request' }>;
type Applied = { result: 'applied' | 'noop' | 'refused'; code: string };

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
  readonly #keys = new Map<string, KeySet>();
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
    const keys = await this.#keysOf(gatewayId);
    if (!keys) return this.#reject(gatewayId, topic, 'UNKNOWN_GATEWAY', `gateway ${gatewayId}`);
    // anySkew: a verified, correctly addressed message is never dropped for the gateway's clock
    // (its access events would be lost for good); the skew is recorded instead, and replays are
    // refused by the jti dedupe below.
    const v = await verifyMessage(payload, {
      keys,
      issuer: gatewayId,
      audience: this.#o.signer.issuer,
      schema: UplinkMessage,
      clock: this.#app.clock,
      anySkew: true,
    });
    if (!v.ok) return this.#reject(gatewayId, topic, v.code, v.detail);
    const m = v.message;
    const log = withCorrelation(this.#app.log, m.cid, { gatewayId, jti: m.jti, type: m.type });
    const now = this.#app.clock.now();
    const seq = m.type === 'resync.request' ? null : m.seq;

    const outcome = await this.#withRetry(log, () =>
      this.#app.db.transaction(async (tx): Promise<Applied | 'duplicate' | 'unstorable'> => {
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
        const applied = await this.#apply(tx, gatewayId, m, now);
        await recordInboxResult(tx, m.jti, applied.result, applied.code);
        return applied;
      }),
    ).catch((e: unknown) => {
      // A signed message the database refuses as data (SQLSTATE class 22/23: say a NUL in a
      // string) would fail the same way forever: record it and let it be acknowledged.
      const code = pgErrorCode(e);
      if (code !== undefined && (code.startsWith('22') || code.startsWith('23'))) return 'unstorable' as const;
      throw e;
    });
    if (outcome === 'unstorable') return this.#reject(gatewayId, topic, 'APPLY_FAILED', `jti ${m.jti}: the database refused its data`, log);

    if (outcome === 'duplicate') {
      log.info({ code: 'DUPLICATE_MESSAGE' satisfies OutcomeCode }, 'duplicate uplink; not applied again');
      this.#telemetry.uplink('duplicate', 'DUPLICATE_MESSAGE');
      return;
    }
    await this.#recordSkew(gatewayId, m.iat * 1000 - now, now, log);
    log.info({ result: outcome.result, code: outcome.code }, 'uplink applied');
    this.#telemetry.uplink(outcome.result, outcome.code);
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
      const p: Promise<void> = answerResync(this.#app, this.#o, gatewayId, m)
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

  async #apply(tx: Queryable, gatewayId: string, m: UplinkMessage, now: number): Promise<Applied> {
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
      case 'resync.request': {
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
      await resetUplinkAck(tx, gatewayId);
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

  async #keysOf(gatewayId: string): Promise<KeySet | null> {
    const cached = this.#keys.get(gatewayId);
    if (cached) return cached;
    const jwk = await gatewayPublicJwk(this.#app.db, gatewayId);
    if (jwk === null) return null;
    const ks = await KeySet.fromJwks({ keys: [jwk] });
    this.#keys.set(gatewayId, ks);
    return ks;
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

/** Control characters (NUL included) replaced, length bounded. */
function printable(s: string, max: number): string {
  // eslint-disable-next-line no-control-regex
  return s.slice(0, max).replace(/[\u0000-\u001f\u007f]/g, '?');
}
