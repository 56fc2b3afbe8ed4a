import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { connectMqtt, encodeSecret, newPairingSecret, topics, waitConnected } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { FakeLock, PIN, lockClockOf, STAFF_PIN, STAFF_TOKEN, runSite, waitFor, type Running } from './harness.js';
import { capturingLog } from './staff-helpers.js';

/**
 * What a flood from the site side can do to a gateway (docs/gateway.md "Flood
 * bounds"): a lock sending requests as fast as it can, guessing spread over
 * doors, a disk running out of room.
 */
describe.each(mqttBackends())('flood bounds against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  const extraLocks: FakeLock[] = [];
  let cap: ReturnType<typeof capturingLog>;
  const locks = ['lock-1', 'lock-2', 'lock-3'].map((lockId, i) => ({
    lockId,
    doorId: `door-${i + 1}`,
    pairingSecret: encodeSecret(newPairingSecret()),
  }));

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    cap = capturingLog();
  });
  afterEach(async () => {
    for (const l of extraLocks.splice(0)) await l.close();
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const start = async (opts: Parameters<typeof runSite>[3] = {}) => {
    site = await runSite(broker.url, broker.url, broker.unique, {
      ...opts,
      overrides: { locks, ...opts.overrides },
      deps: { log: cap.log, ...opts.deps },
    });
    return site;
  };
  const lockAt = async (s: Running, lockId: string) => {
    const l = new FakeLock(s.f.gatewayId, lockId, lockClockOf(s.gw));
    await l.connect(broker.url);
    extraLocks.push(l);
    return l;
  };
  /** A key for every door (and a staff key), and a running lease. */
  async function provision(s: Running) {
    const doors = locks.map((l) => l.doorId) as never;
    await s.cloud.grant({ doors });
    await s.cloud.grant({
      keyId: 'staff' as never,
      personId: 'staff-1' as never,
      offlineCapable: true,
      doors,
      credential: { type: 'pin', digest: s.f.digest(STAFF_PIN) },
    });
    await s.cloud.heartbeat();
    await waitFor(
      () => s.gw.store.settings().leaseExpiresAt !== null && s.gw.store.settings().appliedSeq >= s.cloud.seq,
      'grants and heartbeat applied',
    );
  }
  const count = (s: Running, sql: string, ...args: unknown[]) => (s.gw.store.db.prepare(sql).get(...args) as { n: number }).n;
  const accessRows = (s: Running, lockId: string) => count(s, 'SELECT count(*) AS n FROM access_log WHERE lock_id = ?', lockId);
  const accessEvents = (s: Running, lockId: string) =>
    count(s, "SELECT count(*) AS n FROM outbox WHERE type = 'access.event' AND json_extract(body, '$.lockId') = ?", lockId);

  describe('when one lock floods the gateway with requests', () => {
    it('cuts the flood by the per-lock rate limit before anything is written, logs its first refusal once, and still serves the other locks', async () => {
      const s = await start({ overrides: { requestRate: { burst: 5, perSecond: 1 } } });
      await provision(s);
      const flood = Array.from({ length: 120 }, (_, i) => `flood-${i}`);
      // The manual clock stands still: no token comes back during the flood.
      await Promise.all(
        flood.map((requestId) => s.lock.publish('request', { requestId, credential: { type: 'pin', value: PIN }, at: s.gw.trustedNow() })),
      );
      await waitFor(() => flood.every((id) => s.lock.decisions.has(id)), 'every flooded request answered');
      const codes = flood.map((id) => s.lock.decisions.get(id)!.code);
      expect(codes.filter((c) => c === 'ALLOWED')).toHaveLength(5);
      expect(codes.filter((c) => c === 'RATE_LIMITED')).toHaveLength(115);
      expect(
        flood.filter((id) => s.lock.decisions.get(id)!.code === 'RATE_LIMITED').every((id) => s.lock.decisions.get(id)!.commandId === null),
      ).toBe(true);

      // Bounded writes: the access log, the outbox and the uplink hold the 5 decisions, nothing per refused request.
      expect(accessRows(s, 'lock-1')).toBe(5);
      expect(accessEvents(s, 'lock-1')).toBe(5);
      expect(s.lock.commands).toHaveLength(5);
      // One bounded summary row for operators, one log line with its cid; the rest only counted.
      expect(s.gw.store.db.prepare("SELECT lock_id, channel, code FROM lock_refusals WHERE code = 'RATE_LIMITED'").all()).toEqual([
        { lock_id: 'lock-1', channel: 'request', code: 'RATE_LIMITED' },
      ]);
      const first = cap.lines().filter((l) => l.code === 'RATE_LIMITED' && l.msg === 'lock message refused');
      expect(first).toHaveLength(1);
      expect(first[0]).toMatchObject({ lockId: 'lock-1', cid: expect.any(String) });
      expect(await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_lock_messages_refused_total')).toContain(
        'channel="request",code="RATE_LIMITED"} 115',
      );

      // Another lock is not touched by lock-1's flood.
      const other = await lockAt(s, 'lock-2');
      expect((await other.present(PIN)).code).toBe('ALLOWED');

      // Once lock-1 slows down it is served again, and the end of the flood is summed up in one line.
      s.f.clock.advance(2000);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      expect(cap.lines().filter((l) => l.msg === 'lock request flood over: requests refused by the rate limit')).toEqual([
        expect.objectContaining({ lockId: 'lock-1', refused: 115, code: 'RATE_LIMITED' }),
      ]);
    });

    it('bounds a flood of garbage and of made-up lock ids too: no BAD_REQUEST row per message, one bucket for every unpaired id', async () => {
      const s = await start({ overrides: { requestRate: { burst: 3, perSecond: 1 } } });
      await Promise.all(Array.from({ length: 60 }, () => s.lock.publish('request', 'not json {')));
      // Made-up lock ids: each would be a refusal row; they share one bucket.
      const intruder = await lockAt(s, 'ghost-0');
      const client = connectMqtt(broker.url, { protocolVersion: 4, clientId: `ghosts-${broker.unique}`, clean: true });
      await waitConnected(client);
      await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          client.publishAsync(
            topics.lock(s.f.gatewayId, `ghost-${i}`, 'request'),
            JSON.stringify({ requestId: `g-${i}`, credential: { type: 'pin', value: PIN }, at: s.gw.trustedNow() }),
            { qos: 1 },
          ),
        ),
      );
      await client.endAsync(true);
      await waitFor(async () => {
        const m = await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_lock_messages_refused_total');
        return m.includes('channel="request",code="RATE_LIMITED"} 94');
      }, 'every flooded message counted (57 garbage + 37 made-up ids over the limit)');
      expect(accessRows(s, 'lock-1')).toBe(3);
      // the made-up ids' requests share one bucket (the intruder's own privacy report on connect is an event, apart)
      expect(count(s, "SELECT count(*) AS n FROM lock_refusals WHERE code = 'UNKNOWN_LOCK' AND channel = 'request'")).toBe(3);
      expect(count(s, "SELECT count(*) AS n FROM lock_refusals WHERE code = 'RATE_LIMITED'")).toBe(2);
      expect(s.gw.store.outboxDepth() + count(s, "SELECT count(*) AS n FROM outbox WHERE status = 'sent'")).toBeLessThan(10);
      // Nothing answers a made-up lock id.
      expect(intruder.decisions.size).toBe(0);
    });
  });

  describe('when guessing is spread over several locks', () => {
    it('locks the credential type out at every lock once the site-wide limit is reached, though no lock reached its own', async () => {
      const s = await start({
        overrides: { lockout: { limit: 3, cooldownSeconds: 60 }, siteLockout: { limit: 5, windowSeconds: 600, cooldownSeconds: 300 } },
      });
      await provision(s);
      const [l2, l3] = [await lockAt(s, 'lock-2'), await lockAt(s, 'lock-3')];
      for (const l of [s.lock, s.lock, l2, l2]) expect((await l.present('000000')).code).toBe('UNKNOWN_CREDENTIAL');
      expect((await l3.present('000001')).code).toBe('UNKNOWN_CREDENTIAL'); // the 5th wrong PIN on the site
      expect(s.gw.store.locks().map((l) => l.lockedOutUntil)).toEqual([null, null, null]);

      // Now every PIN is refused at every lock, the right one and the staff one included: a guess learns nothing.
      for (const l of [s.lock, l2, l3]) expect((await l.present(PIN)).code).toBe('LOCKED_OUT');
      expect((await l3.present(STAFF_PIN)).code).toBe('LOCKED_OUT');
      expect(
        cap.lines().filter((l) => l.msg === 'wrong credentials of one type across the site: that type is locked out at every lock'),
      ).toEqual([expect.objectContaining({ code: 'LOCKED_OUT', credentialType: 'pin', lockId: 'lock-3', cid: expect.any(String) })]);
      // Other credential types are not locked out (a wrong card is judged as usual).
      await l2.publish('request', { requestId: 'card-1', credential: { type: 'card', value: 'abcd1234' }, at: s.gw.trustedNow() });
      expect((await waitFor(() => l2.decisions.get('card-1'), 'card decision')).code).toBe('UNKNOWN_CREDENTIAL');

      s.f.clock.advance(300_000);
      await s.cloud.heartbeat();
      await waitFor(() => (s.gw.store.settings().leaseExpiresAt ?? 0) > s.f.clock.now(), 'lease renewed');
      expect((await l2.present(PIN)).code).toBe('ALLOWED');
    });
  });

  describe('when the disk runs below its headroom', () => {
    it('refuses ordinary keys with STORAGE_FULL (recorded), still opens for staff keys, raises DISK_LOW in status, log and metrics, and recovers when space is back', async () => {
      let free = 10 * 2 ** 30;
      let fail = false;
      const s = await start({
        overrides: { storage: { minFreeBytes: 256 * 2 ** 20, checkIntervalMs: 3_600_000 } },
        deps: {
          freeSpace: async () => {
            if (fail) throw new Error('EIO');
            return free;
          },
        },
      });
      await provision(s);
      const status = async () => {
        const r = await fetch(`${s.gw.httpUrl!}/staff/status`, { headers: { authorization: `Bearer ${STAFF_TOKEN}` } });
        return ((await r.json()) as { storage: unknown }).storage;
      };
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      expect(await status()).toMatchObject({ low: false, freeBytes: free, minFreeBytes: 256 * 2 ** 20 });

      free = 100 * 2 ** 20;
      // The verdict is cached: nothing changes until the next check reads the disk.
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      await s.gw.checkStorageNow();
      const denied = await s.lock.present(PIN);
      expect(denied).toMatchObject({ allowed: false, code: 'STORAGE_FULL', commandId: null });
      expect((await s.lock.present(STAFF_PIN)).code).toBe('ALLOWED');
      expect(await status()).toMatchObject({ low: true, freeBytes: free });
      expect(cap.lines().filter((l) => l.code === 'DISK_LOW')).toEqual([
        expect.objectContaining({ level: 50, freeBytes: free, cid: expect.any(String) }),
      ]);
      expect(await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_storage_low')).toContain('tobira_gateway_storage_low 1');
      // The denial itself is an audit event: recorded and sent up like any other.
      const ev = await waitFor(
        () => s.cloud.ofType('access.event').find((e) => e.body.requestId === denied.requestId),
        'STORAGE_FULL event uplinked',
      );
      expect(ev.body).toMatchObject({ allowed: false, code: 'STORAGE_FULL', keyId: 'key-1' });

      // A failed reading keeps the verdict (it neither opens nor shuts every door).
      fail = true;
      await s.gw.checkStorageNow();
      expect((await s.lock.present(PIN)).code).toBe('STORAGE_FULL');
      expect(cap.lines().some((l) => l.code === 'DISK_CHECK_FAILED')).toBe(true);

      fail = false;
      free = 2 * 2 ** 30;
      await s.gw.checkStorageNow();
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      expect(await status()).toMatchObject({ low: false, freeBytes: free });
      expect(cap.lines().filter((l) => l.code === 'DISK_OK')).toHaveLength(1);
    });

    it('starts refusing at once when it starts on a full disk', async () => {
      const s = await start({ deps: { freeSpace: async () => 1024 } });
      await provision(s);
      expect((await s.lock.present(PIN)).code).toBe('STORAGE_FULL');
    });
  });

  describe('the hourly purge', () => {
    it('prunes access-log rows past the retention once the cloud has them', async () => {
      const s = await start({ overrides: { accessLog: { maxAgeDays: 1, maxRows: 100_000 } } });
      await provision(s);
      for (let i = 0; i < 3; i++) await s.lock.present(PIN);
      await waitFor(() => s.gw.store.outboxDepth() === 0, 'outbox drained');
      // the broker took them, but until the cloud acknowledges applying them they are kept
      s.f.clock.advance(2 * 86_400_000);
      s.gw.purgeNow();
      expect(s.gw.store.accessLog(10)).toHaveLength(3);
      const last = s.gw.store.db.prepare('SELECT seq, jti FROM outbox ORDER BY seq DESC LIMIT 1').get() as { seq: number; jti: string };
      await s.cloud.heartbeat(s.cloud.seq, last);
      await waitFor(() => s.gw.store.settings().uplinkAckedSeq === last.seq, 'the cloud acknowledged them');
      await s.lock.present(PIN);
      // The newest decision is not acknowledged yet; the purge keeps it either way (it is recent).
      s.gw.purgeNow();
      expect(s.gw.store.accessLog(10)).toHaveLength(1);
    });
  });
});
