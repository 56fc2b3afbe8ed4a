import type { JWK } from 'jose';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  KeySet,
  LockCommand,
  LockDecision,
  ManualClock,
  type Clock,
  UplinkEnvelope,
  type UplinkMessage,
  checkUplinkBatch,
  connectMqtt,
  credentialDigest,
  encodeSecret,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  newId,
  newPairingSecret,
  signMessage,
  topics,
  verifyMessage,
  waitConnected,
  type DownlinkMessage,
  type KeyGrant,
  type KeyPairJwk,
  type SigningKey,
} from '@tobira/shared';
import { waitFor } from '@tobira/shared/testing';
import type { MqttClient } from 'mqtt';
import { pino } from 'pino';
import { createGateway, type Gateway, type GatewayDeps } from '../src/gateway.js';
import { parseConfig, type GatewayConfig, type GatewayConfigInput } from '../src/config.js';
import { grant as baseGrant, T0 } from './fixtures.js';

export const CLOUD_ISSUER = 'tobira-cloud';
export const PIN = '123456';
export const STAFF_PIN = '999999';
export const STAFF_TOKEN = 'staff-token-0123456789';
/** The metrics token of a test that reads /metrics (none by default: /metrics then answers 503). */
export const METRICS_TOKEN = 'metrics-token-0123456789';

let counter = 0;

// the suite's one polling helper (shared/src/testing/wait.ts), re-exported for the tests that import it from here
export { waitFor };

export interface SiteFixture {
  readonly dir: string;
  readonly gatewayId: string;
  readonly clock: ManualClock;
  readonly pepper: Uint8Array;
  readonly lockSecret: Uint8Array;
  readonly cloudKey: SigningKey;
  readonly cloudPair: KeyPairJwk;
  readonly otherKey: SigningKey;
  readonly gatewayPair: KeyPairJwk;
  readonly config: GatewayConfig;
  readonly configInput: GatewayConfigInput;
  readonly configFile: string;
  digest(pin: string): string;
}

/** Keys, secrets, a temp dir with a real SQLite path and a config file. */
export async function siteFixture(
  cloudUrl: string,
  siteUrl: string,
  unique: string,
  overrides: Partial<GatewayConfigInput> = {},
): Promise<SiteFixture> {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-gw-'));
  const gatewayId = `gw-${unique}-${++counter}`;
  const cloudPair = await generateSigningKeyPair();
  const otherPair = await generateSigningKeyPair();
  const gatewayPair = await generateSigningKeyPair();
  const keyPairFile = join(dir, 'gateway-key.json');
  writeFileSync(keyPairFile, JSON.stringify(gatewayPair));
  const pepper = newPairingSecret();
  const lockSecret = newPairingSecret();
  const configInput: GatewayConfigInput = {
    gatewayId,
    keyPairFile,
    cloud: { url: cloudUrl, issuer: CLOUD_ISSUER, jwks: { keys: [cloudPair.publicJwk as never] } },
    site: { url: siteUrl },
    sqlitePath: join(dir, 'gateway.sqlite'),
    offlineGraceSeconds: 300,
    locks: [{ lockId: 'lock-1', doorId: 'door-1', pairingSecret: encodeSecret(lockSecret) }],
    credentialPepper: encodeSecret(pepper),
    lockout: { limit: 3, cooldownSeconds: 60 },
    http: { host: '127.0.0.1', port: 0 },
    staffToken: STAFF_TOKEN,
    inboxMaxAttempts: 3,
    resyncIntervalMs: 100,
    drainTimeoutMs: 2000,
    ...overrides,
  };
  const configFile = join(dir, 'gateway.json');
  writeFileSync(configFile, JSON.stringify(configInput));
  return {
    dir,
    gatewayId,
    clock: new ManualClock(T0),
    pepper,
    lockSecret,
    cloudPair,
    cloudKey: await importSigningKey(cloudPair.privateJwk),
    otherKey: await importSigningKey(otherPair.privateJwk),
    gatewayPair,
    config: parseConfig(configInput),
    configInput,
    configFile,
    digest: (pin: string) => credentialDigest(pepper, 'pin', pin),
  };
}

type Sent<T extends DownlinkMessage['type']> = Extract<DownlinkMessage, { type: T }>;

/** Plays the cloud: signs and publishes downlink, collects verified uplink. */
export class FakeCloud {
  readonly uplink: UplinkMessage[] = [];
  readonly rawUplink: string[] = [];
  seq = 0;
  /**
   * Answer each `startup` resync request (`up_to_date`, or `replay` with nothing replayed), as the
   * cloud does: the answer proves the time to a (re)started gateway. Other reasons are the tests' to answer.
   */
  answerResync = true;
  /** The gateway's retained presence (last will), as last seen. */
  presence: boolean | null = null;
  /** The gateway's public keys uplinks are verified with (a test adds a rotated one with `acceptGatewayKey`). */
  #gwJwks: JWK[];
  #client: MqttClient | null = null;
  constructor(private readonly f: SiteFixture) {
    this.#gwJwks = [f.gatewayPair.publicJwk];
  }

