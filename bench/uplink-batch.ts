/**
 * Issue #14: uplink events one signature each vs under one signature per
 * `uplink.batch`. Two measures, interleaved runs, medians (the machine is shared):
 *
 * - cloud: access events applied per second by the uplink inbox (verify +
 *   dedupe + audit insert + seq/ack tracking), fed straight to `Uplink.handle`
 *   on PGlite and, with TOBIRA_TEST_PG_URL, PostgreSQL;
 * - gateway: CPU (user + system) of one outbox drain of N access events by
 *   the uplink sender, publishing at QoS 1 to a real broker (TOBIRA_TEST_MQTT_URL,
 *   default mqtt://127.0.0.1:1883).
 *
 *   node --import tsx bench/uplink-batch.ts [events=500] [rounds=5]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pino } from 'pino';
import {
  ManualClock,
  connectMqtt,
  importSigningKey,
  newCorrelationId,
  newId,
  newMessageId,
  signMessage,
  topics,
  waitConnected,
  type UplinkBatchMessage,
} from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { fixedSigner } from '../cloud/src/adapters/signer.js';
import { NotConnected, type MqttLink } from '../cloud/src/adapters/mqtt/link.js';
import { Uplink } from '../cloud/src/app/uplink.js';
import { T0, deps, openTestDb, seed, type TestDb } from '../cloud/test/helpers.js';
import { cloudSigningKey } from '../cloud/test/cloud-helpers.js';
import { openDatabase } from '../gateway/src/adapters/sqlite/db.js';
import { GatewayStore } from '../gateway/src/adapters/sqlite/store.js';
import { TrustedTime, noCrash } from '../gateway/src/app/context.js';
import { UplinkSender } from '../gateway/src/app/uplink.js';
import { createMetrics } from '../gateway/src/metrics.js';
import { generateSigningKeyPair } from '@tobira/shared';

const N = Number(process.argv[2] ?? 500);
const ROUNDS = Number(process.argv[3] ?? 5);
const BATCH = 50;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const body = (i: number) => ({
  eventId: newId(),
  requestId: `r-${i}`,
  lockId: 'lock-1',
  doorId: null,
  at: T0 + i,
  allowed: false,
  code: 'UNKNOWN_CREDENTIAL',
  keyId: null,
  keyVersion: null,
  personId: null,
  credentialType: 'pin',
  commandId: null,
});

const disconnected: MqttLink = {
  connected: false,
  waitConnected: async () => false,
  publish: () => Promise.reject(new NotConnected()),
  onMessage: () => {},
  subscribe: async () => {},
  onConnect: () => {},
  close: async () => {},
};

/** Access events applied per second by the cloud inbox, batched by `batch` (1: one message each). */
async function cloudRun(t: TestDb, batch: number): Promise<number> {
  const clock = new ManualClock(T0);
  const d = { ...deps(t.db, clock), log: pino({ level: 'silent' }) };
  const s = await seed(d);
  const key = await cloudSigningKey();
  const inbox = new Uplink(d, {
    link: disconnected,
    signer: fixedSigner('tobira-cloud', await importSigningKey(key.privateJwk), { keys: [key.publicJwk] }),
    replayMax: 10,
    publishTimeoutMs: 100,
  });
  const gwKey = await importSigningKey(s.pair.privateJwk);
  const items = Array.from({ length: N }, (_, i) => ({
    type: 'access.event',
    seq: i + 1,
    jti: newMessageId(),
    cid: newCorrelationId(),
    body: body(i),
  }));
  const payloads: Buffer[] = [];
  for (let i = 0; i < N; i += batch) {
    const chunk = items.slice(i, i + batch);
    const draft =
      chunk.length === 1
        ? { aud: 'tobira-cloud', ...chunk[0]! }
        : { type: 'uplink.batch', aud: 'tobira-cloud', cid: chunk[0]!.cid, body: { items: chunk } as UplinkBatchMessage['body'] };
    payloads.push(Buffer.from((await signMessage(gwKey, s.gatewayId, draft as never, clock)).token));
  }
  const topic = topics.gatewayUp(s.gatewayId);
  const t0 = performance.now();
  for (const p of payloads) await inbox.handle(topic, p);
  const secs = (performance.now() - t0) / 1000;
  const n = (await t.db.query('SELECT 1 FROM audit WHERE gateway_id = $1', [s.gatewayId])).rowCount;
  if (n !== N) throw new Error(`applied ${n} of ${N}`);
  return N / secs;
}

