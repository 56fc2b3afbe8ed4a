import { asDoorId, asLockId, newId } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { insertAccess } from '../src/adapters/sqlite/access-log.js';
import { PIN, provision, runSite, STAFF_TOKEN, waitFor, type Running } from './harness.js';

/**
 * A lock repeating a recorded request id gets the recorded command again: the
 * same action, never another one; a recorded ALLOWED only while it still holds.
 */
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

  /** The lock asks once more under the same request id (its first answer or the unlock was lost) and waits for the answer. */
  const retry = async (requestId: string) => {
    s.lock.decisions.delete(requestId);
    return s.lock.present(PIN, requestId);
  };
  const rowsOf = (requestId: string) =>
    s.gw.store.db.prepare('SELECT allowed, code, command_id AS commandId FROM access_log WHERE request_id = ?').all(requestId);
  const eventsOf = (requestId: string) => s.cloud.ofType('access.event').filter((e) => e.body.requestId === requestId);
  const setMode = async (mode: string) => {
    const r = await fetch(`${s.gw.httpUrl!}/staff/mode`, {
      method: 'POST',
      headers: { authorization: `Bearer ${STAFF_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ mode }),
    });
    expect(r.status, await r.text()).toBe(200);
  };

  it('of an ALLOWED that still holds gets the same decision and the same command, nothing new recorded', async () => {
    const first = await s.lock.present(PIN);
    expect(first).toMatchObject({ allowed: true, code: 'ALLOWED' });
    await waitFor(() => eventsOf(first.requestId).length === 1 || undefined, 'the access event up');
    const again = await retry(first.requestId);
    expect(again).toEqual(first);
    await waitFor(() => s.lock.commands.filter((c) => c.commandId === first.commandId).length === 2 || undefined, 'the command resent');
    expect(rowsOf(first.requestId)).toHaveLength(1);
    expect(eventsOf(first.requestId)).toHaveLength(1);
  });

  it.each([
    [
      'a revoke',
      'KEY_REVOKED',
      async () => {
        await s.cloud.revoke('key-1', 2);
        await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq || undefined, 'revoke applied');
      },
    ],
    ['a lockdown', 'SITE_LOCKDOWN', async () => setMode('lockdown')],
  ] as const)(
    'of an ALLOWED is refused after %s (%s): the unlock is not sent again, the access log keeps its one row',
    async (_what, code, change) => {
      const first = await s.lock.present(PIN);
      expect(first).toMatchObject({ allowed: true, code: 'ALLOWED' });
      await waitFor(() => s.lock.commands.find((c) => c.commandId === first.commandId), 'the first unlock');
      await change();
      // a fresh request is refused with the same code
      expect(await s.lock.present(PIN)).toMatchObject({ allowed: false, code });
      const again = await retry(first.requestId);
      expect(again).toEqual({ requestId: first.requestId, allowed: false, code, commandId: null });
      // and stays refused however often it is repeated
      expect(await retry(first.requestId)).toEqual(again);
      // the answers are published before nothing else: a resent command would have come with them
      await s.lock.present(PIN);
      expect(s.lock.commands.filter((c) => c.commandId === first.commandId)).toHaveLength(1);
      expect(rowsOf(first.requestId)).toEqual([{ allowed: 1, code: 'ALLOWED', commandId: first.commandId }]);
      await waitFor(() => eventsOf(first.requestId).length >= 1 || undefined, 'the access event up');
      expect(eventsOf(first.requestId)).toHaveLength(1);
      const refusals = s.gw.store.db.prepare("SELECT code, detail FROM lock_refusals WHERE channel = 'request'").all() as {
        code: string;
        detail: string;
      }[];
      expect(refusals.filter((r) => r.code === code && r.detail.includes(first.commandId!))).toHaveLength(2);
    },
  );

  it('of a one-time key allowed is still answered ALLOWED (its own use does not count against it), until the key is revoked', async () => {
    await provision(s, { keyId: 'key-1' as never, version: 3, oneTime: true } as never);
    const first = await s.lock.present(PIN);
    expect(first).toMatchObject({ allowed: true, code: 'ALLOWED' });
    expect(await s.lock.present(PIN)).toMatchObject({ allowed: false, code: 'KEY_USED' });
    expect(await retry(first.requestId)).toEqual(first);
    await s.cloud.revoke('key-1', 4);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq || undefined, 'revoke applied');
    expect(await retry(first.requestId)).toMatchObject({ allowed: false, code: 'KEY_REVOKED', commandId: null });
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
