import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PresentResult } from '@tobira/firmware-sim';
import { System, backends, expectApplied, waitFor } from './system.js';

const GRACE_S = 60;

describe.each(backends())('when the cloud link is cut (%s brokers and database)', (backend) => {
  let sys: System;
  const decided: PresentResult[] = [];
  const present = async (lock: string, pin: string) => {
    const r = await sys.fleet.lock(lock).present({ type: 'pin', value: pin }, { timeoutMs: 10_000 });
    expect(r.status).toBe('decided');
    decided.push(r);
    return r;
  };

  beforeAll(async () => {
    sys = await new System(backend, { offlineGraceSeconds: GRACE_S }).start();
    const guest = expectApplied(await sys.issuePin('2468', ['L1']), 'issue guest');
    const staff = expectApplied(await sys.issuePin('9753', ['L1', 'L2'], { offlineCapable: true }), 'issue staff');
    await sys.waitKeyStatus(guest.id, 'active');
    await sys.waitKeyStatus(staff.id, 'active');
  });
  afterAll(async () => {
    await sys.stop();
  });

  it('valid keys still open while the freshness lease runs', async () => {
    sys.proxy.cut();
    await waitFor(() => !sys.gateway.cloudConnected, 'the gateway to see the cloud link down');
    const r = await present('L1', '2468');
    expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
  });

  it(`after offlineGraceSeconds (${GRACE_S} s) every request is denied with CLOUD_STALE`, async () => {
    sys.clock.advance((GRACE_S + 1) * 1000);
    const r = await present('L1', '2468');
    expect(r.decision).toMatchObject({ allowed: false, code: 'CLOUD_STALE' });
    expect(r.bolt).toBe('locked');
  });

  it('except offline-capable staff keys', async () => {
    const r = await present('L2', '9753');
    expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
  });

  it('when the link returns, the lease renews and decisions recover', async () => {
    sys.proxy.restore();
    await waitFor(() => sys.gateway.cloudConnected, 'the gateway to reconnect to the cloud broker');
    await waitFor(() => {
      const lease = sys.gateway.store.settings().leaseExpiresAt;
      return lease !== null && lease > sys.clock.now() + (GRACE_S - 10) * 1000;
    }, 'the freshness lease to renew after a heartbeat');
    const r = await present('L1', '2468');
    expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
  });

  it('every access event made offline reaches the cloud audit log exactly once', async () => {
    const rows = await waitFor(async () => {
      const all = await sys.cloud.listAudit({ gatewayId: sys.gatewayId });
      return all.length >= decided.length && all;
    }, 'every decision in the cloud audit log');
    expect(rows).toHaveLength(decided.length);
    expect(new Set(rows.map((r) => r.eventId)).size).toBe(rows.length);
    expect(rows.map((r) => r.code)).toEqual(decided.map((d) => d.decision?.code));
    expect(await sys.cloud.listUplinkGaps(sys.gatewayId)).toEqual([]);
  });
});
