import pg from 'pg';
import {
  ManualClock,
  importSigningKey,
  newCorrelationId,
  newId,
  signMessage,
  systemClock,
  type KeyPairJwk,
  type UplinkMessage,
} from '@tobira/shared';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimulatedCrash } from '../src/app/crash.js';
import { linkClientId } from '../src/adapters/mqtt/link.js';
import { DAY, T0, capturingLogger, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { cloudSigningKey, startCloud } from './cloud-helpers.js';
import { fakeGateway, waitFor, type FakeGateway } from './mqtt-helpers.js';

/**
 * Issue #14, an uplink flood against one replica (docs/cloud.md "Replicas",
 * docs/performance.md): the replica's inbox and its publishing link are two
 * connections, so the dispatcher and heartbeats are not held up by the
 * inbox; the inbox handles gateways concurrently, each gateway in order, at
 * most UPLINK_MAX_IN_FLIGHT messages at once, and acknowledges a message only
 * after its commit. Assertions are on events (what arrived before what), not
 * on durations.
 */

const MAX_IN_FLIGHT = 8;

/** Signed access events seq `from`..`to` of a gateway, ready to publish (signed beforehand, so the flood is only MQTT). */
async function accessEvents(gatewayId: string, pair: KeyPairJwk, doorId: string, from: number, to: number) {
  const key = await importSigningKey(pair.privateJwk);
  const out: { seq: number; jti: string; token: string }[] = [];
  for (let seq = from; seq <= to; seq++) {
    const { token, message } = await signMessage<UplinkMessage>(
      key,
      gatewayId,
      {
        type: 'access.event',
        aud: 'tobira-cloud',
        cid: newCorrelationId(),
        seq,
        body: {
          eventId: newId(),
          requestId: `r-${seq}`,
          lockId: 'lock-1',
          doorId,
          at: T0,
          allowed: false,
          code: 'UNKNOWN_CREDENTIAL',
          keyId: null,
          keyVersion: null,
          personId: null,
          credentialType: 'pin',
          commandId: null,
        },
      } as unknown as Parameters<typeof signMessage<UplinkMessage>>[2],
      systemClock,
    );
    out.push({ seq, jti: message.jti, token });
  }
  return out;
}

/** Publishes them in order without waiting for each PUBACK (mqtt.js writes them in call order). */
const flood = (gw: FakeGateway, msgs: { token: string }[]) => Promise.all(msgs.map((m) => gw.sendRaw(m.token)));

describe.each(pgBackends())('the inbox under an uplink flood, on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  const auditCount = async (gatewayId: string) =>
    Number((await t.db.query('SELECT count(*)::int AS n FROM audit WHERE gateway_id = $1', [gatewayId])).rows[0]?.n ?? 0);
  const ackedSeq = async (gatewayId: string) =>
    Number((await t.db.query('SELECT acked_seq FROM uplink_seq WHERE gateway_id = $1', [gatewayId])).rows[0]?.acked_seq ?? 0);

  describe.each(mqttBackends())('and %s', (mqttBackend) => {
    let broker: MqttTestBroker;
    beforeAll(async () => {
      broker = await startMqttBackend(mqttBackend);
    });
    afterAll(async () => {
      await broker.stop();
    });

    async function gateway() {
      const key = await cloudSigningKey();
      const s = await seed(deps(t.db), { gatewayId: `gw-${broker.unique}-${newId().slice(-10)}` });
      const gw = await fakeGateway({
        url: broker.url,
        gatewayId: s.gatewayId,
        pair: s.pair,
        cloudJwks: { keys: [key.publicJwk] },
        cloudIssuer: 'tobira-cloud',
        clock: new ManualClock(T0), // the clouds here sign at T0 (startCloud's clock)
      });
      return { s, gw };
    }

    const grantsTo = (gw: FakeGateway) => gw.received.filter((m) => m.type === 'key.grant');
    const heartbeatsTo = (gw: FakeGateway) => gw.received.filter((m) => m.type === 'heartbeat');

    it('connects twice, as <id>-in and <id>-out; losing the publishing link does not touch the inbox', async () => {
      const clientId = `cloud-links-${newId().slice(-10)}`;
      const cloud = await startCloud(t, broker.url, { env: { MQTT_CLIENT_ID: clientId } });
      try {
        expect(cloud.mqttLinks).toMatchObject({ in: true, out: true });
        expect(cloud.mqttConnected).toBe(true);
        // a client taking over `<id>-out` evicts the publishing link (MQTT: the newer connection wins)
        const { connectMqtt, waitConnected } = await import('@tobira/shared');
        const squatter = connectMqtt(broker.url, { clientId: linkClientId(clientId, 'out'), clean: true, reconnectPeriod: 0 });
        await waitConnected(squatter);
        await waitFor(() => !cloud.mqttLinks.out || undefined, 'publishing link evicted');
        expect(cloud.mqttLinks.in).toBe(true);
        // it reconnects (and evicts the squatter in turn); the inbox never noticed
        await waitFor(() => cloud.mqttConnected || undefined, 'both links again');
        await squatter.endAsync(true);
      } finally {
        await cloud.stop();
      }
      expect(linkClientId('x'.repeat(128), 'out')).toHaveLength(128);
      expect(linkClientId('tobira-cloud-a', 'in')).toBe('tobira-cloud-a-in');
    });

    it('while one gateway floods thousands of uplinks, another gateway gets grant after grant and its heartbeats, before the flood has drained', async () => {
      const FLOOD = 2000;
      const cloud = await startCloud(t, broker.url, { env: { UPLINK_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT) } });
      const a = await gateway();
      const b = await gateway();
      try {
        const msgs = await accessEvents(a.s.gatewayId, a.s.pair, a.s.doorA, 1, FLOOD);
        // sustained, in bursts of CHUNK, at most 2 CHUNKs ahead of the cloud: the test Mosquitto drops what it queues
        // beyond max_queued_messages (default 1000) for a subscriber (a real gateway would resend those)
        const CHUNK = 400;
        const sent = (async () => {
          for (let from = 0; from < FLOOD; from += CHUNK) {
            await flood(a.gw, msgs.slice(from, from + CHUNK));
            await waitFor(async () => (await auditCount(a.s.gatewayId)) >= from || undefined, 'the cloud keeps up', 120_000);
          }
        })();
        await waitFor(async () => (await auditCount(a.s.gatewayId)) > 0 || undefined, 'the flood is being handled');
        // three grants one after another: each needs the previous one's PUBACK before the dispatcher sends it
        for (let i = 1; i <= 3; i++) {
          const o = await cloud.issueKey({
            personId: b.s.personId,
            doors: [b.s.doorA],
            credential: { type: 'pin', value: String(700_000 + i) },
            validFrom: T0,
            validUntil: T0 + DAY,
          });
          expect(o.status).toBe('applied');
          await waitFor(() => grantsTo(b.gw).length >= i || undefined, `grant ${i} at the other gateway`, 60_000);
        }
        const beat = await cloud.sendHeartbeats();
        expect(beat.map((x) => x.gatewayId)).toContain(b.s.gatewayId);
        await waitFor(() => heartbeatsTo(b.gw).length > 0 || undefined, 'heartbeat at the other gateway');
        // all of that happened while the flood was still being worked through
        expect(await auditCount(a.s.gatewayId)).toBeLessThan(FLOOD);
        await sent;
        await waitFor(async () => (await auditCount(a.s.gatewayId)) === FLOOD || undefined, 'flood drained', 120_000);
        await waitFor(async () => (await ackedSeq(a.s.gatewayId)) === FLOOD || undefined, 'uplink pointer at the end');
        expect((await cloud.listOutbox(b.s.gatewayId)).map((r) => r.status)).toEqual(['sent', 'sent', 'sent']);
      } finally {
        await cloud.stop();
        await a.gw.close();
        await b.gw.close();
      }
    }, 240_000);

    it('keeps each gateway in order while handling gateways concurrently: every uplink pointer ends at the last seq, having never skipped one', async () => {
      const GWS = 6;
      const PER = 120;
      const cap = await capturingLogger();
      const cloud = await startCloud(t, broker.url, { env: { UPLINK_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT) }, deps: { log: cap.log } });
      const gws = await Promise.all(Array.from({ length: GWS }, () => gateway()));
      try {
        const batches = await Promise.all(gws.map((g) => accessEvents(g.s.gatewayId, g.s.pair, g.s.doorA, 1, PER)));
        // interleaved on the wire: seq 1 of every gateway, then seq 2, ...
        const sends: Promise<void>[] = [];
        for (let i = 0; i < PER; i++) gws.forEach((g, n) => sends.push(g.gw.sendRaw(batches[n]?.[i]?.token ?? '')));
        await Promise.all(sends);
        for (const [n, g] of gws.entries()) {
          await waitFor(async () => (await auditCount(g.s.gatewayId)) === PER || undefined, `all of ${g.s.gatewayId}`, 120_000);
          // the pointer moves over the next seq only: it reaches PER only if each message was applied after its predecessor
          expect(await ackedSeq(g.s.gatewayId)).toBe(PER);
          // and the order the inbox applied them in, from its log
          const seqOf = new Map((batches[n] ?? []).map((m) => [m.jti, m.seq]));
          const applied = cap.lines
            .filter((l) => l.msg === 'uplink applied' && l.gatewayId === g.s.gatewayId)
            .map((l) => seqOf.get(String(l.jti)));
          expect(applied).toEqual(Array.from({ length: PER }, (_, i) => i + 1));
        }
        // the bound held; more than one message was in the inbox at once
        expect(cloud.mqttLinks.inFlightPeak).toBeLessThanOrEqual(MAX_IN_FLIGHT);
        expect(cloud.mqttLinks.inFlightPeak).toBeGreaterThan(1);
      } finally {
        await cloud.stop();
        await Promise.all(gws.map((g) => g.gw.close()));
      }
    }, 240_000);

    it('a crash mid-flood loses nothing: what was not committed was not acknowledged, and the restarted replica applies the rest once each, in order', async () => {
      const FLOOD = 600; // under Mosquitto's default max_queued_messages (1000) for the session while nobody reads it
      const CRASH_AFTER = 150;
      const a = await gateway();
      const clientId = `cloud-flood-crash-${newId().slice(-10)}`;
      const env = { MQTT_CLIENT_ID: clientId, MQTT_CLEAN_SESSION: 'false', UPLINK_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT) };
      let handled = 0;
      let crashed = 0;
      // the process "dies" after CRASH_AFTER uplinks: from then on every handling fails inside its transaction
      const crashing = await startCloud(t, broker.url, {
        env,
        deps: {
          crash: (p) => {
            if (p !== 'afterInboxInsertBeforeApply') return;
            if (handled >= CRASH_AFTER) {
              crashed++;
              throw new SimulatedCrash(p);
            }
            handled++;
          },
        },
      });
      const msgs = await accessEvents(a.s.gatewayId, a.s.pair, a.s.doorA, 1, FLOOD);
      try {
        await flood(a.gw, msgs);
        await waitFor(() => crashed > 0 || undefined, 'the crash, mid-flood');
        expect(await auditCount(a.s.gatewayId)).toBe(CRASH_AFTER);
        expect(await ackedSeq(a.s.gatewayId)).toBe(CRASH_AFTER);
      } finally {
        await crashing.stop();
      }
      // the same replica again (same client id: its persistent inbox session with the unacknowledged and queued uplinks)
      const cap = await capturingLogger();
      const restarted = await startCloud(t, broker.url, { env, deps: { log: cap.log } });
      try {
        await waitFor(async () => (await ackedSeq(a.s.gatewayId)) === FLOOD || undefined, 'every seq applied after the restart', 120_000);
        expect(await auditCount(a.s.gatewayId)).toBe(FLOOD);
        const inbox = await t.db.query('SELECT count(*)::int AS n FROM uplink_inbox WHERE gateway_id = $1', [a.s.gatewayId]);
        expect(Number(inbox.rows[0]?.n)).toBe(FLOOD);
        // nothing before the crash point was applied twice: everything the first run committed it had acknowledged, or it dedupes
        const seqOf = new Map(msgs.map((m) => [m.jti, m.seq]));
        const applied = cap.lines
          .filter((l) => l.msg === 'uplink applied' && l.gatewayId === a.s.gatewayId)
          .map((l) => seqOf.get(String(l.jti)));
        expect(applied).toEqual(Array.from({ length: FLOOD - CRASH_AFTER }, (_, i) => CRASH_AFTER + i + 1));
      } finally {
        await restarted.stop();
        await a.gw.close();
      }
    }, 240_000);

    if (pgBackend === 'postgres') {
      it('a gateway whose uplink is stuck on a locked row holds up neither the other gateways nor the dispatcher and heartbeats; the inbox stops reading at its bound, then drains in order', async () => {
        const cloud = await startCloud(t, broker.url, { env: { UPLINK_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT) } });
        const a = await gateway();
        const b = await gateway();
        const locker = new pg.Client({ connectionString: t.databaseUrl });
        await locker.connect();
        try {
          const aMsgs = await accessEvents(a.s.gatewayId, a.s.pair, a.s.doorA, 1, 400);
          await a.gw.sendRaw(aMsgs[0]?.token ?? '');
          await waitFor(async () => (await ackedSeq(a.s.gatewayId)) === 1 || undefined, "a's first uplink");
          // a stuck row: every further uplink of gateway A waits on it inside its transaction
          await locker.query('BEGIN');
          await locker.query('SELECT 1 FROM uplink_seq WHERE gateway_id = $1 FOR UPDATE', [a.s.gatewayId]);
          await flood(a.gw, aMsgs.slice(1, 3));
          await waitFor(() => cloud.mqttLinks.inFlight === 2 || undefined, "a's uplinks stuck in the inbox");
          // another gateway's uplink is handled meanwhile
          const [bMsg] = await accessEvents(b.s.gatewayId, b.s.pair, b.s.doorA, 1, 1);
          await b.gw.sendRaw(bMsg?.token ?? '');
          await waitFor(async () => (await ackedSeq(b.s.gatewayId)) === 1 || undefined, "b's uplink applied while a's is stuck");
          // now the rest of A's flood: the inbox fills up to its bound and stops reading (the broker keeps the rest)
          const sent = flood(a.gw, aMsgs.slice(3));
          await waitFor(() => cloud.mqttLinks.inFlight === MAX_IN_FLIGHT || undefined, 'inbox at its bound');
          // the dispatcher and the heartbeat are on the other connection: grants and heartbeats go
          for (let i = 1; i <= 3; i++) {
            const o = await cloud.issueKey({
              personId: b.s.personId,
              doors: [b.s.doorA],
              credential: { type: 'pin', value: String(800_000 + i) },
              validFrom: T0,
              validUntil: T0 + DAY,
            });
            expect(o.status).toBe('applied');
            await waitFor(() => grantsTo(b.gw).length >= i || undefined, `grant ${i} while a is stuck`, 60_000);
          }
          expect((await cloud.sendHeartbeats()).map((x) => x.gatewayId)).toContain(b.s.gatewayId);
          await waitFor(() => heartbeatsTo(b.gw).length > 0 || undefined, 'heartbeat while a is stuck');
          // still stuck, and never more than the bound in memory
          expect(await auditCount(a.s.gatewayId)).toBe(1);
          expect(cloud.mqttLinks.inFlight).toBe(MAX_IN_FLIGHT);
          await locker.query('COMMIT');
          await sent;
          await waitFor(async () => (await ackedSeq(a.s.gatewayId)) === aMsgs.length || undefined, 'a drained in order', 120_000);
          expect(await auditCount(a.s.gatewayId)).toBe(aMsgs.length);
          expect(cloud.mqttLinks.inFlightPeak).toBe(MAX_IN_FLIGHT);
        } finally {
          await locker.end();
          await cloud.stop();
          await a.gw.close();
          await b.gw.close();
        }
      }, 240_000);
    }
  });
});
