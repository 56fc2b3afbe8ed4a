import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { encodeSecret, generateSigningKeyPair, newPairingSecret } from '@tobira/shared';
import pg from 'pg';
import type { History } from './history.js';
import { Mosquitto } from './mosquitto.js';
import { Child, tsxArgs } from './procs.js';
import { startProxy, type Proxy } from './proxy.js';

/**
 * The system under test, every part its own process (docs/reliability.md):
 * PostgreSQL (a database of the run's own, reached through a proxy), the
 * run's Mosquitto, the cloud (`cloud/src/main.ts`), each gateway
 * (`gateway/src/main.ts`, its own SQLite file and wall-clock offset file) and
 * a lock fleet per gateway (`chaos/fleet-child.ts`). Every client reaches the
 * broker through a proxy of its own, so each link can be cut on its own.
 */
export const REPO = resolve(import.meta.dirname, '..');

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const a = s.address();
  await new Promise<void>((r) => s.close(() => r()));
  return typeof a === 'object' && a !== null ? a.port : 0;
}

export interface ClusterOptions {
  readonly dir: string;
  readonly seed: number;
  readonly gateways: number;
  readonly locksPerGateway: number;
  readonly offlineGraceSeconds: number;
  readonly pgUrl: string;
  readonly random: () => number;
  /** Extra env for the gateways (prove-bugs sets nothing here; kept for targeted runs). */
  readonly gatewayEnv?: Record<string, string>;
}

export interface GatewayNode {
  readonly id: string;
  readonly dir: string;
  readonly sqlitePath: string;
  readonly clockFile: string;
  readonly httpPort: number;
  readonly locks: readonly string[];
  readonly doors: Record<string, string>;
  readonly cloudLink: Proxy;
  readonly siteLink: Proxy;
  readonly fleetLink: Proxy;
  readonly child: Child;
  readonly fleet: Child;
  clockOffsetMs: number;
  /** Real time (ms) until which this gateway's trusted time stays ahead after its clock was stepped forward. */
  aheadUntil: number;
}

interface Json {
  readonly [k: string]: unknown;
}

const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

export class Cluster {
  readonly token = `tbr_${randomBytes(32).toString('base64url')}`;
  readonly siteId: string;
  readonly personId = 'chaos-person';
  readonly gateways: GatewayNode[] = [];
  mosquitto!: Mosquitto;
  mosquittoPersistence = true;
  pgLink!: Proxy;
  cloudLink!: Proxy;
  cloud!: Child;
  apiUrl = '';
  dbName: string;
  /** Fleet replies by request id. */
  readonly #pending = new Map<string, (r: Json) => void>();

  constructor(
    readonly o: ClusterOptions,
    readonly h: History,
  ) {
    this.siteId = `chaos-${o.seed}`;
    this.dbName = `chaos_${process.pid}_${o.seed}`;
  }

  get links(): { name: string; proxy: Proxy }[] {
    return [
      { name: 'cloud-pg', proxy: this.pgLink },
      { name: 'cloud-mqtt', proxy: this.cloudLink },
      ...this.gateways.flatMap((g) => [
        { name: `${g.id}-cloud`, proxy: g.cloudLink },
        { name: `${g.id}-site`, proxy: g.siteLink },
        { name: `${g.id}-fleet`, proxy: g.fleetLink },
      ]),
    ];
  }

