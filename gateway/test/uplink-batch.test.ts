import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import {
  KeySet,
  ManualClock,
  UplinkEnvelope,
  checkUplinkBatch,
  connectMqtt,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  newId,
  topics,
  verifyMessage,
  waitConnected,
  type KeyPairJwk,
  type UplinkMessage,
} from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import type { MqttClient } from 'mqtt';
import { openDatabase } from '../src/adapters/sqlite/db.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import type { Link } from '../src/adapters/mqtt/links.js';
import { TrustedTime, noCrash } from '../src/app/context.js';
import { BATCH_BUDGET_BYTES, UplinkSender, packRows } from '../src/app/uplink.js';
import { createMetrics } from '../src/metrics.js';
import type { OutboxRow } from '../src/adapters/sqlite/outbox.js';
import { T0 } from './fixtures.js';

const event = (i: number) => ({
  eventId: newId(),
  requestId: `r-${i}`,
  lockId: 'lock-1',
  doorId: 'door-1',
  at: T0 + i,
  allowed: false,
  code: 'UNKNOWN_CREDENTIAL' as const,
  keyId: null,
  keyVersion: null,
  personId: null,
  credentialType: 'pin' as const,
  commandId: null,
});

describe('packRows', () => {
  const row = (seq: number, size = 10): OutboxRow => ({
    seq,
    jti: newId() as never,
    type: 'access.event',
    cid: 'c-1' as never,
    body: { x: 'y'.repeat(size) },
  });

  it('packs runs of consecutive seqs, at most `max` rows each, and splits at a gap', () => {
    const units = packRows(
      [1, 2, 3, 4, 5, 7, 8].map((s) => row(s)),
      3,
    );
    expect(units.map((u) => u.map((r) => r.seq))).toEqual([
      [1, 2, 3],
      [4, 5],
      [7, 8],
    ]);
  });

  it('keeps each run within the byte budget; a row over the budget goes alone', () => {
    const units = packRows([row(1, 400), row(2, 400), row(3, 400), row(4, 5000), row(5, 10)], 50, 1200);
    expect(units.map((u) => u.map((r) => r.seq))).toEqual([[1, 2], [3], [4], [5]]);
    expect(BATCH_BUDGET_BYTES).toBeLessThan((64 * 1024 * 3) / 4);
  });

  it('with max 1 sends every row alone', () => {
    expect(
      packRows(
        [1, 2, 3].map((s) => row(s)),
        1,
      ).map((u) => u.length),
    ).toEqual([1, 1, 1]);
  });
});

