import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeSecret, ManualClock, newId, newPairingSecret } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lockIds, startFleet, type Fleet } from '../src/fleet.js';
import { FakeGateway, retainedOf, type Seen } from './fake-gateway.js';

const PIN = { type: 'pin', value: '1234' } as const;
const isPresence = (lockId: string, online: boolean) => (s: Seen) =>
  s.channel === 'presence' && s.lockId === lockId && s.value.online === online;

describe('lock ids', () => {
  it('a number N means L1..LN', () => {
    expect(lockIds(3)).toEqual(['L1', 'L2', 'L3']);
  });
  it.each([[0], [1.5], [['a/b']], [['L1', 'L1']], [['']], [['+']]])('refuses %j', (locks) => {
    expect(() => lockIds(locks as number | string[])).toThrow();
  });
});

describe.each(mqttBackends())('a fleet of simulated locks (%s)', (backend) => {
  let broker: MqttTestBroker;
  let clock: ManualClock;
  let gw: FakeGateway;
  let fleet: Fleet;
  let gatewayId: string;

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    clock = new ManualClock(Date.UTC(2026, 10, 29, 9));
    gatewayId = `gw-${broker.unique}-${newId().slice(-6)}`;
    fleet = await startFleet({ url: broker.url, gatewayId, locks: 3, clock, timers: 'manual', random: () => 0 });
    gw = new FakeGateway(broker.url, gatewayId, (id) => fleet.secretOf(id), clock);
    await gw.start();
    for (const id of fleet.lockIds) await gw.waitFor(isPresence(id, true));
  });

  afterEach(async () => {
    await fleet.stop();
    await gw.stop();
    await broker.stop();
  });

  describe('when it starts', () => {
    it('runs L1..L3, each with its own generated secret, each retained online and locked', async () => {
      expect(fleet.lockIds).toEqual(['L1', 'L2', 'L3']);
      const secrets = fleet.secrets();
      expect(Object.keys(secrets)).toEqual(['L1', 'L2', 'L3']);
      expect(new Set(Object.values(secrets)).size).toBe(3);
      for (const id of fleet.lockIds) {
        expect(await retainedOf(broker.url, gatewayId, id)).toMatchObject({
          presence: { online: true },
          state: { lockId: id, bolt: 'locked' },
        });
      }
    });

    it('each lock opens only with its own secret', async () => {
      for (const id of fleet.lockIds)
        expect((await fleet.lock(id).present(PIN)).command).toMatchObject({ result: 'executed', bolt: 'unlocked' });
      const crossed = new FakeGateway(broker.url, gatewayId, () => fleet.secretOf('L1'), clock);
      await gw.stop();
      await crossed.start();
      try {
        clock.advance(60_000);
        await fleet.tick();
        expect((await fleet.lock('L2').present(PIN)).command).toMatchObject({ result: 'refused', code: 'BAD_MAC', bolt: 'locked' });
      } finally {
        await crossed.stop();
      }
    });

    it('an unknown lock id is an error, not a silent no-op', () => {
      expect(() => fleet.lock('L9')).toThrow(/no lock/);
    });
  });

  describe('a restart of the fleet process within a command lifetime', () => {
    const replayAfterRestart = async (replayWindowDir: string | undefined) => {
      const secrets = fleet.secrets();
      await fleet.stop();
      const opts = { url: broker.url, gatewayId, locks: 3, secrets, clock, timers: 'manual' as const, random: () => 0 };
      fleet = await startFleet({ ...opts, ...(replayWindowDir !== undefined && { replayWindowDir }) });
      expect((await fleet.lock('L1').present(PIN)).command).toMatchObject({ result: 'executed' });
      // the process dies (its memory with it) and starts again; the command seen on the broker is sent again
      await fleet.stop();
      fleet = await startFleet({ ...opts, ...(replayWindowDir !== undefined && { replayWindowDir }) });
      await gw.waitFor(isPresence('L1', true));
      gw.mode = 'replay';
      try {
        return (await fleet.lock('L1').present(PIN)).command;
      } finally {
        gw.mode = 'valid';
      }
    };

    it('refuses a command it executed before, with its replay window kept in replayWindowDir (0700)', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'sim-replay-'));
      try {
        expect(await replayAfterRestart(join(dir, 'w'))).toMatchObject({ result: 'refused', code: 'COMMAND_REPLAYED', bolt: 'locked' });
        expect(statSync(join(dir, 'w')).mode & 0o777).toBe(0o700);
        expect(readdirSync(join(dir, 'w')).sort()).toContain('L1.replay.json');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('without one, the window lives in the process and the replay runs again (why npm run sim and the demo keep one)', async () => {
      expect(await replayAfterRestart(undefined)).toMatchObject({ result: 'executed' });
    });
  });

  describe('fault injection', () => {
    it('outgoing drop on one lock: its requests never reach the gateway and present() times out; the others work', async () => {
      fleet.setFaults({ outgoing: { drop: 1, channels: ['request'] } }, ['L1']);
      expect(await fleet.lock('L1').present(PIN, { timeoutMs: 200 })).toMatchObject({ status: 'timeout', waitedFor: 'decision' });
      expect(fleet.lock('L1').stats.droppedOut).toBe(1);
      expect((await fleet.lock('L2').present(PIN)).command).toMatchObject({ result: 'executed' });
    });

    it('incoming duplicate: the duplicated command executes once and the copy is refused as replayed', async () => {
      fleet.setFaults({ incoming: { duplicate: 1, channels: ['command'] } }, ['L1']);
      const r = await fleet.lock('L1').present(PIN);
      expect(r.command).toMatchObject({ result: 'executed' });
      const id = r.command?.commandId;
      await gw.waitFor(
        (s) =>
          s.channel === 'event' && s.value.kind === 'command_result' && s.value.commandId === id && s.value.code === 'COMMAND_REPLAYED',
      );
      expect(
        gw
          .eventsOf('L1')
          .filter((e) => e.kind === 'command_result' && e.commandId === id)
          .map((e) => (e.kind === 'command_result' ? e.result : null)),
      ).toEqual(['executed', 'refused']);
      expect(fleet.lock('L1').stats.duplicatedIn).toBe(1);
    });

    it('outgoing duplicate: the gateway gets the same event twice (same eventId)', async () => {
      fleet.setFaults({ outgoing: { duplicate: 1, channels: ['event'] } }, ['L3']);
      await fleet.lock('L3').tamper();
      await gw.waitFor((s) => s.channel === 'event' && s.lockId === 'L3' && gw.eventsOf('L3').length === 2);
      const [a, b] = gw.eventsOf('L3');
      expect(a).toEqual(b);
    });

    it('incoming delay: decisions and commands arrive late but still arrive', async () => {
      fleet.setFaults({ incoming: { delayMs: 30 } });
      expect((await fleet.lock('L2').present(PIN)).command).toMatchObject({ result: 'executed' });
      expect(fleet.lock('L2').stats.delayedIn).toBe(2);
    });

    it('outgoing delay: the request is published late and still answered', async () => {
      fleet.setFaults({ outgoing: { delayMs: 30 } }, ['L2']);
      expect((await fleet.lock('L2').present(PIN)).decision).toMatchObject({ allowed: true });
    });

    it('incoming drop of decisions: present() times out although the command ran', async () => {
      fleet.setFaults({ incoming: { drop: 1, channels: ['decision'] } }, ['L1']);
      const r = await fleet.lock('L1').present(PIN, { timeoutMs: 300 });
      expect(r).toMatchObject({ status: 'timeout', waitedFor: 'decision' });
      expect(fleet.lock('L1').stats.droppedIn).toBe(1);
      const sent = gw.commands.at(-1);
      expect(await fleet.lock('L1').waitForCommand(sent?.commandId ?? '')).toMatchObject({ result: 'executed', bolt: 'unlocked' });
    });

    it('disconnect one lock: only its will fires; reconnect brings it back', async () => {
      await fleet.disconnect(['L2']);
      await gw.waitFor(isPresence('L2', false));
      expect((await retainedOf(broker.url, gatewayId, 'L1')).presence).toEqual({ online: true });
      await fleet.reconnect(['L2']);
      expect(fleet.lock('L2').connected).toBe(true);
      expect((await fleet.lock('L2').present(PIN)).command).toMatchObject({ result: 'executed' });
    });

    it('faults are validated', () => {
      expect(() => fleet.setFaults({ outgoing: { drop: 2 } })).toThrow(RangeError);
      expect(() => fleet.setFaults({ incoming: { delayMs: -1 } })).toThrow(RangeError);
    });
  });

  describe('when it stops', () => {
    it('every lock publishes offline', async () => {
      await fleet.stop();
      for (const id of ['L1', 'L2', 'L3']) await gw.waitFor(isPresence(id, false));
    });
  });
});

