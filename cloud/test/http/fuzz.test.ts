import fc from 'fast-check';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, issueBody, openHarness, seedSite, snapshot, type Harness } from './harness.js';

/** A malformed HTTP body never crashes the API or gets a 5xx; a 400 writes nothing. */
describe.each(pgBackends())('admin API fuzzed bodies on %s', (backend) => {
  let h: Harness;
  let s: Awaited<ReturnType<typeof seedSite>>;
  beforeAll(async () => {
    h = await openHarness(backend);
    s = await seedSite(h, h.siteA);
  });
  afterAll(async () => {
    await h?.close();
  });

  const routes = () => ['/keys', '/people', '/doors', '/gateways', '/sites', '/webhooks', `/keys/key-x/revoke`];

  it('random JSON values and raw bytes on every POST route answer 4xx with a code, never 5xx; a 400 writes nothing', async () => {
    const body = fc.oneof(
      fc.jsonValue().map((v) => JSON.stringify(v)),
      // near misses of a valid key issue: one field replaced by a random value
      fc
        .record({
          field: fc.constantFrom(
            'personId',
            'doors',
            'credential',
            'validFrom',
            'validUntil',
            'schedule',
            'offlineCapable',
            'offlineMaxSeconds',
            'extra',
          ),
          value: fc.jsonValue(),
        })
        .map(({ field, value }) => JSON.stringify({ ...issueBody(s), [field]: value })),
      fc.string({ maxLength: 200 }),
      fc
        .string({ maxLength: 20 })
        .map((x) => JSON.stringify({ name: `${x}\u0000`, siteId: h.siteA, gatewayId: s.gatewayId, reason: 'staff_revoked' })),
      fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b).toString('latin1')),
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes()), body, async (url, payload) => {
        const before = await snapshot(h);
        const r = await h.app.inject({
          method: 'POST',
          url,
          headers: { ...bearer(h.tokens.managerA), 'content-type': 'application/json' },
          payload,
        });
        expect(r.statusCode).toBeLessThan(500);
        const json = r.json() as { status?: string; code?: string };
        if (r.statusCode >= 400) {
          expect(json.code).toMatch(/^[A-Z_]+$/);
          if (r.statusCode === 400) expect(await snapshot(h)).toEqual(before);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('random query strings on list routes answer 200 or 400 with a code', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/keys', '/access-events', '/dead-letters', '/people', '/doors', '/gateways', '/webhooks'),
        fc.dictionary(
          fc.constantFrom('siteId', 'personId', 'status', 'cursor', 'limit', 'from', 'to', 'code', 'x'),
          fc.oneof(fc.string({ maxLength: 40 }), fc.constant('a\u0000b'), fc.constant(Buffer.from('[1,"a\u0000"]').toString('base64url'))),
        ),
        async (path, q) => {
          const r = await h.app.inject({ method: 'GET', url: path, query: q, headers: bearer(h.tokens.managerA) });
          expect([r.statusCode, r.body]).toEqual([expect.toBeOneOf([200, 400]), expect.any(String)]);
          if (r.statusCode === 400) expect(r.json().code).toBe('BAD_REQUEST');
        },
      ),
      { numRuns: 150 },
    );
  });
});
