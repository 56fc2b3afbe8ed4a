import { randomUUID } from 'node:crypto';
import { newId, systemClock, type Logger } from '@tobira/shared';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { takeRoundLease } from '../src/adapters/db/leases.js';
import { subscribedFilter } from '../src/adapters/mqtt/link.js';
import { DAY, T0, capturingLogger, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { cloudSigningKey, startCloud } from './cloud-helpers.js';
import { fakeGateway, waitFor, type FakeGateway } from './mqtt-helpers.js';

/**
 * Replicas first-class (docs/cloud.md "Replicas"): two cloud
 * processes on one database and one broker. Every gateway must see its
 * sequenced downlinks in seq order with no gap (so it never needs a gap
 * resync), uplinks are applied once (and, on a broker with shared
 * subscriptions, spread over the replicas), and the heartbeat round runs on
 * one replica per interval.
 */

const GATEWAYS = 8;
const OPS = 600; // grants and revokes, spread over the gateways and both replicas
const WORKERS = 16;

/** The seqs of the sequenced downlinks a gateway received, in arrival order (decoded as they arrive, no async step in between). */
function recordSeqs(gw: FakeGateway): { seqs: number[]; heartbeats: number[] } {
  const seqs: number[] = [];
  const heartbeats: number[] = [];
  gw.client.on('message', (_topic, payload) => {
    const part = payload.toString().split('.')[1] ?? '';
    const claims: unknown = JSON.parse(Buffer.from(part, 'base64url').toString());
    if (typeof claims !== 'object' || claims === null) return;
    const type = 'type' in claims ? claims.type : undefined;
    const seq = 'seq' in claims ? claims.seq : undefined;
    if ((type === 'key.grant' || type === 'key.revoke') && typeof seq === 'number') seqs.push(seq);
    if (type === 'heartbeat') heartbeats.push(Date.now());
  });
  return { seqs, heartbeats };
}

const countLines = (lines: Record<string, unknown>[], msg: string) => lines.filter((l) => l.msg === msg).length;

describe('shared subscriptions', () => {
  it('subscribes the shared filters as $share/<group>/<filter>, the others (retained presence) plainly, and nothing shared without a group', () => {
    const shared = { group: 'tobira-cloud', filters: ['tobira/v1/gw/+/up'] };
    expect(subscribedFilter('tobira/v1/gw/+/up', shared)).toBe('$share/tobira-cloud/tobira/v1/gw/+/up');
    expect(subscribedFilter('tobira/v1/gw/+/presence', shared)).toBe('tobira/v1/gw/+/presence');
    expect(subscribedFilter('tobira/v1/gw/+/up', { group: '', filters: shared.filters })).toBe('tobira/v1/gw/+/up');
    expect(subscribedFilter('tobira/v1/gw/+/up', undefined)).toBe('tobira/v1/gw/+/up');
  });
});

describe.each(pgBackends())('two cloud replicas on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  it('the round lease goes to one of two replicas asking at once, and to nobody else until it runs out', async () => {
    const name = `test-${newId().slice(-8)}`;
    const got = await Promise.all([takeRoundLease(t.db, name, 'a', 60_000), takeRoundLease(t.db, name, 'b', 60_000)]);
    expect(got.filter(Boolean)).toHaveLength(1);
    expect(await takeRoundLease(t.db, name, 'a', 60_000)).toBe(false);
    expect(await takeRoundLease(t.db, name, 'c', 60_000)).toBe(false);
    const short = `test-${newId().slice(-8)}`;
    expect(await takeRoundLease(t.db, short, 'a', 1)).toBe(true);
    await new Promise((r) => setTimeout(r, 20));
    expect(await takeRoundLease(t.db, short, 'b', 1)).toBe(true);
  });

  describe.each(mqttBackends())('and %s', (mqttBackend) => {
    let broker: MqttTestBroker;
    beforeAll(async () => {
      broker = await startMqttBackend(mqttBackend);
    });
    afterAll(async () => {
      await broker.stop();
    });
    // aedes has no shared subscriptions (moscajs/aedes#228): there both replicas get every uplink and dedupe by jti
    const group = mqttBackend === 'mosquitto' ? `tobira-${randomUUID().slice(0, 8)}` : '';

    async function replicas(logs: [Logger, Logger], env: Record<string, string> = {}) {
      const a = await startCloud(t, broker.url, { deps: { log: logs[0] }, env: { MQTT_SHARED_GROUP: group, ...env } });
      const b = await startCloud(t, broker.url, {
        clock: a.clock,
        deps: { log: logs[1] },
        ownPool: true,
        env: { MQTT_SHARED_GROUP: group, ...env },
      });
      return [a, b] as const;
    }

    async function gateways(n: number) {
      const key = await cloudSigningKey();
      const d = deps(t.db);
      return Promise.all(
        Array.from({ length: n }, async () => {
          const s = await seed(d, { gatewayId: `gw-${broker.unique}-${newId().slice(-10)}` });
          const gw = await fakeGateway({
            url: broker.url,
            gatewayId: s.gatewayId,
            pair: s.pair,
            cloudJwks: { keys: [key.publicJwk] },
            cloudIssuer: 'tobira-cloud',
            clock: systemClock,
          });
          return { s, gw, rec: recordSeqs(gw) };
        }),
      );
    }

    it(`with ${GATEWAYS} gateways and ${OPS} grants and revokes through both replicas, every gateway receives its seqs in order with no gap`, async () => {
      const la = await capturingLogger();
      const lb = await capturingLogger();
      const [a, b] = await replicas([la.log, lb.log]);
      const gws = await gateways(GATEWAYS);
      try {
        const issued: { keyId: string; gw: number }[] = [];
        let next = 0;
        let pin = 100_000;
        const worker = async (w: number) => {
          for (let i = next++; i < OPS; i = next++) {
            const cloud = (i + w) % 2 ? a : b;
            const victim = i % 3 === 2 ? issued.shift() : undefined;
            if (victim) {
              const o = await cloud.revokeKey({ keyId: victim.keyId, reason: 'staff_revoked' });
              expect(o.status).toBe('applied');
              continue;
            }
            const g = gws[i % GATEWAYS];
            if (!g) throw new Error('gateway');
            const o = await cloud.issueKey({
              personId: g.s.personId,
              doors: [g.s.doorA],
              credential: { type: 'pin', value: String(pin++) },
              validFrom: T0,
              validUntil: T0 + DAY,
            });
            expect(o.status).toBe('applied');
            if (o.status === 'applied') issued.push({ keyId: o.state.id, gw: i % GATEWAYS });
          }
        };
        await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
        for (const g of gws) {
          const rows = await a.listOutbox(g.s.gatewayId);
          await waitFor(
            async () => (await a.listOutbox(g.s.gatewayId)).every((r) => r.status === 'sent') || undefined,
            'rows sent',
            60_000,
          );
          await waitFor(() => g.rec.seqs.length >= rows.length || undefined, `seqs at ${g.s.gatewayId}`, 30_000);
          expect(rows.length).toBeGreaterThan(OPS / GATEWAYS / 2);
          // in order, gap-free, each once: what the gateway applies without ever asking for a resync
          expect(g.rec.seqs).toEqual(Array.from({ length: rows.length }, (_, i) => i + 1));
        }
        // both replicas took part in dispatching
        expect(countLines(la.lines, 'outbox row sent')).toBeGreaterThan(0);
        expect(countLines(lb.lines, 'outbox row sent')).toBeGreaterThan(0);
      } finally {
        await a.stop();
        await b.stop();
        await Promise.all(gws.map((g) => g.gw.close()));
      }
    }, 180_000);

    it('uplinks are applied once each; with shared subscriptions (Mosquitto) they are spread over the replicas', async () => {
      const la = await capturingLogger();
      const lb = await capturingLogger();
      const [a, b] = await replicas([la.log, lb.log]);
      const gws = await gateways(4);
      const PER = 25;
      try {
        for (const g of gws) {
          for (let seq = 1; seq <= PER; seq++) {
            await g.gw.send({
              type: 'access.event',
              seq,
              body: {
                eventId: newId(),
                requestId: `r-${seq}`,
                lockId: 'lock-1',
                doorId: g.s.doorA,
                at: T0,
                allowed: false,
                code: 'UNKNOWN_CREDENTIAL',
                keyId: null,
                keyVersion: null,
                personId: null,
                credentialType: 'pin',
                commandId: null,
              },
            });
          }
        }
        for (const g of gws) {
          await waitFor(
            async () => ((await a.listAudit({ gatewayId: g.s.gatewayId })).length >= PER ? true : undefined),
            'audit rows',
            30_000,
          );
          expect(await b.listAudit({ gatewayId: g.s.gatewayId })).toHaveLength(PER);
        }
        const appliedA = countLines(la.lines, 'uplink applied');
        const appliedB = countLines(lb.lines, 'uplink applied');
        expect(appliedA + appliedB).toBe(PER * gws.length);
        if (group !== '') {
          // each message went to one member of the group: nobody saw a duplicate, both did work
          expect(
            countLines(la.lines, 'duplicate uplink; not applied again') + countLines(lb.lines, 'duplicate uplink; not applied again'),
          ).toBe(0);
          expect(appliedA).toBeGreaterThan(0);
          expect(appliedB).toBeGreaterThan(0);
        }
      } finally {
        await a.stop();
        await b.stop();
        await Promise.all(gws.map((g) => g.gw.close()));
      }
    }, 60_000);

    it('the heartbeat round runs on one replica per interval, not on each', async () => {
      const INTERVAL = 300;
      const la = await capturingLogger();
      const lb = await capturingLogger();
      const [g] = await gateways(1);
      if (!g) throw new Error('gateway');
      const [a, b] = await replicas([la.log, lb.log], { HEARTBEAT_INTERVAL_MS: String(INTERVAL) });
      const started = Date.now();
      try {
        await waitFor(() => g.rec.heartbeats.length >= 3 || undefined, 'heartbeats', 30_000);
        await new Promise((r) => setTimeout(r, 8 * INTERVAL));
        const elapsed = Date.now() - started;
        // the lease is 90 % of an interval: at most one round per 0.9 interval (+1 for the edges); two replicas each beating would send ~2 per interval
        expect(g.rec.heartbeats.length).toBeLessThanOrEqual(Math.floor(elapsed / (0.9 * INTERVAL)) + 1);
      } finally {
        await a.stop();
        await b.stop();
        await g.gw.close();
      }
    }, 60_000);
  });
});
