import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  KeySet,
  ManualClock,
  asDoorId,
  asKeyId,
  credentialDigest,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  newPairingSecret,
  signMessage,
  topics,
  type DownlinkMessage,
  type SigningKey,
} from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../src/adapters/sqlite/db.js';
import { releaseAllClaims } from '../src/adapters/sqlite/inbox.js';
import { capHighWater, touchHighWater } from '../src/adapters/sqlite/settings.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { handleLockRequests, type AccessDeps } from '../src/app/access.js';
import { applyPending, maybeResync, type ApplyDeps } from '../src/app/apply.js';
import { TrustedTime, nowOf, type AppContext, type CrashPoint } from '../src/app/context.js';
import { receiveDownlink, type DownlinkDeps } from '../src/app/downlink.js';
import { createMetrics } from '../src/metrics.js';
import { GRACE_SECONDS, Model, type Delivery, type KeySpec, type Sent, type Window } from './decisions-model.js';
import { T0, grant } from './fixtures.js';

/**
 * Model-based test of door decisions. fast-check drives the key
 * lifecycle against the real gateway code path, in process: messages signed
 * by a cloud key go through `receiveDownlink` (signature, expiry, inbox),
 * `applyPending` (the writer, in seq order) and lock requests through
 * `handleLockRequests`, on a real SQLite file. `fc.scheduler` picks which
 * message in flight arrives next (reordering); messages are duplicated, the
 * gateway crashes (also at its named crash points) and restarts on the same
 * file, its wall clock steps back, forward and to 1970, real time moves on
 * with or without heartbeats. At every presented credential the gateway must
 * answer exactly what the model (decisions-model.ts) predicts, and whatever
 * it answers must be fail-closed by real time, not by its clock.
 *
 * Reproduce a failure: `TOBIRA_MODEL_SEED=<seed> [TOBIRA_MODEL_PATH=<path>] npx vitest run gateway/test/decisions-model.test.ts`
 * (the seed and path are printed); `TOBIRA_MODEL_RUNS=<n>` runs more.
 */

const GW = 'gw-decisions-model';
const ISSUER = 'tobira-cloud';
const DOORS: Record<string, string> = { 'lock-1': 'door-1', 'lock-2': 'door-2' };
const KEYS: readonly KeySpec[] = [
  { keyId: 'key-a', pin: '111111', doors: ['door-1'], offlineCapable: false },
  { keyId: 'key-b', pin: '222222', doors: ['door-1', 'door-2'], offlineCapable: false },
  // a staff key: opens on a stale lease within its offline cap
  { keyId: 'key-staff', pin: '333333', doors: ['door-1', 'door-2'], offlineCapable: true, offlineMaxSeconds: 900 },
  // a one-time key (a delivery): the first entry at either door consumes it
  { keyId: 'key-once', pin: '444444', doors: ['door-1', 'door-2'], offlineCapable: false, oneTime: true },
];
const UNKNOWN_PIN = '987654';

class CrashSignal extends Error {}

interface InFlight {
  readonly sent: Sent;
  readonly token: string;
}

/** The real gateway, in process, on one SQLite file; restartable. */
class RealGateway {
  readonly dir = mkdtempSync(join(tmpdir(), 'tobira-decisions-'));
  readonly real: ManualClock;
  offset = 0;
  readonly pepper = newPairingSecret();
  readonly secrets = new Map(Object.keys(DOORS).map((l) => [l, newPairingSecret()]));
  armed: CrashPoint | null = null;
  /** Resync requests the gateway sent (each process asks at start, and on heartbeats until proven); the cloud answers them. */
  readonly requests: { requestId: string; boot: number; askedAt: number }[] = [];
  /** The crash point the process died at (its database handle is closed). */
  dead: CrashPoint | null = null;
  restarts = 0;
  #db: ReturnType<typeof openDatabase> | null = null;
  #ctx: AppContext | null = null;
  #apply: ApplyDeps | null = null;
  #down: DownlinkDeps | null = null;
  #access: AccessDeps | null = null;
  #requests = 0;

