import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, openHarness, seedSite, type Harness } from './harness.js';

const LOBBY = { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '08:00', end: '20:00' }] };

describe.each(pgBackends())('modes from the admin API on %s', (backend) => {
  let h: Harness;
  let a: Awaited<ReturnType<typeof seedSite>>;
  let b: Awaited<ReturnType<typeof seedSite>>;
  beforeAll(async () => {
    h = await openHarness(backend);
    a = await seedSite(h, h.siteA);
    b = await seedSite(h, h.siteB);
  });
  afterAll(async () => {
    await h.close();
  });
  const post = (url: string, token: string, payload: object) => h.app.inject({ method: 'POST', url, headers: bearer(token), payload });

  it("a site's manager locks it down: 202 pending, the request readable at its location", async () => {
    const r = await post(`/sites/${h.siteA}/mode`, h.tokens.managerA, { mode: 'lockdown', reason: 'police request' });
    expect(r.statusCode).toBe(202);
    const body = r.json<{ code: string; request: { requestId: string; status: string; requestedBy: string; gateways: unknown[] } }>();
    expect(body).toMatchObject({ status: 'applied', code: 'MODE_REQUEST_QUEUED', request: { status: 'pending', requestedBy: 'mA' } });
    expect(body.request.gateways).toMatchObject([{ gatewayId: a.gatewayId, status: 'pending' }]);
    const g = await h.app.inject({ method: 'GET', url: r.headers.location as string, headers: bearer(h.tokens.managerA) });
    expect(g.statusCode).toBe(200);
    expect(g.json()).toMatchObject({ requestId: body.request.requestId, status: 'pending', mode: 'lockdown' });
    // another site's manager does not see it
    const other = await h.app.inject({ method: 'GET', url: r.headers.location as string, headers: bearer(h.tokens.managerB) });
    expect(other.statusCode).toBe(404);
    expect(other.json()).toMatchObject({ code: 'MODE_REQUEST_NOT_FOUND' });
  });

  it("the attack from outside: a manager cannot reach another site's gateways, by site or by door, and 'every site' means only theirs", async () => {
    expect((await post(`/sites/${h.siteB}/mode`, h.tokens.managerA, { mode: 'lockdown' })).statusCode).toBe(404);
    const door = await post(`/sites/${h.siteA}/mode`, h.tokens.managerA, { passage: { doorIds: [b.doorId], schedule: LOBBY } });
    expect(door.statusCode).toBe(404);
    expect(door.json()).toMatchObject({ code: 'DOOR_NOT_FOUND' });
    // an auditor reads, never sets a mode
    const auditor = await post(`/sites/${h.siteA}/mode`, h.tokens.auditorA, { mode: 'lockdown' });
    expect(auditor.statusCode).toBe(403);
    expect(auditor.json()).toMatchObject({ code: 'FORBIDDEN_ROLE' });
    const every = await post('/modes', h.tokens.managerA, { mode: 'lockdown' });
    expect(every.statusCode).toBe(202);
    const gws = every.json<{ request: { gateways: { gatewayId: string }[] } }>().request.gateways.map((g) => g.gatewayId);
    expect(gws).toContain(a.gatewayId);
    expect(gws).not.toContain(b.gatewayId);
  });

  it('refuses an empty or malformed request before anything is queued', async () => {
    const empty = await post(`/sites/${h.siteA}/mode`, h.tokens.admin, {});
    expect(empty.statusCode).toBe(422);
    expect(empty.json()).toMatchObject({ status: 'refused', code: 'MODE_REQUEST_EMPTY' });
    expect((await post(`/sites/${h.siteA}/mode`, h.tokens.admin, { mode: 'panic' })).statusCode).toBe(400);
    expect(
      (await post(`/sites/${h.siteA}/mode`, h.tokens.admin, { passage: { schedule: { timeZone: 'Mars/Olympus', windows: [] } } }))
        .statusCode,
    ).toBe(400);
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/openapi.json' })).json<{ paths: Record<string, unknown> }>();
    for (const p of ['/sites/{siteId}/mode', '/modes', '/mode-requests/{requestId}', '/sites/{siteId}/mode-requests'])
      expect(Object.keys(doc.paths)).toContain(p);
  });
});
