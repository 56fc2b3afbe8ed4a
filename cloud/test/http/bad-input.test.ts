import { pgBackends } from '@tobira/shared/testing';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, count, issueBody, openHarness, seedSite, snapshot, type Harness } from './harness.js';

/** Every bad request gets its status and a stable code, and nothing is written. */
describe.each(pgBackends())('admin API bad input on %s', (backend) => {
  let h: Harness;
  let s: Awaited<ReturnType<typeof seedSite>>;
  beforeAll(async () => {
    h = await openHarness(backend, { bodyLimit: 4096 });
    s = await seedSite(h, h.siteA);
  });
  afterAll(async () => {
    await h?.close();
  });

  /** Runs `send`, checks status and code, and that no table changed. */
  async function refusedWithoutWrites(send: () => Promise<LightMyRequestResponse>, status: number, code: string) {
    const before = await snapshot(h);
    const r = await send();
    expect({ status: r.statusCode, code: r.json().code }).toEqual({ status, code });
    expect(r.json().status).toMatch(/^(refused|conflict)$/);
    expect(await snapshot(h)).toEqual(before);
    return r;
  }
  const json = { 'content-type': 'application/json' };

  it('malformed JSON is 400 MALFORMED_JSON', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/keys', headers: { ...bearer(h.tokens.admin), ...json }, payload: '{"personId": "x",' }),
      400,
      'MALFORMED_JSON',
    );
  });

  it('an empty JSON body is 400 MALFORMED_JSON', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/people', headers: { ...bearer(h.tokens.admin), ...json }, payload: '' }),
      400,
      'MALFORMED_JSON',
    );
  });

  it('wrong types are 400 BAD_REQUEST naming the field', async () => {
    const r = await refusedWithoutWrites(
      () =>
        h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.admin), payload: issueBody(s, { validFrom: 'tomorrow' }) }),
      400,
      'BAD_REQUEST',
    );
    expect(r.json().detail).toContain('validFrom');
  });

  it('an unknown time zone is 400 BAD_REQUEST naming the field, and no site is made', async () => {
    const sites = await count(h, 'sites');
    const r = await h.app.inject({
      method: 'POST',
      url: '/sites',
      headers: bearer(h.tokens.admin),
      payload: { name: 'Olympus base', timeZone: 'Mars/Olympus' },
    });
    expect(r.statusCode).toBe(400);
    expect(r.json()).toMatchObject({ status: 'refused', code: 'BAD_REQUEST' });
    expect(JSON.stringify(r.json())).toContain('timeZone');
    expect(await count(h, 'sites')).toBe(sites);
  });

  it('unknown fields are 400 BAD_REQUEST (strict objects)', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.admin), payload: issueBody(s, { admin: true }) }),
      400,
      'BAD_REQUEST',
    );
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'GET', url: '/keys?sortBy=id', headers: bearer(h.tokens.admin) }),
      400,
      'BAD_REQUEST',
    );
  });

  it('a NUL character in a string (PostgreSQL text cannot hold it) is 400 BAD_REQUEST', async () => {
    await refusedWithoutWrites(
      () =>
        h.app.inject({ method: 'POST', url: '/people', headers: bearer(h.tokens.admin), payload: { name: 'Ha\u0000na', siteId: h.siteA } }),
      400,
      'BAD_REQUEST',
    );
  });

  it('an oversize body is 413 PAYLOAD_TOO_LARGE', async () => {
    await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: '/people',
          headers: bearer(h.tokens.admin),
          payload: { name: 'x'.repeat(10_000), siteId: h.siteA },
        }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
  });

  it('a body that is not JSON is 415 UNSUPPORTED_MEDIA_TYPE', async () => {
    await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: '/people',
          headers: { ...bearer(h.tokens.admin), 'content-type': 'text/plain' },
          payload: 'name=Hana',
        }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
  });

  it('a missing token is 401 UNAUTHENTICATED', async () => {
    await refusedWithoutWrites(() => h.app.inject({ method: 'POST', url: '/keys', payload: issueBody(s) }), 401, 'UNAUTHENTICATED');
    await refusedWithoutWrites(() => h.app.inject({ method: 'GET', url: '/keys' }), 401, 'UNAUTHENTICATED');
  });

  it('a bad or revoked token is 401 UNAUTHENTICATED', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/keys', headers: bearer('tbr_not-a-real-token'), payload: issueBody(s) }),
      401,
      'UNAUTHENTICATED',
    );
    const t = await h.app.inject({
      method: 'POST',
      url: '/api-tokens',
      headers: bearer(h.tokens.admin),
      payload: { name: 'temp', role: 'manager', sites: [h.siteA] },
    });
    expect(t.statusCode).toBe(201);
    expect((await h.app.inject({ method: 'GET', url: '/sites', headers: bearer(t.json().token) })).statusCode).toBe(200);
    expect(
      (await h.app.inject({ method: 'POST', url: `/api-tokens/${t.json().id}/revoke`, headers: bearer(h.tokens.admin) })).statusCode,
    ).toBe(200);
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/keys', headers: bearer(t.json().token), payload: issueBody(s) }),
      401,
      'UNAUTHENTICATED',
    );
  });

  it('a token of another site gets 404, never 403, for every row of site A', async () => {
    const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
    const keyId = issued.json().key.id as string;
    const b = h.tokens.managerB;
    for (const url of [
      `/keys/${keyId}`,
      `/keys/${keyId}/history`,
      `/sites/${h.siteA}`,
      `/gateways/${s.gatewayId}`,
      `/doors/${s.doorId}`,
      `/people/${s.personId}`,
    ]) {
      const r = await h.app.inject({ method: 'GET', url, headers: bearer(b) });
      expect([url, r.statusCode]).toEqual([url, 404]);
      expect(r.json().code).toMatch(/NOT_FOUND$/);
    }
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: `/keys/${keyId}/revoke`, headers: bearer(b), payload: { reason: 'staff_revoked' } }),
      404,
      'KEY_NOT_FOUND',
    );
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/keys', headers: bearer(b), payload: issueBody(s) }),
      404,
      'PERSON_NOT_FOUND',
    );
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/doors', headers: bearer(b), payload: { gatewayId: s.gatewayId, name: 'Side' } }),
      404,
      'GATEWAY_NOT_FOUND',
    );
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/people', headers: bearer(b), payload: { name: 'Ken', siteId: h.siteA } }),
      404,
      'SITE_NOT_FOUND',
    );
    const list = await h.app.inject({ method: 'GET', url: `/keys?siteId=${h.siteA}`, headers: bearer(b) });
    expect(list.json().items).toEqual([]);
  });

  it('an auditor writing is 403 FORBIDDEN_ROLE', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.auditorA), payload: issueBody(s) }),
      403,
      'FORBIDDEN_ROLE',
    );
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/people', headers: bearer(h.tokens.auditorA), payload: { name: 'Ken', siteId: h.siteA } }),
      403,
      'FORBIDDEN_ROLE',
    );
    expect((await h.app.inject({ method: 'GET', url: '/keys', headers: bearer(h.tokens.auditorA) })).statusCode).toBe(200);
  });

  it('a manager creating a site or a token is 403 FORBIDDEN_ROLE', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/sites', headers: bearer(h.tokens.managerA), payload: { name: 'Osaka' } }),
      403,
      'FORBIDDEN_ROLE',
    );
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/api-tokens', headers: bearer(h.tokens.managerA), payload: { name: 'x', role: 'admin' } }),
      403,
      'FORBIDDEN_ROLE',
    );
  });

  it('a stale If-Match is 412 KEY_STATE_CHANGED with the current key and its ETag', async () => {
    const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
    const keyId = issued.json().key.id as string;
    const r = await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: `/keys/${keyId}/revoke`,
          headers: { ...bearer(h.tokens.managerA), 'if-match': '"7"' },
          payload: { reason: 'staff_revoked' },
        }),
      412,
      'KEY_STATE_CHANGED',
    );
    expect(r.json()).toMatchObject({ status: 'conflict', key: { id: keyId, revision: 1, status: 'issuing' } });
    expect(r.headers.etag).toBe('"1"');
  });

  it('a malformed If-Match is 400 BAD_REQUEST', async () => {
    const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
    await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: `/keys/${issued.json().key.id}/revoke`,
          headers: { ...bearer(h.tokens.managerA), 'if-match': 'yesterday' },
          payload: { reason: 'staff_revoked' },
        }),
      400,
      'BAD_REQUEST',
    );
  });

  it('an Idempotency-Key reused with a different body is 422 IDEMPOTENCY_KEY_REUSED', async () => {
    const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `reuse-${s.u}` };
    const first = await h.app.inject({ method: 'POST', url: '/people', headers, payload: { name: 'Aki', siteId: h.siteA } });
    expect(first.statusCode).toBe(201);
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'POST', url: '/people', headers, payload: { name: 'Someone else', siteId: h.siteA } }),
      422,
      'IDEMPOTENCY_KEY_REUSED',
    );
  });

  it('a verb refusal is 422 with the verb code (a validity window that already ended)', async () => {
    await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.managerA),
          payload: issueBody(s, { validFrom: 1000, validUntil: 2000 }),
        }),
      422,
      'INVALID_VALIDITY_WINDOW',
    );
    await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: '/keys',
          headers: bearer(h.tokens.managerA),
          payload: issueBody(s, { credential: { type: 'pin', value: 'abc' } }),
        }),
      422,
      'INVALID_CREDENTIAL',
    );
  });

  it('a bad cursor, a bad X-Correlation-Id and an unknown route are refused with codes', async () => {
    await refusedWithoutWrites(
      () => h.app.inject({ method: 'GET', url: '/keys?cursor=!!!', headers: bearer(h.tokens.admin) }),
      400,
      'BAD_REQUEST',
    );
    await refusedWithoutWrites(
      () =>
        h.app.inject({
          method: 'POST',
          url: '/people',
          headers: { ...bearer(h.tokens.admin), 'x-correlation-id': 'has spaces in it' },
          payload: { name: 'A', siteId: h.siteA },
        }),
      400,
      'BAD_REQUEST',
    );
    await refusedWithoutWrites(() => h.app.inject({ method: 'GET', url: '/nope', headers: bearer(h.tokens.admin) }), 404, 'NOT_FOUND');
  });
});