  /** Accepts uplinks signed with this key too (an uplink-key rotation). */
  acceptGatewayKey(jwk: JWK): void {
    this.#gwJwks = [...this.#gwJwks, jwk];
  }

  async connect(url: string): Promise<void> {
    const c = connectMqtt(url, { protocolVersion: 4, clientId: `cloud-${this.f.gatewayId}-${counter++}`, clean: true });
    // Verify one message at a time so `uplink` keeps broker order (verification is async).
    let chain: Promise<void> = Promise.resolve();
    c.on('message', (topic, payload) => {
      const text = payload.toString();
      if (topic === topics.gatewayPresence(this.f.gatewayId)) {
        this.presence = text === '' ? null : (JSON.parse(text) as { online: boolean }).online;
        return;
      }
      chain = chain.then(async () =>
        verifyMessage(text, {
          keys: await KeySet.fromJwks({ keys: this.#gwJwks }),
          issuer: this.f.gatewayId,
          audience: CLOUD_ISSUER,
          schema: UplinkEnvelope,
          clock: this.f.clock,
          anySkew: true,
        }).then((v) => {
          if (!v.ok) throw new Error(`uplink does not verify: ${v.code} ${v.detail}`);
          this.rawUplink.push(text);
          // A batch stands for its items, each checked as the cloud checks them.
          let messages: UplinkMessage[];
          if (v.message.type === 'uplink.batch') {
            const c = checkUplinkBatch(v.message);
            if (!c.ok) throw new Error(`uplink batch refused: ${c.code} ${c.detail}`);
            messages = c.items;
          } else messages = [v.message];
          // The cloud deduplicates by jti (QoS 1 and outbox resends are at least once); so does this fake.
          for (const m of messages) if (!this.uplink.some((x) => x.jti === m.jti)) this.uplink.push(m);
          const m = messages[0]!;
          if (m.type === 'resync.request' && m.body.reason === 'startup' && this.answerResync) {
            // as the cloud does, an answer naming the request: it proves the time to a restarted gateway
            const b = m.body;
            const mode = b.lastAppliedSeq >= this.seq ? 'up_to_date' : 'replay';
            const body = { requestId: b.requestId, mode, fromSeq: b.lastAppliedSeq, toSeq: this.seq, snapshotId: null };
            this.send({ type: 'resync.answer', body }).catch(() => {}); // a closed fake cloud answers nothing
          }
        }),
      );
    });
    await waitConnected(c);
    await c.subscribeAsync([topics.gatewayUp(this.f.gatewayId), topics.gatewayPresence(this.f.gatewayId)], { qos: 1 });
    this.#client = c;
  }

  async sign(
    draft: Record<string, unknown>,
    key: SigningKey = this.f.cloudKey,
    issuer = CLOUD_ISSUER,
  ): Promise<{ token: string; message: DownlinkMessage }> {
    return signMessage<DownlinkMessage>(key, issuer, { aud: this.f.gatewayId, cid: newCorrelationId(), ...draft } as never, this.f.clock);
  }

  async publishRaw(payload: string | Buffer): Promise<void> {
    await this.#client!.publishAsync(topics.gatewayDown(this.f.gatewayId), payload, { qos: 1 });
  }

  async send(draft: Record<string, unknown>): Promise<DownlinkMessage> {
    const { token, message } = await this.sign(draft);
    await this.publishRaw(token);
    return message;
  }

  async grant(g: Partial<KeyGrant> = {}, seq = ++this.seq): Promise<Sent<'key.grant'>> {
    return (await this.send({
      type: 'key.grant',
      seq,
      body: { key: baseGrant({ credential: { type: 'pin', digest: this.f.digest(PIN) }, ...g }) },
    })) as Sent<'key.grant'>;
  }
  async revoke(keyId: string, version: number, seq = ++this.seq): Promise<Sent<'key.revoke'>> {
    return (await this.send({ type: 'key.revoke', seq, body: { keyId, version, reason: 'staff_revoked' } })) as Sent<'key.revoke'>;
  }
  async heartbeat(lastSeq = this.seq, uplinkAck?: { seq: number; jti: string }): Promise<DownlinkMessage> {
    return this.send({ type: 'heartbeat', body: { lastSeq, intervalMs: 30_000, ...(uplinkAck && { uplinkAck }) } });
  }

  ofType<T extends UplinkMessage['type']>(type: T): Extract<UplinkMessage, { type: T }>[] {
    return this.uplink.filter((m): m is Extract<UplinkMessage, { type: T }> => m.type === type);
  }

  async close(): Promise<void> {
    await this.#client?.endAsync(true);
  }
}

/** Plays a lock: sends requests and collects decisions and commands from the site broker. */
export class FakeLock {
  readonly decisions = new Map<string, LockDecision>();
  readonly commands: LockCommand[] = [];
  #client: MqttClient | null = null;
  #n = 0;
  /** `clock`: the lock's own clock, which stamps its requests' `at` (the gateway refuses requests older than requestMaxAgeMs). */
  constructor(
    private readonly gatewayId: string,
    readonly lockId = 'lock-1',
    readonly clock: Clock = new ManualClock(T0),
  ) {}

  async connect(url: string): Promise<void> {
    const c = connectMqtt(url, { protocolVersion: 4, clientId: `lock-${this.gatewayId}-${this.lockId}-${counter++}`, clean: true });
    c.on('message', (topic, payload) => {
      const v = JSON.parse(payload.toString()) as unknown;
      if (topic.endsWith('/decision')) {
        const d = LockDecision.parse(v);
        this.decisions.set(d.requestId, d);
      } else this.commands.push(LockCommand.parse(v));
    });
    await waitConnected(c);
    await c.subscribeAsync([topics.lock(this.gatewayId, this.lockId, 'decision'), topics.lock(this.gatewayId, this.lockId, 'command')], {
      qos: 1,
    });
    this.#client = c;
    await this.announcePrivacy(false);
  }

  /** What a lock says on connect: whether its guest has privacy on (until then the gateway counts it as private). */
  async announcePrivacy(active: boolean): Promise<void> {
    await this.publish('event', { eventId: newId(), lockId: this.lockId, at: 0, kind: 'privacy', active });
  }

  async publish(channel: 'request' | 'state' | 'event' | 'presence', payload: unknown, retain = false): Promise<void> {
    await this.#client!.publishAsync(
      topics.lock(this.gatewayId, this.lockId, channel),
      typeof payload === 'string' ? payload : JSON.stringify(payload),
      { qos: 1, retain },
    );
  }

  /** Presents a PIN and waits for the decision. */
  async present(pin: string, requestId = `req-${this.lockId}-${++this.#n}-${counter++}`): Promise<LockDecision> {
    await this.publish('request', { requestId, credential: { type: 'pin', value: pin }, at: this.clock.now() });
    return waitFor(() => this.decisions.get(requestId), `decision for ${requestId}`);
  }

  async close(): Promise<void> {
    await this.#client?.endAsync(true);
  }
}

export interface Running {
  readonly f: SiteFixture;
  readonly gw: Gateway;
  readonly cloud: FakeCloud;
  readonly lock: FakeLock;
  close(): Promise<void>;
}

/** The clock of a lock the gateway keeps set: it reads the gateway's trusted time, whatever the gateway's wall clock reads. */
export function lockClockOf(gw: Gateway): Clock {
  return { now: () => gw.trustedNow() };
}

/** A started gateway (in process, manual clock) with a fake cloud and a fake lock. */
export async function runSite(
  cloudUrl: string,
  siteUrl: string,
  unique: string,
  opts: { overrides?: Partial<GatewayConfigInput>; deps?: Partial<GatewayDeps> } = {},
): Promise<Running> {
  const f = await siteFixture(cloudUrl, siteUrl, unique, opts.overrides);
  const cloud = new FakeCloud(f);
  await cloud.connect(cloudUrl);
  const gw = createGateway(f.config, { clock: f.clock, log: silentLog(), tickMs: 50, ...opts.deps });
  await gw.start();
  await waitFor(() => gw.cloudConnected && gw.siteConnected, 'gateway connected');
  // the fake cloud's answer to the startup resync request proves the time (TrustedTime.proven)
  if (cloud.answerResync) await waitFor(() => gw.timeProven, 'startup resync answered');
  const lock = new FakeLock(f.gatewayId, 'lock-1', lockClockOf(gw));
  await lock.connect(siteUrl);
  return {
    f,
    gw,
    cloud,
    lock,
    async close() {
      await lock.close();
      await cloud.close();
      await gw.stop({ force: true });
      rmSync(f.dir, { recursive: true, force: true });
    },
  };
}

/** The fake cloud grants a key (PIN) and sends a heartbeat; resolves once the gateway applied both (it is fresh). */
export async function provision(
  s: Running,
  g: Parameters<Running['cloud']['grant']>[0] = {},
): Promise<Awaited<ReturnType<Running['cloud']['grant']>>> {
  const m = await s.cloud.grant(g);
  await s.cloud.heartbeat();
  await waitFor(
    () => s.gw.timeProven && s.gw.store.settings().leaseExpiresAt !== null && s.gw.store.settings().appliedSeq >= s.cloud.seq,
    'grant, heartbeat and the startup resync answer applied',
  );
  return m;
}

export const silentLog = () => pino({ level: process.env.LOG_LEVEL ?? 'silent' });
