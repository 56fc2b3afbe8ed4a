import { randomUUID } from 'node:crypto';
import { ManualClock, asKeyId } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/gateway.js';
import { parseConfig } from '../src/config.js';
import { T0 } from './fixtures.js';
import { FakeLock, PIN, lockClockOf, STAFF_TOKEN, provision, runSite, silentLog, waitFor, type Running } from './harness.js';

const DAY = 86_400_000;
const GRACE_MS = 300_000; // the harness's offlineGraceSeconds

/**
 * Attacks I1 from the wall clock: the lease must run out after at most
 * offlineGraceSeconds of real elapsed time since the heartbeat arrived,
 * whatever the wall clock reads. Elapsed time is a hand-moved monotonic
 * clock, separate from the wall clock the test breaks.
 */
describe.each(mqttBackends())('trusted time when the wall clock is wrong (broker: %s)', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  let mono: ManualClock;
  const extra: (() => Promise<void>)[] = [];
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    mono = new ManualClock(1_000);
  });
  afterEach(async () => {
    for (const c of extra.splice(0).reverse()) await c();
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const start = async () => {
    site = await runSite(broker.url, broker.url, broker.unique, { deps: { monotonic: mono } });
    return site;
  };
  const status = async (gw: Gateway) => {
    const r = await fetch(`${gw.httpUrl!}/staff/status`, { headers: { authorization: `Bearer ${STAFF_TOKEN}` } });
    return (await r.json()) as { failClosed: boolean; failClosedReason: string | null; leaseRemainingSeconds: number };
  };
  async function inSync(s: Running, grant: Parameters<Running['cloud']['grant']>[0] = {}) {
    await provision(s, grant);
    expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
  }

  const faults: [string, (wall: ManualClock) => void][] = [
    ['stopped (no clock source)', () => {}],
    ['reset to 1970 after a power cut', (wall) => wall.set(0)],
    ['stepped one day back', (wall) => wall.set(T0 - DAY)],
  ];

  describe.each(faults)('when the wall clock is %s while the cloud is silent', (_name, breakClock) => {
    it('fails closed once offlineGraceSeconds of real time have elapsed, and the staff countdown keeps counting', async () => {
      const s = await start();
      await inSync(s);
      breakClock(s.f.clock);

      mono.advance(GRACE_MS - 60_000);
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED'); // inside the grace
      const mid = await status(s.gw);
      expect(mid.failClosed).toBe(false);
      expect(mid.leaseRemainingSeconds).toBeLessThanOrEqual(60);
      expect(mid.leaseRemainingSeconds).toBeGreaterThan(55);

      mono.advance(60_000);
      expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
      expect(await status(s.gw)).toMatchObject({ failClosed: true, failClosedReason: 'LEASE_EXPIRED', leaseRemainingSeconds: 0 });
    });
  });

  it('keeps deciding on real time when the wall clock jumps a year ahead, says so, and fails closed once the grace has really elapsed', async () => {
    const s = await start();
    await inSync(s, { validUntil: T0 + 2 * 365 * DAY });
    s.f.clock.set(T0 + 365 * DAY);
    expect((await s.lock.present(PIN)).code).toBe('ALLOWED'); // the lease runs on elapsed time, bounded above by the cloud's
    const st = (await status(s.gw)) as unknown as { clockSkew: { skewMs: number } | null; failClosed: boolean };
    expect(st.failClosed).toBe(false);
    expect(st.clockSkew?.skewMs).toBeGreaterThan(364 * DAY);
    mono.advance(GRACE_MS);
    expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
  });

  describe('when the wall clock runs 150 s ahead', () => {
    it('opens no key before its validFrom, shows CLOCK_SKEW to staff, and the skew does not outlive the fix of the clock', async () => {
      const s = await start();
      await inSync(s);
      const soonPin = '918273';
      await s.cloud.grant({
        keyId: 'key-soon' as never,
        credential: { type: 'pin', digest: s.f.digest(soonPin) },
        validFrom: s.f.clock.now() + 100_000,
      });
      await s.cloud.heartbeat();
      await waitFor(() => s.gw.store.settings().appliedSeq >= 2, 'the second key applied');
      expect((await s.lock.present(soonPin)).code).toBe('KEY_NOT_YET_VALID');

      const real = s.f.clock.now();
      s.f.clock.set(real + 150_000); // only the wall clock moves: no real time passes
      expect((await s.lock.present(soonPin)).code).toBe('KEY_NOT_YET_VALID');
      expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
      const skewed = (await status(s.gw)) as unknown as { clockSkew: { skewMs: number } | null; failClosed: boolean };
      expect(skewed.failClosed).toBe(false);
      expect(skewed.clockSkew?.skewMs).toBeGreaterThan(100_000);

      // the clock is fixed: nothing of the skew stayed behind in the high-water mark
      s.f.clock.set(real);
      expect(s.gw.store.settings().highWaterMs).toBeLessThan(real + 100_000);
      // nor in trusted time, not even the tolerance: a heartbeat now gives its whole grace (a mark kept at the
      // ceiling would cut every lease by 30 s for good, and fail closed for good with a grace under that)
      await s.cloud.heartbeat();
      await waitFor(async () => ((await status(s.gw)).leaseRemainingSeconds > GRACE_MS / 1000 - 5 ? true : undefined), 'a whole lease');
      expect((await s.lock.present(soonPin)).code).toBe('KEY_NOT_YET_VALID');
      expect(((await status(s.gw)) as unknown as { clockSkew: unknown }).clockSkew).toBeNull();
      // real time reaches validFrom: it opens
      mono.advance(100_000);
      s.f.clock.set(real + 100_000);
      expect((await s.lock.present(soonPin)).code).toBe('ALLOWED');
    });

    it('lowers a high-water mark left ahead by the clock to the time the cloud proves after a restart', async () => {
      const s = await start();
      await inSync(s);
      const real = s.f.clock.now();
      // a high-water mark left far ahead (a clock that ran ahead while nothing bounded it)
      s.gw.store.db.prepare('UPDATE settings SET high_water_ms = ? WHERE id = 1').run(real + 3_600_000);
      await s.gw.stop({ force: true });
      const gw = createGateway(s.f.config, { clock: s.f.clock, monotonic: mono, log: silentLog(), tickMs: 50 });
      extra.push(() => gw.stop({ force: true }));
      await gw.start();
      await waitFor(() => gw.timeProven, 'the restart proven by the cloud');
      // the next tick lowers it to the ceiling (the proven time plus the tolerance)
      await waitFor(() => gw.store.settings().highWaterMs < real + 60_000, 'the high-water mark lowered');
    });

    it('recovers from a start with the clock days ahead: the answer to its own request proves the time past every exp', async () => {
      const s = await start();
      await inSync(s);
      const real = s.f.clock.now();
      await s.gw.stop({ force: true });
      // started with its clock two days ahead (the cloud's is right) while the cloud does not answer: nothing
      // bounds it before a proof, so the high-water mark follows it past the exp of every message the cloud
      // signs now (a day's lifetime)
      s.cloud.answerResync = false;
      const aheadClock = new ManualClock(real + 2 * DAY);
      const ahead = createGateway(s.f.config, { clock: aheadClock, monotonic: mono, log: silentLog(), tickMs: 50 });
      await ahead.start();
      await waitFor(() => ahead.store.settings().highWaterMs >= real + 2 * DAY, 'the high-water mark ahead');
      await ahead.stop({ force: true });

      // the clock is fixed; the restart's proof must not be refused as expired against the stored mark
      s.cloud.answerResync = true;
      const gw = createGateway(s.f.config, { clock: s.f.clock, monotonic: mono, log: silentLog(), tickMs: 50 });
      extra.push(() => gw.stop({ force: true }));
      await gw.start();
      await waitFor(() => gw.timeProven || undefined, 'the restart proven by the cloud');
      await waitFor(() => gw.store.settings().highWaterMs < real + 60_000, 'the high-water mark lowered');
      // the heartbeats count again: the lease runs and the door opens
      await s.cloud.heartbeat();
      const lock = new FakeLock(s.f.gatewayId, 'lock-1', lockClockOf(gw));
      await lock.connect(broker.url);
      extra.push(() => lock.close());
      await waitFor(async () => (await lock.present(PIN)).code === 'ALLOWED' || undefined, 'the door opens again');
      expect(await status(gw)).toMatchObject({ failClosed: false });
    });

    it('refuses an expired answer to a request it did not make, whatever the stored mark', async () => {
      const s = await start();
      await inSync(s);
      const stale = await s.cloud.send({
        type: 'resync.answer',
        ttlSeconds: -120, // past the 60 s tolerance
        body: { requestId: randomUUID(), mode: 'up_to_date', fromSeq: 0, toSeq: 0, snapshotId: null },
      });
      expect(stale.type).toBe('resync.answer');
      await waitFor(
        () =>
          (s.gw.store.db.prepare("SELECT count(*) AS n FROM rejected WHERE code = 'EXPIRED'").get() as { n: number }).n >= 1 || undefined,
        'the expired foreign answer rejected',
      );
    });
  });

  it('keeps deciding and recording when the monotonic clock reads fractions of a ms, as performance.now() does', async () => {
    const s = await start();
    await inSync(s);
    s.f.clock.set(0);
    mono.advance(1234.5678);
    expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
    await waitFor(() => s.gw.store.settings().highWaterMs >= T0 + 1234, 'the time floor checkpointed');
    expect(Number.isInteger(s.gw.store.settings().highWaterMs)).toBe(true);
    expect(
      s.gw.store
        .accessLog(10)
        .map((a) => a.at)
        .every(Number.isInteger),
    ).toBe(true);
  });

  it('keeps key validity windows expiring with elapsed time when the wall clock is set back', async () => {
    const s = await start();
    await inSync(s, { validUntil: T0 + 100_000 });
    s.f.clock.set(0);
    mono.advance(99_000);
    expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
    mono.advance(2_000);
    expect((await s.lock.present(PIN)).code).toBe('KEY_EXPIRED'); // the lease (300 s) still runs: the window ended
  });

  it('does not hand back elapsed lease time when the gateway restarts during the outage with a reset clock', async () => {
    const s = await start();
    await inSync(s);
    s.f.clock.set(0); // RTC lost: the wall clock reads 1970 from here on, across the restart
    mono.advance(200_000);
    expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
    // the periodic checkpoint of trusted time (every tick) reaches the database before the crash
    await waitFor(() => s.gw.store.settings().highWaterMs >= T0 + 200_000, 'time floor checkpointed');
    await s.gw.stop({ force: true });

    // A new process: its monotonic clock starts anew, the cloud is unreachable, the wall clock still reads 1970.
    // It cannot know how long it was off (an hour, here, or a second), so the persisted lease does not count.
    const restartedMono = new ManualClock(0);
    const gw = createGateway(parseConfig({ ...s.f.configInput, cloud: { ...s.f.configInput.cloud, url: 'mqtt://127.0.0.1:1' } }), {
      clock: s.f.clock,
      monotonic: restartedMono,
      log: silentLog(),
      tickMs: 50,
    });
    await gw.start();
    extra.push(() => gw.stop({ force: true }));
    await waitFor(() => gw.siteConnected, 'site link after restart');
    const lock = new FakeLock(s.f.gatewayId, 'lock-1', lockClockOf(gw));
    await lock.connect(broker.url);
    extra.push(() => lock.close());

    expect(await status(gw)).toMatchObject({ failClosed: true, failClosedReason: 'TIME_UNPROVEN', leaseRemainingSeconds: 0 });
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');
    expect(gw.store.settings().leaseExpiresAt).not.toBeNull(); // kept: a proof of the time may show it still runs
  });

  it('after a restart, counts the persisted lease again only once the cloud answers a resync request of the new process', async () => {
    const s = await start();
    await inSync(s);
    s.f.clock.set(0);
    mono.advance(200_000);
    await waitFor(() => s.gw.store.settings().highWaterMs >= T0 + 200_000, 'time floor checkpointed');
    await s.gw.stop({ force: true });
    s.cloud.answerResync = false; // the cloud is slow to answer: the restarted gateway waits for it

    const restartedMono = new ManualClock(0);
    const gw = createGateway(s.f.config, { clock: s.f.clock, monotonic: restartedMono, log: silentLog(), tickMs: 50 });
    await gw.start();
    extra.push(() => gw.stop({ force: true }));
    const lock = new FakeLock(s.f.gatewayId, 'lock-1', lockClockOf(gw));
    await lock.connect(broker.url);
    extra.push(() => lock.close());
    const req = await waitFor(
      () => s.cloud.ofType('resync.request').find((r) => r.body.reason === 'startup' && r.iat * 1000 >= T0 + 200_000),
      'startup request of the new process',
    );
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');

    // An answer to the old process's request (queued across the restart, or replayed) proves nothing.
    const old = s.cloud.ofType('resync.request')[0]!;
    expect(old.jti).not.toBe(req.jti);
    s.f.clock.set(T0 + 200_000 + 3_000); // the cloud's clock: the gateway was off for 3 s
    await s.cloud.send({
      type: 'resync.answer',
      body: { requestId: old.body.requestId, mode: 'up_to_date', fromSeq: 0, toSeq: 0, snapshotId: null },
    });
    await waitFor(
      () => (gw.store.inboxByStatus().processed ?? 0) >= 1 && gw.store.inboxByStatus().pending === undefined,
      'old answer applied',
    );
    expect(gw.timeProven).toBe(false);
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');

    // The answer to the new process's request: trusted time is the cloud's (the 3 s off counted), the lease counts.
    await s.cloud.send({
      type: 'resync.answer',
      body: { requestId: req.body.requestId, mode: 'up_to_date', fromSeq: 1, toSeq: 1, snapshotId: null },
    });
    await waitFor(() => gw.timeProven || undefined, 'time proven');
    s.f.clock.set(0);
    expect((await lock.present(PIN)).code).toBe('ALLOWED');
    const st = await status(gw);
    expect(st.failClosed).toBe(false);
    // 300 s of lease from the heartbeat at T0, minus the 203 s that really passed (not just the 200 s the old process saw)
    expect(st.leaseRemainingSeconds).toBeLessThanOrEqual(97);
    expect(st.leaseRemainingSeconds).toBeGreaterThan(90);
    restartedMono.advance(97_000);
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');
  });
  it('after a restart, an answer that says the cloud is ahead proves the time but counts no lease until the gateway has caught up to its toSeq', async () => {
    // a gateway restored from a backup: the backup's lease would otherwise open keys the cloud has since used or revoked
    const s = await start();
    await inSync(s);
    await s.gw.stop({ force: true });
    s.cloud.answerResync = false;
    const restartedMono = new ManualClock(0);
    const gw = createGateway(s.f.config, { clock: s.f.clock, monotonic: restartedMono, log: silentLog(), tickMs: 50 });
    await gw.start();
    extra.push(() => gw.stop({ force: true }));
    const lock = new FakeLock(s.f.gatewayId, 'lock-1', lockClockOf(gw));
    await lock.connect(broker.url);
    extra.push(() => lock.close());
    const req = await waitFor(
      () =>
        s.cloud
          .ofType('resync.request')
          .find((r) => r.body.reason === 'startup' && gw.store.settings().appliedSeq === r.body.lastAppliedSeq && r.iat * 1000 >= T0),
      'startup request of the new process',
    );
    const applied = gw.store.settings().appliedSeq;
    // the cloud handed out two seqs this store never applied; it answers, then replays them
    await s.cloud.send({
      type: 'resync.answer',
      body: { requestId: req.body.requestId, mode: 'replay', fromSeq: applied + 1, toSeq: applied + 2, snapshotId: null },
    });
    await waitFor(() => gw.timeProven || undefined, 'time proven');
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');
    expect(await status(gw)).toMatchObject({ failClosed: true, failClosedReason: 'BEHIND_CLOUD' });
    await s.cloud.grant({ keyId: asKeyId('k-later'), credential: { type: 'pin', digest: s.f.digest('5678') } }, applied + 1);
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');
    await s.cloud.grant({ keyId: asKeyId('k-later-2'), credential: { type: 'pin', digest: s.f.digest('5679') } }, applied + 2);
    await waitFor(() => gw.store.settings().appliedSeq >= applied + 2 || undefined, 'caught up');
    expect((await lock.present(PIN)).code).toBe('ALLOWED');
    expect(await status(gw)).toMatchObject({ failClosed: false, failClosedReason: null });
  });
});
