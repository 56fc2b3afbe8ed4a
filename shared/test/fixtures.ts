import {
  KeySet,
  ManualClock,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  type KeyGrant,
  type SigningKey,
} from '../src/index.js';

export const CLOUD = 'tobira-cloud';
export const GW = 'gw-1';

export async function signingFixture() {
  const cloudPair = await generateSigningKeyPair();
  const otherPair = await generateSigningKeyPair();
  const cloudKey: SigningKey = await importSigningKey(cloudPair.privateJwk);
  const otherKey: SigningKey = await importSigningKey(otherPair.privateJwk);
  const keys = await KeySet.fromJwks({ keys: [cloudPair.publicJwk] });
  const clock = new ManualClock(Date.UTC(2026, 10, 29, 9, 0, 0));
  return { cloudPair, otherPair, cloudKey, otherKey, keys, clock };
}

export function sampleGrant(overrides: Partial<KeyGrant> = {}): KeyGrant {
  return {
    keyId: 'key-1',
    version: 1,
    personId: 'person-1',
    credential: { type: 'pin', digest: 'A'.repeat(43) },
    doors: ['door-1'],
    validFrom: Date.UTC(2026, 10, 29),
    validUntil: Date.UTC(2026, 11, 1),
    schedule: null,
    offlineCapable: false,
    ...overrides,
  } as KeyGrant;
}

export const cid = () => newCorrelationId();
