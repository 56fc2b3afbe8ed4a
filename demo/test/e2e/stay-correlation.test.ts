import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { startAdminApi, type AdminApi } from '@tobira/cloud';
import { newId } from '@tobira/shared';
import { startStripeLocal, type StripeLocal } from '@tobira/stripe-local';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, waitFor } from './system.js';

/**
 * One correlation id from the booking request to the door: the
 * `X-Correlation-Id` of `POST /stays` must be the cid of what the Stripe
 * webhook later sets off — the stay's confirmation, its key, the signed
 * grant the gateway stores, and the door decisions the key produces, at the
 * gateway and in the cloud's audit log — even though the webhook arrives as
 * a request of its own (Stripe's, with a new id) and is settled by the
 * billing worker. Real cloud (PGlite or PostgreSQL), the real SDK against
 * the local Stripe delivering signed webhooks to the admin API, a real
 * broker, a gateway and the firmware-sim locks.
 */
const SECRET = `whsec_${randomBytes(18).toString('base64url')}`;
const DAY = 86_400_000;

function daytimeZone(now: number): string {
  const hour = (tz: string) => Number(new Intl.DateTimeFormat('en-GB', { timeZone: tz, hour: '2-digit', hourCycle: 'h23' }).format(now));
  const zone = ['Asia/Tokyo', 'Europe/London', 'America/Los_Angeles'].find((tz) => hour(tz) >= 6 && hour(tz) < 18);
  if (zone === undefined) throw new Error('no daytime zone');
  return zone;
}
const siteDate = (now: number, tz: string, days = 0): string => {
  const today = new Intl.DateTimeFormat('en-CA', { timeZone: tz }).format(now);
  return new Date(Date.parse(`${today}T00:00:00Z`) + days * DAY).toISOString().slice(0, 10);
};

describe.each(backends())('the booking correlation id through the webhook to the door (%s)', (backend) => {
  const zone = daytimeZone(Date.now());
  const guestPin = String(10_000_000 + Math.floor(Math.random() * 89_999_999));
  let local: StripeLocal;
  let sys: System;
  let api: AdminApi;
  let roomId: string;
  const token = `tbr_${randomBytes(32).toString('base64url')}`;

  const call = async <T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const r = await fetch(`${api.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(method === 'GET' ? {} : { 'idempotency-key': `e2e-${newId()}` }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: r.status, cid: r.headers.get('x-correlation-id'), json: (await r.json()) as T };
  };

  beforeAll(async () => {
    local = await startStripeLocal({ seed: `cid${backend}${Date.now().toString(36)}` });
    sys = await new System(backend, {
      timeZone: zone,
      cloudEnv: {
        STRIPE_SECRET_KEY: local.secretKey,
        STRIPE_WEBHOOK_SECRET: SECRET,
        STRIPE_API_HOST: local.host,
        STRIPE_API_PORT: String(local.port),
        STRIPE_API_PROTOCOL: 'http',
      },
    }).start();
    api = await startAdminApi({
      cloud: sys.cloud,
      db: sys.cloud.db,
      log: sys.log.child({ part: 'api' }),
      clock: sys.clock,
      port: 0,
      bootstrapAdminToken: token,
      webhooks: false,
    });
    local.webhooks.add({ url: `${api.url}/webhooks/stripe`, secret: SECRET });
    const room = await call<{ id: string }>('POST', '/rooms', { siteId: sys.siteId, name: '101', doors: [sys.doors.L1] });
    expect(room.status).toBe(201);
    roomId = room.json.id;
    expect((await call('PUT', `/sites/${sys.siteId}/stay-settings`, { checkInTime: '00:00' })).status).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
    await sys?.stop();
    await local?.close();
  });

  it('booking → Stripe webhook → confirmation → key grant → gateway → door decision → audit row, all under the booking id', async () => {
    const cid = `booking-${newId()}`;
    const now = sys.clock.now();
    const booked = await call<{ stay: { id: string }; payment: { intentId: string } }>(
      'POST',
      '/stays',
      {
        personId: sys.personId,
        roomId,
        checkIn: siteDate(now, zone),
        checkOut: siteDate(now, zone, 2),
        amount: 24_000,
        currency: 'jpy',
        credential: { type: 'pin', value: guestPin },
      },
      { 'x-correlation-id': cid },
    );
    expect(booked.status).toBe(202);
    expect(booked.cid).toBe(cid);
    const stayId = booked.json.stay.id;
    const keyId = `key_${stayId}`;

    // the guest pays; Stripe's signed webhook is a request of its own, with an id of its own
    await fetch(`${local.url}/_local/pay/${booked.json.payment.intentId}?card=pm_card_visa`);
    await sys.waitKeyStatus(keyId, 'active');
    const events = await sys.cloud.db.query<{ cid: string }>(
      "SELECT cid FROM payment_webhook_events WHERE type = 'payment_intent.succeeded' AND object_id = $1",
      [booked.json.payment.intentId],
    );
    expect(events.rows.length).toBeGreaterThan(0);
    expect(events.rows.map((r) => r.cid)).not.toContain(cid);

    // the confirmation and the key it issued
    const stay = await sys.cloud.db.query<{ status: string; cid: string }>('SELECT status, cid FROM stays WHERE id = $1', [stayId]);
    expect(stay.rows[0]?.status).toBe('confirmed');
    const history = await sys.cloud.listKeyHistory(keyId);
    expect(history.length).toBeGreaterThan(0);
    for (const h of history) expect(h.cid, JSON.stringify(h)).toBe(cid);
    expect((await sys.cloud.getKey(keyId))?.cid).toBe(cid);
    // the signed grant as the cloud queued it and as the gateway stored it
    const deliveries = await sys.cloud.listKeyDeliveries(keyId);
    expect(deliveries.length).toBeGreaterThan(0);
    for (const d of deliveries) expect(d.cid).toBe(cid);
    const gw = new Database(join(sys.dir, 'gateway.sqlite'), { readonly: true, fileMustExist: true });
    try {
      expect(gw.prepare('SELECT grant_cid FROM keys WHERE key_id = ?').get(keyId)).toEqual({ grant_cid: cid });
    } finally {
      gw.close();
    }

    // the door decision at the sim lock, at the gateway and in the cloud's audit log
    const opened = await sys.fleet.lock('L1').present({ type: 'pin', value: guestPin }, { timeoutMs: 10_000 });
    expect(opened.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
    const gw2 = new Database(join(sys.dir, 'gateway.sqlite'), { readonly: true, fileMustExist: true });
    try {
      expect(gw2.prepare('SELECT cid FROM access_log WHERE key_id = ?').all(keyId)).toEqual([{ cid }]);
    } finally {
      gw2.close();
    }
    const [entry] = await waitFor(async () => {
      const rows = await sys.cloud.listAudit({ gatewayId: sys.gatewayId, keyId });
      return rows.length > 0 && rows;
    }, 'the access event in the cloud audit log');
    expect(entry).toMatchObject({ allowed: true, code: 'ALLOWED', keyId, lockId: 'L1', cid });
  });
});
