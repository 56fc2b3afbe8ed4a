import { asDoorId, asLockId, newId } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { insertAccess } from '../src/adapters/sqlite/access-log.js';
import { provision, runSite, waitFor, type Running } from './harness.js';

/** A lock repeating a recorded request id gets the recorded command again: the same action, never another one. */
describe.each(mqttBackends())('a repeated request id (broker: %s)', (backend) => {
  let broker: MqttTestBroker;
  let s: Running;
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    s = await runSite(broker.url, broker.url, broker.unique);
    await provision(s);
  });
  afterEach(async () => {
    await s?.close();
    await broker.stop();
  });

  it("of a passage relock gets the relock's lock command again, not an unlock", async () => {
    const requestId = `passage-${newId()}`;
    const commandId = newId();
    const now = s.f.clock.now();
    // what a passage relock records (app/passage.ts): a lock command under the request id
    insertAccess(s.gw.store.db, {
      eventId: newId(),
      requestId,
      lockId: asLockId('lock-1'),
      doorId: asDoorId('door-1'),
      at: now,
      allowed: true,
      code: 'PASSAGE_RELOCK',
      keyId: null,
      keyVersion: null,
      personId: null,
      credentialType: null,
      commandId,
      commandExpiresAt: now + 10_000,
      holdMs: 0,
      cid: newId(),
    });
    await s.lock.present('000000', requestId);
    const c = await waitFor(() => s.lock.commands.find((x) => x.commandId === commandId), 'the recorded command');
    expect(c.action).toBe('lock');
  });
});
