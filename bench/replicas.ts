import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { connectMqtt, filters, waitConnected } from '@tobira/shared';
import {
  cloudEnv,
  provisionGateway,
  scratchDatabase,
  startCloudProcess,
  tempDir,
  type CloudProcess,
  type ProvisionedGateway,
} from './stack.js';

/**
 * `replicas_in_order`: two cloud processes on one database and
 * one broker (uplinks on a shared subscription), `gateways` gateways
 * registered through the API, and `ops` grants and revokes sent by 16 HTTP
 * clients to both replicas alternately. An observer on the broker records
 * every gateway's sequenced downlinks in arrival order: true when every
 * gateway received exactly 1, 2, 3, … (in order, no gap, so it never needs
 * a gap resync, and no seq twice). The same scenario, smaller, is the test
 * cloud/test/replicas.test.ts.
 */
export interface ReplicasResult {
  readonly inOrder: boolean;
  readonly gateways: number;
  readonly ops: number;
  readonly outOfOrder: readonly string[];
}

const DAY = 86_400_000;

export async function runReplicas(o: {
  brokerUrl: string;
  databaseUrl: string;
  gateways: number;
  ops: number;
  log: (s: string) => void;
}): Promise<ReplicasResult> {
  const db = await scratchDatabase(o.databaseUrl);
  const tmp = tempDir('tobira-bench-replicas-');
  const env = await cloudEnv(db.url, o.brokerUrl, { MQTT_SHARED_GROUP: `bench-${randomBytes(3).toString('hex')}` });
  const clouds: CloudProcess[] = [];
  const observer = connectMqtt(o.brokerUrl, { clientId: `bench-replicas-observer-${randomBytes(3).toString('hex')}` });
  try {
    clouds.push(await startCloudProcess({ ...env, MQTT_CLIENT_ID: `${env.MQTT_CLIENT_ID}-a` }));
    // the first replica migrated the database; the second starts on it
    clouds.push(await startCloudProcess({ ...env, MQTT_CLIENT_ID: `${env.MQTT_CLIENT_ID}-b` }, clouds[0]?.api.token));
    const [a, b] = clouds;
    if (!a || !b) throw new Error('replicas');
    await waitConnected(observer);
    const seqs = new Map<string, number[]>();
    observer.on('message', (topic, payload) => {
      const claims: unknown = JSON.parse(Buffer.from(payload.toString().split('.')[1] ?? '', 'base64url').toString());
      if (typeof claims !== 'object' || claims === null || !('seq' in claims) || typeof claims.seq !== 'number') return;
      const id = topic.split('/')[3] ?? '';
      const list = seqs.get(id) ?? [];
      list.push(claims.seq);
      seqs.set(id, list);
    });
    await observer.subscribeAsync(filters.allGatewaysUp.replace(/up$/, 'down'), { qos: 1 });
    const gws: ProvisionedGateway[] = [];
    for (let i = 0; i < o.gateways; i++) {
      gws.push(await provisionGateway(a.api, tmp.dir, { gatewayId: `gw-rep-${i + 1}`, locks: 1, mqttUrl: o.brokerUrl }));
    }
    const expected = new Map<string, number>();
    const live: { keyId: string; gatewayId: string }[] = [];
    let next = 0;
    let pin = 100_000;
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        for (let i = next++; i < o.ops; i = next++) {
          const api = (i + w) % 2 ? a.api : b.api;
          const victim = i % 3 === 2 ? live.shift() : undefined;
          if (victim) {
            const r = await api.call('POST', `/keys/${victim.keyId}/revoke`, { reason: 'staff_revoked' });
            if (r.status === 202) expected.set(victim.gatewayId, (expected.get(victim.gatewayId) ?? 0) + 1);
            continue;
          }
          const g = gws[i % gws.length];
          if (!g) continue;
          const keyId = `key-rep-${i}`;
          const r = await api.call('POST', '/keys', {
            keyId,
            personId: g.personId,
            doors: [g.doors[0]],
            credential: { type: 'pin', value: String(pin++) },
            validFrom: Date.now() - DAY,
            validUntil: Date.now() + DAY,
          });
          if (r.status === 202) {
            expected.set(g.gatewayId, (expected.get(g.gatewayId) ?? 0) + 1);
            live.push({ keyId, gatewayId: g.gatewayId });
          }
        }
      }),
    );
    const total = [...expected.values()].reduce((x, y) => x + y, 0);
    const received = () => [...seqs.values()].reduce((x, l) => x + l.length, 0);
    for (let waited = 0; received() < total && waited < 120_000; waited += 100) await sleep(100);
    await sleep(500); // anything sent twice would show now
    const outOfOrder = gws
      .map((g) => g.gatewayId)
      .filter((id) => {
        const got = seqs.get(id) ?? [];
        const n = expected.get(id) ?? 0;
        return got.length !== n || got.some((s, i) => s !== i + 1);
      });
    const inOrder = outOfOrder.length === 0;
    o.log(
      `replicas: ${o.gateways} gateways, ${total} grants/revokes through 2 replicas: ${inOrder ? 'every gateway in order' : `out of order or incomplete at ${outOfOrder.join(', ')}`}`,
    );
    return { inOrder, gateways: o.gateways, ops: total, outOfOrder };
  } finally {
    await observer.endAsync(true);
    await Promise.all(clouds.map((c) => c.stop()));
    await db.drop();
    tmp.remove();
  }
}
