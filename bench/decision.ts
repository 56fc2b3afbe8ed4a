import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import {
  asDoorId,
  asKeyId,
  asPersonId,
  connectMqtt,
  credentialDigest,
  encodeSecret,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  newPairingSecret,
  signMessage,
  systemClock,
  topics,
  waitConnected,
  type DownlinkMessage,
} from '@tobira/shared';
import type { MqttClient } from 'mqtt';
import { percentiles, type Percentiles } from './results.js';

/**
 * The door decision end to end: a lock presents a PIN on the site broker →
 * a real gateway (its own process, SQLite WAL synchronous=FULL) decides,
 * commits and publishes → the unlock command arrives at the lock. The locks
 * are bench clients speaking the lock protocol (one MQTT connection per
 * lock); latency is from the request's publish to the command's arrival,
 * matched through the decision's commandId.
 */
export interface DecisionRun {
  /** Requests per second offered (open loop: sent on schedule whether or not answers came). */
  readonly rate: number;
  readonly seconds: number;
}
export interface DecisionResult {
  readonly offered: number;
  readonly sent: number;
  readonly answered: number;
  readonly sentPerSecond: number;
  readonly latency: Percentiles;
}

export interface DecisionBench {
  run(r: DecisionRun): Promise<DecisionResult>;
  stop(): Promise<void>;
}

const PIN = '246810';
const GATEWAY_ID = 'gw-bench';
const GATEWAY_PROCESS = fileURLToPath(new URL('./gateway-process.ts', import.meta.url));

