import { LockCommand, LockEvent, connectMqtt, newPairingSecret, topics, waitConnected } from '@tobira/shared';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

describe.each(backends())('the bolt never moves without a valid, fresh, unseen command (%s)', (backend) => {
  let sys: System;
  let spy: MqttClient;
  const commands: LockCommand[] = [];
  const results: Extract<LockEvent, { kind: 'command_result' }>[] = [];

  beforeAll(async () => {
    // L3's controller was paired with another secret than the one the gateway holds.
    sys = await new System(backend, { locks: ['L1', 'L3'], lockSecretsOverride: { L3: newPairingSecret() } }).start();
    const key = expectApplied(await sys.issuePin('8642', ['L1', 'L3']), 'issueKey');
    await sys.waitKeyStatus(key.id, 'active');
    spy = connectMqtt(sys.siteBrokerUrl, { clean: true });
    await waitConnected(spy);
    spy.on('message', (topic, payload) => {
      const json: unknown = JSON.parse(payload.toString());
      if (topic.endsWith('/command')) commands.push(LockCommand.parse(json));
      else {
        const e = LockEvent.parse(json);
        if (e.kind === 'command_result') results.push(e);
      }
    });
    await spy.subscribeAsync([topics.lock(sys.gatewayId, 'L1', 'command'), topics.lock(sys.gatewayId, 'L1', 'event')], { qos: 1 });
  });
  afterAll(async () => {
    await spy?.endAsync(true);
    await sys.stop();
  });

  it('a lock with a wrong pairing secret refuses the unlock with BAD_MAC', async () => {
    const r = await sys.fleet.lock('L3').present({ type: 'pin', value: '8642' }, { timeoutMs: 10_000 });
    expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
    expect(r.command).toMatchObject({ result: 'refused', code: 'BAD_MAC', bolt: 'locked' });
    expect(sys.fleet.lock('L3').bolt).toBe('locked');
  });

  it('a replayed command is refused with COMMAND_REPLAYED', async () => {
    const r = await sys.fleet.lock('L1').present({ type: 'pin', value: '8642' }, { timeoutMs: 10_000 });
    expect(r.command).toMatchObject({ result: 'executed' });
    const original = await waitFor(() => commands.find((c) => c.commandId === r.command?.commandId), 'the command on the wire');
    await spy.publishAsync(topics.lock(sys.gatewayId, 'L1', 'command'), JSON.stringify(original), { qos: 1 });
    const refusal = await waitFor(
      () => results.find((e) => e.commandId === original.commandId && e.result === 'refused'),
      'the lock to answer the replay',
    );
    expect(refusal.code).toBe('COMMAND_REPLAYED');
    expect(results.filter((e) => e.commandId === original.commandId && e.result === 'executed')).toHaveLength(1);
  });

  it('an expired command is refused with COMMAND_EXPIRED', async () => {
    const lock = sys.fleet.lock('L1');
    lock.setFaults({ incoming: { drop: 1, channels: ['command'] } });
    const r = await lock.present({ type: 'pin', value: '8642' }, { timeoutMs: 1000 });
    expect(r.decision).toMatchObject({ allowed: true });
    const unseen = await waitFor(() => commands.find((c) => c.commandId === r.decision?.commandId), 'the dropped command on the wire');
    lock.setFaults({});
    sys.clock.advance(unseen.expiresAt - sys.clock.now() + 1);
    const late = lock.waitForCommand(unseen.commandId);
    await spy.publishAsync(topics.lock(sys.gatewayId, 'L1', 'command'), JSON.stringify(unseen), { qos: 1 });
    expect(await late).toMatchObject({ result: 'refused', code: 'COMMAND_EXPIRED', bolt: 'locked' });
  });
});