  async start(): Promise<void> {
    const { dir } = this.o;
    // 1. PostgreSQL: a database of the run's own
    const admin = new pg.Client({ connectionString: this.o.pgUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${this.dbName} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${this.dbName}`);
    await admin.end();
    const pgu = new URL(this.o.pgUrl);
    this.pgLink = await startProxy(pgu.hostname, Number(pgu.port || 5432), { random: this.o.random });
    const cloudDbUrl = new URL(this.o.pgUrl);
    cloudDbUrl.host = `127.0.0.1:${this.pgLink.port}`;
    cloudDbUrl.pathname = `/${this.dbName}`;

    // 2. the broker
    this.mosquitto = new Mosquitto(join(dir, 'mosquitto'), await freePort());
    await this.mosquitto.start(true);
    this.h.add('runner', 'broker-start', { persistence: true, port: this.mosquitto.port });
    const mqttProxy = () => startProxy('127.0.0.1', this.mosquitto.port, { random: this.o.random, mqtt: true });
    this.cloudLink = await mqttProxy();

    // 3. the cloud
    const apiPort = await freePort();
    this.apiUrl = `http://127.0.0.1:${apiPort}`;
    const signing = (await generateSigningKeyPair()).privateJwk;
    const kek = randomBytes(32).toString('base64');
    this.cloud = new Child(
      'cloud',
      process.execPath,
      tsxArgs(join(REPO, 'cloud/src/main.ts')),
      {
        DATABASE_URL: cloudDbUrl.toString(),
        MQTT_URL: `mqtt://127.0.0.1:${this.cloudLink.port}`,
        MQTT_CLIENT_ID: `chaos-cloud-${this.o.seed}`,
        CLOUD_SIGNING_JWK: JSON.stringify(signing),
        TOBIRA_KEK: kek,
        HEARTBEAT_INTERVAL_MS: '1000',
        DISPATCH_POLL_MS: '500',
        DISPATCH_BACKOFF_BASE_MS: '200',
        DISPATCH_BACKOFF_MAX_MS: '2000',
        PUBLISH_TIMEOUT_MS: '3000',
        EXPIRE_SWEEP_MS: '1000',
        ADMIN_API_PORT: String(apiPort),
        TOBIRA_BOOTSTRAP_ADMIN_TOKEN: this.token,
        TOBIRA_RATE_LIMIT_IP_MAX: '1000000',
        LOG_LEVEL: 'info',
      },
      (l) => this.#cloudLine(l),
      REPO,
    );
    this.#recordExits(this.cloud);
    await this.startCloud();

    // 4. the site, its gateways, doors and one person
    await this.api('POST', '/sites', {
      id: this.siteId,
      name: 'Chaos site',
      timeZone: 'Asia/Tokyo',
      offlineGraceSeconds: this.o.offlineGraceSeconds,
    });
    await this.api('POST', '/people', { id: this.personId, name: 'Chaos Person', siteId: this.siteId });
    for (let g = 1; g <= this.o.gateways; g++) await this.#addGateway(`gw-${this.o.seed}-${g}`);
  }

  async startCloud(): Promise<void> {
    await this.cloud.start((l) => l.includes('"cloud started"'), 60_000);
    this.h.add('cloud', 'start', { starts: this.cloud.starts });
  }

  #cloudLine(l: string): void {
    if (!l.startsWith('{')) return;
    try {
      const o: unknown = JSON.parse(l);
      if (isObj(o) && typeof o.level === 'number' && o.level >= 40)
        this.h.add('cloud', o.level >= 50 ? 'log-error' : 'log-warn', { msg: o.msg, code: o.code ?? null, err: o.err ?? null });
    } catch {
      // not JSON: ignore
    }
  }

  async #addGateway(id: string): Promise<void> {
    const gdir = join(this.o.dir, id);
    mkdirSync(gdir, { recursive: true });
    const pair = await generateSigningKeyPair();
    const keyFile = join(gdir, 'key.json');
    writeFileSync(keyFile, JSON.stringify(pair));
    const prov = await this.api('POST', '/gateways', { gatewayId: id, siteId: this.siteId, publicJwk: pair.publicJwk });
    const p = isObj(prov.body) && isObj(prov.body.provisioning) ? prov.body.provisioning : prov.body;
    if (!isObj(p)) throw new Error(`provisioning of ${id}: ${JSON.stringify(prov.body)}`);
    const locks = Array.from({ length: this.o.locksPerGateway }, (_, i) => `L${i + 1}`);
    const doors = Object.fromEntries(locks.map((l) => [l, `${id}-door-${l}`]));
    const secrets = Object.fromEntries(locks.map((l) => [l, encodeSecret(newPairingSecret())]));
    for (const l of locks) await this.api('POST', '/doors', { id: doors[l], gatewayId: id, name: `Door ${l}` });
    const cloudLink = await startProxy('127.0.0.1', this.mosquitto.port, { random: this.o.random, mqtt: true });
    const siteLink = await startProxy('127.0.0.1', this.mosquitto.port, { random: this.o.random, mqtt: true });
    const fleetLink = await startProxy('127.0.0.1', this.mosquitto.port, { random: this.o.random, mqtt: true });
    const httpPort = await freePort();
    const sqlitePath = join(gdir, 'gateway.sqlite');
    const clockFile = join(gdir, 'clock-offset');
    writeFileSync(clockFile, '0');
    const config = {
      gatewayId: id,
      keyPairFile: keyFile,
      cloud: { url: `mqtt://127.0.0.1:${cloudLink.port}`, issuer: p.cloudIssuer, jwks: p.cloudJwks },
      site: { url: `mqtt://127.0.0.1:${siteLink.port}` },
      sqlitePath,
      offlineGraceSeconds: p.offlineGraceSeconds,
      timeZone: p.timeZone,
      locks: locks.map((l) => ({ lockId: l, doorId: doors[l], pairingSecret: secrets[l] })),
      credentialPepper: p.credentialPepper,
      http: { host: '127.0.0.1', port: httpPort },
      // the workload presents many PINs, wrong ones on purpose: lockouts would hide the decisions under test
      lockout: { limit: 0, cooldownSeconds: 1 },
      siteLockout: { limit: 0, windowSeconds: 1, cooldownSeconds: 1 },
      requestRate: { burst: 1000, perSecond: 1000 },
      storage: { minFreeBytes: 0, checkIntervalMs: 30_000 },
      resyncIntervalMs: 1000,
      uplinkAckTimeoutMs: 5000,
      statusIntervalMs: 5000,
      drainTimeoutMs: 1000,
    };
    const configFile = join(gdir, 'gateway.json');
    writeFileSync(configFile, JSON.stringify(config, null, 2));
    const node: GatewayNode = {
      id,
      dir: gdir,
      sqlitePath,
      clockFile,
      httpPort,
      locks,
      doors,
      cloudLink,
      siteLink,
      fleetLink,
      clockOffsetMs: 0,
      aheadUntil: 0,
      child: new Child(
        id,
        process.execPath,
        tsxArgs(join(REPO, 'gateway/src/main.ts'), '--config', configFile),
        { TOBIRA_CLOCK_OFFSET_FILE: clockFile, LOG_LEVEL: 'info', ...this.o.gatewayEnv },
        (l) => this.#gatewayLine(id, l),
        REPO,
      ),
      fleet: new Child(
        `${id}-fleet`,
        process.execPath,
        tsxArgs(join(REPO, 'chaos/fleet-child.ts')),
        {
          CHAOS_FLEET: JSON.stringify({
            url: `mqtt://127.0.0.1:${fleetLink.port}`,
            gatewayId: id,
            locks,
            secrets,
            replayDir: join(gdir, 'lock-replay'),
          }),
        },
        (l) => this.#fleetLine(id, l),
        REPO,
      ),
    };
    this.#recordExits(node.child);
    this.#recordExits(node.fleet);
    this.gateways.push(node);
    await this.startGateway(node);
    await this.startFleet(node);
  }

