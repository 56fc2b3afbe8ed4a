import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CreateTokenInput,
  DAY_MS,
  RotateTokenInput,
  expiresSoon,
  expiryOf,
  hashToken,
  isTokenShaped,
  judgeToken,
  lastUseDue,
  mayCoverEverySite,
  rotationRefusal,
  tokenState,
  type StoredToken,
} from '../src/domain/tokens.js';

const NOW = Date.UTC(2026, 11, 2, 9);
const WEEK = 7 * DAY_MS;
const MINUTE = 60_000;

const stored = (over: Partial<StoredToken> = {}): StoredToken => ({
  id: 'tok-1',
  name: 'front desk',
  role: 'manager',
  sites: ['site-1'],
  expiresAt: null,
  revokedAt: null,
  ...over,
});

describe('token hashing and shape', () => {
  it('stores a token by the hex SHA-256 of its text, so the same token finds the same row and another does not', () => {
    expect(hashToken('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(hashToken('tbr_x')).toBe(hashToken('tbr_x'));
    expect(hashToken('tbr_x')).not.toBe(hashToken('tbr_y'));
  });
  it('only tbr_ followed by exactly 43 base64url characters is shaped like a token', () => {
    const body = 'A'.repeat(40) + '_-9';
    expect(isTokenShaped(`tbr_${body}`)).toBe(true);
    expect(isTokenShaped(`tbr_${body}x`)).toBe(false);
    expect(isTokenShaped(`tbr_${body.slice(1)}`)).toBe(false);
    expect(isTokenShaped(`tbx_${body}`)).toBe(false);
    expect(isTokenShaped(`tbr_${'A'.repeat(42)}=`)).toBe(false);
    expect(isTokenShaped(` tbr_${body}`)).toBe(false);
  });
});

describe('token input', () => {
  it('a lifetime is 1 to 3650 whole days', () => {
    const ok = (d: number) => CreateTokenInput.safeParse({ name: 'n', role: 'admin', expiresInDays: d }).success;
    expect([1, 90, 3650].map(ok)).toEqual([true, true, true]);
    expect([0, 3651, 1.5].map(ok)).toEqual([false, false, false]);
  });
  it('a rotation grace is 0 to 7 days of seconds', () => {
    const ok = (g: number) => RotateTokenInput.safeParse({ graceSeconds: g }).success;
    expect([0, 7 * 86_400].map(ok)).toEqual([true, true]);
    expect([-1, 7 * 86_400 + 1].map(ok)).toEqual([false, false]);
  });
  it('refuses an unknown role and unknown fields', () => {
    expect(CreateTokenInput.safeParse({ name: 'n', role: 'root' }).success).toBe(false);
    expect(CreateTokenInput.safeParse({ name: 'n', role: 'admin', extra: 1 }).success).toBe(false);
  });
});

describe('expiryOf', () => {
  it('the asked lifetime wins over the default, counted in whole days from now', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3650 }), fc.option(fc.integer({ min: 1, max: 1e12 })), (days, ttl) => {
        expect(expiryOf(NOW, days, { defaultTtlMs: ttl })).toBe(NOW + days * DAY_MS);
      }),
    );
  });
  it('with no lifetime asked, the default lifetime from now; with no default either, no expiry', () => {
    expect(expiryOf(NOW, undefined, { defaultTtlMs: 90 * DAY_MS })).toBe(NOW + 90 * DAY_MS);
    expect(expiryOf(NOW, undefined, { defaultTtlMs: null })).toBeNull();
    expect(expiryOf(NOW, undefined, {})).toBeNull();
  });
});

describe('mayCoverEverySite', () => {
  it('only an admin token may cover every site', () => {
    expect(mayCoverEverySite('admin')).toBe(true);
    expect(mayCoverEverySite('manager')).toBe(false);
    expect(mayCoverEverySite('auditor')).toBe(false);
  });
});

describe('expiresSoon', () => {
  it('warns from seven days before the expiry on, never for a token that does not expire', () => {
    expect(expiresSoon(null, NOW)).toBe(false);
    expect(expiresSoon(NOW + WEEK + 1, NOW)).toBe(false);
    expect(expiresSoon(NOW + WEEK, NOW)).toBe(true);
    expect(expiresSoon(NOW + 1, NOW)).toBe(true);
    expect(expiresSoon(NOW - DAY_MS, NOW)).toBe(true);
  });
});

describe('tokenState', () => {
  const cases: [string, number | null, number | null, string][] = [
    ['revoked wins over expired', NOW - 1, NOW - DAY_MS, 'revoked'],
    ['revoked wins over no expiry', NOW - 1, null, 'revoked'],
    ['no expiry is active for ever', null, null, 'active'],
    ['expired at its expiry instant', null, NOW, 'expired'],
    ['expired after it', null, NOW - 1, 'expired'],
    ['expiring one ms before the expiry', null, NOW + 1, 'expiring'],
    ['expiring exactly seven days ahead', null, NOW + WEEK, 'expiring'],
    ['active beyond seven days', null, NOW + WEEK + 1, 'active'],
  ];
  it.each(cases)('%s', (_, revokedAt, expiresAt, state) => {
    expect(tokenState({ revokedAt, expiresAt }, NOW)).toBe(state);
  });
});

