import { describe, expect, it } from 'vitest';
import {
  EXPIRY_WARNING_MS,
  expiresSoon,
  expiryOf,
  judgeToken,
  lastUseDue,
  rotationRefusal,
  tokenState,
  type StoredToken,
} from '../../src/domain/tokens.js';

// The token rules alone (domain/tokens.ts): time is an argument, nothing is stored.
const NOW = 1_800_000_000_000;
const DAY = 86_400_000;
const live: StoredToken = { id: 't1', name: 'ops', role: 'manager', sites: ['s1'], expiresAt: NOW + DAY, revokedAt: null };

describe('judging a stored token', () => {
  it('a live token is its principal, with its expiry', () => {
    expect(judgeToken(live, NOW)).toEqual({
      kind: 'ok',
      principal: { tokenId: 't1', name: 'ops', role: 'manager', sites: ['s1'] },
      expiresAt: NOW + DAY,
    });
  });
  it('from its expiry on it is expired, and says when', () => {
    expect(judgeToken(live, NOW + DAY)).toEqual({ kind: 'expired', tokenId: 't1', expiresAt: NOW + DAY });
  });
  it('revoked wins over expired; an unknown token or an unknown role is unknown', () => {
    expect(judgeToken({ ...live, revokedAt: NOW - 1 }, NOW + 2 * DAY)).toEqual({ kind: 'unknown' });
    expect(judgeToken(undefined, NOW)).toEqual({ kind: 'unknown' });
    expect(judgeToken({ ...live, role: 'owner' }, NOW)).toEqual({ kind: 'unknown' });
  });
});

describe('lifetimes and states', () => {
  it('a lifetime in days wins over the default; no default means no expiry', () => {
    expect(expiryOf(NOW, 2, { defaultTtlMs: DAY })).toBe(NOW + 2 * DAY);
    expect(expiryOf(NOW, undefined, { defaultTtlMs: DAY })).toBe(NOW + DAY);
    expect(expiryOf(NOW, undefined, { defaultTtlMs: null })).toBeNull();
    expect(expiryOf(NOW, undefined, {})).toBeNull();
  });
  it('revoked > expired > expiring (within the warning window) > active', () => {
    expect(tokenState({ revokedAt: NOW, expiresAt: NOW - 1 }, NOW)).toBe('revoked');
    expect(tokenState({ revokedAt: null, expiresAt: NOW }, NOW)).toBe('expired');
    expect(tokenState({ revokedAt: null, expiresAt: NOW + EXPIRY_WARNING_MS }, NOW)).toBe('expiring');
    expect(tokenState({ revokedAt: null, expiresAt: NOW + EXPIRY_WARNING_MS + 1 }, NOW)).toBe('active');
    expect(tokenState({ revokedAt: null, expiresAt: null }, NOW)).toBe('active');
  });
  it('the expiry warning starts EXPIRY_WARNING_MS before the expiry; a token without expiry never warns', () => {
    expect(expiresSoon(NOW + EXPIRY_WARNING_MS, NOW)).toBe(true);
    expect(expiresSoon(NOW + EXPIRY_WARNING_MS + 1, NOW)).toBe(false);
    expect(expiresSoon(null, NOW)).toBe(false);
  });
  it('last use is written at most once a minute', () => {
    expect(lastUseDue(null, NOW)).toBe(true);
    expect(lastUseDue(NOW - 59_999, NOW)).toBe(false);
    expect(lastUseDue(NOW - 60_000, NOW)).toBe(true);
  });
});

describe('rotation', () => {
  const t = { revokedAt: null, expiresAt: NOW + DAY, rotatedTo: null, successorRevoked: false };
  it('a live token without a live successor may rotate', () => {
    expect(rotationRefusal(t, NOW)).toBeNull();
    expect(rotationRefusal({ ...t, rotatedTo: 't2', successorRevoked: true }, NOW)).toBeNull();
  });
  it('is refused for a missing, revoked, expired or already rotated token, in that order', () => {
    expect(rotationRefusal(undefined, NOW)).toBe('TOKEN_NOT_FOUND');
    expect(rotationRefusal({ ...t, revokedAt: NOW, expiresAt: NOW }, NOW)).toBe('TOKEN_REVOKED');
    expect(rotationRefusal({ ...t, expiresAt: NOW, rotatedTo: 't2' }, NOW)).toBe('TOKEN_EXPIRED');
    expect(rotationRefusal({ ...t, rotatedTo: 't2' }, NOW)).toBe('TOKEN_ALREADY_ROTATED');
  });
});
