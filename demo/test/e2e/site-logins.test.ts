import { connectMqtt, lockClientId, newId, siteBrokerPassword, topics, waitConnected, type LockChannel } from '@tobira/shared';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SimActivity } from '@tobira/firmware-sim';
import { System, backends, connackCode, expectApplied, waitFor } from './system.js';

/**
 * The site broker is a trust boundary (docs/gateway.md "Site broker
 * logins"): on the embedded site broker (aedes with the gateway's hooks) and
 * on a Mosquitto started from the shipped gateway/deploy/mosquitto-site.conf
 * with its generated password and ACL files, a lock logs in as itself and
 * can touch nothing of another lock's. The attacker here is a compromised
 * lock: L2's controller with its real login, run by someone else.
 */
describe.each(backends())('site broker logins and ACLs (%s)', (backend) => {
  let sys: System;
  const activity: { lockId: string; a: SimActivity }[] = [];
  const PIN = '5173';

  beforeAll(async () => {
    sys = await new System(backend, {
      locks: ['L1', 'L2'],
      siteLogins: true,
      onLockActivity: (lockId, a) => activity.push({ lockId, a }),
    }).start();
    const key = expectApplied(await sys.issuePin(PIN, ['L1', 'L2']), 'issueKey');
    await sys.waitKeyStatus(key.id, 'active');
    // L2's own controller goes away; its login is now the attacker's
    await sys.fleet.lock('L2').stop();
  });
  afterAll(async () => {
    await sys?.stop();
  });

  const l2Login = () => ({ username: 'L2', password: siteBrokerPassword(sys.secrets.L2 as Uint8Array, sys.gatewayId, 'L2') });
  const topic = (lockId: string, c: LockChannel) => topics.lock(sys.gatewayId, lockId, c);

  /** A client with L2's real login and client id. */
  async function asL2(): Promise<MqttClient> {
    const c = connectMqtt(sys.siteBrokerUrl, {
      ...l2Login(),
      clientId: lockClientId(sys.gatewayId, 'L2'),
      clean: true,
      reconnectPeriod: 0,
    });
    c.on('error', () => {});
    await waitConnected(c);
    return c;
  }

  /** Publishes and waits for the broker's answer; aedes answers a refused publish by closing the connection. */
  async function publishAsL2(c: MqttClient, t: string, body: unknown, retain = false): Promise<MqttClient> {
    const closed = new Promise<void>((r) => c.once('close', () => r()));
    await Promise.race([c.publishAsync(t, JSON.stringify(body), { qos: 1, retain }).catch(() => {}), closed]);
    if (c.connected) return c;
    await c.endAsync(true);
    return asL2();
  }

  it('refuses anonymous clients, wrong passwords, and the pairing secret itself as a password', async () => {
    expect(await connackCode(sys.siteBrokerUrl)).toBe(5);
    expect(await connackCode(sys.siteBrokerUrl, { username: 'L1', password: 'not-the-password' })).toBe(5);
    // the password is derived from the secret: the secret never goes on the wire and is no login
    expect(
      await connackCode(sys.siteBrokerUrl, { username: 'L1', password: Buffer.from(sys.secrets.L1 as Uint8Array).toString('base64url') }),
    ).toBe(5);
    // L2's password is no good for L1
    expect(await connackCode(sys.siteBrokerUrl, { username: 'L1', password: l2Login().password })).toBe(5);
    expect(await connackCode(sys.siteBrokerUrl, { username: sys.siteGatewayLogin.username, password: l2Login().password })).toBe(5);
  });

  it("a lock's own traffic works end to end with its own login", async () => {
    const r = await sys.fleet.lock('L1').present({ type: 'pin', value: PIN }, { timeoutMs: 10_000 });
    expect(r).toMatchObject({ status: 'decided', decision: { allowed: true, code: 'ALLOWED' }, command: { result: 'executed' } });
    expect(sys.gateway.store.lock('L1')?.online).toBe(true);
  });

  it("a lock cannot publish another lock's request, state or presence: the gateway never sees them", async () => {
    let c = await asL2();
    const forged = `forged-${newId()}`;
    const at = sys.clock.now();
    c = await publishAsL2(c, topic('L1', 'request'), { requestId: forged, credential: { type: 'pin', value: PIN }, at });
    c = await publishAsL2(
      c,
      topic('L1', 'state'),
      { lockId: 'L1', bolt: 'unlocked', door: 'open', battery: 7, at, lastCommandId: null },
      true,
    );
    c = await publishAsL2(c, topic('L1', 'presence'), { online: false }, true);
    // its own traffic, sent after the forgeries, gets through: once it is in, the forgeries would have been too
    const own = `own-${newId()}`;
    await c.subscribeAsync(topic('L2', 'decision'), { qos: 1 });
    const decided = new Promise<void>((resolve) => c.on('message', (t) => t === topic('L2', 'decision') && resolve()));
    c = await publishAsL2(
      c,
      topic('L2', 'state'),
      { lockId: 'L2', bolt: 'locked', door: 'closed', battery: 42, at, lastCommandId: null },
      true,
    );
    c = await publishAsL2(c, topic('L2', 'request'), { requestId: own, credential: { type: 'pin', value: PIN }, at });
    await decided;
    await waitFor(
      () => sys.gateway.store.findAccess('L2', own) !== null && sys.gateway.store.lock('L2')?.battery === 42,
      "L2's own request and state at the gateway",
    );
    expect(sys.gateway.store.findAccess('L1', forged)).toBeNull();
    expect(sys.gateway.store.lock('L1')).toMatchObject({ online: true, door: 'closed' });
    expect(sys.gateway.store.lock('L1')?.battery).not.toBe(7);
    await c.endAsync(true);
  });

  it("a lock cannot subscribe to another lock's commands or decisions, not even with a wildcard", async () => {
    const c = await asL2();
    const seen: string[] = [];
    c.on('message', (t) => seen.push(t));
    const granted = (filters: string[]) =>
      c.subscribeAsync(filters, { qos: 1 }).then(
        (g) => g.map((x) => x.qos),
        (e: { packet?: { granted?: number[] } }) => e.packet?.granted ?? [],
      );
    const refused = await granted([topic('L1', 'command'), topic('L1', 'decision'), `tobira/v1/site/${sys.gatewayId}/lock/+/command`, '#']);
    // aedes refuses them in the SUBACK; Mosquitto's acl_file grants a subscription and checks read access on every delivery
    if (backend === 'embedded') expect(refused).toEqual([128, 128, 128, 128]);
    await c.subscribeAsync(topic('L2', 'decision'), { qos: 1 });
    const r = await sys.fleet.lock('L1').present({ type: 'pin', value: PIN }, { timeoutMs: 10_000 });
    expect(r.command).toMatchObject({ result: 'executed' });
    // a marker for the spy, published by the gateway after L1's command: the broker delivers to one client in order
    const own = `own-${newId()}`;
    await c.publishAsync(
      topic('L2', 'request'),
      JSON.stringify({ requestId: own, credential: { type: 'pin', value: PIN }, at: sys.clock.now() }),
      { qos: 1 },
    );
    await waitFor(() => seen.includes(topic('L2', 'decision')), "the spy's own decision");
    // its own command may come through the wildcard (L2 may read it); nothing of L1's may
    expect(seen.filter((t) => !t.startsWith(`tobira/v1/site/${sys.gatewayId}/lock/L2/`))).toEqual([]);
    expect(seen.length).toBeGreaterThan(0);
    await c.endAsync(true);
  });

  it("a lock cannot take over another lock's session with its client id", async () => {
    const before = activity.filter((x) => x.lockId === 'L1' && x.a.type === 'disconnected').length;
    const thief = connectMqtt(sys.siteBrokerUrl, {
      ...l2Login(),
      clientId: lockClientId(sys.gatewayId, 'L1'),
      clean: true,
      reconnectPeriod: 0,
    });
    thief.on('error', () => {});
    // aedes refuses the login; Mosquitto lets it in under its own name (use_username_as_clientid), so the id names no one else
    const got = await waitConnected(thief).then(
      () => 0,
      (e: unknown) => (e as { code?: number }).code ?? -1,
    );
    expect(got).toBe(backend === 'embedded' ? 5 : 0);
    const r = await sys.fleet.lock('L1').present({ type: 'pin', value: PIN }, { timeoutMs: 10_000 });
    expect(r.command).toMatchObject({ result: 'executed' });
    expect(activity.filter((x) => x.lockId === 'L1' && x.a.type === 'disconnected').length).toBe(before);
    expect(sys.fleet.lock('L1').connected).toBe(true);
    await thief.endAsync(true);
  });
});
