import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { asDoorId, encodeSecret, newPairingSecret } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { createGateway } from '../src/gateway.js';
import { FakeLock, PIN, lockClockOf, provision, runSite, silentLog, waitFor, type Running } from './harness.js';

/**
 * One-time keys: the first successful entry consumes the
 * key in the decision's own SQLite transaction; every later presentation, at
 * any lock, is KEY_USED, across restarts and snapshots.
 */
describe.each(mqttBackends())('one-time keys against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running;
  let lock2: FakeLock | undefined;
  const lock2Secret = newPairingSecret();
  const start = async () => {
    site = await runSite(broker.url, broker.url, broker.unique, {
      overrides: {
        locks: [
          { lockId: 'lock-1', doorId: 'door-1', pairingSecret: encodeSecret(newPairingSecret()) },
          { lockId: 'lock-2', doorId: 'door-2', pairingSecret: encodeSecret(lock2Secret) },
        ],
      },
    });
    lock2 = new FakeLock(site.f.gatewayId, 'lock-2', lockClockOf(site.gw));
    await lock2.connect(broker.url);
    return site;
  };
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await lock2?.close();
    await site?.close();
    await broker.stop();
  });

  it('two locks presenting it at the same moment: exactly one opens, the other is KEY_USED, and one consumption reaches the uplink', async () => {
    const s = await start();
    await provision(s, { oneTime: true, doors: [asDoorId('door-1'), asDoorId('door-2')] });
    const [a, b] = await Promise.all([s.lock.present(PIN), lock2!.present(PIN)]);
    const codes = [a.code, b.code].sort();
    expect(codes).toEqual(['ALLOWED', 'KEY_USED']);
    expect([a, b].filter((d) => d.allowed)).toHaveLength(1);
    expect([a, b].filter((d) => d.commandId !== null)).toHaveLength(1);
    const events = await waitFor(() => {
      const evs = s.cloud.ofType('access.event');
      return evs.length === 2 ? evs : undefined;
    }, 'both access events');
    expect(events.filter((e) => e.body.allowed)).toHaveLength(1);
    expect(events.find((e) => !e.body.allowed)?.body).toMatchObject({ code: 'KEY_USED', keyId: 'key-1', personId: 'person-1' });
    // a later presentation at either lock, and a repeat of the refused request id, stay refused
    expect(await s.lock.present(PIN)).toMatchObject({ allowed: false, code: 'KEY_USED' });
    expect(await lock2!.present(PIN)).toMatchObject({ allowed: false, code: 'KEY_USED' });
  });

  it('stays consumed after a restart of the gateway and after a redelivered grant', async () => {
    const s = await start();
    const g = await provision(s, { oneTime: true });
    expect(await s.lock.present(PIN)).toMatchObject({ allowed: true, code: 'ALLOWED' });
    await s.gw.stop({ force: true });
    // a new process on the same SQLite file
    const gw = createGateway(s.f.config, { clock: s.f.clock, log: silentLog(), tickMs: 50 });
    await gw.start();
    try {
      await waitFor(() => gw.cloudConnected && gw.siteConnected, 'reconnected');
      // the broker or the outbox sends the grant again (same message id), and a fresh heartbeat
      await s.cloud.publishRaw((await s.cloud.sign({ type: 'key.grant', seq: g.seq, body: g.body, jti: g.jti })).token);
      await s.cloud.heartbeat();
      await waitFor(() => (gw.store.settings().leaseExpiresAt ?? 0) > s.f.clock.now(), 'fresh again');
      expect(await s.lock.present(PIN)).toMatchObject({ allowed: false, code: 'KEY_USED' });
    } finally {
      await gw.stop({ force: true });
    }
  });

  it('an ordinary key with the same shape opens every time (the consumption is for one-time keys only)', async () => {
    const s = await start();
    await provision(s);
    for (let i = 0; i < 3; i++) expect(await s.lock.present(PIN)).toMatchObject({ allowed: true, code: 'ALLOWED' });
  });
});
