import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { connectMqtt, generateSigningKeyPair, topics, waitConnected } from '@tobira/shared';
import type { MqttClient } from 'mqtt';

/**
 * The pieces the end-to-end scenarios share: a scratch PostgreSQL database,
 * cloud processes (core + admin API, `cloud-process.ts`), gateway processes
 * (`gateway-process.ts`) provisioned through the admin API, and simulated
 * locks that speak the lock protocol on the site broker.
 */

const CLOUD_PROCESS = fileURLToPath(new URL('./cloud-process.ts', import.meta.url));
const GATEWAY_PROCESS = fileURLToPath(new URL('./gateway-process.ts', import.meta.url));

/** A database of its own for one scenario (`bench_<pid>_<time>`), dropped afterwards. */
export async function scratchDatabase(baseUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `bench_${process.pid}_${Date.now().toString(36)}_${randomBytes(2).toString('hex')}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: baseUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

function forkReady(file: string, env: Record<string, string>, prof: string | undefined): Promise<{ child: ChildProcess; hello: unknown }> {
  const child = fork(file, [], {
    execArgv: ['--import', 'tsx', ...(prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : [])],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (m) => resolve({ child, hello: m }));
    child.once('exit', (code) => reject(new Error(`${file} exited (${code}) before it was ready`)));
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.send('stop');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

export interface CloudProcess {
  readonly url: string;
  readonly api: Api;
  stop(): Promise<void>;
}

/** A cloud replica in its own process. `env` is its environment (DATABASE_URL, MQTT_URL, CLOUD_SIGNING_JWK, ...). */
export async function startCloudProcess(
  env: Record<string, string>,
  token = `tbr_${randomBytes(32).toString('base64url')}`,
): Promise<CloudProcess> {
  const { child, hello } = await forkReady(
    CLOUD_PROCESS,
    { TOBIRA_BENCH_CLOUD_ENV: JSON.stringify(env), TOBIRA_BENCH_ADMIN_TOKEN: token },
    process.env.TOBIRA_BENCH_CPU_PROF_CLOUD,
  );
  const url = typeof hello === 'object' && hello !== null && 'url' in hello && typeof hello.url === 'string' ? hello.url : '';
  if (url === '') throw new Error(`cloud process: ${JSON.stringify(hello)}`);
  return { url, api: new Api(url, token), stop: () => stopChild(child) };
}

/** The cloud's environment for the bench: a signing key shared by its replicas, MQTT, the database. */
export async function cloudEnv(databaseUrl: string, mqttUrl: string, extra: Record<string, string> = {}): Promise<Record<string, string>> {
  const key = await generateSigningKeyPair();
  return {
    DATABASE_URL: databaseUrl,
    MQTT_URL: mqttUrl,
    CLOUD_SIGNING_JWK: JSON.stringify(key.privateJwk),
    TOBIRA_KEK: randomBytes(32).toString('base64'),
    MQTT_CLIENT_ID: `bench-cloud-${randomBytes(4).toString('hex')}`,
    MQTT_CLEAN_SESSION: 'true',
    DISPATCH_POLL_MS: '1000',
    ...extra,
  };
}

/** The admin API over HTTP (docs/api.md), as an integrator would call it. */
export class Api {
  constructor(
    readonly url: string,
    readonly token: string,
  ) {}

  async call(method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
    const res = await fetch(`${this.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    const parsed: unknown = text === '' ? {} : JSON.parse(text);
    return { status: res.status, body: typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {} };
  }

  async ok(method: 'GET' | 'POST', path: string, body?: unknown): Promise<Record<string, unknown>> {
    const r = await this.call(method, path, body);
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }
}

export interface ProvisionedGateway {
  readonly gatewayId: string;
  readonly siteId: string;
  readonly personId: string;
  readonly doors: readonly string[];
  readonly locks: readonly string[];
  /** The gateway's config (gateway-process.ts / the daemon's file). */
  readonly config: Record<string, unknown>;
}

/**
 * A site, a gateway registered with its public key, one door per lock and a
 * person, all through the admin API; answers the gateway's config from the
 * provisioning answer. Lockouts off and the per-lock request rate high: the
 * bench measures the path, not the guards.
 */
export async function provisionGateway(
  api: Api,
  dir: string,
  o: { gatewayId: string; locks: number; mqttUrl: string; siteId?: string },
): Promise<ProvisionedGateway> {
  const siteId = o.siteId ?? `site-${o.gatewayId}`;
  if (o.siteId === undefined)
    await api.ok('POST', '/sites', { id: siteId, name: siteId, timeZone: 'Asia/Tokyo', offlineGraceSeconds: 300 });
  const pair = await generateSigningKeyPair();
  const keyPairFile = join(dir, `${o.gatewayId}.key.json`);
  writeFileSync(keyPairFile, JSON.stringify(pair));
  const prov = await api.ok('POST', '/gateways', { gatewayId: o.gatewayId, siteId, publicJwk: pair.publicJwk });
  const p = prov.provisioning;
  if (typeof p !== 'object' || p === null) throw new Error('no provisioning in the answer');
  const pv = p as Record<string, unknown>;
  const locks = Array.from({ length: o.locks }, (_, i) => `lock-${i + 1}`);
  const doors = locks.map((_, i) => `${o.gatewayId}-door-${i + 1}`);
  await Promise.all(doors.map((d, i) => api.ok('POST', '/doors', { id: d, gatewayId: o.gatewayId, name: `Door ${i + 1}` })));
  const personId = `${o.gatewayId}-person`;
  await api.ok('POST', '/people', { id: personId, name: 'Bench', siteId });
  const secret = () => randomBytes(32).toString('base64url');
  return {
    gatewayId: o.gatewayId,
    siteId,
    personId,
    doors,
    locks,
    config: {
      gatewayId: o.gatewayId,
      keyPairFile,
      cloud: { url: o.mqttUrl, issuer: pv.cloudIssuer, jwks: pv.cloudJwks },
      site: { url: o.mqttUrl },
      sqlitePath: join(dir, `${o.gatewayId}.sqlite`),
      offlineGraceSeconds: pv.offlineGraceSeconds,
      timeZone: pv.timeZone,
      locks: locks.map((lockId, i) => ({ lockId, doorId: doors[i], pairingSecret: secret() })),
      credentialPepper: pv.credentialPepper,
      http: null,
      lockout: { limit: 0, cooldownSeconds: 60 },
      // polling the lock side with a PIN not yet granted (or already revoked) is a stream of wrong PINs: guards off
      siteLockout: { limit: 0, windowSeconds: 600, cooldownSeconds: 300 },
      requestRate: { burst: 1_000_000, perSecond: 1000 },
    },
  };
}

