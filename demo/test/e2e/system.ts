import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCloud, parseConfig as parseCloudConfig, type Cloud } from '@tobira/cloud';
import { createGateway, parseConfig as parseGatewayConfig, type Gateway, type GatewayConfigInput } from '@tobira/gateway';
import {
  connectMqtt,
  createLogger,
  encodeSecret,
  waitConnected,
  generateSigningKeyPair,
  newPairingSecret,
  type Clock,
  type KeyPairJwk,
} from '@tobira/shared';
import pg from 'pg';
import { createTestDatabase, startMqttBackend, waitFor, type MqttTestBroker, type TestDatabase } from '@tobira/shared/testing';
import { startFleet, type Fleet, type FleetOptions } from '@tobira/firmware-sim';
import { startSiteBroker, type SiteBroker } from './site-broker.js';

/**
 * The whole system in one process over real brokers and a real database:
 * cloud (PGlite or PostgreSQL) + gateway (SQLite file) + firmware-sim locks.
 * The gateway reaches the cloud broker through a TCP proxy a test can cut,
 * like an internet outage at the site.
 */
export type Backend = 'embedded' | 'real';
export const backends = (): Backend[] =>
  process.env.TOBIRA_TEST_MQTT_URL && process.env.TOBIRA_TEST_PG_URL ? ['embedded', 'real'] : ['embedded'];

/** Real time plus an offset a test can push forward (time keeps flowing for timers and backoff). */
export class OffsetClock implements Clock {
  #offset = 0;
  now(): number {
    return Date.now() + this.#offset;
  }
  advance(ms: number): void {
    this.#offset += ms;
  }
}

export interface TcpProxy {
  readonly url: string;
  cut(): void;
  restore(): void;
  stop(): Promise<void>;
}