export async function startDecisionBench(brokerUrl: string, lockCount: number): Promise<DecisionBench> {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-bench-gw-'));
  const cloudPair = await generateSigningKeyPair();
  const gwPair = await generateSigningKeyPair();
  writeFileSync(join(dir, 'key.json'), JSON.stringify(gwPair));
  const pepper = newPairingSecret();
  const lockIds = Array.from({ length: lockCount }, (_, i) => `lock-${i + 1}`);
  const config = {
    gatewayId: GATEWAY_ID,
    keyPairFile: join(dir, 'key.json'),
    cloud: { url: brokerUrl, jwks: { keys: [cloudPair.publicJwk] } },
    site: { url: brokerUrl },
    sqlitePath: join(dir, 'gw.sqlite'),
    locks: lockIds.map((lockId, i) => ({ lockId, doorId: `door-${i + 1}`, pairingSecret: encodeSecret(newPairingSecret()) })),
    credentialPepper: encodeSecret(pepper),
    http: null,
    lockout: { limit: 0, cooldownSeconds: 60 },
    // Measures decisions, not the flood guard (the highest per-lock rate the config allows; 20 locks share the load).
    requestRate: { burst: 1_000_000, perSecond: 1000 },
  };
  const child: ChildProcess = fork(GATEWAY_PROCESS, [], {
    // TOBIRA_BENCH_CPU_PROF=<dir>: a CPU profile of the gateway process (docs/performance.md reads one)
    execArgv: [
      '--import',
      'tsx',
      ...(process.env.TOBIRA_BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.TOBIRA_BENCH_CPU_PROF}`] : []),
    ],
    env: { ...process.env, TOBIRA_BENCH_GATEWAY_CONFIG: JSON.stringify(config) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  await new Promise<void>((resolve, reject) => {
    child.once('message', (m) => (m === 'ready' ? resolve() : reject(new Error(`gateway process: ${String(m)}`))));
    child.once('exit', (code) => reject(new Error(`gateway process exited (${code})`)));
  });

  // Play the cloud: one grant for every door, heartbeats; take the uplink like the cloud would.
  const cloudKey = await importSigningKey(cloudPair.privateJwk);
  const cloud = connectMqtt(brokerUrl, { clientId: 'bench-cloud' });
  await waitConnected(cloud);
  await cloud.subscribeAsync(topics.gatewayUp(GATEWAY_ID), { qos: 1 });
  const send = async (draft: Record<string, unknown>) => {
    const { token } = await signMessage<DownlinkMessage>(
      cloudKey,
      'tobira-cloud',
      { aud: GATEWAY_ID, cid: newCorrelationId(), ...draft } as never,
      systemClock,
    );
    await cloud.publishAsync(topics.gatewayDown(GATEWAY_ID), token, { qos: 1 });
  };
  // Answer the gateway's resync requests as the cloud does: the answer proves the time to a started gateway (TIME_UNPROVEN).
  cloud.on('message', (_t, payload) => {
    const claims = JSON.parse(Buffer.from(payload.toString().split('.')[1] ?? '', 'base64url').toString()) as {
      type?: string;
      body?: { requestId?: string; lastAppliedSeq?: number };
    };
    if (claims.type !== 'resync.request' || claims.body?.requestId === undefined) return;
    const from = claims.body.lastAppliedSeq ?? 0;
    void send({
      type: 'resync.answer',
      body: { requestId: claims.body.requestId, mode: from >= 1 ? 'up_to_date' : 'replay', fromSeq: from, toSeq: 1, snapshotId: null },
    });
  });
  const now = Date.now();
  await send({
    type: 'key.grant',
    seq: 1,
    body: {
      key: {
        keyId: asKeyId('key-bench'),
        version: 1,
        personId: asPersonId('person-bench'),
        credential: { type: 'pin', digest: credentialDigest(pepper, 'pin', PIN) },
        doors: lockIds.map((_, i) => asDoorId(`door-${i + 1}`)),
        validFrom: now - 3600_000,
        validUntil: now + 24 * 3600_000,
        schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }] },
        offlineCapable: false,
      },
    },
  });
  const heartbeat = () => send({ type: 'heartbeat', body: { lastSeq: 1, intervalMs: 10_000 } });
  await heartbeat();
  const heartbeats = setInterval(() => void heartbeat(), 10_000);

  // Play the locks.
  const sentAt = new Map<string, number>();
  const requestOf = new Map<string, string>();
  const commandAt = new Map<string, number>();
  let samples: number[] = [];
  let denied = 0;
  const settle = (commandId: string) => {
    const requestId = requestOf.get(commandId);
    const at = commandAt.get(commandId);
    if (requestId === undefined || at === undefined) return;
    const t0 = sentAt.get(requestId);
    requestOf.delete(commandId);
    commandAt.delete(commandId);
    sentAt.delete(requestId);
    if (t0 !== undefined) samples.push(at - t0);
  };
  const locks: MqttClient[] = await Promise.all(
    lockIds.map(async (lockId) => {
      const c = connectMqtt(brokerUrl, { clientId: `bench-${lockId}` });
      await waitConnected(c);
      await c.subscribeAsync(topics.lock(GATEWAY_ID, lockId, 'command'), { qos: 1 });
      await c.subscribeAsync(topics.lock(GATEWAY_ID, lockId, 'decision'), { qos: 1 });
      c.on('message', (topic, payload) => {
        const t = performance.now();
        const v = JSON.parse(payload.toString()) as { requestId?: string; commandId: string | null; allowed?: boolean };
        if (topic.endsWith('/decision')) {
          if (!v.allowed || v.commandId === null || v.requestId === undefined) {
            denied++;
            return;
          }
          requestOf.set(v.commandId, v.requestId);
          settle(v.commandId);
        } else if (v.commandId !== null) {
          commandAt.set(v.commandId, t);
          settle(v.commandId);
        }
      });
      return c;
    }),
  );

  let n = 0;
  const request = (i: number) => {
    const lockId = lockIds[i % lockIds.length]!;
    const requestId = `bench-${n++}`;
    sentAt.set(requestId, performance.now());
    // no await: the locks send on schedule (open loop); a request lost at shutdown only goes unanswered
    locks[i % locks.length]!.publish(
      topics.lock(GATEWAY_ID, lockId, 'request'),
      JSON.stringify({ requestId, credential: { type: 'pin', value: PIN }, at: Date.now() }),
      { qos: 1 },
      () => {},
    );
  };

  // Ready once the grant is applied and the lease runs: a request opens.
  for (let tries = 0; ; tries++) {
    samples = [];
    request(0);
    await sleep(100);
    if (samples.length > 0) break;
    if (tries > 100) throw new Error(`the gateway never opened (denied ${denied})`);
  }

  return {
    async run({ rate, seconds }) {
      samples = [];
      denied = 0;
      sentAt.clear();
      const offered = Math.round(rate * seconds);
      let sent = 0;
      const t0 = performance.now();
      await new Promise<void>((resolve) => {
        const tick = setInterval(() => {
          const due = Math.min(offered, Math.floor(((performance.now() - t0) / 1000) * rate));
          while (sent < due) request(sent++);
          if (sent >= offered) {
            clearInterval(tick);
            resolve();
          }
        }, 1);
      });
      const sendSeconds = (performance.now() - t0) / 1000;
      for (let waited = 0; samples.length + denied < sent && waited < 3000; waited += 20) await sleep(20);
      return { offered, sent, answered: samples.length, sentPerSecond: Math.round(sent / sendSeconds), latency: percentiles(samples) };
    },
    async stop() {
      clearInterval(heartbeats);
      await Promise.all([...locks, cloud].map((c) => c.endAsync(true)));
      child.send('stop');
      await new Promise<void>((r) => (child.exitCode !== null ? r() : child.once('exit', () => r())));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
