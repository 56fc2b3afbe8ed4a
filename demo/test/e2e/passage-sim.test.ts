import { checkLockCommand, type Schedule } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { SimLock } from '@tobira/firmware-sim';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { accessLog } from '../../../gateway/src/adapters/sqlite/access-log.js';
import { lockModesOf } from '../../../gateway/src/adapters/sqlite/modes.js';
import { passageStep, passageWanted, type PassageInput } from '../../../gateway/src/domain/passage.js';
import { createGateway, type Gateway } from '../../../gateway/src/gateway.js';
import { T0 } from '../../../gateway/test/fixtures.js';
import { provision, runSite, silentLog, waitFor, type Running } from '../../../gateway/test/harness.js';
import { makeAccounts, supervisorWrite } from '../../../gateway/test/ui-browser.js';

const HOUR = 3_600_000;
/** The lobby: 08:00-20:00 every day, site time (T0 is Monday 12:00 in Asia/Tokyo). */
const LOBBY: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '08:00', end: '20:00' }] };

describe('passage rules (the tables in domain/passage.ts)', () => {
  const on: PassageInput = { schedule: LOBBY, mode: 'normal', failClosedReason: null, privacy: false };
  it('holds only inside the schedule, with no lockdown, no privacy and a fresh gateway', () => {
    expect(passageWanted(on, T0)).toEqual({ hold: true });
    expect(passageWanted(on, T0 + 8 * HOUR)).toEqual({ hold: false, why: 'OUTSIDE_SCHEDULE' });
    expect(passageWanted(on, T0 - 4 * HOUR - 60_000)).toEqual({ hold: false, why: 'OUTSIDE_SCHEDULE' });
    expect(passageWanted({ ...on, schedule: null }, T0)).toEqual({ hold: false, why: 'NO_PASSAGE' });
    expect(passageWanted({ ...on, mode: 'lockdown' }, T0)).toEqual({ hold: false, why: 'SITE_LOCKDOWN' });
    expect(passageWanted({ ...on, failClosedReason: 'LEASE_EXPIRED' }, T0)).toEqual({ hold: false, why: 'CLOUD_STALE' });
    expect(passageWanted({ ...on, privacy: true }, T0)).toEqual({ hold: false, why: 'PRIVACY_ACTIVE' });
  });
  it('starts, renews half-way, and always stops a held door that should not be', () => {
    expect(passageStep(false, false, null, T0, 10_000)).toBe('none');
    expect(passageStep(false, true, null, T0, 10_000)).toBe('start');
    expect(passageStep(true, true, null, T0, 10_000)).toBe('renew');
    expect(passageStep(true, true, T0 - 5_000, T0, 10_000)).toBe('none');
    expect(passageStep(true, true, T0 - 10_000, T0, 10_000)).toBe('renew');
    expect(passageStep(true, false, T0, T0, 10_000)).toBe('stop');
    expect(passageStep(true, false, null, T0, 10_000)).toBe('stop');
  });
});

