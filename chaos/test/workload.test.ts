import { describe, expect, it } from 'vitest';
import { revokedToPresent } from '../workload.js';

describe('the workload', () => {
  it('presents every revoked key the cloud has not shown acknowledged, however many and however old', () => {
    const keys = Array.from({ length: 6 }, (_, n) => ({ keyId: `k${n}`, revoked: n !== 5 }));
    const status = new Map([
      ['k0', 'revoking'],
      ['k1', 'revoked'],
    ]);
    expect(revokedToPresent(keys, status).map((k) => k.keyId)).toEqual(['k0', 'k2', 'k3', 'k4']);
  });
});
