/**
 * Issue #14: what an uplink flood does to a replica's downlinks. One cloud
 * core (PostgreSQL, the bench's Mosquitto with the deploy tuning), gateway A
 * publishing `--flood` signed access events in one burst, gateway B getting
 * `--grants` grants one after another while the flood is handled, and a
 * heartbeat round after each. Reported: B's grant latency (the start of
 * issueKey to the grant's arrival at B), the heartbeat round (sendHeartbeats:
 * sign, publish, PUBACK), whether the flood had drained by then, and the
 * flood's drain rate. Run it on two trees and interleave the runs (the
 * machine is shared): `node --import tsx bench/uplink-flood.ts --runs 3`.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  connectMqtt,
  createLogger,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  newId,
  signMessage,
  systemClock,
  topics,
  waitConnected,
  type UplinkMessage,
} from '@tobira/shared';
import { createCloud, parseConfig } from '../cloud/src/index.js';
import { startBroker } from './mosquitto.js';
import { scratchDatabase } from './stack.js';

const { values } = parseArgs({
  options: {
    flood: { type: 'string', default: '3000' },
    grants: { type: 'string', default: '5' },
    pg: { type: 'string', default: process.env.TOBIRA_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
  },
});
const FLOOD = Number(values.flood);
const GRANTS = Number(values.grants);
const DAY = 86_400_000;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : (s[Math.floor((s.length - 1) / 2)] ?? NaN);
};

async function main() {
  const broker = await startBroker();
  const db = await scratchDatabase(values.pg);
  const key = await generateSigningKeyPair();
  const log = createLogger('bench-flood');
  log.level = 'error';
  const cloud = createCloud(
    parseConfig({
      DATABASE_URL: db.url,
      MQTT_URL: broker.url,
      CLOUD_SIGNING_JWK: JSON.stringify(key.privateJwk),
      TOBIRA_KEK: randomBytes(32).toString('base64'),
      MQTT_CLIENT_ID: `bench-flood-${newId().slice(-8)}`,
      MQTT_CLEAN_SESSION: 'true',
      HEARTBEAT_INTERVAL_MS: '3600000',
    }),
    { log, billingWorker: false, notificationDispatcher: false },
  );
  await cloud.start();
  try {
    const site = await cloud.createSite({ id: 'site-flood', name: 'Flood' });
    if (site.status !== 'applied') throw new Error('site');
    const made = await Promise.all(
      ['gw-flood-a', 'gw-flood-b'].map(async (gatewayId) => {
        const pair = await generateSigningKeyPair();
        const g = await cloud.registerGateway({ gatewayId, siteId: 'site-flood', publicJwk: pair.publicJwk });
        if (g.status !== 'applied') throw new Error(`gateway ${g.code}`);
        const door = await cloud.createDoor({ id: `door-${gatewayId}`, gatewayId, name: 'D' });
        if (door.status !== 'applied') throw new Error('door');
        return { gatewayId, pair };
      }),
    );
    const [a, b] = made;
    if (!a || !b) throw new Error('gateways');
    const person = await cloud.createPerson({ id: 'person-flood', name: 'P' });
    if (person.status !== 'applied') throw new Error('person');

    // B: notes when each grant and heartbeat arrives (decoded, not verified: the bench times the path)
    const bClient = connectMqtt(broker.url, { clientId: `bench-${b.gatewayId}`, clean: true });
    await waitConnected(bClient);
    const arrived = new Map<number, number>();
    const waiters = new Map<number, () => void>();
    bClient.on('message', (_t, payload) => {
      const claims = JSON.parse(Buffer.from(payload.toString().split('.')[1] ?? '', 'base64url').toString()) as {
        type?: string;
        seq?: number;
      };
      if (claims.type === 'key.grant' && typeof claims.seq === 'number' && !arrived.has(claims.seq)) {
        arrived.set(claims.seq, performance.now());
        waiters.get(claims.seq)?.();
      }
    });
    await bClient.subscribeAsync(topics.gatewayDown(b.gatewayId), { qos: 1 });

    // A: the flood, signed beforehand
    const aKey = await importSigningKey(a.pair.privateJwk);
    const tokens: string[] = [];
    for (let seq = 1; seq <= FLOOD; seq++) {
      const draft = {
        type: 'access.event',
        aud: 'tobira-cloud',
        cid: newCorrelationId(),
        seq,
        body: {
          eventId: newId(),
          requestId: `r-${seq}`,
          lockId: 'lock-1',
          doorId: `door-${a.gatewayId}`,
          at: Date.now(),
          allowed: false,
          code: 'UNKNOWN_CREDENTIAL',
          keyId: null,
          keyVersion: null,
          personId: null,
          credentialType: 'pin',
          commandId: null,
        },
      } as unknown as Parameters<typeof signMessage<UplinkMessage>>[2];
      tokens.push((await signMessage<UplinkMessage>(aKey, a.gatewayId, draft, systemClock)).token);
    }
    const aClient = connectMqtt(broker.url, { clientId: `bench-${a.gatewayId}`, clean: true });
    await waitConnected(aClient);
    const audited = async () =>
      Number(
        ((await cloud.db.query('SELECT count(*)::int AS n FROM audit WHERE gateway_id = $1', [a.gatewayId])).rows[0] as { n: number }).n,
      );

    const t0 = performance.now();
    const published = Promise.all(tokens.map((t) => aClient.publishAsync(topics.gatewayUp(a.gatewayId), t, { qos: 1 })));
    while ((await audited()) === 0) await new Promise((r) => setTimeout(r, 5));

    const grantMs: number[] = [];
    const beatMs: number[] = [];
    let beatsToB = 0;
    for (let i = 1; i <= GRANTS; i++) {
      const got = new Promise<void>((r) => waiters.set(i, r));
      const g0 = performance.now();
      const o = await cloud.issueKey({
        personId: 'person-flood',
        doors: [`door-${b.gatewayId}`],
        credential: { type: 'pin', value: String(500_000 + i) },
        validFrom: Date.now() - DAY,
        validUntil: Date.now() + DAY,
      });
      if (o.status !== 'applied') throw new Error(`issue ${o.code}`);
      await Promise.race([got, new Promise((r) => setTimeout(r, 60_000))]);
      grantMs.push((arrived.get(i) ?? Infinity) - g0);
      const h0 = performance.now();
      const sent = await cloud.sendHeartbeats();
      beatMs.push(performance.now() - h0);
      if (sent.some((s) => s.gatewayId === b.gatewayId)) beatsToB++;
    }
    const auditedAtEnd = await audited();
    await published;
    while ((await audited()) < FLOOD) await new Promise((r) => setTimeout(r, 20));
    const drainS = (performance.now() - t0) / 1000;
    const failures = await cloud.db.query("SELECT count(*)::int AS n FROM outbox WHERE attempts > 1 OR status <> 'sent'");
    console.log(
      JSON.stringify({
        flood: FLOOD,
        grant_ms_median: Math.round(median(grantMs) * 10) / 10,
        grant_ms_max: Math.round(Math.max(...grantMs) * 10) / 10,
        heartbeat_round_ms_median: Math.round(median(beatMs) * 10) / 10,
        heartbeats_to_b: `${beatsToB}/${GRANTS}`,
        flood_handled_when_grants_done: auditedAtEnd,
        drain_s: Math.round(drainS * 10) / 10,
        uplinks_per_s: Math.round(FLOOD / drainS),
        outbox_rows_retried_or_unsent: (failures.rows[0] as { n: number }).n,
      }),
    );
    await aClient.endAsync(true);
    await bClient.endAsync(true);
  } finally {
    await cloud.stop();
    await broker.stop();
    await db.drop();
  }
}

await main();
