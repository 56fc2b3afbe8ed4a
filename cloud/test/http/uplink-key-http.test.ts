import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, openHarness, seedSite, type Harness } from './harness.js';

describe.each(pgBackends())('POST /gateways/{id}/uplink-key/rotate on %s', (backend) => {
  let h: Harness;
  let a: Awaited<ReturnType<typeof seedSite>>;
  beforeAll(async () => {
    h = await openHarness(backend);
    a = await seedSite(h, h.siteA);
  });
  afterAll(async () => {
    await h.close();
  });
  const rotate = (gatewayId: string, token: string, headers: Record<string, string> = {}) =>
    h.app.inject({ method: 'POST', url: `/gateways/${gatewayId}/uplink-key/rotate`, headers: { ...bearer(token), ...headers } });
  const outboxRows = async () =>
    (
      await h.cloud.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM outbox WHERE gateway_id = $1 AND type = 'uplink_key.rotate'`, [
        a.gatewayId,
      ])
    ).rows[0]?.n;

  it("refuses another site's manager (404) and an auditor (403), and queues nothing for them", async () => {
    expect((await rotate(a.gatewayId, h.tokens.managerB)).statusCode).toBe(404);
    expect((await rotate(a.gatewayId, h.tokens.auditorA)).statusCode).toBe(403);
    expect(await outboxRows()).toBe(0);
  });

  it("the site's manager rotates: 202 requested; again while open: 409 with the open rotation; the same Idempotency-Key replays the 202", async () => {
    const first = await rotate(a.gatewayId, h.tokens.managerA, { 'idempotency-key': 'rot-1' });
    expect(first.statusCode).toBe(202);
    const body = first.json<{ rotation: { rotationId: string } }>();
    expect(body).toMatchObject({
      status: 'applied',
      code: 'UPLINK_KEY_ROTATION_REQUESTED',
      rotation: { status: 'requested', requestedBy: 'mA' },
    });
    const replay = await rotate(a.gatewayId, h.tokens.managerA, { 'idempotency-key': 'rot-1' });
    expect(replay.statusCode).toBe(202);
    expect(replay.json()).toEqual(first.json());
    const again = await rotate(a.gatewayId, h.tokens.managerA);
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ code: 'UPLINK_KEY_ROTATION_IN_PROGRESS', rotation: { rotationId: body.rotation.rotationId } });
    expect(await outboxRows()).toBe(1);
    const list = await h.app.inject({
      method: 'GET',
      url: `/gateways/${a.gatewayId}/uplink-key/rotations`,
      headers: bearer(h.tokens.auditorA),
    });
    expect(list.json()).toMatchObject({ items: [{ rotationId: body.rotation.rotationId, status: 'requested' }] });
    const hidden = await h.app.inject({
      method: 'GET',
      url: `/gateways/${a.gatewayId}/uplink-key/rotations`,
      headers: bearer(h.tokens.managerB),
    });
    expect(hidden.statusCode).toBe(404);
  });
});
