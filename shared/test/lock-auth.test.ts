import { describe, expect, it } from 'vitest';
import {
  ReplayWindow,
  asLockId,
  checkLockCommand,
  newId,
  newPairingSecret,
  signLockCommand,
  type UnsignedLockCommand,
} from '../src/index.js';

const NOW = Date.UTC(2026, 10, 29, 9);
const secret = newPairingSecret();
const draft = (over: Partial<UnsignedLockCommand> = {}): UnsignedLockCommand => ({
  commandId: newId(),
  lockId: asLockId('L1'),
  action: 'unlock',
  holdMs: 5000,
  expiresAt: NOW + 10_000,
  ...over,
});

describe('lock command HMAC', () => {
  it('a fresh command with the right secret is accepted', () => {
    expect(checkLockCommand(secret, signLockCommand(secret, draft()), { lockId: 'L1', now: NOW, seen: new Set() })).toEqual({ ok: true });
  });

  it('a command signed with another secret -> BAD_MAC', () => {
    const c = signLockCommand(newPairingSecret(), draft());
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: new Set() })).toEqual({ ok: false, code: 'BAD_MAC' });
  });

  it.each([
    ['action', { action: 'lock' as const }],
    ['holdMs', { holdMs: 60_000 }],
    ['expiresAt', { expiresAt: NOW + 20_000 }],
    ['lockId', { lockId: asLockId('L2') }],
  ])('changing %s after signing -> BAD_MAC', (_f, change) => {
    const c = { ...signLockCommand(secret, draft()), ...change };
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: new Set() })).toEqual({ ok: false, code: 'BAD_MAC' });
  });

  it('a command for another lock -> WRONG_LOCK', () => {
    const c = signLockCommand(secret, draft({ lockId: asLockId('L2') }));
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: new Set() })).toEqual({ ok: false, code: 'WRONG_LOCK' });
  });

  it('an expired command -> COMMAND_EXPIRED', () => {
    const c = signLockCommand(secret, draft({ expiresAt: NOW }));
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: new Set() })).toEqual({ ok: false, code: 'COMMAND_EXPIRED' });
  });

  it('a command that expires too far ahead -> COMMAND_TOO_FAR_AHEAD', () => {
    const c = signLockCommand(secret, draft({ expiresAt: NOW + 31_000 }));
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: new Set() })).toEqual({ ok: false, code: 'COMMAND_TOO_FAR_AHEAD' });
  });

  it('a replayed command id -> COMMAND_REPLAYED', () => {
    const window = new ReplayWindow();
    const c = signLockCommand(secret, draft());
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: window })).toEqual({ ok: true });
    expect(window.remember(c.commandId, c.expiresAt, NOW)).toBe(true);
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW + 1, seen: window })).toEqual({ ok: false, code: 'COMMAND_REPLAYED' });
  });

  it('a bad MAC is reported before anything else (no oracle on forged commands)', () => {
    const c = { ...signLockCommand(secret, draft({ expiresAt: NOW - 1, lockId: asLockId('L9') })), mac: 'A'.repeat(43) };
    expect(checkLockCommand(secret, c, { lockId: 'L1', now: NOW, seen: new Set([c.commandId]) })).toEqual({ ok: false, code: 'BAD_MAC' });
  });
});

describe('ReplayWindow', () => {
  it('forgets ids once their command has expired, and refuses to grow past capacity', () => {
    const w = new ReplayWindow(2);
    expect(w.remember('a', NOW + 10, NOW)).toBe(true);
    expect(w.remember('b', NOW + 20, NOW)).toBe(true);
    expect(w.remember('c', NOW + 30, NOW)).toBe(false);
    expect(w.remember('c', NOW + 30, NOW + 10)).toBe(true);
    expect(w.has('a')).toBe(false);
    expect(w.has('b')).toBe(true);
  });
});
