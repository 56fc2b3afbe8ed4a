import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PIN, STAFF_TOKEN, provision, runSite, waitFor, type Running } from './harness.js';

const GRACE_MS = 300_000;

// a message alone, or the items of an uplink.batch
const claims = (t: string) => {
  const c = JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString()) as {
    jti: string;
    seq: number;
    type: string;
    body: unknown;
  };
  return c.type === 'uplink.batch' ? (c.body as { items: { jti: string; seq: number }[] }).items : [c];
};

describe.each(mqttBackends())('a gateway behind the cloud, and uplinks the cloud has not acknowledged (broker: %s)', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await site?.close();
    site = undefined;
    await broker.stop();
  });
  const status = async (s: Running) =>
    (await (await fetch(`${s.gw.httpUrl!}/staff/status`, { headers: { authorization: `Bearer ${STAFF_TOKEN}` } })).json()) as Record<
      string,
      unknown
    >;

  describe('when a heartbeat names a seq the gateway never got (a revoke stuck in the cloud)', () => {
    it('does not renew the lease, asks for it, fails closed with BEHIND_CLOUD when the lease runs out, and denies the key once the revoke arrives', async () => {
      const s = (site = await runSite(broker.url, broker.url, broker.unique));
      await provision(s);
      const leaseBefore = s.gw.store.settings().leaseExpiresAt!;
      // seq 2 (a revoke) was handed out but never delivered; heartbeats keep naming it
      s.f.clock.advance(60_000);
      await s.cloud.heartbeat(2);
      await waitFor(() => s.gw.store.settings().cloudLastSeq === 2, 'heartbeat applied');
      expect(s.gw.store.settings().leaseExpiresAt).toBe(leaseBefore); // not renewed over the missing revoke
      // (resync requests are rate-limited: the heartbeat is repeated until one goes out, as the cloud's timer would)
      await waitFor(async () => {
        const asked = s.cloud.ofType('resync.request').find((r) => r.body.reason === 'gap' && r.body.lastAppliedSeq === 1);
        if (!asked) await s.cloud.heartbeat(2);
        return asked;
      }, 'resync request for the gap');
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED'); // still inside the grace of the last proven sync

      s.f.clock.advance(GRACE_MS);
      expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
      expect(await status(s)).toMatchObject({ failClosed: true, failClosedReason: 'BEHIND_CLOUD', cloudLastSeq: 2, appliedSeq: 1 });

      await s.cloud.revoke('key-1', 2, 2);
      await s.cloud.heartbeat(2);
      await waitFor(
        () => s.gw.store.settings().appliedSeq === 2 && (s.gw.store.settings().leaseExpiresAt ?? 0) > s.f.clock.now(),
        'caught up and fresh',
      );
      expect((await s.lock.present(PIN)).code).toBe('KEY_REVOKED');
      expect((await status(s)).failClosedReason).toBe(null);
    });

    it('takes the proof of a heartbeat it was behind on once the missing seq is applied (never longer than iat + grace)', async () => {
      const s = (site = await runSite(broker.url, broker.url, broker.unique));
      await provision(s);
      s.f.clock.advance(100_000);
      const hb = await s.cloud.heartbeat(2);
      await waitFor(() => s.gw.store.settings().behindHeartbeat?.seq === 2, 'behind heartbeat kept');
      await s.cloud.grant({ version: 2 }, 2);
      await waitFor(() => s.gw.store.settings().appliedSeq === 2, 'seq 2 applied');
      await waitFor(() => s.gw.store.settings().leaseExpiresAt === hb.iat * 1000 + GRACE_MS, 'lease from the behind heartbeat');
      expect(s.gw.store.settings().behindHeartbeat).toBe(null);
    });
  });

  describe('when the broker took an uplink the cloud never applied', () => {
    it('keeps it until a heartbeat acknowledges it, sends it again (same jti and seq) when overdue, and drops it only then', async () => {
      const s = (site = await runSite(broker.url, broker.url, broker.unique, { overrides: { uplinkAckTimeoutMs: 5_000 } }));
      await provision(s);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      const event = await waitFor(() => s.cloud.ofType('access.event')[0], 'access event up');
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'broker took everything');
      expect(s.gw.store.outboxUnacked()).toBeGreaterThan(0);

      // The cloud has applied everything before the event, not the event (say the broker lost it).
      const before = s.cloud.uplink
        .filter((m) => m.type !== 'resync.request' && m.seq < event.seq)
        .sort((a, b) => ('seq' in a && 'seq' in b ? a.seq - b.seq : 0))
        .at(-1)!;
      expect('seq' in before).toBe(true);
      const ackBefore = { seq: (before as { seq: number }).seq, jti: before.jti };
      await s.cloud.heartbeat(1, ackBefore);
      await waitFor(() => s.gw.store.settings().uplinkAckedSeq === ackBefore.seq, 'acknowledged up to before the event');
      const n = s.cloud.rawUplink.length;
      expect(s.gw.store.outboxUnacked()).toBeGreaterThan(0); // the event is kept

      s.f.clock.advance(6_000); // overdue
      await s.cloud.heartbeat(1, ackBefore);
      const resent = await waitFor(
        () =>
          s.cloud.rawUplink
            .slice(n)
            .flatMap(claims)
            .find((c) => c.jti === event.jti),
        'the event sent again',
      );
      expect(resent.seq).toBe(event.seq);
      expect(await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_uplink_resent_total')).toMatch(/ [1-9]/);

      // Now the cloud has it: acknowledged, kept no longer than retention.
      const last = s.gw.store.db.prepare('SELECT seq, jti FROM outbox ORDER BY seq DESC LIMIT 1').get() as { seq: number; jti: string };
      await s.cloud.heartbeat(1, last);
      const unackedUpTo = (seq: number) =>
        (s.gw.store.db.prepare('SELECT count(*) AS n FROM outbox WHERE seq <= ? AND acked_at IS NULL').get(seq) as { n: number }).n;
      await waitFor(() => unackedUpTo(last.seq) === 0, 'everything up to it acknowledged');
      // (only the ack of that very heartbeat may still wait for the next one)
      expect(await status(s)).toMatchObject({ uplinkAckedSeq: last.seq, uplinkUnacked: expect.toBeOneOf([0, 1]) });
    });

    it('ignores an acknowledgement of another history (its jti is not ours at that seq) and keeps every row', async () => {
      const s = (site = await runSite(broker.url, broker.url, broker.unique));
      await provision(s);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'broker took everything');
      const unacked = s.gw.store.outboxUnacked();
      const last = s.gw.store.db.prepare('SELECT seq FROM outbox ORDER BY seq DESC LIMIT 1').get() as { seq: number };
      await s.cloud.heartbeat(1, { seq: last.seq, jti: '01900000-0000-7000-8000-000000000000' });
      await waitFor(() => s.gw.store.settings().cloudLastSeq === 1 && s.gw.store.inboxDepth() === 0, 'heartbeat applied');
      expect(s.gw.store.outboxUnacked()).toBeGreaterThanOrEqual(unacked);
      expect(s.gw.store.settings().uplinkAckedSeq).toBe(0);
    });

    it('on an acknowledgement of another history (its own store restored), fails closed and asks for a conflict resync naming its lowest unacknowledged uplink seq', async () => {
      const s = (site = await runSite(broker.url, broker.url, broker.unique));
      await provision(s);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'broker took everything');
      // the cloud has really applied the rows up to the first one: that one is acknowledged
      const first = s.gw.store.db.prepare('SELECT seq, jti FROM outbox ORDER BY seq LIMIT 1').get() as { seq: number; jti: string };
      await s.cloud.heartbeat(1, first);
      await waitFor(() => s.gw.store.settings().uplinkAckedSeq === first.seq, 'the first row acknowledged');
      const lowest = (s.gw.store.db.prepare('SELECT min(seq) AS seq FROM outbox WHERE acked_at IS NULL').get() as { seq: number }).seq;
      expect(lowest).toBeGreaterThan(first.seq);
      const last = s.gw.store.db.prepare('SELECT seq FROM outbox ORDER BY seq DESC LIMIT 1').get() as { seq: number };
      const n = s.cloud.uplink.length;
      await s.cloud.heartbeat(1, { seq: last.seq + 5, jti: '01900000-0000-7000-8000-000000000000' });
      const req = await waitFor(
        () => s.cloud.uplink.slice(n).find((m) => m.type === 'resync.request' && m.body.reason === 'conflict'),
        'the conflict resync request',
      );
      expect(req.type === 'resync.request' && req.body.uplinkUnackedFrom).toBe(lowest);
      expect((await s.lock.present(PIN)).code).not.toBe('ALLOWED');
    });

    it('sends overdue rows again on a heartbeat that acknowledges nothing (a cloud whose pointer restarted names no message yet)', async () => {
      const s = (site = await runSite(broker.url, broker.url, broker.unique, { overrides: { uplinkAckTimeoutMs: 5_000 } }));
      await provision(s);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      const event = await waitFor(() => s.cloud.ofType('access.event')[0], 'access event up');
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'broker took everything');
      const n = s.cloud.rawUplink.length;
      s.f.clock.advance(6_000); // overdue
      await s.cloud.heartbeat(1);
      const resent = await waitFor(
        () =>
          s.cloud.rawUplink
            .slice(n)
            .flatMap(claims)
            .find((c) => c.jti === event.jti),
        'the event sent again',
      );
      expect(resent.seq).toBe(event.seq);
      expect(await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_uplink_resent_total')).toMatch(/ [1-9]/);
    });
  });
});
