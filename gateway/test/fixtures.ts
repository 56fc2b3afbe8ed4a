import { asDoorId, asKeyId, asLockId, asPersonId, type KeyGrant } from '@tobira/shared';

export const T0 = Date.UTC(2026, 10, 30, 3, 0, 0); // Monday 2026-11-30 12:00 in Asia/Tokyo

export function grant(overrides: Partial<KeyGrant> = {}): KeyGrant {
  return {
    keyId: asKeyId('key-1'),
    version: 1,
    personId: asPersonId('person-1'),
    credential: { type: 'pin', digest: 'A'.repeat(43) },
    doors: [asDoorId('door-1')],
    validFrom: T0 - 86_400_000,
    validUntil: T0 + 86_400_000,
    schedule: null,
    offlineCapable: false,
    ...overrides,
  };
}

export const LOCK = asLockId('lock-1');
export const DOOR = asDoorId('door-1');
