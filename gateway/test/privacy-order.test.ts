import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { runSite, type Running } from './harness.js';

/**
 * A lock that reconnects flushes the events it queued meanwhile, so an old "privacy off" can arrive
 * after a newer "privacy on". Privacy is ordered by the lock's own time across its states and its
 * privacy events: turning it off must be the lock's newest word on privacy (else staff keys would open
 * a room whose guest is inside with privacy on); turning it on always counts (the fail-closed side).
 */
describe.each(mqttBackends())('privacy reports ordered by the lock time against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;

  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const privacySince = (s: Running) =>
    (s.gw.store.db.prepare('SELECT privacy_since AS p FROM locks WHERE lock_id = ?').get(s.lock.lockId) as { p: number | null }).p;
  const event = (s: Running, active: boolean, at: number) =>
    s.lock.publish('event', { eventId: randomUUID(), lockId: s.lock.lockId, at, kind: 'privacy', active });
  const state = (s: Running, privacy: boolean, at: number) =>
    s.lock.publish('state', { lockId: s.lock.lockId, bolt: 'locked', door: 'closed', battery: 80, at, lastCommandId: null, privacy });
  /** One broker connection, in order: a request answered means every message before it was handled. */
  const handled = async (s: Running) => void (await s.lock.present('000000'));

  it('an old privacy-off event (a queue flushed on reconnect) after a newer on leaves privacy on; a newer off turns it off', async () => {
    const s = (site = await runSite(broker.url, broker.url, broker.unique));
    const t = Date.now();
    await event(s, true, t);
    await handled(s);
    expect(privacySince(s)).not.toBeNull();
    await event(s, false, t - 3_600_000);
    await handled(s);
    expect(privacySince(s)).not.toBeNull();
    await event(s, false, t + 1000);
    await handled(s);
    expect(privacySince(s)).toBeNull();
  });

  it('events and states share one order: an older state saying off does not undo a newer event saying on', async () => {
    const s = (site = await runSite(broker.url, broker.url, broker.unique));
    const t = Date.now();
    await state(s, false, t);
    await event(s, true, t + 2000);
    await handled(s);
    expect(privacySince(s)).not.toBeNull();
    // a newer state of the bolt that is older than the privacy event: the bolt is recorded, privacy stays on
    await state(s, false, t + 1000);
    await handled(s);
    expect(privacySince(s)).not.toBeNull();
    await state(s, false, t + 3000);
    await handled(s);
    expect(privacySince(s)).toBeNull();
  });

  it('an old privacy-on still turns it on (fail closed)', async () => {
    const s = (site = await runSite(broker.url, broker.url, broker.unique));
    const t = Date.now();
    await event(s, false, t);
    await event(s, true, t - 60_000);
    await handled(s);
    expect(privacySince(s)).not.toBeNull();
  });
});
