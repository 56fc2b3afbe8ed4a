import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebhookDispatcher, signWebhook } from '../../src/http/webhooks.js';
import { testLog } from '../helpers.js';
import { bearer, count, issueBody, openHarness, seedSite, type Harness } from './harness.js';

interface Received {
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

describe.each(pgBackends())('webhooks on %s', (backend) => {
  let h: Harness;
  let server: Server;
  let url: string;
  const received: Received[] = [];
  let answer = 204;
  beforeAll(async () => {
    // the receiver below is a local server: the SSRF guard must be off (webhook-egress.test.ts tests it on)
    h = await openHarness(backend, { webhookAllowPrivateNetworks: true });
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        res.statusCode = answer;
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  });
  afterAll(async () => {
    await new Promise<void>((r) => server?.close(() => r()));
    await h?.close();
  });

  const dispatcher = () =>
    new WebhookDispatcher({ db: h.cloud.db, clock: h.cloud.clock, log: testLog, random: () => 1 }, { maxAttempts: 2, baseMs: 1000, allowPrivateNetworks: true });
  const register = async (events: string[], token = h.tokens.managerA) =>
    h.app.inject({ method: 'POST', url: '/webhooks', headers: bearer(token), payload: { siteId: h.siteA, url, events } });

  it('a key state change is delivered from the outbox with an HMAC signature, the correlation id and a delivery log entry', async () => {
    const s = await seedSite(h, h.siteA);
    const reg = await register(['key.state_changed']);
    expect(reg.statusCode).toBe(201);
    const { webhook, secret } = reg.json() as { webhook: { id: string }; secret: string };
    expect(secret).toMatch(/^whsec_/);
    received.length = 0;
    answer = 204;
    const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: { ...bearer(h.tokens.managerA), 'x-correlation-id': `wh-${s.u}` }, payload: issueBody(s) });
    const keyId = issued.json().key.id as string;
    // queued in the verb's own transaction, by trigger
    expect((await h.cloud.db.query('SELECT 1 FROM webhook_outbox WHERE endpoint_id = $1', [webhook.id])).rowCount).toBe(1);
    expect(await dispatcher().runOnce()).toBe(1);
    expect(received).toHaveLength(1);
    const got = received[0] as Received;
    const body = JSON.parse(got.body) as { id: string; type: string; cid: string; data: Record<string, unknown> };
    expect(body).toMatchObject({ type: 'key.state_changed', cid: `wh-${s.u}`, data: { keyId, event: 'issue', to: 'issuing', code: 'KEY_ISSUED' } });
    expect(got.headers['tobira-event-id']).toBe(body.id);
    const sig = got.headers['tobira-signature'] as string;
    const t = Number(/t=(\d+)/.exec(sig)?.[1]);
    expect(sig).toBe(signWebhook(secret, t, got.body));
    expect(got.headers['x-correlation-id']).toBe(`wh-${s.u}`);
    const log = await h.app.inject({ method: 'GET', url: `/webhooks/${webhook.id}/deliveries`, headers: bearer(h.tokens.auditorA) });
    expect(log.json().items).toEqual([expect.objectContaining({ attempt: 1, statusCode: 204, error: null, code: null, eventStatus: 'delivered' })]);
    expect(await dispatcher().runOnce()).toBe(0);
    await h.app.inject({ method: 'POST', url: `/webhooks/${webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
  });

  it('a failing endpoint is retried with backoff and dead-lettered after the allowed attempts; every attempt is logged', async () => {
    const s = await seedSite(h, h.siteA);
    const { webhook } = (await register(['access.event'])).json() as { webhook: { id: string } };
    received.length = 0;
    answer = 500;
    await h.cloud.db.query(
      `INSERT INTO audit (event_id, gateway_id, seq, jti, lock_id, door_id, at, allowed, code, cid, received_at)
       VALUES (gen_random_uuid(), $1, 1, gen_random_uuid(), 'lock-1', $2, $3, false, 'UNKNOWN_CREDENTIAL', 'cid-a', $3)`,
      [s.gatewayId, s.doorId, h.cloud.clock.now()],
    );
    const d = dispatcher();
    expect(await d.runOnce()).toBe(1);
    expect(await d.runOnce()).toBe(0); // backing off
    h.cloud.clock.advance(1_001);
    expect(await d.runOnce()).toBe(1);
    h.cloud.clock.advance(60_000);
    expect(await d.runOnce()).toBe(0); // dead after 2 attempts
    expect(received).toHaveLength(2);
    expect(JSON.parse(received[0]?.body ?? '{}')).toMatchObject({ type: 'access.event', data: { code: 'UNKNOWN_CREDENTIAL', doorId: s.doorId } });
    const log = await h.app.inject({ method: 'GET', url: `/webhooks/${webhook.id}/deliveries`, headers: bearer(h.tokens.managerA) });
    expect(log.json().items.map((x: { attempt: number; statusCode: number; eventStatus: string }) => [x.attempt, x.statusCode, x.eventStatus])).toEqual([
      [2, 500, 'dead'],
      [1, 500, 'dead'],
    ]);
    await h.app.inject({ method: 'POST', url: `/webhooks/${webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
  });

  it('endpoints are scoped to the token sites, a disabled endpoint gets no new events, and a bad URL is refused', async () => {
    const s = await seedSite(h, h.siteA);
    const { webhook } = (await register(['key.state_changed'])).json() as { webhook: { id: string } };
    expect((await h.app.inject({ method: 'GET', url: `/webhooks/${webhook.id}/deliveries`, headers: bearer(h.tokens.managerB) })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: '/webhooks', headers: bearer(h.tokens.managerB) })).json().items).toEqual([]);
    expect((await h.app.inject({ method: 'POST', url: '/webhooks', headers: bearer(h.tokens.managerB), payload: { siteId: h.siteA, url, events: ['alarm'] } })).statusCode).toBe(404);
    const off = await h.app.inject({ method: 'POST', url: `/webhooks/${webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
    expect(off.json()).toEqual({ status: 'applied', code: 'MESSAGE_APPLIED' });
    const before = await count(h, 'webhook_outbox');
    await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
    expect(await count(h, 'webhook_outbox')).toBe(before);
    const bad = await h.app.inject({ method: 'POST', url: '/webhooks', headers: bearer(h.tokens.managerA), payload: { siteId: h.siteA, url: 'file:///etc/passwd', events: ['alarm'] } });
    expect([bad.statusCode, bad.json().code]).toEqual([422, 'WEBHOOK_URL_FORBIDDEN']);
  });
});
