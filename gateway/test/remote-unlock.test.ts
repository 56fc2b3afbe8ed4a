import { describe, expect, it } from 'vitest';
import { decideRemoteUnlock, type RemoteUnlockInput } from '../src/domain/remote-unlock.js';

const ok: RemoteUnlockInput = {
  role: 'supervisor',
  reason: 'guest locked out',
  lock: { online: true },
  mode: 'normal',
  failClosedReason: null,
};

describe('decideRemoteUnlock (the table in domain/remote-unlock.ts)', () => {
  it('allows a supervisor with a reason at an online lock, the reason trimmed', () => {
    expect(decideRemoteUnlock({ ...ok, reason: '  guest locked out ' })).toEqual({
      allowed: true,
      reason: 'guest locked out',
      warning: null,
    });
  });
  it('refuses in the table order: role, reason, lock, presence, lockdown', () => {
    const bad: RemoteUnlockInput = { role: 'staff', reason: ' ', lock: null, mode: 'lockdown', failClosedReason: 'NO_LEASE' };
    expect(decideRemoteUnlock(bad)).toEqual({ allowed: false, code: 'NOT_SUPERVISOR' });
    expect(decideRemoteUnlock({ ...bad, role: 'supervisor' })).toEqual({ allowed: false, code: 'REASON_REQUIRED' });
    expect(decideRemoteUnlock({ ...bad, role: 'supervisor', reason: 'x' })).toEqual({ allowed: false, code: 'LOCK_NOT_FOUND' });
    expect(decideRemoteUnlock({ ...bad, role: 'supervisor', reason: 'x', lock: { online: false } })).toEqual({
      allowed: false,
      code: 'LOCK_OFFLINE',
    });
    expect(decideRemoteUnlock({ ...bad, role: 'supervisor', reason: 'x', lock: { online: true } })).toEqual({
      allowed: false,
      code: 'SITE_LOCKDOWN',
    });
  });
  it('allows while failing closed, with the FAILING_CLOSED warning', () => {
    for (const r of ['NO_LEASE', 'LEASE_EXPIRED', 'BEHIND_CLOUD', 'SEQ_CONFLICT'])
      expect(decideRemoteUnlock({ ...ok, failClosedReason: r })).toEqual({
        allowed: true,
        reason: 'guest locked out',
        warning: 'FAILING_CLOSED',
      });
  });
});
