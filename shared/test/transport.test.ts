import { PGlite } from '@electric-sql/pglite';
import type { MqttClient } from 'mqtt';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DownlinkMessage,
  Presence,
  connectMqtt,
  newCorrelationId,
  parsePayload,
  signMessage,
  topics,
  verifyMessage,
  waitConnected,
  type DownlinkMessage as Down,
} from '../src/index.js';
import { createTestDatabase, mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '../src/testing/index.js';
import { CLOUD, sampleGrant, signingFixture } from './fixtures.js';

const f = await signingFixture();

function nextMessage(client: MqttClient, topic: string): Promise<Buffer> {
  return new Promise((resolve) => {
    const on = (t: string, payload: Buffer) => {
      if (t !== topic) return;
      client.off('message', on);
      resolve(payload);
    };
    client.on('message', on);
  });
}

describe.each(mqttBackends())('over a real MQTT broker (%s)', (backend) => {
  let broker: MqttTestBroker;
  const clients: MqttClient[] = [];
  const connect = async (opts: Parameters<typeof connectMqtt>[1] = {}) => {
    const c = connectMqtt(broker.url, opts);
    clients.push(c);
    await waitConnected(c);
    return c;
  };
  beforeAll(async () => {
    broker = await startMqttBackend(backend);
  });
  afterAll(async () => {
    for (const c of clients) c.end(true);
    await broker.stop();
  });

  it('a signed grant published at QoS 1 arrives and verifies equal', async () => {
    const gw = `gw-${broker.unique}`;
    const cloud = await connect();
    const gateway = await connect();
    await gateway.subscribeAsync(topics.gatewayDown(gw), { qos: 1 });
    const { token, message } = await signMessage<Down>(
      f.cloudKey,
      CLOUD,
      { type: 'key.grant', aud: gw, seq: 1, cid: newCorrelationId(), body: { key: sampleGrant() } },
      f.clock,
    );
    const arrived = nextMessage(gateway, topics.gatewayDown(gw));
    await cloud.publishAsync(topics.gatewayDown(gw), token, { qos: 1 });
    const r = await verifyMessage(await arrived, { keys: f.keys, issuer: CLOUD, audience: gw, schema: DownlinkMessage, clock: f.clock });
    expect(r).toEqual({ ok: true, message, kid: f.cloudKey.kid });
  });

  it('retained presence with a last will says offline when a client drops', async () => {
    const gw = `gw-${broker.unique}-p`;
    const topic = topics.gatewayPresence(gw);
    const device = await connect({ will: { topic, payload: Buffer.from(JSON.stringify({ online: false })), qos: 1, retain: true } });
    await device.publishAsync(topic, JSON.stringify({ online: true }), { qos: 1, retain: true });
    const watcher = await connect();
    const first = nextMessage(watcher, topic);
    await watcher.subscribeAsync(topic, { qos: 1 });
    expect(parsePayload(Presence, await first)).toEqual({ ok: true, value: { online: true } });
    const second = nextMessage(watcher, topic);
    device.stream.destroy(); // an abrupt loss, not a clean DISCONNECT: the broker publishes the will
    device.end(true);
    expect(parsePayload(Presence, await second)).toEqual({ ok: true, value: { online: false } });
    await watcher.publishAsync(topic, '', { qos: 1, retain: true }); // clear the retained message on shared brokers
  });
});

describe.each(pgBackends())('a test database of its own (%s)', (backend) => {
  it('is empty, writable, and dropped afterwards', async () => {
    const db = await createTestDatabase(backend);
    try {
      if (db.backend === 'pglite') {
        const lite = await PGlite.create(db.dataDir);
        await lite.exec('CREATE TABLE t (x int); INSERT INTO t VALUES (42);');
        expect((await lite.query<{ x: number }>('SELECT x FROM t')).rows).toEqual([{ x: 42 }]);
        await lite.close();
      } else {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        expect((await c.query("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'")).rows).toEqual([{ n: 0 }]);
        await c.query('CREATE TABLE t (x int); INSERT INTO t VALUES (42);');
        expect((await c.query('SELECT x FROM t')).rows).toEqual([{ x: 42 }]);
        await c.end();
      }
    } finally {
      await db.drop();
    }
  });
});
