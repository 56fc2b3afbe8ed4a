import {
  asLockId,
  ManualClock,
  newId,
  newPairingSecret,
  signLockCommand,
  startEmbeddedBroker,
  topics,
  type LockEvent,
} from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SimLock } from '../src/adapter.js';
import { FakeGateway, retainedOf, type Seen } from './fake-gateway.js';

const isEvent = (lockId: string, match: (e: LockEvent) => boolean) => (s: Seen) =>
  s.channel === 'event' && s.lockId === lockId && match(s.value);
const isState = (lockId: string, bolt: string) => (s: Seen) => s.channel === 'state' && s.lockId === lockId && s.value.bolt === bolt;
const isPresence = (lockId: string, online: boolean) => (s: Seen) =>
  s.channel === 'presence' && s.lockId === lockId && s.value.online === online;

describe.each(mqttBackends())('one simulated lock over MQTT (%s)', (backend) => {
  let broker: MqttTestBroker;
  let clock: ManualClock;
  let gw: FakeGateway;
  let lock: SimLock;
  let gatewayId: string;
  const secret = newPairingSecret();

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    clock = new ManualClock(Date.UTC(2026, 10, 29, 9));
    gatewayId = `gw-${broker.unique}-${newId().slice(-6)}`;
    gw = new FakeGateway(broker.url, gatewayId, () => secret, clock);
    await gw.start();
    lock = new SimLock({ url: broker.url, gatewayId, lockId: 'L1', secret, clock, timers: 'manual' });
    await lock.start();
    await gw.waitFor(isPresence('L1', true));
  });

  afterEach(async () => {
    await lock.stop();
    await gw.stop();
    await broker.stop();
  });

  describe('when it starts', () => {
    it('publishes retained presence online and a retained locked state', async () => {
      const r = await retainedOf(broker.url, gatewayId, 'L1');
      expect(r.presence).toEqual({ online: true });
      expect(r.state).toMatchObject({ lockId: 'L1', bolt: 'locked', door: 'closed', battery: 100, lastCommandId: null });
    });
  });

  describe('when the gateway allows with a valid command', () => {
    it('the bolt opens, and relocks when holdMs has passed', async () => {
      const r = await lock.present({ type: 'pin', value: '1234' });
      expect(r.status).toBe('decided');
      expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
      expect(r.command).toMatchObject({ result: 'executed', code: null, bolt: 'unlocked' });
      await gw.waitFor(isState('L1', 'unlocked'));
      await gw.waitFor(isEvent('L1', (e) => e.kind === 'command_result' && e.result === 'executed'));

      clock.advance(gw.holdMs - 1);
      await lock.tick();
      expect(lock.bolt).toBe('unlocked');
      clock.advance(1);
      await lock.tick();
      expect(lock.bolt).toBe('locked');
      await gw.waitFor((s) => s.channel === 'state' && s.value.bolt === 'locked' && s.value.at === clock.now());
      expect((await retainedOf(broker.url, gatewayId, 'L1')).state).toMatchObject({ bolt: 'locked' });
      expect(gw.invalid).toEqual([]);
    });

    it('a denied credential gets the decision and no command; the bolt stays locked', async () => {
      const r = await lock.present({ type: 'pin', value: '9999' });
      expect(r).toMatchObject({
        status: 'decided',
        decision: { allowed: false, code: 'UNKNOWN_CREDENTIAL' },
        command: null,
        bolt: 'locked',
      });
    });
  });

  describe('when the command is not valid the bolt never moves', () => {
    it.each([
      ['wrong_secret', 'BAD_MAC'],
      ['expired', 'COMMAND_EXPIRED'],
    ] as const)('%s -> refused command_result %s', async (mode, code) => {
      gw.mode = mode;
      const r = await lock.present({ type: 'pin', value: '1234' });
      expect(r.decision).toMatchObject({ allowed: true });
      expect(r.command).toMatchObject({ result: 'refused', code, bolt: 'locked' });
      await gw.waitFor(isEvent('L1', (e) => e.kind === 'command_result' && e.result === 'refused' && e.code === code));
      expect(gw.statesOf('L1').every((s) => s.bolt === 'locked')).toBe(true);
    });

    it('a replayed command -> refused COMMAND_REPLAYED', async () => {
      const first = await lock.present({ type: 'pin', value: '1234' });
      expect(first.command).toMatchObject({ result: 'executed' });
      clock.advance(gw.holdMs);
      await lock.tick();
      expect(lock.bolt).toBe('locked');
      await gw.waitFor(isState('L1', 'unlocked'));
      await gw.waitFor((s) => isState('L1', 'locked')(s) && gw.seen.indexOf(s) > gw.seen.findIndex(isState('L1', 'unlocked')));
      const unlocksBefore = gw.statesOf('L1').filter((s) => s.bolt === 'unlocked').length;

      gw.mode = 'replay';
      const again = lock.waitForCommand(first.command?.commandId ?? '', 5000);
      const second = await lock.present({ type: 'pin', value: '1234' });
      // present() reports what happened to the delivery that answered it; waitForCommand the first result for the id.
      expect(second.decision?.commandId).toBe(first.command?.commandId);
      expect(second.command).toMatchObject({ result: 'refused', code: 'COMMAND_REPLAYED', bolt: 'locked' });
      expect((await again)?.result).toBe('executed');
      await gw.waitFor(isEvent('L1', (e) => e.kind === 'command_result' && e.code === 'COMMAND_REPLAYED'));
      expect(second.bolt).toBe('locked');
      expect(lock.bolt).toBe('locked');
      expect(gw.statesOf('L1').filter((s) => s.bolt === 'unlocked')).toHaveLength(unlocksBefore);
    });

    it('a command for another lock, signed with its secret, is refused WRONG_LOCK', async () => {
      const c = signLockCommand(secret, {
        commandId: newId(),
        lockId: asLockId('L2'),
        action: 'unlock',
        holdMs: 1000,
        expiresAt: clock.now() + 5000,
      });
      gw.sendCommand('L1', c);
      expect(await lock.waitForCommand(c.commandId)).toMatchObject({ result: 'refused', code: 'WRONG_LOCK', bolt: 'locked' });
    });
  });

  describe('when payloads are malformed', () => {
    it('bad commands and decisions are logged, counted and ignored; the lock keeps working', async () => {
      const cmdTopic = topics.lock(gatewayId, 'L1', 'command');
      const decTopic = topics.lock(gatewayId, 'L1', 'decision');
      const junk: (string | Buffer)[] = [
        'not json',
        'null',
        '[]',
        '{"commandId":"abc"}',
        JSON.stringify({
          ...signLockCommand(secret, {
            commandId: newId(),
            lockId: asLockId('L1'),
            action: 'unlock',
            holdMs: 1000,
            expiresAt: clock.now() + 5000,
          }),
          extra: 1,
        }),
        Buffer.from([0xff, 0xfe, 0x00, 0x7b]),
        '['.repeat(60_000),
        'x'.repeat(70 * 1024),
      ];
      for (const j of junk) gw.publish(cmdTopic, j);
      for (const j of junk) gw.publish(decTopic, j);
      await gw.waitFor((s) => s.channel === 'event' && s.value.kind === 'command_result' && s.value.commandId === 'abc');
      // Ordering on one topic: once a later valid command is handled, every junk command before it was too.
      const ok = signLockCommand(secret, {
        commandId: newId(),
        lockId: asLockId('L1'),
        action: 'lock',
        holdMs: 0,
        expiresAt: clock.now() + 5000,
      });
      gw.sendCommand('L1', ok);
      expect(await lock.waitForCommand(ok.commandId)).toMatchObject({ result: 'executed' });
      await gw.waitFor(isEvent('L1', (e) => e.kind === 'command_result' && e.commandId === ok.commandId));

      const refusals = gw.eventsOf('L1').filter((e) => e.kind === 'command_result' && e.code === 'MALFORMED_COMMAND');
      expect(refusals).toHaveLength(junk.length);
      expect(lock.bolt).toBe('locked');
      // The decisions were rejected too; a valid exchange afterwards still works.
      const r = await lock.present({ type: 'pin', value: '1234' });
      expect(r.command).toMatchObject({ result: 'executed' });
      expect(lock.stats.rejected).toBe(2 * junk.length);
      expect(lock.stats.rejectedByCode).toMatchObject({ MALFORMED: expect.any(Number), SCHEMA_INVALID: expect.any(Number), TOO_LARGE: 2 });
      expect(gw.invalid).toEqual([]);
    });
  });

  describe('presence and the last will', () => {
    it('an abrupt disconnect makes the broker publish the retained will {online:false}; reconnect says online again', async () => {
      await lock.disconnect();
      await gw.waitFor(isPresence('L1', false));
      expect((await retainedOf(broker.url, gatewayId, 'L1')).presence).toEqual({ online: false });

      const statesBefore = gw.statesOf('L1').length;
      await lock.reconnect();
      await gw.waitFor((s) => isPresence('L1', true)(s) && gw.seen.indexOf(s) > gw.seen.findIndex(isPresence('L1', false)));
      await gw.waitFor((s) => s.channel === 'state' && gw.statesOf('L1').length > statesBefore);
      expect(await retainedOf(broker.url, gatewayId, 'L1')).toMatchObject({ presence: { online: true }, state: { bolt: 'locked' } });
    });

    it('a clean stop publishes {online:false} itself', async () => {
      await lock.stop();
      await gw.waitFor(isPresence('L1', false));
      expect((await retainedOf(broker.url, gatewayId, 'L1')).presence).toEqual({ online: false });
    });

    it('while disconnected, present() answers offline at once instead of hanging', async () => {
      await lock.disconnect();
      expect(await lock.present({ type: 'pin', value: '1234' })).toMatchObject({ status: 'offline', decision: null });
    });
  });

  describe('when the gateway does not answer', () => {
    it('present() returns a timeout result naming what it waited for', async () => {
      gw.mode = 'silent';
      expect(await lock.present({ type: 'pin', value: '1234' }, { timeoutMs: 200 })).toMatchObject({
        status: 'timeout',
        waitedFor: 'decision',
        decision: null,
        bolt: 'locked',
      });
    });
  });

  describe('the alarm helpers', () => {
    it('force open, tamper, door ajar and jam reach the gateway as events', async () => {
      await lock.forceOpen();
      await lock.tamper();
      clock.advance(30_000);
      await lock.tick();
      await lock.jam();
      for (const kind of ['forced_open', 'tamper', 'door_ajar', 'jam'] as const) await gw.waitFor(isEvent('L1', (e) => e.kind === kind));
      await gw.waitFor(isState('L1', 'jammed'));
    });
  });
});

