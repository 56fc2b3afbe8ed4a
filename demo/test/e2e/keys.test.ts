import { afterEach, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

/**
 * Issue #17 part 2, end to end: cloud (PGlite or PostgreSQL), gateway, the
 * firmware-sim fleet and real brokers.
 */
describe.each(backends())('keys people ask for, end to end (%s brokers and database)', (backend) => {
  let sys: System | undefined;
  afterEach(async () => {
    await sys?.stop();
    sys = undefined;
  });

  it('a one-time key opens exactly one of two doors presented at once, the second and later tries are KEY_USED, and the cloud shows the key used', async () => {
    const s = (sys = await new System(backend).start());
    const now = s.clock.now();
    const key = expectApplied(
      await s.cloud.issueKey({
        personId: s.personId,
        doors: [s.doors.L1!, s.doors.L2!],
        credential: { type: 'pin', value: '8642' },
        validFrom: now - 3_600_000,
        validUntil: now + 86_400_000,
        oneTime: true,
      }),
      'issue',
    );
    expect(key.oneTime).toBe(true);
    await s.waitKeyStatus(key.id, 'active');
    const [a, b] = await Promise.all(
      ['L1', 'L2'].map((l) => s.fleet.lock(l).present({ type: 'pin', value: '8642' }, { timeoutMs: 10_000 })),
    );
    expect([a!.decision?.code, b!.decision?.code].sort()).toEqual(['ALLOWED', 'KEY_USED']);
    expect((await s.fleet.lock('L1').present({ type: 'pin', value: '8642' }, { timeoutMs: 10_000 })).decision?.code).toBe('KEY_USED');

    // The consumption reaches the cloud through the access event: the key is used, once.
    await s.waitKeyStatus(key.id, 'used');
    const used = await s.cloud.getKey(key.id);
    const audit = await waitFor(async () => {
      const rows = await s.cloud.listAudit({ gatewayId: s.gatewayId, limit: 100 });
      return rows.length === 3 && rows;
    }, 'three events in the audit log');
    const allowed = audit.filter((r) => r.allowed);
    expect(allowed).toHaveLength(1);
    expect(used?.usedAt).toBe(allowed[0]!.at);
    expect(audit.filter((r) => r.code === 'KEY_USED')).toHaveLength(2);
    expect((await s.cloud.listKeyHistory(key.id)).map((h) => h.toStatus)).toEqual(['issuing', 'active', 'used']);
    // a used key is no longer revocable: it can open nothing
    expect(await s.cloud.revokeKey({ keyId: key.id, reason: 'staff_revoked' })).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_USED' });
  }, 60_000);
});
