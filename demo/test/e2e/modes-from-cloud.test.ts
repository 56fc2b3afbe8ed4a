import { newCorrelationId } from '@tobira/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

const ALL_DAY = { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }] };
const STAFF_TOKEN = 'staff-token-modes-0123456789';

/**
 * Modes set from the cloud, end to end over real brokers: the verb queues a
 * signed site.mode through the outbox, the dispatcher publishes it, the
 * gateway applies it and acks, the request turns from pending to applied,
 * and the firmware-sim locks follow (HMAC commands). The gateway's clock and
 * the cloud's run on the test's offset clock.
 */
describe.each(backends())('modes from the cloud, end to end (%s brokers and database)', (backend) => {
  let sys: System;
  beforeAll(async () => {
    sys = await new System(backend, {
      offlineGraceSeconds: 300,
      gatewayOverrides: { http: { host: '127.0.0.1', port: 0 }, staffToken: STAFF_TOKEN },
    }).start();
    await sys.waitKeyStatus(expectApplied(await sys.issuePin('2468', ['L1', 'L2']), 'issueKey').id, 'active');
  });
  afterAll(async () => {
    await sys.stop();
  });

  const request = (input: { mode?: 'normal' | 'lockdown'; passage?: { doorIds: string[] | null; schedule: typeof ALL_DAY | null } }) =>
    sys.cloud.requestMode({
      scope: null,
      siteId: sys.siteId,
      mode: input.mode ?? null,
      passage: input.passage ?? null,
      by: 'ops-token',
      reason: 'e2e',
      cid: newCorrelationId(),
    });
  const settled = (requestId: string) =>
    waitFor(async () => {
      const r = await sys.cloud.getModeRequest(requestId, null);
      return r !== null && r.status !== 'pending' && r;
    }, `mode request ${requestId} settled`);
  const staffStatus = async () =>
    (await (await fetch(`${sys.gateway.httpUrl}/staff/status`, { headers: { authorization: `Bearer ${STAFF_TOKEN}` } })).json()) as {
      mode: string;
      modeOrigin: { origin: string; by: string | null };
      passage: { doorId: string; origin: string; held: boolean }[];
    };

  it('a cloud lockdown reaches the gateway, is confirmed, and the PIN is refused SITE_LOCKDOWN at the sim lock', async () => {
    const r = expectApplied(await request({ mode: 'lockdown' }), 'requestMode');
    expect(r.status).toBe('pending');
    expect((await settled(r.requestId)).gateways).toMatchObject([{ gatewayId: sys.gatewayId, status: 'applied', code: 'MODE_APPLIED' }]);
    expect(await staffStatus()).toMatchObject({ mode: 'lockdown', modeOrigin: { origin: 'cloud', by: 'ops-token' } });
    const d = await sys.fleet.lock('L1').present({ type: 'pin', value: '2468' }, { timeoutMs: 10_000 });
    expect(d.decision).toMatchObject({ allowed: false, code: 'SITE_LOCKDOWN' });
    expect(await settled(expectApplied(await request({ mode: 'normal' }), 'requestMode').requestId)).toMatchObject({ status: 'applied' });
  });

  it('a cloud passage schedule holds the sim door open; a gateway that cannot be reached leaves the request pending', async () => {
    const p = expectApplied(await request({ passage: { doorIds: [sys.doors.L1!], schedule: ALL_DAY } }), 'requestMode');
    await settled(p.requestId);
    await waitFor(() => sys.fleet.lock('L1').bolt === 'unlocked', 'L1 held open by passage');
    expect(sys.fleet.lock('L2').bolt).toBe('locked');
    expect((await staffStatus()).passage).toMatchObject([{ doorId: sys.doors.L1, origin: 'cloud', held: true }]);

    // the site's internet is cut: a lockdown is queued but stays pending, the door stays held (the lease runs)
    sys.proxy.cut();
    await waitFor(() => !sys.gateway.cloudConnected, 'gateway cut off');
    const l = expectApplied(await request({ mode: 'lockdown' }), 'requestMode');
    expect((await sys.cloud.getModeRequest(l.requestId, null))?.status).toBe('pending');
    sys.proxy.restore();
    expect(await settled(l.requestId)).toMatchObject({ status: 'applied' });
    await waitFor(() => sys.fleet.lock('L1').bolt === 'locked', 'L1 relocked by the cloud lockdown');
    await settled(expectApplied(await request({ mode: 'normal' }), 'requestMode').requestId);
    await waitFor(() => sys.fleet.lock('L1').bolt === 'unlocked', 'L1 held again');
  });

  it('the attack: a gateway failing closed relocks the passage door and no cloud request opens it again while stale', async () => {
    await waitFor(() => sys.fleet.lock('L1').bolt === 'unlocked', 'L1 held');
    sys.proxy.cut();
    await waitFor(() => !sys.gateway.cloudConnected, 'gateway cut off');
    sys.clock.advance(301_000);
    await waitFor(() => sys.fleet.lock('L1').bolt === 'locked', 'L1 relocked: the gateway fails closed');
    // the cloud (re)asks for passage; the message waits in the outbox and the door stays shut
    const again = expectApplied(await request({ passage: { doorIds: [sys.doors.L1!], schedule: ALL_DAY } }), 'requestMode');
    sys.gateway.passageNow();
    expect(sys.fleet.lock('L1').bolt).toBe('locked');
    expect((await sys.cloud.getModeRequest(again.requestId, null))?.status).toBe('pending');
    // back online: the heartbeat renews the lease, the request is confirmed and passage resumes
    sys.proxy.restore();
    await settled(again.requestId);
    await waitFor(() => sys.fleet.lock('L1').bolt === 'unlocked', 'L1 held again once fresh');
  });
});
