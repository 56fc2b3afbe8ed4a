import { describe, expect, it } from 'vitest';
import { KEY_STATUSES } from '../src/domain/key-states.js';
import { mobileTokenRefusal } from '../src/domain/mobile-tokens.js';

const NOW = Date.UTC(2026, 11, 2, 9);

describe('mobileTokenRefusal', () => {
  it.each(['issuing', 'active'] as const)('a %s mobile key whose window is still open gets a token', (status) => {
    expect(mobileTokenRefusal({ credentialType: 'mobile', status, validUntil: NOW + 1 }, NOW)).toBeNull();
  });
  it.each(KEY_STATUSES.filter((s) => s !== 'issuing' && s !== 'active'))('a %s key is not live: KEY_NOT_LIVE', (status) => {
    expect(mobileTokenRefusal({ credentialType: 'mobile', status, validUntil: NOW + 86_400_000 }, NOW)).toBe('KEY_NOT_LIVE');
  });
  it('a key whose window ends now or ended is not live', () => {
    expect(mobileTokenRefusal({ credentialType: 'mobile', status: 'active', validUntil: NOW }, NOW)).toBe('KEY_NOT_LIVE');
    expect(mobileTokenRefusal({ credentialType: 'mobile', status: 'active', validUntil: NOW - 1 }, NOW)).toBe('KEY_NOT_LIVE');
  });
  it.each(['pin', 'card', 'qr'])('a %s key never gets a mobile token, whatever its state', (credentialType) => {
    expect(mobileTokenRefusal({ credentialType, status: 'active', validUntil: NOW + 1 }, NOW)).toBe('KEY_NOT_MOBILE');
    expect(mobileTokenRefusal({ credentialType, status: 'revoked', validUntil: NOW - 1 }, NOW)).toBe('KEY_NOT_MOBILE');
  });
});