export async function startTcpProxy(target: string): Promise<TcpProxy> {
  const t = new URL(target);
  const sockets = new Set<Socket>();
  let open = true;
  const server: Server = createServer((client) => {
    if (!open) return void client.destroy();
    const upstream = tcpConnect(Number(t.port || 1883), t.hostname);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.once('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const dropAll = () => {
    for (const s of sockets) s.destroy();
  };
  return {
    url: `mqtt://127.0.0.1:${port}`,
    cut() {
      open = false;
      dropAll();
    },
    restore() {
      open = true;
    },
    async stop() {
      open = false;
      dropAll();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** The CONNACK return code a login gets (0: accepted). */
export async function connackCode(url: string, login: { username?: string; password?: string; clientId?: string } = {}): Promise<number> {
  const c = connectMqtt(url, { ...login, reconnectPeriod: 0 });
  try {
    await waitConnected(c, 5000);
    return 0;
  } catch (e) {
    return (e as { code?: number }).code ?? -1;
  } finally {
    c.end(true);
  }
}

// the suite's one polling helper (shared/src/testing/wait.ts), re-exported for the tests that import it from here
export { waitFor };

export interface SystemOptions {
  readonly offlineGraceSeconds?: number;
  readonly locks?: readonly string[];
  /** Pairing secrets the locks use, when a test wants one to differ from the gateway's. */
  readonly lockSecretsOverride?: Readonly<Record<string, Uint8Array>>;
  /** false: the test runs the gateway itself (as a child process from `gatewayConfigFile`). */
  readonly gatewayInProcess?: boolean;
  /** PGlite in a directory (not in memory), so a test can back the cloud's database up and restore it. */
  readonly pgliteOnDisk?: boolean;
  /** The gateway's wall clock is off from the cloud's by this much (ms; the cloud's clock is real time plus the test's offset). */
  readonly gatewayClockOffsetMs?: number;
  /** Gateway config fields a test sets (e.g. uplinkAckTimeoutMs). */
  readonly gatewayOverrides?: Partial<GatewayConfigInput>;
  /**
   * The site broker enforces lock logins (embedded: aedes with the gateway's hooks; real: a Mosquitto of
   * its own from the shipped site config); the gateway and every lock log in with their own.
   */
  readonly siteLogins?: boolean;
  /** Everything the locks see and do (FleetOptions.onActivity). */
  readonly onLockActivity?: FleetOptions['onActivity'];
  /** The site's time zone (default Asia/Tokyo). */
  readonly timeZone?: string;
  /** More cloud settings (env names of cloud/src/config.ts), e.g. the STRIPE_* ones of a local Stripe. */
  readonly cloudEnv?: Readonly<Record<string, string>>;
}

let n = 0;

export class System {
  readonly clock = new OffsetClock();
  readonly log = createLogger('e2e');
  readonly dir = mkdtempSync(join(tmpdir(), 'tobira-e2e-'));
  readonly siteId: string;
  readonly gatewayId: string;
  readonly personId = 'person-1';
  readonly doors: Record<string, string>;
  readonly lockIds: readonly string[];
  readonly secrets: Record<string, Uint8Array>;
  cloud!: Cloud;
  gateway!: Gateway;
  fleet!: Fleet;
  proxy!: TcpProxy;
  gatewayConfig!: GatewayConfigInput;
  gatewayKeyFile = '';
  #brokers: (MqttTestBroker | SiteBroker)[] = [];
  /** The gateway's own login on the site broker (with `siteLogins`). */
  readonly siteGatewayLogin: { readonly username: string; readonly password: string };
  #db!: TestDatabase;
  #signingJwk: string | undefined;
  /** The cloud's KEK, the same across its restarts (the secrets it sealed must open again). */
  readonly #kek = randomBytes(32).toString('base64');
  readonly #extraDatabases = new Set<string>();

  constructor(
    readonly backend: Backend,
    readonly opts: SystemOptions = {},
  ) {
    const tag = `${process.pid}-${++n}-${Math.random().toString(36).slice(2, 6)}`;
    this.siteId = `site-${tag}`;
    this.gatewayId = `gw-${tag}`;
    this.lockIds = opts.locks ?? ['L1', 'L2'];
    this.doors = Object.fromEntries(this.lockIds.map((l) => [l, `door-${tag}-${l}`]));
    this.secrets = Object.fromEntries(this.lockIds.map((l) => [l, newPairingSecret()]));
    this.siteGatewayLogin = { username: `gw.${this.gatewayId}`, password: randomBytes(24).toString('base64url') };
  }

  get cloudBrokerUrl(): string {
    return (this.#brokers[0] as MqttTestBroker).url;
  }
  get siteBrokerUrl(): string {
    return (this.#brokers[1] as SiteBroker).url;
  }

  async start(): Promise<this> {
    const mqtt = this.backend === 'embedded' ? 'aedes' : 'mosquitto';
    const locks = this.lockIds.map((lockId) => ({
      lockId,
      doorId: this.doors[lockId] as string,
      pairingSecret: encodeSecret(this.secrets[lockId] as Uint8Array),
    }));
    const siteBroker = this.opts.siteLogins
      ? await startSiteBroker(
          mqtt,
          { gatewayId: this.gatewayId, locks, site: this.siteGatewayLogin },
          this.log.child({ part: 'site-broker' }),
        )
      : await startMqttBackend(mqtt);
    this.#brokers = [await startMqttBackend(mqtt), siteBroker];
    this.#db = await createTestDatabase(this.backend === 'embedded' ? 'pglite' : 'postgres');
    this.proxy = await startTcpProxy(this.cloudBrokerUrl);
    await this.startCloud();

    const site = await this.cloud.createSite({
      id: this.siteId,
      name: 'E2E site',
      timeZone: this.opts.timeZone ?? 'Asia/Tokyo',
      offlineGraceSeconds: this.opts.offlineGraceSeconds ?? 300,
    });
    expectApplied(site, 'createSite');
    const pair: KeyPairJwk = await generateSigningKeyPair();
    this.gatewayKeyFile = join(this.dir, 'gateway-key.json');
    writeFileSync(this.gatewayKeyFile, JSON.stringify(pair));
    const prov = await this.cloud.registerGateway({ gatewayId: this.gatewayId, siteId: this.siteId, publicJwk: pair.publicJwk });
    const p = expectApplied(prov, 'registerGateway');
    for (const lockId of this.lockIds)
      expectApplied(
        await this.cloud.createDoor({ id: this.doors[lockId] as string, gatewayId: this.gatewayId, name: `Door ${lockId}` }),
        'createDoor',
      );
    expectApplied(await this.cloud.createPerson({ id: this.personId, name: 'Aiko Tanaka' }), 'createPerson');

    this.gatewayConfig = {
      gatewayId: this.gatewayId,
      keyPairFile: this.gatewayKeyFile,
      cloud: { url: this.proxy.url, issuer: p.cloudIssuer, jwks: p.cloudJwks as GatewayConfigInput['cloud']['jwks'] },
      site: { url: this.siteBrokerUrl, ...(this.opts.siteLogins && this.siteGatewayLogin) },
      sqlitePath: join(this.dir, 'gateway.sqlite'),
      offlineGraceSeconds: p.offlineGraceSeconds,
      timeZone: p.timeZone,
      locks,
      credentialPepper: p.credentialPepper,
      http: null,
      resyncIntervalMs: 500,
      statusIntervalMs: 60_000,
      drainTimeoutMs: 2000,
      ...this.opts.gatewayOverrides,
    };
    writeFileSync(this.gatewayConfigFile, JSON.stringify(this.gatewayConfig));
    if (this.opts.gatewayInProcess !== false) await this.startGateway();

    this.fleet = await startFleet({
      url: this.siteBrokerUrl,
      gatewayId: this.gatewayId,
      locks: this.lockIds,
      secrets: { ...this.secrets, ...this.opts.lockSecretsOverride },
      ...(this.opts.siteLogins && { siteLogin: true }),
      ...(this.opts.onLockActivity && { onActivity: this.opts.onLockActivity }),
      clock: this.clock,
      log: this.log.child({ part: 'sim' }),
    });
    return this;
  }

  get #pgliteDir(): string {
    return join(this.dir, 'cloud-pglite');
  }

  /** (Re)starts the cloud on its database (the same signing key every time: the gateway trusts it). */
  /** `clientId`: another MQTT client id than the first run's, whose persistent session (and what the broker queued in it) the cloud then never sees. */
  async startCloud(opts: { clientId?: string } = {}): Promise<void> {
    const database =
      this.#db.backend === 'postgres'
        ? { DATABASE_URL: this.#db.url }
        : { PGLITE_DATA_DIR: this.opts.pgliteOnDisk ? this.#pgliteDir : this.#db.dataDir };
    this.#signingJwk ??= JSON.stringify((await generateSigningKeyPair()).privateJwk);
    this.cloud = createCloud(
      parseCloudConfig({
        ...database,
        MQTT_URL: this.cloudBrokerUrl,
        MQTT_CLIENT_ID: opts.clientId ?? `cloud-${this.gatewayId}`,
        CLOUD_SIGNING_JWK: this.#signingJwk,
        TOBIRA_KEK: this.#kek,
        HEARTBEAT_INTERVAL_MS: '250',
        DISPATCH_POLL_MS: '500',
        DISPATCH_BACKOFF_BASE_MS: '100',
        DISPATCH_BACKOFF_MAX_MS: '1000',
        ...this.opts.cloudEnv,
      }),
      { clock: this.clock, log: this.log.child({ part: 'cloud' }) },
    );
    await this.cloud.start();
  }

  async stopCloud(): Promise<void> {
    await this.cloud.stop();
  }

  /**
   * A backup of the cloud's database, as an operator takes one (the cloud is
   * stopped first): a template copy in PostgreSQL, a copy of the PGlite
   * directory (needs `pgliteOnDisk`).
   */
  async backupCloudDatabase(): Promise<void> {
    await this.#copyDatabase('backup');
  }

  /** Restores the backup over the cloud's database (the cloud is stopped first). */
  async restoreCloudDatabase(): Promise<void> {
    await this.#copyDatabase('restore');
  }

  async #copyDatabase(direction: 'backup' | 'restore'): Promise<void> {
    const db = this.#db;
    if (db.backend === 'pglite') {
      if (!this.opts.pgliteOnDisk) throw new Error('backup/restore of PGlite needs pgliteOnDisk');
      const [from, to] = direction === 'backup' ? [this.#pgliteDir, `${this.#pgliteDir}.bak`] : [`${this.#pgliteDir}.bak`, this.#pgliteDir];
      rmSync(to, { recursive: true, force: true });
      cpSync(from, to, { recursive: true });
      return;
    }
    const live = new URL(db.url).pathname.slice(1);
    const bak = `${live}_bak`;
    // CREATE DATABASE ... TEMPLATE needs nobody connected to the source: work from the maintenance database
    const maint = new URL(db.url);
    maint.pathname = '/postgres';
    const c = new pg.Client({ connectionString: maint.toString() });
    await c.connect();
    try {
      if (direction === 'backup') {
        await c.query(`DROP DATABASE IF EXISTS ${bak}`);
        await c.query(`CREATE DATABASE ${bak} TEMPLATE ${live}`);
      } else {
        await c.query(`DROP DATABASE ${live} WITH (FORCE)`);
        await c.query(`CREATE DATABASE ${live} TEMPLATE ${bak}`);
      }
    } finally {
      await c.end();
    }
    this.#extraDatabases.add(bak);
  }

  async #dropExtraDatabases(): Promise<void> {
    if (this.#db?.backend !== 'postgres' || this.#extraDatabases.size === 0) return;
    const maint = new URL(this.#db.url);
    maint.pathname = '/postgres';
    const c = new pg.Client({ connectionString: maint.toString() });
    await c.connect();
    try {
      for (const name of this.#extraDatabases) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    } finally {
      await c.end();
    }
  }

  get gatewayConfigFile(): string {
    return join(this.dir, 'gateway.json');
  }

  async startGateway(): Promise<void> {
    await this.startGatewayOnly();
    // Until its first proven sync (a heartbeat it is caught up with) a gateway fails closed: wait for it.
    await this.cloud.sendHeartbeats();
    await waitFor(() => (this.gateway.store.settings().leaseExpiresAt ?? 0) > this.clock.now(), "the gateway's first freshness lease");
  }

  /** Starts the in-process gateway without waiting for its first lease (it fails closed until then); its wall clock off by `clockOffsetMs` when given. */
  async startGatewayOnly(clockOffsetMs?: number): Promise<void> {
    const offset = clockOffsetMs ?? this.opts.gatewayClockOffsetMs ?? 0;
    const clock: Clock = offset === 0 ? this.clock : { now: () => this.clock.now() + offset };
    this.gateway = createGateway(parseGatewayConfig(this.gatewayConfig), { clock, log: this.log.child({ part: 'gateway' }) });
    await this.gateway.start();
  }

  /** Issues a PIN key for the given locks' doors, valid from an hour ago for a day. */
  async issuePin(pin: string, locks: readonly string[] = this.lockIds, extra: { offlineCapable?: boolean; cid?: string } = {}) {
    const now = this.clock.now();
    return this.cloud.issueKey({
      personId: this.personId,
      doors: locks.map((l) => this.doors[l] as string),
      credential: { type: 'pin', value: pin },
      validFrom: now - 3_600_000,
      validUntil: now + 86_400_000,
      ...(extra.offlineCapable !== undefined && { offlineCapable: extra.offlineCapable }),
      ...(extra.cid !== undefined && { cid: extra.cid as never }),
    });
  }

  async keyStatus(keyId: string): Promise<string | undefined> {
    return (await this.cloud.getKey(keyId))?.status;
  }

  async waitKeyStatus(keyId: string, status: string): Promise<void> {
    await waitFor(async () => (await this.keyStatus(keyId)) === status, `key ${keyId} to become ${status}`);
  }

  async stop(): Promise<void> {
    await this.fleet?.stop().catch(() => {});
    await this.gateway?.stop({ force: true }).catch(() => {});
    await this.cloud?.stop().catch(() => {});
    await this.proxy?.stop().catch(() => {});
    for (const b of this.#brokers) await b.stop().catch(() => {});
    await this.#db?.drop().catch(() => {});
    await this.#dropExtraDatabases().catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function expectApplied<T>(o: { status: string; code: string } & ({ state: T } | object), what: string): T {
  if (o.status !== 'applied' || !('state' in o)) throw new Error(`${what}: ${o.status} ${o.code}`);
  return o.state;
}
