import { describe, expect, it } from 'vitest';
import { DisplayName, KeyGrant } from '../src/index.js';

const base = {
  keyId: 'key-1',
  version: 1,
  personId: 'guest-aiko',
  credential: { type: 'pin', digest: 'a'.repeat(43) },
  doors: ['door-101'],
  validFrom: 0,
  validUntil: 1,
  schedule: null,
  offlineCapable: false,
};

describe('display names in a key grant', () => {
  it('are optional: a grant without them (from an older cloud) still parses', () => {
    expect(KeyGrant.safeParse(base).success).toBe(true);
  });

  it('carry a person name and door names, trimmed', () => {
    const g = KeyGrant.parse({ ...base, personName: '  Aiko Tanaka ', doorNames: { 'door-101': '101号室' } });
    expect(g.personName).toBe('Aiko Tanaka');
    expect(g.doorNames).toEqual({ 'door-101': '101号室' });
  });

  it('refuse an empty, over-long or control-character name, and a door id that is not one', () => {
    for (const bad of ['', '   ', 'x'.repeat(81), 'Aiko\nTanaka', 'a\u0000b'])
      expect(DisplayName.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    expect(KeyGrant.safeParse({ ...base, personName: 'Aiko\u0007' }).success).toBe(false);
    expect(KeyGrant.safeParse({ ...base, doorNames: { 'not a door id!': 'Room' } }).success).toBe(false);
    expect(KeyGrant.safeParse({ ...base, doorNames: { 'door-101': '' } }).success).toBe(false);
  });
});