describe.each(mqttBackends())('with real timers (%s)', (backend) => {
  it('relocks by itself after holdMs', async () => {
    const broker = await startMqttBackend(backend);
    const gatewayId = `gw-${broker.unique}-rt`;
    const secret = newPairingSecret();
    const clock = { now: () => Date.now() };
    const gw = new FakeGateway(broker.url, gatewayId, () => secret, clock);
    gw.holdMs = 50;
    await gw.start();
    const lock = new SimLock({ url: broker.url, gatewayId, lockId: 'L1', secret });
    try {
      await lock.start();
      const r = await lock.present({ type: 'pin', value: '1234' });
      expect(r.command).toMatchObject({ result: 'executed' });
      await gw.waitFor(isState('L1', 'unlocked'));
      await gw.waitFor((s) => isState('L1', 'locked')(s) && gw.seen.indexOf(s) > gw.seen.findIndex(isState('L1', 'unlocked')));
      expect(lock.bolt).toBe('locked');
    } finally {
      await lock.stop();
      await gw.stop();
      await broker.stop();
    }
  });
});

// Needs a broker that can cut every connection at once, which only the embedded one can do from a test.
describe('when the broker drops every connection (aedes)', () => {
  it('mqtt.js reconnects, and the lock announces online and its state again', async () => {
    const broker = await startEmbeddedBroker();
    const gatewayId = 'gw-drop';
    const secret = newPairingSecret();
    const clock = new ManualClock(Date.UTC(2026, 10, 29, 9));
    const gw = new FakeGateway(broker.url, gatewayId, () => secret, clock);
    await gw.start();
    const activity: string[] = [];
    const lock = new SimLock({
      url: broker.url,
      gatewayId,
      lockId: 'L1',
      secret,
      clock,
      timers: 'manual',
      onActivity: (a) => activity.push(a.type),
    });
    try {
      await lock.start();
      await gw.waitFor(isPresence('L1', true));
      const connects = activity.filter((a) => a === 'connected').length;
      const seenBefore = gw.seen.length;
      broker.dropAllConnections();
      // The observer was cut too (it may miss the will itself; the will is tested with disconnect() above).
      await until(() => activity.filter((a) => a === 'connected').length > connects);
      expect(activity).toContain('disconnected');
      await until(() => lock.connected);
      await gw.waitFor((s) => isPresence('L1', true)(s) && gw.seen.indexOf(s) >= seenBefore);
      expect(await retainedOf(broker.url, gatewayId, 'L1')).toMatchObject({ presence: { online: true }, state: { bolt: 'locked' } });
      // Subscriptions came back too: the lock still opens.
      expect((await lock.present({ type: 'pin', value: '1234' })).command).toMatchObject({ result: 'executed' });
    } finally {
      await lock.stop();
      await gw.stop();
      await broker.stop();
    }
  });
});

async function until(cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
