/**
 * Access-path benchmark (not a test): decisions per second and latency from a
 * lock request to the unlock command arriving on the site broker, through a
 * real SQLite file (WAL, synchronous=FULL) and an embedded aedes broker.
 *
 *   npm run bench -w @tobira/gateway  [-- --requests 2000 --concurrency 32]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
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
  startEmbeddedBroker,
  systemClock,
  topics,
  waitConnected,
  type DownlinkMessage,
  type LockCommand,
} from '@tobira/shared';
import { pino } from 'pino';
import { parseConfig } from '../src/config.js';
import { createGateway } from '../src/gateway.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const REQUESTS = arg('requests', 2000);
const CONCURRENCY = arg('concurrency', 32);
const WARMUP = 200;
const PIN = '246810';

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
}

async function main() {
  const broker = await startEmbeddedBroker();
  const dir = mkdtempSync(join(tmpdir(), 'tobira-bench-'));
  const cloudPair = await generateSigningKeyPair();
  const gwPair = await generateSigningKeyPair();
  writeFileSync(join(dir, 'key.json'), JSON.stringify(gwPair));
  const pepper = newPairingSecret();
  const gatewayId = 'gw-bench';
  const config = parseConfig({
    gatewayId,
    keyPairFile: join(dir, 'key.json'),
    cloud: { url: broker.url, jwks: { keys: [cloudPair.publicJwk] } },
    site: { url: broker.url },
    sqlitePath: join(dir, 'gw.sqlite'),
    locks: [{ lockId: 'lock-1', doorId: 'door-1', pairingSecret: encodeSecret(newPairingSecret()) }],
    credentialPepper: encodeSecret(pepper),
    http: null,
    lockout: { limit: 0, cooldownSeconds: 60 },
    // Measures decisions, not the flood guard: one lock sends thousands of requests.
    requestRate: { burst: 1_000_000, perSecond: 1000 },
  });
  const gw = createGateway(config, { log: pino({ level: 'silent' }) });
  await gw.start();

  // Play the cloud: one grant and a heartbeat; drain the uplink like the cloud would.
  const cloudKey = await importSigningKey(cloudPair.privateJwk);
  const cloud = connectMqtt(broker.url, { protocolVersion: 4, clientId: 'bench-cloud' });
  await waitConnected(cloud);
  await cloud.subscribeAsync(topics.gatewayUp(gatewayId), { qos: 1 });
  const send = async (draft: Record<string, unknown>) => {
    const { token } = await signMessage<DownlinkMessage>(
      cloudKey,
      'tobira-cloud',
      { aud: gatewayId, cid: newCorrelationId(), ...draft } as never,
      systemClock,
    );
    await cloud.publishAsync(topics.gatewayDown(gatewayId), token, { qos: 1 });
  };
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
        doors: [asDoorId('door-1')],
        validFrom: now - 3600_000,
        validUntil: now + 3600_000,
        schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }] },
        offlineCapable: false,
      },
    },
  });
  await send({ type: 'heartbeat', body: { lastSeq: 1, intervalMs: 30_000 } });
  while (gw.store.settings().leaseExpiresAt === null) await new Promise((r) => setTimeout(r, 10));

  // Play the lock.
  const lock = connectMqtt(broker.url, { protocolVersion: 4, clientId: 'bench-lock' });
  await waitConnected(lock);
  await lock.subscribeAsync(topics.lock(gatewayId, 'lock-1', 'command'), { qos: 1 });
  await lock.subscribeAsync(topics.lock(gatewayId, 'lock-1', 'decision'), { qos: 1 });
  const waiting = new Map<string, (t: number) => void>();
  const byCommand = new Map<string, string>();
  lock.on('message', (topic, payload) => {
    const t = performance.now();
    const v = JSON.parse(payload.toString()) as { requestId?: string; commandId: string | null; allowed?: boolean };
    if (topic.endsWith('/decision')) {
      if (!v.allowed) throw new Error(`denied: ${payload.toString()}`);
      const cmdAt = byCommand.get(v.commandId!);
      if (cmdAt !== undefined) waiting.get(v.requestId!)?.(Number(cmdAt));
      else byCommand.set(v.commandId!, v.requestId!);
    } else {
      const c = v as unknown as LockCommand;
      const requestId = byCommand.get(c.commandId);
      if (requestId !== undefined) waiting.get(requestId)?.(t);
      else byCommand.set(c.commandId, String(t));
    }
  });

  let n = 0;
  const one = async (): Promise<number> => {
    const requestId = `bench-${n++}`;
    const done = new Promise<number>((resolve) => waiting.set(requestId, resolve));
    const t0 = performance.now();
    await lock.publishAsync(
      topics.lock(gatewayId, 'lock-1', 'request'),
      JSON.stringify({ requestId, credential: { type: 'pin', value: PIN }, at: Date.now() }),
      { qos: 1 },
    );
    const t1 = await done;
    waiting.delete(requestId);
    return t1 - t0;
  };

  for (let i = 0; i < WARMUP; i++) await one();

  // Latency: one request at a time.
  const sequential: number[] = [];
  for (let i = 0; i < Math.min(REQUESTS, 1000); i++) sequential.push(await one());
  sequential.sort((a, b) => a - b);

  // Throughput: CONCURRENCY requests in flight.
  const concurrent: number[] = [];
  const start = performance.now();
  let left = REQUESTS;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (left-- > 0) concurrent.push(await one());
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  concurrent.sort((a, b) => a - b);

  const f = (x: number) => x.toFixed(2);
  console.log(
    `tobira gateway access path (request -> unlock command on the site broker), SQLite WAL synchronous=FULL, embedded aedes, Node ${process.version}`,
  );
  console.log(
    `sequential (1 in flight, ${sequential.length} requests): p50 ${f(pct(sequential, 50))} ms  p99 ${f(pct(sequential, 99))} ms  => ${(1000 / (sequential.reduce((a, b) => a + b, 0) / sequential.length)).toFixed(0)} decisions/s`,
  );
  console.log(
    `concurrent (${CONCURRENCY} in flight, ${REQUESTS} requests): ${(REQUESTS / elapsed).toFixed(0)} decisions/s  p50 ${f(pct(concurrent, 50))} ms  p99 ${f(pct(concurrent, 99))} ms`,
  );
  console.log(`access log rows: ${gw.store.accessLog(1_000_000).length}, outbox pending: ${gw.store.outboxDepth()}`);

  await lock.endAsync(true);
  await cloud.endAsync(true);
  await gw.stop({ force: true });
  await broker.stop();
  rmSync(dir, { recursive: true, force: true });
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