describe.each(mqttBackends())('a fleet with given ids and secrets (%s)', (backend) => {
  it('uses them as given', async () => {
    const broker = await startMqttBackend(backend);
    const secrets = { door_a: encodeSecret(newPairingSecret()), door_b: newPairingSecret() };
    const fleet = await startFleet({
      url: broker.url,
      gatewayId: `gw-${broker.unique}-given`,
      locks: ['door_a', 'door_b', 'door_c'],
      secrets,
      timers: 'manual',
    });
    try {
      expect(fleet.lockIds).toEqual(['door_a', 'door_b', 'door_c']);
      const out = fleet.secrets();
      expect(out.door_a).toBe(secrets.door_a);
      expect(out.door_b).toBe(encodeSecret(secrets.door_b));
      expect(out.door_c).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(fleet.gatewayLocks((id) => `d-${id}`)).toEqual([
        { lockId: 'door_a', doorId: 'd-door_a', pairingSecret: secrets.door_a },
        { lockId: 'door_b', doorId: 'd-door_b', pairingSecret: encodeSecret(secrets.door_b) },
        { lockId: 'door_c', doorId: 'd-door_c', pairingSecret: out.door_c },
      ]);
    } finally {
      await fleet.stop();
      await broker.stop();
    }
  });
});

describe.each(mqttBackends())('a fleet of 20 locks under concurrent use (%s)', (backend) => {
  it('every lock presents at once and every one opens with its own command', async () => {
    const broker = await startMqttBackend(backend);
    const gatewayId = `gw-${broker.unique}-twenty`;
    const clock = new ManualClock(Date.UTC(2026, 10, 29, 9));
    const fleet = await startFleet({ url: broker.url, gatewayId, locks: 20, clock, timers: 'manual' });
    const gw = new FakeGateway(broker.url, gatewayId, (id) => fleet.secretOf(id), clock);
    try {
      await gw.start();
      const results = await Promise.all(fleet.locks.map((l) => l.present(PIN, { timeoutMs: 10_000 })));
      expect(results.map((r) => r.command?.result)).toEqual(Array(20).fill('executed'));
      expect(new Set(results.map((r) => r.command?.commandId)).size).toBe(20);
      expect(fleet.locks.every((l) => l.bolt === 'unlocked')).toBe(true);
      clock.advance(gw.holdMs);
      await fleet.tick();
      expect(fleet.locks.every((l) => l.bolt === 'locked')).toBe(true);
    } finally {
      await fleet.stop();
      await gw.stop();
      await broker.stop();
    }
  });
});