describe.each(mqttBackends())('passage mode at a gateway with a firmware-sim lock (%s)', (backend) => {
  let broker: MqttTestBroker;
  let s: Running;
  let sim: SimLock;
  let restarted: Gateway | null = null;
  // passage is a supervisor's (docs/gateway.md "Passage mode"): her session's headers
  let asSupervisor: Record<string, string> = {};

  const start = async (offlineGraceSeconds: number) => {
    s = await runSite(broker.url, broker.url, broker.unique, { overrides: { offlineGraceSeconds } });
    await makeAccounts(s);
    asSupervisor = await supervisorWrite(s);
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
    await waitFor(() => s.gw.store.lock('lock-1')?.online === true, 'the sim lock online at the gateway');
  };
  const setPassage = async (schedule: Schedule | null) => {
    const r = await fetch(`${s.gw.httpUrl}/staff/passage`, {
      method: 'POST',
      headers: { ...asSupervisor, 'content-type': 'application/json' },
      body: JSON.stringify({ doorId: 'door-1', schedule, reason: 'lobby open hours' }),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  const codes = () =>
    accessLog(s.gw.store.db)
      .map((a) => a.code)
      .filter((c) => c.startsWith('PASSAGE'))
      .reverse();
  const unlocksSent = () => s.lock.commands.filter((c) => c.action === 'unlock').length;
  /** Moves the shared clock and lets the sim lock apply elapsed time (relock when its hold ran out). */
  const advance = async (ms: number) => {
    s.f.clock.advance(ms);
    await sim.tick();
  };

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await sim?.stop();
    await restarted?.stop({ force: true });
    restarted = null;
    await s?.close();
    await broker.stop();
  });

  describe('when the door has a passage schedule and the site is in sync', () => {
    it('holds the sim door unlocked inside the schedule with renewed HMAC commands, and relocks it when the schedule ends', async () => {
      await start(86_400);
      expect(sim.bolt).toBe('locked');
      expect(await setPassage(LOBBY)).toEqual({ status: 200, body: { status: 'applied', doorId: 'door-1' } });
      await waitFor(() => sim.bolt === 'unlocked', 'the sim bolt held unlocked');
      const first = s.lock.commands.find((c) => c.action === 'unlock')!;
      expect(checkLockCommand(s.f.lockSecret, first, { lockId: 'lock-1', now: s.f.clock.now(), seen: new Set() })).toEqual({ ok: true });
      expect(codes()).toEqual(['PASSAGE_UNLOCK']);
      const ev = await waitFor(() => s.cloud.ofType('access.event').find((e) => e.body.code === 'PASSAGE_UNLOCK'), 'the event uplink');
      expect(ev.body).toMatchObject({ allowed: true, lockId: 'lock-1', doorId: 'door-1', keyId: null, commandId: first.commandId });

      // Past the first command's hold (30 s), the gateway has renewed it: the door is still open.
      for (let i = 0; i < 6; i++) {
        const before = unlocksSent();
        await advance(10_000);
        await waitFor(() => unlocksSent() > before, 'a renewal');
        await waitFor(() => sim.lock?.lastCommandId === s.lock.commands.at(-1)?.commandId, 'the sim took the renewal');
      }
      await sim.tick();
      expect(sim.bolt).toBe('unlocked');
      expect(codes()).toEqual(['PASSAGE_UNLOCK']);

      // 20:00 site time: relocked at once by a lock command, not by waiting for the hold to run out.
      s.f.clock.set(T0 + 8 * HOUR);
      await waitFor(() => sim.bolt === 'locked', 'the sim bolt relocked');
      expect(s.lock.commands.at(-1)?.action).toBe('lock');
      expect(codes()).toEqual(['PASSAGE_UNLOCK', 'PASSAGE_RELOCK']);
      const sent = unlocksSent();
      await advance(60_000);
      await advance(60_000);
      expect(unlocksSent()).toBe(sent);
      expect(sim.bolt).toBe('locked');
    });

    it('relocks at once when the site enters lockdown, and holds again when it ends', async () => {
      await start(86_400);
      await setPassage(LOBBY);
      await waitFor(() => sim.bolt === 'unlocked', 'held');
      s.gw.setMode('lockdown', 'test');
      await waitFor(() => sim.bolt === 'locked', 'relocked by the lockdown');
      expect(codes()).toEqual(['PASSAGE_UNLOCK', 'PASSAGE_RELOCK']);
      const sent = unlocksSent();
      await advance(20_000);
      await advance(20_000);
      expect(unlocksSent()).toBe(sent);
      s.gw.setMode('normal', 'test');
      await waitFor(() => sim.bolt === 'unlocked', 'held again');
    });

    it('clearing the schedule relocks the door', async () => {
      await start(86_400);
      await setPassage(LOBBY);
      await waitFor(() => sim.bolt === 'unlocked', 'held');
      expect((await setPassage(null)).body).toEqual({ status: 'applied', doorId: 'door-1' });
      await waitFor(() => sim.bolt === 'locked', 'relocked');
      expect(codes()).toEqual(['PASSAGE_UNLOCK', 'PASSAGE_RELOCK']);
    });

    it('refuses an unknown door and a malformed schedule', async () => {
      await start(86_400);
      const r = await fetch(`${s.gw.httpUrl}/staff/passage`, {
        method: 'POST',
        headers: { ...asSupervisor, 'content-type': 'application/json' },
        body: JSON.stringify({ doorId: 'door-nope', schedule: LOBBY }),
      });
      expect(r.status).toBe(404);
      expect(await r.json()).toEqual({ code: 'DOOR_NOT_FOUND' });
      const bad = await fetch(`${s.gw.httpUrl}/staff/passage`, {
        method: 'POST',
        headers: { ...asSupervisor, 'content-type': 'application/json' },
        body: JSON.stringify({ doorId: 'door-1', schedule: { timeZone: 'Mars/Olympus', windows: [] } }),
      });
      expect(bad.status).toBe(422);
      expect(s.gw.passageNow()).toEqual([]);
    });
  });

  describe('when the gateway fails closed (the attack: passage must not hold a door open)', () => {
    it('relocks when the lease runs out and sends no unlock while stale, even for a schedule set while stale', async () => {
      await start(300);
      await setPassage(LOBBY);
      await waitFor(() => sim.bolt === 'unlocked', 'held');
      await advance(301_000);
      // (the sim relocks by itself too: no renewal came within the hold)
      await waitFor(() => codes().length === 2, 'the relock recorded when failing closed');
      expect(codes()).toEqual(['PASSAGE_UNLOCK', 'PASSAGE_RELOCK']);
      await waitFor(() => s.lock.commands.at(-1)?.action === 'lock', 'the lock command on the site broker');
      expect(sim.bolt).toBe('locked');
      const sent = unlocksSent();
      // Still stale: the schedule is set again, time passes, the sim is asked to open by nobody.
      await setPassage(null);
      await setPassage(LOBBY);
      for (let i = 0; i < 5; i++) {
        await advance(15_000);
        s.gw.passageNow();
      }
      expect(unlocksSent()).toBe(sent);
      expect(sim.bolt).toBe('locked');
      expect(lockModesOf(s.gw.store.db, 'lock-1')?.passageSince).toBeNull();
      // A fresh heartbeat ends failing closed: the schedule holds the door again.
      await s.cloud.heartbeat();
      await waitFor(() => sim.bolt === 'unlocked', 'held again once fresh');
    });
  });

  describe('when the gateway restarts', () => {
    const restart = async (at: number) => {
      await s.gw.stop({ force: true });
      s.f.clock.set(at);
      await sim.tick();
      const gw = createGateway(s.f.config, { clock: s.f.clock, log: silentLog(), tickMs: 50 });
      restarted = gw;
      await gw.start();
      return gw;
    };

    it('relocks at start a door it held when the schedule ended while it was down', async () => {
      await start(86_400);
      await setPassage(LOBBY);
      await waitFor(() => sim.bolt === 'unlocked', 'held');
      // Down for 8 hours: the sim relocked by itself when the last hold ran out (no renewal came).
      const gw = await restart(T0 + 8 * HOUR);
      expect(sim.bolt).toBe('locked');
      await waitFor(
        () =>
          accessLog(gw.store.db)
            .map((a) => a.code)
            .includes('PASSAGE_RELOCK'),
        'the relock recorded at start',
      );
      expect(lockModesOf(gw.store.db, 'lock-1')?.passageSince).toBeNull();
      await waitFor(() => s.lock.commands.at(-1)?.action === 'lock', 'a lock command at start');
    });

    it('renews a door still inside its schedule once the restart is proven (no second PASSAGE_UNLOCK)', async () => {
      await start(86_400);
      await setPassage(LOBBY);
      await waitFor(() => sim.bolt === 'unlocked', 'held');
      const sent = unlocksSent();
      const gw = await restart(T0 + 20_000);
      // the fake cloud answers the new process's startup resync: its lease counts again, the hold is renewed
      await waitFor(() => gw.timeProven || undefined, 'restart proven');
      await waitFor(() => unlocksSent() > sent, 'renewed at start');
      await advance(15_000);
      expect(sim.bolt).toBe('unlocked');
      const passage = accessLog(gw.store.db)
        .map((a) => a.code)
        .filter((c) => c.startsWith('PASSAGE'));
      expect(passage[0]).toBe('PASSAGE_UNLOCK');
      // (a relock and a new unlock when the first evaluation ran before the proof: never two unlocks in a row)
      expect(passage.filter((c, i) => c === 'PASSAGE_UNLOCK' && passage[i - 1] === 'PASSAGE_UNLOCK')).toEqual([]);
    });

    it('relocks at start while the restart is unproven (the cloud does not answer): passage never holds a door open failing closed', async () => {
      await start(86_400);
      await setPassage(LOBBY);
      await waitFor(() => sim.bolt === 'unlocked', 'held');
      s.cloud.answerResync = false;
      const gw = await restart(T0 + 20_000);
      await waitFor(
        () =>
          accessLog(gw.store.db)
            .map((a) => a.code)
            .includes('PASSAGE_RELOCK') || undefined,
        'relocked while TIME_UNPROVEN',
      );
      await waitFor(() => s.lock.commands.at(-1)?.action === 'lock', 'a lock command at start');
      expect(gw.timeProven).toBe(false);
    });
  });
});
