import { randomBytes } from 'node:crypto';
import { startAdminApi, type AdminApi } from '@tobira/cloud';
import { newId } from '@tobira/shared';
import { startStripeLocal, type StripeLocal } from '@tobira/stripe-local';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, waitFor } from './system.js';

/**
 * Issue #12's "done when", end to end: the cloud (PGlite or PostgreSQL) with
 * the real `stripe` SDK against the local Stripe, the admin API receiving the
 * webhooks the local Stripe signs, a real broker, a gateway and the
 * firmware-sim locks. Book with a guest PIN → pay with a test card → the
 * signed webhook (never the browser) confirms the stay and issues its key →
 * the PIN opens the room and the lobby at the sim → cancel → the PIN is
 * denied at the sim and exactly one refund exists, in the local Stripe and in
 * the ledger. And a booking that is never paid expires after its hold and
 * releases the room.
 */
const SECRET = `whsec_${randomBytes(18).toString('base64url')}`;
const DAY = 86_400_000;

/**
 * A site zone where it is daytime now (06:00-18:00), so "today" at the site
 * does not end during the test: Tokyo, London and Los Angeles are at most 9
 * hours apart around the clock, so one of them always is.
 */
function daytimeZone(now: number): string {
  const hour = (tz: string) => Number(new Intl.DateTimeFormat('en-GB', { timeZone: tz, hour: '2-digit', hourCycle: 'h23' }).format(now));
  const zone = ['Asia/Tokyo', 'Europe/London', 'America/Los_Angeles'].find((tz) => hour(tz) >= 6 && hour(tz) < 18);
  if (zone === undefined) throw new Error('no daytime zone');
  return zone;
}

/** The site's calendar date `days` after the one `now` falls on. */
const siteDate = (now: number, tz: string, days = 0): string => {
  const today = new Intl.DateTimeFormat('en-CA', { timeZone: tz }).format(now);
  return new Date(Date.parse(`${today}T00:00:00Z`) + days * DAY).toISOString().slice(0, 10);
};

interface StayAnswer {
  status: string;
  code: string;
  stay: { id: string; status: string; keyId: string | null };
  payment: { id: string; intentId: string; status: string } | null;
}

