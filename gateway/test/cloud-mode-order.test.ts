import { newId } from '@tobira/shared';
import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runSite, STAFF_TOKEN, waitFor, type Running } from './harness.js';

/**
 * A cloud request to lift a lockdown can reach the gateway long after it was made (the link was down):
 * a lockdown staff set at the gateway after the request stands (MODE_SUPERSEDED, acked refused so the
 * operator sees why); a lift asked after the lockdown, and a cloud that sends no request time, lift it.
 */
describe('a late cloud mode against a newer staff lockdown', () => {
  let broker: MqttTestBroker;
  let s: Running | undefined;
  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
  });
  afterEach(async () => {
    await s?.close();
    s = undefined;
    await broker.stop();
  });

  const mode = () => s!.gw.store.settings().mode;
  const lockdownHere = async () => {
    const r = await fetch(`${s!.gw.httpUrl!}/staff/mode`, {
      method: 'POST',
      headers: { authorization: `Bearer ${STAFF_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ mode: 'lockdown' }),
    });
    expect(r.status).toBe(200);
    expect(mode()).toBe('lockdown');
  };
  const cloudMode = async (m: 'normal' | 'lockdown', requestedAt: number | undefined) => {
    const requestId = newId();
    const sent = await s!.cloud.send({
      type: 'site.mode',
      seq: ++s!.cloud.seq,
      body: { requestId, mode: m, passage: [], by: 'ops-token', reason: null, ...(requestedAt === undefined ? {} : { requestedAt }) },
    });
    await waitFor(() => s!.gw.store.settings().appliedSeq >= s!.cloud.seq, 'site.mode applied');
    return sent.jti;
  };
  const ackOf = (jti: string) => s!.cloud.ofType('ack').find((m) => m.body.ackOf === jti)?.body;

  it('a lift asked before the staff lockdown leaves it standing, acked refused MODE_SUPERSEDED', async () => {
    s = await runSite(broker.url, broker.url, broker.unique);
    const asked = s.f.clock.now() - 60_000;
    await lockdownHere();
    const id = await cloudMode('normal', asked);
    expect(mode()).toBe('lockdown');
    await waitFor(() => ackOf(id) !== undefined, 'the ack');
    expect(ackOf(id)).toMatchObject({ result: 'refused', code: 'MODE_SUPERSEDED' });
  });

  it('a lift asked after the staff lockdown lifts it; so does one from a cloud that sends no request time', async () => {
    s = await runSite(broker.url, broker.url, broker.unique);
    await lockdownHere();
    s.f.clock.advance(1000);
    await cloudMode('normal', s.f.clock.now());
    expect(mode()).toBe('normal');
    await lockdownHere();
    await cloudMode('normal', undefined);
    expect(mode()).toBe('normal');
  });
});