  constructor(
    readonly cloudKeys: KeySet,
    start: number,
  ) {
    this.real = new ManualClock(start);
  }

  /** A start of the daemon on the data folder (gateway.ts start(), without the links). */
  start(): void {
    const db = openDatabase(join(this.dir, 'gateway.sqlite'));
    const store = new GatewayStore(db);
    const origin = this.real.now(); // a new process: its monotonic clock starts anew
    const time = new TrustedTime({ now: () => this.real.now() + this.offset }, { now: () => this.real.now() - origin });
    const ctx: AppContext = {
      gatewayId: GW,
      store,
      time,
      log: pino({ level: 'silent' }),
      metrics: createMetrics(),
      crash: (point) => {
        if (this.armed === point) {
          // kill -9: nothing after this point may touch the file, not even the writer's error path
          this.armed = null;
          this.dead = point;
          db.close();
          throw new CrashSignal(point);
        }
      },
      outboxWritten: () => {},
    };
    for (const [lockId, doorId] of Object.entries(DOORS)) store.upsertLock(lockId, doorId, time.now(db));
    releaseAllClaims(db);
    this.#db = db;
    this.#ctx = ctx;
    this.#apply = {
      ...ctx,
      options: {
        offlineGraceSeconds: GRACE_SECONDS,
        maxAttempts: 3,
        claimLeaseMs: 30_000,
        resyncIntervalMs: 0,
        uplinkAckTimeoutMs: 60_000,
      },
      resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
      requestResync: (_reason, _seq, _cid, requestId) => this.requests.push({ requestId, boot: this.restarts, askedAt: this.real.now() }),
    };
    this.#down = { ...ctx, cloudKeys: this.cloudKeys, cloudIssuer: ISSUER, applySoon: () => {} };
    this.#access = {
      ...ctx,
      access: {
        pepper: this.pepper,
        // lockouts are the subject of their own tests (domain.test.ts); off here so every decision is the key's
        lockout: { limit: 0, cooldownSeconds: 60 },
        siteLockout: { limit: 0, windowSeconds: 600, cooldownSeconds: 300 },
        requestRate: { burst: 1_000_000, perSecond: 1_000_000 },
        holdMs: 1000,
        commandTtlMs: 10_000,
        pairingSecrets: this.secrets,
        offlineGraceSeconds: GRACE_SECONDS,
      },
      buckets: new Map(),
      storageLow: () => false,
    };
    applyPending(this.#apply);
    // the daemon asks once its cloud link stands (gateway.ts onConnect); its answer proves the time
    maybeResync(this.#apply, 'startup', newCorrelationId(), true);
  }

  /** kill -9 and start again on the same file (after `downMs` of real time off): nothing but the committed SQLite state survives. */
  restart(downMs = 0): void {
    if (this.#db?.open === true) this.#db.close();
    this.dead = null;
    this.real.advance(downMs);
    this.restarts++;
    this.start();
  }

  get store(): GatewayStore {
    return this.#ctx!.store;
  }

  /** The daemon's periodic tick: apply retries, persist the time acted on, and lower it to the time the cloud proved if above. */
  tick(): void {
    applyPending(this.#apply!);
    touchHighWater(this.#db!, nowOf(this.#ctx!));
    const ceiling = this.#ctx!.time.ceiling();
    if (ceiling !== null) capHighWater(this.#db!, ceiling);
  }

  /** A message from the broker: verified and stored, then the writer runs (as applySoon would). */
  async receive(token: string): Promise<{ result: Delivery; crashed: CrashPoint | null }> {
    try {
      const r = await receiveDownlink(this.#down!, topics.gatewayDown(GW), Buffer.from(token));
      applyPending(this.#apply!);
      return { result: r.kind, crashed: null };
    } catch (e) {
      const point = this.dead;
      if (point === null) throw e;
      this.restart();
      return { result: 'stored', crashed: point };
    }
  }

  present(lockId: string, pin: string, requestId = `req-${++this.#requests}`) {
    const payload = Buffer.from(JSON.stringify({ requestId, credential: { type: 'pin', value: pin }, at: 0 }));
    try {
      const [answer] = handleLockRequests(this.#access!, [{ lockId, payload }]);
      return { answer: answer!, requestId, crashed: false };
    } catch (e) {
      if (this.dead === null) throw e;
      this.restart();
      return { answer: null, requestId, crashed: true };
    }
  }

  close(): void {
    this.#db?.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The fake cloud's signing and the broker between it and the gateway (reordering by the scheduler). */
class World {
  readonly model: Model;
  readonly gw: RealGateway;
  readonly sent: InFlight[] = [];
  readonly arrived: InFlight[] = [];
  readonly log: string[] = [];
  maxHeartbeatIat = 0;

  constructor(
    readonly s: fc.Scheduler,
    readonly cloudKey: SigningKey,
    cloudKeys: KeySet,
  ) {
    this.model = new Model(KEYS, T0);
    this.gw = new RealGateway(cloudKeys, T0);
    this.gw.start();
    // The daemon's first tick (a second after start) persists the time floor; before it, a new
    // gateway has nothing but its wall clock, until the first cloud message raises it.
    this.tick();
  }

  async sign(draft: Record<string, unknown>): Promise<{ token: string; message: DownlinkMessage }> {
    return signMessage<DownlinkMessage>(this.cloudKey, ISSUER, { aud: GW, cid: newCorrelationId(), ...draft } as never, this.gw.real);
  }

  /** Hands a message to the broker: it arrives when the scheduler lets it. */
  publish(m: InFlight): void {
    void this.s.schedule(Promise.resolve(m), `${m.sent.kind} ${'seq' in m.sent ? m.sent.seq : ''}`).then((x) => this.arrived.push(x));
  }

  /** One message in flight arrives (the scheduler picks which). */
  async deliverOne(): Promise<boolean> {
    if (this.s.count() === 0) return false;
    await this.s.waitOne();
    for (let i = 0; i < 100 && this.arrived.length === 0; i++) await Promise.resolve();
    const m = this.arrived.shift();
    if (m === undefined) throw new Error('the scheduler released no message');
    const expected = this.model.deliver(m.sent, this.gw.armed === 'afterInboxInsertBeforeApply');
    const got = await this.gw.receive(m.token);
    if (got.crashed !== null) this.model.restartAfter(0); // a new process: the time is unproven again
    this.log.push(`deliver ${m.sent.kind} ${JSON.stringify(m.sent)} -> ${got.result}${got.crashed ? ` (crashed ${got.crashed})` : ''}`);
    expect(got.result, `delivery of ${m.sent.kind}`).toBe(expected);
    // Not acked to the broker before the inbox commit: it comes again.
    if (got.crashed === 'afterInboxInsertBeforeApply') this.publish(m);
    this.checkState();
    return true;
  }

  /** The gateway's stored key set and lease equal the model's after every step. */
  checkState(): void {
    const settings = this.gw.store.settings();
    expect(settings.appliedSeq).toBe(this.model.appliedSeq);
    expect(settings.leaseExpiresAt).toBe(this.model.lease);
    KEYS.forEach((k, i) => {
      const slot = this.gw.store.loadSlot(k.keyId);
      const held = this.model.held(i);
      expect(slot.key?.status === 'active', `${k.keyId} active`).toBe(held?.active === true);
      if (held?.active === true) expect(slot.key?.version).toBe(held.grant.version);
    });
  }

  /** The daemon's tick after every step (the real one runs every second). */
  tick(): void {
    this.gw.tick();
    this.model.tick();
  }
}

type Cmd = fc.AsyncCommand<Model, World>;
const cmd = (name: string, run: (w: World) => Promise<void> | void, check: (m: Readonly<Model>) => boolean = () => true): Cmd => ({
  check,
  async run(_m, w) {
    w.log.push(name);
    await run(w);
    w.tick();
  },
  toString: () => name,
});

function issue(k: number, fromSeconds: number, forSeconds: number): Cmd {
  return cmd(
    `issue ${KEYS[k]!.keyId} valid from ${fromSeconds}s to ${forSeconds}s`,
    async (w) => {
      const c = w.model.cloud[k]!;
      const version = c.version + 1;
      const now = w.gw.real.now();
      const window: Window = { validFrom: now + fromSeconds * 1000, validUntil: now + forSeconds * 1000 };
      const seq = ++w.model.seq;
      const spec = KEYS[k]!;
      const { token, message } = await w.sign({
        type: 'key.grant',
        seq,
        body: {
          key: grant({
            keyId: asKeyId(spec.keyId),
            version,
            credential: { type: 'pin', digest: credentialDigest(w.gw.pepper, 'pin', spec.pin) },
            doors: spec.doors.map(asDoorId),
            ...window,
            offlineCapable: spec.offlineCapable,
            ...(spec.offlineMaxSeconds === undefined ? {} : { offlineMaxSeconds: spec.offlineMaxSeconds }),
            ...(spec.oneTime === true ? { oneTime: true as const } : {}),
          }),
        },
      });
      c.version = version;
      c.status = 'active';
      c.windows.set(version, window);
      const m: InFlight = { token, sent: { kind: 'grant', jti: message.jti, iat: message.iat, seq, key: k, version, window } };
      w.sent.push(m);
      w.publish(m);
    },
    (m) => m.cloud[k]!.status !== 'active',
  );
}

function revoke(k: number): Cmd {
  return cmd(
    `revoke ${KEYS[k]!.keyId}`,
    async (w) => {
      const c = w.model.cloud[k]!;
      const seq = ++w.model.seq;
      const { token, message } = await w.sign({
        type: 'key.revoke',
        seq,
        body: { keyId: KEYS[k]!.keyId, version: c.version, reason: 'staff_revoked' },
      });
      c.status = 'revoked';
      const m: InFlight = { token, sent: { kind: 'revoke', jti: message.jti, iat: message.iat, seq, key: k, version: c.version } };
      w.sent.push(m);
      w.publish(m);
    },
    (m) => m.cloud[k]!.status === 'active',
  );
}

/**
 * A grant of an already revoked version under a new seq and id (a cloud that
 * re-sends old history, e.g. restored from a backup): the tombstone must hold.
 */
function staleGrant(k: number, pick: number): Cmd {
  return cmd(
    `stale grant of a revoked version of ${KEYS[k]!.keyId}`,
    async (w) => {
      const old = w.sent.filter((x) => x.sent.kind === 'revoke' && x.sent.key === k);
      const r = old[pick % old.length]!.sent;
      if (r.kind !== 'revoke') return;
      const original = w.sent.find((x) => x.sent.kind === 'grant' && x.sent.key === k && x.sent.version === r.version)!;
      if (original.sent.kind !== 'grant') return;
      const spec = KEYS[k]!;
      const seq = ++w.model.seq;
      const { token, message } = await w.sign({
        type: 'key.grant',
        seq,
        body: {
          key: grant({
            keyId: asKeyId(spec.keyId),
            version: r.version,
            credential: { type: 'pin', digest: credentialDigest(w.gw.pepper, 'pin', spec.pin) },
            doors: spec.doors.map(asDoorId),
            ...original.sent.window,
            offlineCapable: spec.offlineCapable,
            ...(spec.offlineMaxSeconds === undefined ? {} : { offlineMaxSeconds: spec.offlineMaxSeconds }),
            ...(spec.oneTime === true ? { oneTime: true as const } : {}),
          }),
        },
      });
      const m: InFlight = {
        token,
        sent: { kind: 'grant', jti: message.jti, iat: message.iat, seq, key: k, version: r.version, window: original.sent.window },
      };
      w.sent.push(m);
      w.publish(m);
    },
    (m) => m.cloud[k]!.status === 'revoked',
  );
}

const heartbeat = (): Cmd =>
  cmd('heartbeat', async (w) => {
    const lastSeq = w.model.seq;
    const { token, message } = await w.sign({ type: 'heartbeat', body: { lastSeq, intervalMs: 30_000 } });
    w.maxHeartbeatIat = Math.max(w.maxHeartbeatIat, message.iat);
    w.publish({ token, sent: { kind: 'heartbeat', jti: message.jti, iat: message.iat, lastSeq } });
  });

/** The cloud answers every resync request it has received (the answers travel like any message: late, twice, across a restart). */
const answerResyncs = (): Cmd =>
  cmd('answer the resync requests', async (w) => {
    for (const r of w.gw.requests.splice(0)) {
      const body = { requestId: r.requestId, mode: 'up_to_date', fromSeq: 0, toSeq: 0, snapshotId: null };
      const { token, message } = await w.sign({ type: 'resync.answer', body });
      const m: InFlight = { token, sent: { kind: 'answer', jti: message.jti, iat: message.iat, boot: r.boot, askedAt: r.askedAt } };
      w.sent.push(m);
      w.publish(m);
    }
  });

/** The broker (QoS 1) or the cloud's outbox sends a message again: same token, same id. */
const duplicate = (pick: number): Cmd =>
  cmd(
    'duplicate',
    (w) => w.publish(w.sent[pick % w.sent.length]!),
    (m) => m.seq > 0,
  );

const deliver = (): Cmd => cmd('deliver', (w) => w.deliverOne().then(() => undefined));
/** Everything in flight arrives, in the order the scheduler picks. */
const deliverAll = (): Cmd =>
  cmd('deliver all in flight', async (w) => {
    while (await w.deliverOne());
  });

const crashOnNextDelivery = (point: CrashPoint): Cmd =>
  cmd(`deliver, crashing at ${point}`, async (w) => {
    w.gw.armed = point;
    await w.deliverOne();
    w.gw.armed = null;
  });

const restart = (downSeconds: number): Cmd =>
  cmd(`crash, ${downSeconds}s off, restart`, (w) => {
    w.gw.restart(downSeconds * 1000);
    w.model.restartAfter(downSeconds * 1000);
  });

const elapse = (seconds: number): Cmd =>
  cmd(`${seconds}s pass`, (w) => {
    w.gw.real.advance(seconds * 1000);
    w.model.real += seconds * 1000;
  });

type Step = 'to1970' | 'backDay' | 'forward90s' | 'forward15min' | 'forward2days' | 'ntpFix';
const clockStep = (step: Step): Cmd =>
  cmd(`wall clock ${step}`, (w) => {
    const real = w.gw.real.now();
    const off = w.model.offset;
    const next: Record<Step, number> = {
      to1970: 3_600_000 - real,
      backDay: off - 86_400_000,
      forward90s: off + 90_000,
      forward15min: off + 900_000,
      forward2days: off + 2 * 86_400_000,
      ntpFix: 0,
    };
    w.model.offset = w.gw.offset = next[step];
  });

function present(k: number | null, lockId: string, crash: boolean): Cmd {
  const who = k === null ? 'an unknown PIN' : KEYS[k]!.keyId;
  return cmd(`present ${who} at ${lockId}${crash ? ' (crash before the answer is published)' : ''}`, (w) => {
    const expected = w.model.decide(k, DOORS[lockId]!);
    const pin = k === null ? UNKNOWN_PIN : KEYS[k]!.pin;
    w.gw.armed = crash ? 'afterDecisionBeforePublish' : null;
    let r = w.gw.present(lockId, pin);
    let answered = expected;
    if (r.crashed) {
      w.model.restartAfter(0);
      // The decision was committed before the crash; the lock asks again with the same request id.
      // A recorded refusal is answered again; a recorded ALLOWED only if it still holds now (its own
      // use of a one-time key aside: the model has not counted it yet), else the refusal of now.
      const now = w.model.decide(k, DOORS[lockId]!);
      if (expected.allowed && !now.allowed) answered = now;
      r = w.gw.present(lockId, pin, r.requestId);
      expect(r.answer?.replayed).toBe(true);
    }
    const d = r.answer!.decision;
    w.model.decided(k, expected);
    w.log.push(`  -> ${d.code} (model ${answered.code}) trusted=${w.model.trusted} real=${w.model.real} lease=${w.model.lease}`);
    expect({ allowed: d.allowed, code: d.code }).toEqual(answered);
    seenCodes.set(d.code, (seenCodes.get(d.code) ?? 0) + 1);
    if (d.allowed) {
      // Fail-closed by real time, whatever the gateway's clock says, checked on the real store,
      // across restarts too: trusted time lags real time by less than a second (an answer's iat is in whole seconds)
      const real = w.gw.real.now() - 999;
      const slot = w.gw.store.loadSlot(KEYS[k!]!.keyId);
      expect(slot.key?.status).toBe('active');
      expect(slot.tombstone ?? 0).toBeLessThan(slot.key!.version);
      const window = w.model.cloud[k!]!.windows.get(slot.key!.version)!;
      expect(real).toBeLessThan(window.validUntil);
      const lease = w.gw.store.settings().leaseExpiresAt;
      expect(lease).not.toBeNull();
      const cap = (KEYS[k!]!.offlineMaxSeconds ?? 0) * 1000;
      // the lease never comes from nowhere: at most grace after the newest heartbeat the cloud signed
      expect(lease!).toBeLessThanOrEqual(w.maxHeartbeatIat * 1000 + GRACE_SECONDS * 1000);
      expect(real).toBeLessThan(lease! + (KEYS[k!]!.offlineCapable ? cap - GRACE_SECONDS * 1000 : 0));
      expect(r.answer!.command).not.toBeNull();
    }
  });
}

/** Decisions seen across the runs: the test checks it reached each outcome it is about. */
const seenCodes = new Map<string, number>();

const keyIndex = fc.integer({ min: 0, max: KEYS.length - 1 });
const issueArb = fc
  .tuple(keyIndex, fc.constantFrom(-3600, -3600, 60), fc.constantFrom(120, 900, 7200))
  .map(([k, from, until]) => issue(k, from, until));
const presentArb = fc
  .tuple(fc.option(keyIndex, { freq: 8 }), fc.constantFrom('lock-1', 'lock-1', 'lock-2'), fc.integer({ min: 0, max: 5 }))
  .map(([k, lock, n]) => present(k, lock, n === 0));
const commands = fc.commands(
  [
    issueArb,
    issueArb,
    issueArb,
    keyIndex.map(revoke),
    fc.tuple(keyIndex, fc.nat()).map(([k, p]) => staleGrant(k, p)),
    fc.constant(null).map(heartbeat),
    fc.constant(null).map(heartbeat),
    fc.constant(null).map(heartbeat),
    fc.constant(null).map(answerResyncs),
    fc.constant(null).map(answerResyncs),
    fc.constant(null).map(answerResyncs),
    fc.nat().map(duplicate),
    fc.constant(null).map(deliver),
    fc.constant(null).map(deliverAll),
    fc.constant(null).map(deliverAll),
    fc.constantFrom<CrashPoint>('afterInboxInsertBeforeApply', 'afterApplyBeforeAck').map(crashOnNextDelivery),
    fc.constantFrom(0, 0, 120, 600).map(restart),
    fc.constantFrom(1, 30, 120, 299, 301, 600, 1200).map(elapse),
    fc
      .oneof(
        { arbitrary: fc.constantFrom<Step>('to1970', 'backDay', 'forward90s', 'forward15min', 'ntpFix'), weight: 12 },
        { arbitrary: fc.constant<Step>('forward2days'), weight: 1 },
      )
      .map(clockStep),
    presentArb,
    presentArb,
    presentArb,
    presentArb,
  ],
  { maxCommands: 50, size: 'max' },
);

describe('a power cut that resets the wall clock to 1970', () => {
  it('the restarted gateway fails closed until the cloud answers its own resync; then the heartbeat after the outage renews the lease', async () => {
    const pair = await generateSigningKeyPair();
    const w = new World(
      fc.sample(fc.scheduler(), { numRuns: 1, seed: 1 })[0]!,
      await importSigningKey(pair.privateJwk),
      await KeySet.fromJwks({ keys: [pair.publicJwk] }),
    );
    try {
      const first = w.gw.requests[0]!; // the first process's startup request
      await issue(0, -3600, 7200).run(w.model, w);
      await heartbeat().run(w.model, w);
      await answerResyncs().run(w.model, w);
      await deliverAll().run(w.model, w);
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('ALLOWED');
      // The power goes for ten minutes; the RTC comes back at 1970. The restarted process cannot know how
      // long it was off: it acts on no lease until the cloud answers its own resync request.
      const { token: beforeCut } = await w.sign({
        type: 'resync.answer',
        body: { requestId: first.requestId, mode: 'up_to_date', fromSeq: 0, toSeq: 0, snapshotId: null },
      });
      w.gw.real.advance(600_000);
      w.gw.offset = 3_600_000 - w.gw.real.now();
      w.gw.restart(); // the persisted lease (iat + 300 s) would still have 300 s left by the persisted floor
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('CLOUD_STALE');
      // an answer to the previous process's request (late, or replayed) proves nothing
      expect((await w.gw.receive(beforeCut)).result).toBe('stored');
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('CLOUD_STALE');
      w.gw.real.advance(400_000);
      w.gw.tick();
      const { token } = await w.sign({ type: 'heartbeat', body: { lastSeq: w.model.seq, intervalMs: 30_000 } });
      expect((await w.gw.receive(token)).result).toBe('stored');
      expect(w.gw.store.settings().leaseExpiresAt).toBe(Math.floor(w.gw.real.now() / 1000) * 1000 + GRACE_SECONDS * 1000);
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('CLOUD_STALE'); // a heartbeat is no proof of the time
      const asked = w.gw.requests.filter((r) => r.boot === w.gw.restarts);
      expect(asked.length).toBeGreaterThanOrEqual(2); // at start, and again on the heartbeat while unproven
      const answerTo = async (requestId: string) =>
        (
          await w.sign({
            type: 'resync.answer',
            body: { requestId, mode: 'up_to_date', fromSeq: 0, toSeq: 0, snapshotId: null },
          })
        ).token;
      // The answer to the request made at start, 400 s ago: the cloud may have signed it at any point of that
      // round trip, so it says little about the time now; it proves nothing (and moves no floor).
      const floorBefore = w.gw.store.settings().highWaterMs;
      expect((await w.gw.receive(await answerTo(asked[0]!.requestId))).result).toBe('stored');
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('CLOUD_STALE');
      expect(w.gw.store.settings().highWaterMs).toBeLessThan(floorBefore + 400_000);
      // the answer to the request the heartbeat made just now proves it
      expect((await w.gw.receive(await answerTo(asked.at(-1)!.requestId))).result).toBe('stored');
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('ALLOWED');
      // and trusted time is the cloud's again: the lease runs out after the grace of real time
      w.gw.real.advance(GRACE_SECONDS * 1000);
      expect(w.gw.present('lock-1', KEYS[0]!.pin).answer!.decision.code).toBe('CLOUD_STALE');
    } finally {
      w.gw.close();
    }
  });
});

describe('a one-time key', () => {
  it('opens once, at either door; a crash after the decision does not give the entry back; later presentations are KEY_USED', async () => {
    const pair = await generateSigningKeyPair();
    const w = new World(
      fc.sample(fc.scheduler(), { numRuns: 1, seed: 1 })[0]!,
      await importSigningKey(pair.privateJwk),
      await KeySet.fromJwks({ keys: [pair.publicJwk] }),
    );
    const once = KEYS.findIndex((k) => k.oneTime === true);
    try {
      await issue(once, -3600, 7200).run(w.model, w);
      await heartbeat().run(w.model, w);
      await answerResyncs().run(w.model, w);
      await deliverAll().run(w.model, w);
      // each step checks the gateway's answer against the model
      await present(once, 'lock-2', true).run(w.model, w);
      expect(w.model.used.has(once)).toBe(true);
      await present(once, 'lock-1', false).run(w.model, w);
      await restart(0).run(w.model, w);
      await present(once, 'lock-2', false).run(w.model, w);
      expect(w.gw.present('lock-1', KEYS[once]!.pin).answer!.decision.code).toBe('KEY_USED');
    } finally {
      w.gw.close();
    }
  });
});

describe('door decisions, model-based (fc.commands + fc.scheduler)', () => {
  it('the real gateway answers every credential as the model predicts, through reorder, duplicates, crashes, clock steps and lease expiry', async () => {
    const pair = await generateSigningKeyPair();
    const cloudKey = await importSigningKey(pair.privateJwk);
    const cloudKeys = await KeySet.fromJwks({ keys: [pair.publicJwk] });
    const seed = process.env.TOBIRA_MODEL_SEED === undefined ? Date.now() % 2 ** 31 : Number(process.env.TOBIRA_MODEL_SEED);
    const path = process.env.TOBIRA_MODEL_PATH;
    // most steps refuse (unknown credentials, stale sync): at 30 runs a run of no opening at all came up one time in ten
    const numRuns = Number(process.env.TOBIRA_MODEL_RUNS ?? 100);
    let failing: string[] = [];
    try {
      await fc.assert(
        fc.asyncProperty(fc.scheduler(), commands, async (s, cmds) => {
          const w = new World(s, cloudKey, cloudKeys);
          try {
            await fc.asyncModelRun(() => ({ model: w.model, real: w }), cmds);
            // Heal: everything in flight arrives, the cloud sends a heartbeat; the key set is the cloud's
            // (unless the gateway's clock ran so far ahead that it refused the cloud's messages as expired).
            while (await w.deliverOne());
            await answerResyncs().run(w.model, w);
            await heartbeat().run(w.model, w);
            while (await w.deliverOne());
            if (!w.model.rejectedAny) {
              expect(w.gw.store.settings().appliedSeq).toBe(w.model.seq);
              KEYS.forEach((k, i) => {
                expect(w.gw.store.loadSlot(k.keyId).key?.status === 'active', k.keyId).toBe(w.model.cloud[i]!.status === 'active');
              });
            }
          } catch (e) {
            failing = w.log;
            throw e;
          } finally {
            w.gw.close();
          }
        }),
        { seed, numRuns, ...(path === undefined ? {} : { path }) },
      );
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      const cause = e instanceof Error && e.cause instanceof Error ? `\n\ncaused by: ${e.cause.message}` : '';
      throw new Error(
        `decisions model failed; reproduce with TOBIRA_MODEL_SEED=${seed} (and TOBIRA_MODEL_PATH from below)\n` +
          `steps of the smallest failing run:\n${failing.join('\n')}${cause}\n\n${message}`,
        { cause: e },
      );
    }
    if (process.env.TOBIRA_MODEL_STATS !== undefined)
      process.stdout.write(`decision codes seen: ${JSON.stringify(Object.fromEntries(seenCodes))}\n`);
    // Not vacuous: across the runs doors opened, and were refused for several reasons.
    expect(seenCodes.get('ALLOWED') ?? 0).toBeGreaterThan(0);
    expect(seenCodes.size).toBeGreaterThanOrEqual(4);
  }, 120_000);
});
