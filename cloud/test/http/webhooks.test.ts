import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failRow } from '../../src/adapters/outbox/fail.js';
import { WebhookDispatcher } from '../../src/adapters/webhooks/worker.js';
import { signWebhook } from '../../src/adapters/webhooks/deliver.js';
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
    new WebhookDispatcher(
      { db: h.cloud.db, secrets: h.cloud.secrets, clock: h.cloud.clock, log: testLog, random: () => 1 },
      { maxAttempts: 2, baseMs: 1000, allowPrivateNetworks: true },
    );
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
    const issued = await h.app.inject({
      method: 'POST',
      url: '/keys',
      headers: { ...bearer(h.tokens.managerA), 'x-correlation-id': `wh-${s.u}` },
      payload: issueBody(s),
    });
    const keyId = issued.json().key.id as string;
    // queued in the verb's own transaction, by trigger
    expect((await h.cloud.db.query('SELECT 1 FROM webhook_outbox WHERE endpoint_id = $1', [webhook.id])).rowCount).toBe(1);
    expect(await dispatcher().runOnce()).toBe(1);
    expect(received).toHaveLength(1);
    const got = received[0] as Received;
    const body = JSON.parse(got.body) as { id: string; type: string; cid: string; data: Record<string, unknown> };
    expect(body).toMatchObject({
      type: 'key.state_changed',
      cid: `wh-${s.u}`,
      data: { keyId, event: 'issue', to: 'issuing', code: 'KEY_ISSUED' },
    });
    expect(got.headers['tobira-event-id']).toBe(body.id);
    const sig = got.headers['tobira-signature'] as string;
    const t = Number(/t=(\d+)/.exec(sig)?.[1]);
    expect(sig).toBe(signWebhook(secret, t, got.body));
    expect(got.headers['x-correlation-id']).toBe(`wh-${s.u}`);
    const log = await h.app.inject({ method: 'GET', url: `/webhooks/${webhook.id}/deliveries`, headers: bearer(h.tokens.auditorA) });
    expect(log.json().items).toEqual([
      expect.objectContaining({ attempt: 1, statusCode: 204, error: null, code: null, eventStatus: 'delivered' }),
    ]);
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
    expect(JSON.parse(received[0]?.body ?? '{}')).toMatchObject({
      type: 'access.event',
      data: { code: 'UNKNOWN_CREDENTIAL', doorId: s.doorId },
    });
    const log = await h.app.inject({ method: 'GET', url: `/webhooks/${webhook.id}/deliveries`, headers: bearer(h.tokens.managerA) });
    expect(
      log.json().items.map((x: { attempt: number; statusCode: number; eventStatus: string }) => [x.attempt, x.statusCode, x.eventStatus]),
    ).toEqual([
      [2, 500, 'dead'],
      [1, 500, 'dead'],
    ]);
    await h.app.inject({ method: 'POST', url: `/webhooks/${webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
  });

  it("a downlink the dispatcher dead-letters raises downlink.dead_lettered for its site (the operator's alarm: that gateway is behind)", async () => {
    const s = await seedSite(h, h.siteA);
    const { webhook } = (await register(['downlink.dead_lettered'])).json() as { webhook: { id: string } };
    received.length = 0;
    answer = 204;
    const leaseToken = randomUUID();
    const now = h.cloud.clock.now();
    const row = await h.cloud.db.transaction(async (tx) => {
      const seq = (
        await tx.query<{ last_seq: number }>('UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq', [
          s.gatewayId,
        ])
      ).rows[0]?.last_seq;
      return (
        await tx.query<{ id: number }>(
          `INSERT INTO outbox (gateway_id, seq, jti, type, key_id, key_version, body, cid, status, attempts, next_attempt_at, lease_token, lease_until, created_at)
           VALUES ($1, $2, gen_random_uuid(), 'key.revoke', 'key-dl', 2, '{}', 'cid-dl', 'sending', 8, $3, $4, $3, $3) RETURNING id`,
          [s.gatewayId, seq, now, leaseToken],
        )
      ).rows[0]!;
    });
    // the dispatcher's own verb gives up on it
    expect(
      await failRow(
        h.cloud.db,
        { id: Number(row.id), leaseToken, attempts: 8 },
        'publish timed out',
        now,
        { baseMs: 100, maxMs: 1000, maxAttempts: 8 },
        0,
      ),
    ).toBe('dead');
    expect(await dispatcher().runOnce()).toBe(1);
    expect(JSON.parse(received[0]?.body ?? '{}')).toMatchObject({
      type: 'downlink.dead_lettered',
      cid: 'cid-dl',
      data: {
        gatewayId: s.gatewayId,
        seq: 1,
        type: 'key.revoke',
        keyId: 'key-dl',
        keyVersion: 2,
        attempts: 8,
        lastError: 'publish timed out',
        at: now,
      },
    });
    await h.app.inject({ method: 'POST', url: `/webhooks/${webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
  });

  it('endpoints are scoped to the token sites, a disabled endpoint gets no new events, and a bad URL is refused', async () => {
    const s = await seedSite(h, h.siteA);
    const { webhook } = (await register(['key.state_changed'])).json() as { webhook: { id: string } };
    expect(
      (await h.app.inject({ method: 'GET', url: `/webhooks/${webhook.id}/deliveries`, headers: bearer(h.tokens.managerB) })).statusCode,
    ).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: '/webhooks', headers: bearer(h.tokens.managerB) })).json().items).toEqual([]);
    expect(
      (
        await h.app.inject({
          method: 'POST',
          url: '/webhooks',
          headers: bearer(h.tokens.managerB),
          payload: { siteId: h.siteA, url, events: ['alarm'] },
        })
      ).statusCode,
    ).toBe(404);
    const off = await h.app.inject({ method: 'POST', url: `/webhooks/${webhook.id}/disable`, headers: bearer(h.tokens.managerA) });
    expect(off.json()).toEqual({ status: 'applied', code: 'MESSAGE_APPLIED' });
    const before = await count(h, 'webhook_outbox');
    await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(s) });
    expect(await count(h, 'webhook_outbox')).toBe(before);
    const bad = await h.app.inject({
      method: 'POST',
      url: '/webhooks',
      headers: bearer(h.tokens.managerA),
      payload: { siteId: h.siteA, url: 'file:///etc/passwd', events: ['alarm'] },
    });
    expect([bad.statusCode, bad.json().code]).toEqual([422, 'WEBHOOK_URL_FORBIDDEN']);
  });
});
