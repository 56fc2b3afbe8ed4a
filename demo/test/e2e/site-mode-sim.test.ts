import { type DownlinkMessage, type Schedule } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { SimLock } from '@tobira/firmware-sim';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { allPassage, readSiteMode } from '../../../gateway/src/adapters/sqlite/modes.js';
import { PIN, provision, runSite, silentLog, waitFor, type Running } from '../../../gateway/test/harness.js';

const LOBBY: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '08:00', end: '20:00' }] };
const REQ = '6f1c1a52-8f7e-4f4e-9d55-0c7f1f0c2a11';

describe.each(mqttBackends())('site.mode downlinks at a gateway (%s)', (backend) => {
  let broker: MqttTestBroker;
  let s: Running;
  let sim: SimLock;

  const start = async (offlineGraceSeconds: number) => {
    s = await runSite(broker.url, broker.url, broker.unique, { overrides: { offlineGraceSeconds } });
    sim = new SimLock({
      url: broker.url,
      gatewayId: s.f.gatewayId,
      lockId: 'lock-1',
      secret: s.f.lockSecret,
      clock: s.f.clock,
      timers: 'manual',
      log: silentLog(),
    });
    await sim.start();
    await provision(s);
    await waitFor(() => s.gw.store.lock('lock-1')?.online === true, 'sim lock online');
  };
  const siteMode = async (body: Record<string, unknown>, seq = ++s.cloud.seq) =>
    (await s.cloud.send({
      type: 'site.mode',
      seq,
      body: { requestId: REQ, mode: null, passage: [], by: 'ops-token', reason: null, ...body },
    })) as Extract<DownlinkMessage, { type: 'site.mode' }>;
  const ackOf = (jti: string) => waitFor(() => s.cloud.ofType('ack').find((a) => a.body.ackOf === jti), 'the ack');

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await sim?.stop();
    await s?.close();
    await broker.stop();
  });

  it('a cloud lockdown is applied in seq order with its origin, acked MODE_APPLIED, and refuses keys like a local one', async () => {
    await start(86_400);
    const m = await siteMode({ mode: 'lockdown', reason: 'police request' });
    expect((await ackOf(m.jti)).body).toMatchObject({ result: 'applied', code: 'MODE_APPLIED', keyId: null, ackSeq: m.seq });
    expect(readSiteMode(s.gw.store.db)).toMatchObject({ mode: 'lockdown', origin: 'cloud', by: 'ops-token', requestId: REQ });
    expect(s.gw.store.settings().appliedSeq).toBe(m.seq);
    expect((await s.lock.present(PIN)).code).toBe('SITE_LOCKDOWN');
    const again = await siteMode({ mode: 'lockdown' });
    expect((await ackOf(again.jti)).body).toMatchObject({ result: 'noop', code: 'MODE_UNCHANGED' });
    // the staff UI status shows where the mode came from
    const st = (await (
      await fetch(`${s.gw.httpUrl}/staff/status`, { headers: { authorization: 'Bearer staff-token-0123456789' } })
    ).json()) as {
      modeOrigin: unknown;
    };
    expect(st.modeOrigin).toMatchObject({ origin: 'cloud', by: 'ops-token', requestId: REQ });
  });

  it('a cloud passage schedule holds the sim door open, and a cloud lockdown relocks it at once', async () => {
    await start(86_400);
    const m = await siteMode({
      passage: [
        { doorId: 'door-1', schedule: LOBBY },
        { doorId: 'door-elsewhere', schedule: LOBBY },
      ],
    });
    expect((await ackOf(m.jti)).body).toMatchObject({ result: 'applied', code: 'MODE_APPLIED' });
    expect(allPassage(s.gw.store.db)).toMatchObject([{ doorId: 'door-1', origin: 'cloud', setBy: 'ops-token', requestId: REQ }]);
    await waitFor(() => sim.bolt === 'unlocked', 'held open by the cloud schedule');
    await siteMode({ mode: 'lockdown' });
    await waitFor(() => sim.bolt === 'locked', 'relocked by the cloud lockdown');
  });

  it('the attack: a cloud passage schedule never opens a door while the gateway fails closed', async () => {
    await start(300);
    s.f.clock.advance(301_000);
    await sim.tick();
    const m = await siteMode({ passage: [{ doorId: 'door-1', schedule: LOBBY }] });
    expect((await ackOf(m.jti)).body).toMatchObject({ result: 'applied', code: 'MODE_APPLIED' });
    for (let i = 0; i < 5; i++) {
      s.f.clock.advance(10_000);
      s.gw.passageNow();
    }
    expect(s.lock.commands.filter((c) => c.action === 'unlock')).toEqual([]);
    expect(sim.bolt).toBe('locked');
  });

  it('a site.mode signed by a key the gateway does not trust is rejected and changes nothing', async () => {
    await start(86_400);
    const { token } = await s.cloud.sign(
      { type: 'site.mode', seq: ++s.cloud.seq, body: { requestId: REQ, mode: 'lockdown', passage: [], by: 'mallory', reason: null } },
      s.f.otherKey,
    );
    await s.cloud.publishRaw(token);
    const codes = () => (s.gw.store.db.prepare('SELECT code FROM rejected').all() as { code: string }[]).map((r) => r.code);
    await waitFor(() => codes().includes('UNKNOWN_KID') || codes().includes('BAD_SIGNATURE'), 'recorded as rejected');
    expect(readSiteMode(s.gw.store.db)).toMatchObject({ mode: 'normal', origin: 'gateway' });
  });
});