describe.each(backends())('a stay paid through the local Stripe, end to end (%s)', (backend) => {
  const zone = daytimeZone(Date.now());
  const guestPin = String(10_000_000 + Math.floor(Math.random() * 89_999_999));
  let local: StripeLocal;
  let sys: System;
  let api: AdminApi;
  let roomId: string;
  const token = `tbr_${randomBytes(32).toString('base64url')}`;

  const call = async <T>(method: string, path: string, body?: unknown): Promise<{ status: number; json: T }> => {
    const r = await fetch(`${api.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(method === 'GET' ? {} : { 'idempotency-key': `e2e-${newId()}` }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: r.status, json: (await r.json()) as T };
  };
  const settings = (body: Record<string, unknown>) => call('PUT', `/sites/${sys.siteId}/stay-settings`, body);
  const book = (checkIn: string, checkOut: string, extra: Record<string, unknown> = {}) =>
    call<StayAnswer>('POST', '/stays', { personId: sys.personId, roomId, checkIn, checkOut, amount: 36_000, currency: 'jpy', ...extra });
  const stay = async (id: string) => (await call<StayAnswer>('GET', `/stays/${id}`)).json;
  const present = (lockId: string, value: string) => sys.fleet.lock(lockId).present({ type: 'pin', value }, { timeoutMs: 10_000 });

  beforeAll(async () => {
    local = await startStripeLocal({ seed: `e2e${backend}${Date.now().toString(36)}` });
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
    // room 101 is L1's door; the lobby (L2) opens for every stay
    const room = await call<{ id: string }>('POST', '/rooms', { siteId: sys.siteId, name: '101', doors: [sys.doors.L1] });
    expect(room.status).toBe(201);
    roomId = room.json.id;
    expect((await settings({ sharedDoors: [sys.doors.L2] })).status).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
    await sys?.stop();
    await local?.close();
  });

  it('book with a PIN → pay → the webhook confirms and issues the key → the PIN opens the room → cancel → the PIN is denied and one refund is made', async () => {
    // the stay covers now: check-in today from midnight at the site (its check-in time), two nights
    expect(
      (
        await settings({
          checkInTime: '00:00',
          cancellationPolicy: { tiers: [{ minDaysBefore: 0, refundPercent: 100 }], noShowRefundPercent: 0 },
        })
      ).status,
    ).toBe(200);
    const now = sys.clock.now();
    const booked = await book(siteDate(now, zone), siteDate(now, zone, 2), { credential: { type: 'pin', value: guestPin } });
    expect(booked.status).toBe(202);
    expect(booked.json).toMatchObject({ code: 'STAY_BOOKED', stay: { status: 'pending', keyId: null } });
    const stayId = booked.json.stay.id;
    const intentId = booked.json.payment?.intentId ?? '';
    expect(JSON.stringify(booked.json)).not.toContain(guestPin);

    // nothing opens before the money is in: the booking alone issues no key
    expect((await present('L1', guestPin)).decision).toMatchObject({ allowed: false, code: 'UNKNOWN_CREDENTIAL' });

    // the guest pays with a test card; the local Stripe delivers the signed webhook, the worker settles on it
    const paid = await fetch(`${local.url}/_local/pay/${intentId}?card=pm_card_visa`);
    expect(await paid.json()).toMatchObject({ id: intentId, status: 'succeeded' });
    await waitFor(async () => (await stay(stayId)).stay.status === 'confirmed', 'the stay confirmed by the webhook');
    const confirmed = await stay(stayId);
    expect(confirmed).toMatchObject({ stay: { keyId: `key_${stayId}` }, payment: { status: 'succeeded' } });
    expect(local.webhooks.attempts().filter((a) => a.status === 200).length).toBeGreaterThan(0);
    await sys.waitKeyStatus(`key_${stayId}`, 'active');

    // the booked PIN opens the room and the lobby at the sim locks
    const room = await present('L1', guestPin);
    expect(room.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
    expect(room.command).toMatchObject({ result: 'executed', bolt: 'unlocked' });
    expect((await present('L2', guestPin)).decision).toMatchObject({ allowed: true, code: 'ALLOWED' });

    // The policy counts whole days before check-in (tiers never below 0), so a stay already under way refunds
    // nothing to a guest who cancels. The site moves its check-in time to late tonight, which puts the
    // cancellation 0 days before check-in: the 100 % tier. (The key keeps the window it was issued with.)
    expect((await settings({ checkInTime: '23:59' })).status).toBe(200);
    const cancelled = await call<StayAnswer>('POST', `/stays/${stayId}/cancel`, { reason: 'guest_cancelled' });
    expect(cancelled.status).toBe(202);
    expect(cancelled.json).toMatchObject({ status: 'applied', code: 'STAY_CANCELLED', stay: { status: 'cancelled' } });

    // revoking never waits on billing: the gateway gets the revoke and the PIN is denied at the sim
    await sys.waitKeyStatus(`key_${stayId}`, 'revoked');
    await waitFor(() => sys.fleet.lock('L1').bolt === 'locked', 'room 101 to relock after the earlier opening');
    const denied = await present('L1', guestPin);
    expect(denied.decision).toMatchObject({ allowed: false, code: 'KEY_REVOKED' });
    expect(denied.command).toBeNull();
    expect(denied.bolt).toBe('locked');
    expect((await present('L2', guestPin)).decision).toMatchObject({ allowed: false });

    // exactly one refund, in the local Stripe and in the ledger, however often the worker and the webhooks run again
    await waitFor(async () => (await stay(stayId)).payment?.status === 'refunded', 'the refund recorded');
    await local.webhooks.idle();
    await sys.cloud.runBilling();
    await sys.cloud.runBilling();
    const refunds = local.refunds().filter((r) => r.payment_intent === intentId);
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ amount: 36_000, status: 'succeeded' });
    const ledger = await call<{ items: { refunds: { status: string; amount: number; stripeRefundId: string | null }[] }[] }>(
      'GET',
      `/stays/${stayId}/payments`,
    );
    const ours = ledger.json.items.flatMap((p) => p.refunds);
    expect(ours).toHaveLength(1);
    expect(ours[0]).toMatchObject({ status: 'succeeded', amount: 36_000, stripeRefundId: refunds[0]?.id });
    expect(await stay(stayId)).toMatchObject({ stay: { status: 'cancelled' }, payment: { status: 'refunded' } });
  });

  it('a booking never paid is expired after its hold, its intent cancelled, and the same nights can be booked again', async () => {
    expect((await settings({ holdMinutes: 1 })).status).toBe(200);
    const now = sys.clock.now();
    const [checkIn, checkOut] = [siteDate(now, zone, 20), siteDate(now, zone, 22)];
    const first = await book(checkIn, checkOut);
    expect(first.status).toBe(202);
    const stayId = first.json.stay.id;
    expect((await book(checkIn, checkOut)).json).toMatchObject({ code: 'ROOM_UNAVAILABLE' });

    sys.clock.advance(61_000); // past the one-minute hold (the worker's hold sweep reads the same clock)
    await sys.cloud.runBilling();
    await waitFor(async () => (await stay(stayId)).stay.status === 'expired', 'the hold to expire');
    const intentId = first.json.payment?.intentId ?? '';
    await waitFor(async () => {
      await sys.cloud.runBilling();
      return local.paymentIntent(intentId)?.status === 'canceled';
    }, 'the unpaid intent cancelled at the local Stripe');

    const again = await book(checkIn, checkOut);
    expect(again.status).toBe(202);
    expect(again.json).toMatchObject({ code: 'STAY_BOOKED', stay: { status: 'pending' } });
    expect(again.json.stay.id).not.toBe(stayId);
  });
});
