import { ManualClock } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeLock, PIN, provision, runSite, waitFor, type Running } from './harness.js';

/**
 * A request that sat in a stalled site link, or comes from a lock whose clock is off, must not open the
 * door when it finally reaches the gateway: the person who typed the PIN may have walked away, and the
 * next one through gets in on their authority (docs/gateway.md "Request age").
 */
describe.each(mqttBackends())('the age of a lock request (broker: %s)', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  const extra: FakeLock[] = [];
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    for (const l of extra.splice(0)) await l.close();
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  /** lock-1 with its own clock, `offsetMs` from the gateway's trusted time (negative: behind). */
  const lockOff = async (s: Running, offsetMs: number) => {
    const l = new FakeLock(s.f.gatewayId, 'lock-1', { now: () => s.gw.trustedNow() + offsetMs });
    await l.connect(broker.url);
    extra.push(l);
    return l;
  };
  const accessCodes = (s: Running) => s.gw.store.accessLog(50).map((r) => r.code);

  it('a request 24 s old when it arrives is refused REQUEST_STALE: no unlock is sent, and the one-time key it named is not used up', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s, { oneTime: true });
    const stalled = await lockOff(s, -24_000);
    const before = s.lock.commands.length;
    const d = await stalled.present(PIN);
    expect(d).toMatchObject({ allowed: false, code: 'REQUEST_STALE', commandId: null });
    expect(stalled.commands).toHaveLength(0);
    expect(accessCodes(s)).toContain('REQUEST_STALE');
    // the key is still there for the guest who presents it again, now
    expect((await s.lock.present(PIN)).code).toBe('ALLOWED');
    await waitFor(() => s.lock.commands.length > before || undefined, 'the fresh request unlocks');
  });

  it('a lock whose clock runs 30 s ahead is refused LOCK_CLOCK_AHEAD; one 5 s behind (within requestMaxAgeMs) opens', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s);
    expect((await (await lockOff(s, 30_000)).present(PIN)).code).toBe('LOCK_CLOCK_AHEAD');
    expect((await (await lockOff(s, -5_000)).present(PIN)).code).toBe('ALLOWED');
  });

  it('the bound is requestMaxAgeMs: with 3 s a request 5 s old is refused', async () => {
    site = await runSite(broker.url, broker.url, broker.unique, { overrides: { requestMaxAgeMs: 3_000 } });
    const s = site;
    await provision(s);
    expect((await (await lockOff(s, -5_000)).present(PIN)).code).toBe('REQUEST_STALE');
    expect((await (await lockOff(s, -1_000)).present(PIN)).code).toBe('ALLOWED');
  });

  it("a lock's retry of an allowed request that comes after requestMaxAgeMs is withdrawn REQUEST_STALE: the unlock is not sent again", async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s);
    const at = s.gw.trustedNow();
    const request = { requestId: 'req-late-retry', credential: { type: 'pin', value: PIN }, at };
    await s.lock.publish('request', request);
    expect(await waitFor(() => s.lock.decisions.get('req-late-retry'), 'first decision')).toMatchObject({ allowed: true, code: 'ALLOWED' });
    const commands = s.lock.commands.length;
    s.lock.decisions.delete('req-late-retry');
    s.f.clock.advance(11_000); // the harness's gateway counts elapsed time on this clock too
    await s.lock.publish('request', request);
    expect(await waitFor(() => s.lock.decisions.get('req-late-retry'), 'retry decision')).toMatchObject({
      allowed: false,
      code: 'REQUEST_STALE',
      commandId: null,
    });
    expect(s.lock.commands).toHaveLength(commands);
  });

  it('a gateway whose own wall clock runs 150 s ahead still opens for a lock on real time: the age counts from the earliest real time its clock may stand for', async () => {
    const mono = new ManualClock(1_000);
    site = await runSite(broker.url, broker.url, broker.unique, { deps: { monotonic: mono } });
    const s = site;
    await provision(s);
    const real = s.f.clock.now();
    s.f.clock.set(real + 150_000); // only the gateway's wall clock moves; the lock keeps real time
    const honest = new FakeLock(s.f.gatewayId, 'lock-1', { now: () => real + (mono.now() - 1_000) });
    await honest.connect(broker.url);
    extra.push(honest);
    expect(s.gw.trustedNow()).toBeGreaterThan(real + 10_000); // held at the ceiling, ahead of real time
    expect((await honest.present(PIN)).code).toBe('ALLOWED');
    // a request that sat 40 s in a stalled link is still refused
    const stalled = new FakeLock(s.f.gatewayId, 'lock-1', { now: () => real - 40_000 });
    await stalled.connect(broker.url);
    extra.push(stalled);
    expect((await stalled.present(PIN)).code).toBe('REQUEST_STALE');
  });

  // the wall clock off while the cloud is heard: 45 s ahead (trusted time held up to the tolerance above real
  // time, with no skew flagged) must not refuse honest locks; 60 s behind must give a late request no slack
  it.each([
    ['45 s ahead', 45_000],
    ['60 s behind', -60_000],
  ])('with the wall clock %s, a lock on real time opens and a request 15 s old is refused', async (_name, offsetMs) => {
    const mono = new ManualClock(1_000);
    site = await runSite(broker.url, broker.url, broker.unique, { deps: { monotonic: mono } });
    const s = site;
    await provision(s);
    const real = s.f.clock.now();
    s.f.clock.set(real + offsetMs);
    mono.advance(1_000);
    const realNow = () => real + (mono.now() - 2_000);
    const honest = new FakeLock(s.f.gatewayId, 'lock-1', { now: realNow });
    await honest.connect(broker.url);
    extra.push(honest);
    expect((await honest.present(PIN)).code).toBe('ALLOWED');
    const late = new FakeLock(s.f.gatewayId, 'lock-1', { now: () => realNow() - 15_000 });
    await late.connect(broker.url);
    extra.push(late);
    expect((await late.present(PIN)).code).toBe('REQUEST_STALE');
  });
});