describe('judgeToken', () => {
  it('a live token of a known role is its principal, with its expiry', () => {
    expect(judgeToken(stored({ expiresAt: NOW + 1 }), NOW)).toEqual({
      kind: 'ok',
      principal: { tokenId: 'tok-1', name: 'front desk', role: 'manager', sites: ['site-1'] },
      expiresAt: NOW + 1,
    });
    expect(judgeToken(stored({ role: 'admin', sites: null }), NOW)).toEqual({
      kind: 'ok',
      principal: { tokenId: 'tok-1', name: 'front desk', role: 'admin', sites: null },
      expiresAt: null,
    });
  });
  it('no such token is unknown', () => {
    expect(judgeToken(undefined, NOW)).toEqual({ kind: 'unknown' });
  });
  it('a revoked token is unknown, even when it is also expired', () => {
    expect(judgeToken(stored({ revokedAt: NOW - 1 }), NOW)).toEqual({ kind: 'unknown' });
    expect(judgeToken(stored({ revokedAt: NOW - 1, expiresAt: NOW - DAY_MS }), NOW)).toEqual({ kind: 'unknown' });
  });
  it('a token of a role no longer known is unknown, not a principal', () => {
    expect(judgeToken(stored({ role: 'owner' }), NOW)).toEqual({ kind: 'unknown' });
    expect(judgeToken(stored({ role: 'owner', expiresAt: NOW - 1 }), NOW)).toEqual({ kind: 'unknown' });
  });
  it('a token is expired from its expiry instant on, and says which token and when', () => {
    expect(judgeToken(stored({ expiresAt: NOW }), NOW)).toEqual({ kind: 'expired', tokenId: 'tok-1', expiresAt: NOW });
    expect(judgeToken(stored({ expiresAt: NOW - 5 }), NOW)).toEqual({ kind: 'expired', tokenId: 'tok-1', expiresAt: NOW - 5 });
    expect(judgeToken(stored({ expiresAt: NOW + 1 }), NOW).kind).toBe('ok');
  });
});

describe('lastUseDue', () => {
  it('a use is written when never written before, or when the last write is a minute or more old', () => {
    expect(lastUseDue(null, NOW)).toBe(true);
    expect(lastUseDue(NOW - MINUTE, NOW)).toBe(true);
    expect(lastUseDue(NOW - MINUTE - 1, NOW)).toBe(true);
    expect(lastUseDue(NOW - MINUTE + 1, NOW)).toBe(false);
    expect(lastUseDue(NOW, NOW)).toBe(false);
  });
  it('a token never used is due a write on its first use whatever the clock reads (a test clock may start at 0)', () => {
    expect(lastUseDue(null, 0)).toBe(true);
    expect(lastUseDue(null, 1)).toBe(true);
  });
});

describe('rotationRefusal', () => {
  const live = { revokedAt: null, expiresAt: NOW + DAY_MS, rotatedTo: null, successorRevoked: false };
  it('a live token never rotated may rotate', () => {
    expect(rotationRefusal(live, NOW)).toBeNull();
    expect(rotationRefusal({ ...live, expiresAt: null }, NOW)).toBeNull();
  });
  it('no such token: TOKEN_NOT_FOUND', () => {
    expect(rotationRefusal(undefined, NOW)).toBe('TOKEN_NOT_FOUND');
  });
  it('a revoked token: TOKEN_REVOKED, before any other reason', () => {
    expect(rotationRefusal({ ...live, revokedAt: NOW - 1 }, NOW)).toBe('TOKEN_REVOKED');
    expect(rotationRefusal({ revokedAt: NOW - 1, expiresAt: NOW - 1, rotatedTo: 'tok-2', successorRevoked: false }, NOW)).toBe(
      'TOKEN_REVOKED',
    );
  });
  it('an expired token (from its expiry instant): TOKEN_EXPIRED, even when already rotated', () => {
    expect(rotationRefusal({ ...live, expiresAt: NOW }, NOW)).toBe('TOKEN_EXPIRED');
    expect(rotationRefusal({ ...live, expiresAt: NOW - 1, rotatedTo: 'tok-2' }, NOW)).toBe('TOKEN_EXPIRED');
    expect(rotationRefusal({ ...live, expiresAt: NOW + 1 }, NOW)).toBeNull();
  });
  it('a token with a live successor: TOKEN_ALREADY_ROTATED; a revoked successor frees it to rotate again', () => {
    expect(rotationRefusal({ ...live, rotatedTo: 'tok-2' }, NOW)).toBe('TOKEN_ALREADY_ROTATED');
    expect(rotationRefusal({ ...live, rotatedTo: 'tok-2', successorRevoked: true }, NOW)).toBeNull();
  });
});