  /**
   * A process that dies by itself once it said it was ready (not the injector's SIGKILL, a crash point's or a
   * stop's SIGTERM) is a finding: its exit and the end of its stderr go in the history as `exit`. One that
   * exits before it was ready is a start that failed (`start-failed`, its stderr too): noted, not a crash.
   */
  #recordExits(c: Child): void {
    c.onExit = (code, signal, stderr, afterReady) => {
      if (signal === 'SIGKILL' || signal === 'SIGTERM' || code === 0) return;
      this.h.add(c.name, afterReady ? 'exit' : 'start-failed', { code, signal, stderr });
    };
  }

  async startGateway(g: GatewayNode, crashAt?: string): Promise<void> {
    g.child.env = { ...g.child.env, TOBIRA_CRASH_AT: crashAt ?? '' };
    await g.child.start((l) => l.includes('"tobira-gateway ready"'), 60_000);
    this.h.add(g.id, 'start', { starts: g.child.starts, crashAt: crashAt ?? null });
  }

  async startFleet(g: GatewayNode): Promise<void> {
    await g.fleet.start((l) => l.includes('"ev":"ready"'), 60_000);
    this.h.add(`${g.id}-fleet`, 'start', { starts: g.fleet.starts });
  }

  #gatewayLine(id: string, l: string): void {
    if (!l.startsWith('{')) return;
    let o: unknown;
    try {
      o = JSON.parse(l);
    } catch {
      return;
    }
    if (!isObj(o)) return;
    // the gateway's own record of each applied heartbeat: `time` is its (possibly wrong) wall clock
    // (`applied` renewed the lease; `REPORT_IGNORED`: behind, nothing renewed), with the heartbeat's last seq
    // and the seq the gateway had applied, so the checker sees a lease given over a gap
    if (o.msg === 'inbox message applied' && o.type === 'heartbeat')
      this.h.add(id, 'heartbeat', {
        result: o.result,
        code: o.code,
        lastSeq: o.lastSeq ?? null,
        appliedSeq: o.appliedSeq ?? null,
        nodeAt: o.time,
      });
    // a heartbeat that found it behind counts once the gap is filled: a renewal too
    else if (o.msg === 'behind heartbeat settled: lease extended')
      this.h.add(id, 'lease-settled', { lastSeq: o.lastSeq ?? null, appliedSeq: o.appliedSeq ?? null, nodeAt: o.time });
    else if (typeof o.level === 'number' && o.level >= 40)
      this.h.add(id, o.level >= 50 ? 'log-error' : 'log-warn', { msg: o.msg, code: o.code ?? null, err: o.err ?? null });
  }

  #fleetLine(id: string, l: string): void {
    let o: unknown;
    try {
      o = JSON.parse(l);
    } catch {
      return;
    }
    if (!isObj(o)) return;
    if (o.ev === 'command')
      this.h.add(`${id}-fleet`, 'lock-command', {
        gatewayId: id,
        lockId: o.lockId,
        commandId: o.commandId,
        result: o.result,
        code: o.code,
        nodeAt: o.wallAt,
      });
    else if (o.ev === 'result' && typeof o.id === 'string') {
      const done = this.#pending.get(o.id);
      this.#pending.delete(o.id);
      done?.(o);
    }
  }

  /** Presents a PIN at a lock through its fleet child; resolves with the fleet's answer (or a timeout/down marker). */
  present(g: GatewayNode, lockId: string, pin: string): Promise<Json> {
    return this.#ask(g, { op: 'present', lockId, pin });
  }

  /**
   * The guest inside turns privacy on or off at a lock (the sim's thumb-turn); resolves with the fleet's answer
   * (`result.privacy`: the lock's own state after it), or a timeout/down marker.
   */
  setPrivacy(g: GatewayNode, lockId: string, on: boolean): Promise<Json> {
    return this.#ask(g, { op: 'privacy', lockId, on });
  }

  #ask(g: GatewayNode, cmd: Json): Promise<Json> {
    const id = randomBytes(6).toString('hex');
    if (!g.fleet.running) return Promise.resolve({ error: 'fleet down' });
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        resolve({ error: 'no answer from the fleet' });
      }, 8000);
      this.#pending.set(id, (r) => {
        clearTimeout(timer);
        resolve(r);
      });
      g.fleet.write(JSON.stringify({ ...cmd, id }));
    });
  }

  async api(method: string, path: string, body?: unknown, timeoutMs = 5000): Promise<{ status: number; body: unknown }> {
    const res = await fetch(`${this.apiUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body !== undefined && { 'content-type': 'application/json' }),
      },
      ...(body !== undefined && { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // keep the text
    }
    if (method === 'POST' && res.status >= 500 && path !== '/keys' && !path.endsWith('/revoke'))
      throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return { status: res.status, body: parsed };
  }

  /** Steps gateway `g`'s wall clock by `offsetMs`, or stops it (`stopped`: it reads what it read now, from now on). */
  setClock(g: GatewayNode, offsetMs: number, stopped = false): void {
    g.clockOffsetMs = offsetMs;
    writeFileSync(g.clockFile, stopped ? `@${Date.now() + offsetMs}` : String(offsetMs));
  }

  /** A client of the run's database that bypasses the proxy (the injector's stuck-row faults). */
  async directDb<T>(f: (c: pg.Client) => Promise<T>): Promise<T> {
    const u = new URL(this.o.pgUrl);
    u.pathname = `/${this.dbName}`;
    const c = new pg.Client({ connectionString: u.toString() });
    await c.connect();
    try {
      return await f(c);
    } finally {
      await c.end();
    }
  }

  async stop(): Promise<void> {
    for (const g of this.gateways) {
      await g.fleet.kill('SIGKILL').catch(() => {});
      await g.child.kill('SIGKILL').catch(() => {});
    }
    await this.cloud?.kill('SIGKILL').catch(() => {});
    await this.mosquitto?.kill().catch(() => {});
    for (const l of this.links) await l.proxy?.stop().catch(() => {});
    try {
      const admin = new pg.Client({ connectionString: this.o.pgUrl });
      await admin.connect();
      await admin.query(`DROP DATABASE IF EXISTS ${this.dbName} WITH (FORCE)`);
      await admin.end();
    } catch {
      // best effort
    }
  }
}
