import { ManualClock } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/gateway.js';
import { parseConfig } from '../src/config.js';
import { T0 } from './fixtures.js';
import { FakeLock, PIN, STAFF_TOKEN, provision, runSite, silentLog, waitFor, type Running } from './harness.js';

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

  it('fails closed at once when the wall clock jumps a year ahead (it can only end a lease sooner)', async () => {
    const s = await start();
    await inSync(s, { validUntil: T0 + 2 * 365 * DAY });
    s.f.clock.set(T0 + 365 * DAY);
    expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
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
    const lock = new FakeLock(s.f.gatewayId, 'lock-1');
    await lock.connect(broker.url);
    extra.push(() => lock.close());

    const after = await status(gw);
    expect(after.failClosed).toBe(false);
    expect(after.leaseRemainingSeconds).toBeLessThanOrEqual(100); // the persisted remainder at most
    expect((await lock.present(PIN)).code).toBe('ALLOWED');
    restartedMono.advance(100_000);
    expect((await lock.present(PIN)).code).toBe('CLOUD_STALE');
  });
});