export interface GatewayProcess {
  rssMb(): Promise<number>;
  stop(): Promise<void>;
}

/** One process running the given gateway configs. */
export async function startGatewayProcess(configs: readonly Record<string, unknown>[]): Promise<GatewayProcess> {
  const { child, hello } = await forkReady(
    GATEWAY_PROCESS,
    { TOBIRA_BENCH_GATEWAY_CONFIG: JSON.stringify(configs) },
    process.env.TOBIRA_BENCH_CPU_PROF,
  );
  if (hello !== 'ready') throw new Error(`gateway process: ${JSON.stringify(hello)}`);
  return {
    rssMb: () =>
      new Promise((resolve) => {
        const on = (m: unknown) => {
          if (typeof m === 'object' && m !== null && 'rss' in m && typeof m.rss === 'number') {
            child.off('message', on);
            resolve(Math.round((m.rss / 2 ** 20) * 10) / 10);
          }
        };
        child.on('message', on);
        child.send('rss');
      }),
    stop: () => stopChild(child),
  };
}

export interface Decision {
  readonly allowed: boolean;
  readonly code: string;
  /** performance.now() when the decision arrived at the lock. */
  readonly at: number;
}

/**
 * The simulated locks of one gateway on the site broker, over one MQTT
 * connection (a real lock has its own; one connection keeps a big fleet
 * within the machine's sockets and CPU). `present` sends a PIN request like
 * a lock and resolves with the gateway's decision as the lock saw it.
 */
export class Locks {
  readonly #c: MqttClient;
  readonly #gatewayId: string;
  readonly #waiting = new Map<string, (d: Decision) => void>();
  #n = 0;

  private constructor(c: MqttClient, gatewayId: string) {
    this.#c = c;
    this.#gatewayId = gatewayId;
    c.on('message', (_topic, payload) => {
      const at = performance.now();
      const v: unknown = JSON.parse(payload.toString());
      if (typeof v !== 'object' || v === null || !('requestId' in v) || typeof v.requestId !== 'string') return;
      const resolve = this.#waiting.get(v.requestId);
      if (!resolve) return;
      this.#waiting.delete(v.requestId);
      resolve({ allowed: 'allowed' in v && v.allowed === true, code: 'code' in v && typeof v.code === 'string' ? v.code : '', at });
    });
  }

  static async open(url: string, gatewayId: string, locks: readonly string[]): Promise<Locks> {
    const c = connectMqtt(url, { clientId: `bench-locks-${gatewayId}-${randomBytes(3).toString('hex')}` });
    await waitConnected(c);
    for (const lockId of locks) await c.subscribeAsync(topics.lock(gatewayId, lockId, 'decision'), { qos: 1 });
    return new Locks(c, gatewayId);
  }

  present(lockId: string, pin: string, timeoutMs = 5000): Promise<Decision | null> {
    const requestId = `bench-${this.#n++}-${randomBytes(3).toString('hex')}`;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(requestId);
        resolve(null);
      }, timeoutMs);
      this.#waiting.set(requestId, (d) => {
        clearTimeout(timer);
        resolve(d);
      });
      this.#c.publish(
        topics.lock(this.#gatewayId, lockId, 'request'),
        JSON.stringify({ requestId, credential: { type: 'pin', value: pin }, at: Date.now() }),
        { qos: 1 },
        () => {},
      );
    });
  }

  async close(): Promise<void> {
    await this.#c.endAsync(true);
  }
}

/**
 * Polls the lock side until `want(decision)`; answers when it first held
 * (performance.now()), or null after `timeoutMs`. One request at a time, the
 * next `everyMs` after the previous answer: every refused request is an
 * access event the gateway sends up, and polling back to back would flood
 * the cloud's inbox with them (docs/performance.md).
 */
export async function pollLock(
  locks: Locks,
  lockId: string,
  pin: string,
  want: (d: Decision) => boolean,
  timeoutMs = 30_000,
  everyMs = 5,
): Promise<number | null> {
  const until = performance.now() + timeoutMs;
  let last = 'no answer';
  while (performance.now() < until) {
    const d = await locks.present(lockId, pin, 2000);
    if (d && want(d)) return d.at;
    last = d?.code ?? 'no answer';
    await new Promise((r) => setTimeout(r, everyMs));
  }
  console.error(`lock ${lockId}, PIN ${pin}: still not the awaited decision after ${timeoutMs} ms (last: ${last})`);
  return null;
}

export function tempDir(prefix: string): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