/** CPU milliseconds (user + system) of the gateway's drain of N access events, per 1000 events. */
async function gatewayRun(url: string, batchMax: number): Promise<{ cpuPer1000: number; wallMs: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'tobira-bench-uplink-'));
  const store = new GatewayStore(openDatabase(join(dir, 'gateway.sqlite')));
  const gatewayId = `bench-gw-${newId().slice(-8)}`;
  const client = connectMqtt(url, { clientId: `${gatewayId}-up` });
  await waitConnected(client);
  try {
    for (let i = 0; i < N; i++) store.enqueue('access.event', body(i) as never, newCorrelationId(), true, T0);
    const pair = await generateSigningKeyPair();
    const clock = new ManualClock(T0);
    const sender = new UplinkSender({
      gatewayId,
      store,
      time: new TrustedTime(clock, clock),
      log: pino({ level: 'silent' }),
      metrics: createMetrics(),
      crash: noCrash,
      outboxWritten: () => {},
      link: () => ({
        client,
        get connected() {
          return client.connected;
        },
        publish: async (topic, payload, o) => {
          await client.publishAsync(topic, payload, { qos: o.qos });
        },
        end: async () => {},
      }),
      signingKey: (
        (k) => () =>
          Promise.resolve(k)
      )(await importSigningKey(pair.privateJwk)),
      cloudIssuer: 'tobira-cloud',
      batchSize: 100,
      batchMax,
    });
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    sender.wake();
    await sender.idle();
    const wallMs = performance.now() - t0;
    const c = process.cpuUsage(c0);
    if (store.outboxDepth() !== 0) throw new Error('rows left pending');
    return { cpuPer1000: ((c.user + c.system) / 1000 / N) * 1000, wallMs };
  } finally {
    await client.endAsync(true);
    store.db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const out: Record<string, unknown> = { events: N, rounds: ROUNDS, batch: BATCH };
for (const backend of pgBackends()) {
  const t = await openTestDb(backend);
  try {
    await cloudRun(t, 1); // warm-up
    const single: number[] = [];
    const batched: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      single.push(await cloudRun(t, 1));
      batched.push(await cloudRun(t, BATCH));
    }
    out[`cloud ${backend}: events applied/s, single vs batch of ${BATCH}`] = [Math.round(median(single)), Math.round(median(batched))];
  } finally {
    await t.close();
  }
}
const url = process.env.TOBIRA_TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
await gatewayRun(url, 1); // warm-up
const gs: { cpuPer1000: number; wallMs: number }[] = [];
const gb: { cpuPer1000: number; wallMs: number }[] = [];
for (let r = 0; r < ROUNDS; r++) {
  gs.push(await gatewayRun(url, 1));
  gb.push(await gatewayRun(url, BATCH));
}
out[`gateway drain: CPU ms per 1000 events, single vs batch of ${BATCH}`] = [
  Math.round(median(gs.map((x) => x.cpuPer1000))),
  Math.round(median(gb.map((x) => x.cpuPer1000))),
];
out[`gateway drain: wall ms for ${N} events, single vs batch of ${BATCH}`] = [
  Math.round(median(gs.map((x) => x.wallMs))),
  Math.round(median(gb.map((x) => x.wallMs))),
];
console.log(JSON.stringify(out, null, 2));