describe.each(mqttBackends())('the uplink sender with batches (broker: %s)', (backend) => {
  let broker: MqttTestBroker;
  beforeAll(async () => {
    broker = await startMqttBackend(backend);
  });
  afterAll(async () => {
    await broker.stop();
  });

  let dir: string;
  let store: GatewayStore;
  let pair: KeyPairJwk;
  let client: MqttClient;
  let watcher: MqttClient;
  let seen: Buffer[];
  let n = 0;
  let gatewayId: string;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-uplink-batch-'));
    store = new GatewayStore(openDatabase(join(dir, 'gateway.sqlite')));
    pair = await generateSigningKeyPair();
    gatewayId = `gw-${broker.unique}-b${++n}`;
    client = connectMqtt(broker.url, { clientId: `${gatewayId}-up` });
    watcher = connectMqtt(broker.url, { clientId: `${gatewayId}-watch` });
    await Promise.all([waitConnected(client), waitConnected(watcher)]);
    seen = [];
    watcher.on('message', (_t, p) => seen.push(p));
    await watcher.subscribeAsync(topics.gatewayUp(gatewayId), { qos: 1 });
  });
  afterEach(async () => {
    await Promise.all([client.endAsync(true), watcher.endAsync(true)]);
    store.db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The real link; `gate` holds each publish after its PUBACK, `fail` refuses the n-th publish (1-based). */
  function link(opts: { gate?: Promise<void>; fail?: number } = {}): Link & { publishes: number } {
    const l = {
      client,
      publishes: 0,
      get connected() {
        return client.connected;
      },
      async publish(topic: string, payload: string, o: { qos: 0 | 1 }) {
        const k = ++l.publishes;
        if (k === opts.fail) throw new Error('publish failed (injected)');
        await client.publishAsync(topic, payload, { qos: o.qos });
        await opts.gate;
      },
      end: async () => {},
    };
    return l;
  }

  async function sender(l: Link, batchMax = 50) {
    const clock = new ManualClock(T0);
    return new UplinkSender({
      gatewayId,
      store,
      time: new TrustedTime(clock, clock),
      log: pino({ level: 'silent' }),
      metrics: createMetrics(),
      crash: noCrash,
      outboxWritten: () => {},
      link: () => l,
      signingKey: (
        (k) => () =>
          Promise.resolve(k)
      )(await importSigningKey(pair.privateJwk)),
      cloudIssuer: 'tobira-cloud',
      batchSize: 100,
      batchMax,
    });
  }

  const enqueue = (count: number) => {
    for (let i = 1; i <= count; i++) store.enqueue('access.event', event(i) as never, newCorrelationId(), true, T0);
  };
  const statuses = () => store.db.prepare('SELECT seq, status FROM outbox ORDER BY seq').all() as { seq: number; status: string }[];
  const items = async (payload: Buffer) => {
    const v = await verifyMessage(payload, {
      keys: await KeySet.fromJwks({ keys: [pair.publicJwk] }),
      issuer: gatewayId,
      audience: 'tobira-cloud',
      schema: UplinkEnvelope,
      clock: new ManualClock(T0),
    });
    if (!v.ok) throw new Error(v.code);
    if (v.message.type !== 'uplink.batch') return { envelope: null, items: [v.message as UplinkMessage] };
    const c = checkUplinkBatch(v.message);
    if (!c.ok) throw new Error(c.code);
    return { envelope: v.message.jti, items: c.items };
  };
  const until = async (f: () => boolean) => {
    for (let i = 0; i < 500 && !f(); i++) await new Promise((r) => setTimeout(r, 10));
    expect(f()).toBe(true);
  };

  it('packs pending rows into signed batches of at most batchMax, in seq order, and marks them sent after the PUBACK', async () => {
    enqueue(7);
    const l = link();
    const s = await sender(l, 3);
    s.wake();
    await s.idle();
    expect(l.publishes).toBe(3);
    await until(() => seen.length === 3);
    const got = await Promise.all(seen.map(items));
    expect(got.map((g) => g.items.map((m) => ('seq' in m ? m.seq : null)))).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    expect(got[2]!.envelope).toBeNull(); // a lone row goes as its own message
    const jtis = store.db.prepare('SELECT jti FROM outbox ORDER BY seq').all() as { jti: string }[];
    expect(got.flatMap((g) => g.items.map((m) => m.jti))).toEqual(jtis.map((r) => r.jti));
    expect(statuses().every((r) => r.status === 'sent')).toBe(true);
  });

  it('leaves the rows pending until the PUBACK has come back', async () => {
    enqueue(4);
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const s = await sender(link({ gate }));
    s.wake();
    await until(() => seen.length === 1); // the broker has it...
    expect(statuses().map((r) => r.status)).toEqual(['pending', 'pending', 'pending', 'pending']); // ...but no PUBACK reached the sender yet
    open();
    await s.idle();
    expect(statuses().map((r) => r.status)).toEqual(['sent', 'sent', 'sent', 'sent']);
  });

  it('a failed publish leaves its rows pending; the resend carries the same items (jti and seq) under a new envelope', async () => {
    enqueue(6);
    const s1 = await sender(link({ fail: 2 }), 3);
    s1.wake();
    await s1.idle();
    // the refused batch's rows stay pending (the first one's may too: its PUBACK can come after the pass gave up)
    expect(
      statuses()
        .slice(3)
        .map((r) => r.status),
    ).toEqual(['pending', 'pending', 'pending']);
    await until(() => seen.length === 1);
    // as after a crash: a new sender over the same file sends the rest again
    store.db.prepare("UPDATE outbox SET status = 'pending'").run();
    const s2 = await sender(link(), 3);
    s2.wake();
    await s2.idle();
    await until(() => seen.length === 3);
    const [first, again, rest] = await Promise.all(seen.map(items));
    expect(again!.items.map((m) => m.jti)).toEqual(first!.items.map((m) => m.jti));
    expect(again!.envelope).not.toBe(first!.envelope);
    expect(rest!.items.map((m) => ('seq' in m ? m.seq : null))).toEqual([4, 5, 6]);
    expect(statuses().every((r) => r.status === 'sent')).toBe(true);
  });

  it('with batchMax 1 sends every row as its own message (a cloud older than uplink.batch)', async () => {
    enqueue(3);
    const s = await sender(link(), 1);
    s.wake();
    await s.idle();
    await until(() => seen.length === 3);
    const got = await Promise.all(seen.map(items));
    expect(got.map((g) => g.envelope)).toEqual([null, null, null]);
  });
});
