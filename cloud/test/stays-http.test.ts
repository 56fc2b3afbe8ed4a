import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * The stay routes over HTTP with the real SDK against the local Stripe,
 * which delivers its signed webhooks to the listening app: book (202,
 * Idempotency-Key required, a repeat answers the same stay and intent),
 * pay, the webhook route (raw body, bad signature / stale / re-serialized →
 * 400 and nothing stored), the return page from the ledger in ja/en,
 * cancel, scoping and pagination.
 */
const SECRET = 'whsec_tobira_stays_http';

describe.each(pgBackends())('stay routes on %s', (backend) => {
  let h: StaysApi;
  let t: StaysApi['t'];
  let local: StaysApi['local'];
  let stripe: StaysApi['stripe'];
  let app: StaysApi['app'];
  let cloud: StaysApi['cloud'];
  let admin: string;
  let managerOther: string;
  let siteId: string;
  let roomId: string;
  let personId: string;
  let doorA: string;
  let doorB: string;
  let n = 0;

  const auth = (token: string) => ({ authorization: `Bearer ${token}` });
  const book = (key: string | undefined, over: Record<string, unknown> = {}, token = admin) => {
    n += 1;
    const start = Date.UTC(2027, 2, 1) + n * 4 * 86_400_000;
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    return app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(token), ...(key === undefined ? {} : { 'idempotency-key': key }) },
      payload: { personId, roomId, checkIn: iso(start), checkOut: iso(start + 2 * 86_400_000), amount: 30_000, currency: 'jpy', ...over },
    });
  };
  const signed = (payload: string, timestamp?: number) =>
    stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, ...(timestamp === undefined ? {} : { timestamp }) });
  const storedEvents = async () =>
    Number((await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM payment_webhook_events')).rows[0]?.n);

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'st', secret: SECRET, doors: 2 });
    ({ t, local, stripe, app, cloud, admin, managerOther, siteId, personId } = h);
    [doorA, doorB] = h.doors as [string, string];
  });
  afterAll(() => h?.close());

  describe('setting a site up for stays', () => {
    it('creates a room with its doors and sets shared doors and the hold through the API', async () => {
      const room = await app.inject({
        method: 'POST',
        url: '/rooms',
        headers: auth(admin),
        payload: { siteId, name: '201', doors: [doorA] },
      });
      expect(room.statusCode).toBe(201);
      roomId = room.json<{ id: string }>().id;
      const foreign = await app.inject({
        method: 'POST',
        url: '/rooms',
        headers: auth(admin),
        payload: { siteId, name: '202', doors: ['no-such-door'] },
      });
      expect(foreign.json()).toMatchObject({ status: 'refused', code: 'DOOR_NOT_FOUND' });
      const s = await app.inject({
        method: 'PUT',
        url: `/sites/${siteId}/stay-settings`,
        headers: auth(admin),
        payload: { sharedDoors: [doorB], holdMinutes: 20 },
      });
      expect(s.statusCode).toBe(200);
      expect(s.json()).toMatchObject({ code: 'STAY_SETTINGS_SAVED', sharedDoors: [doorB], holdMinutes: 20, currency: 'jpy' });
      const bad = await app.inject({
        method: 'PUT',
        url: `/sites/${siteId}/stay-settings`,
        headers: auth(admin),
        payload: {
          cancellationPolicy: {
            tiers: [
              { minDaysBefore: 1, refundPercent: 10 },
              { minDaysBefore: 5, refundPercent: 90 },
            ],
            noShowRefundPercent: 0,
          },
        },
      });
      expect(bad.statusCode).toBe(422);
      expect(bad.json()).toMatchObject({ code: 'INVALID_CANCELLATION_POLICY' });
    });
  });

  describe('booking', () => {
    it('needs an Idempotency-Key, answers 202 pending with the client secret, and a repeat answers the same stay and intent', async () => {
      expect((await book(undefined)).statusCode).toBe(400);
      const key = `bk-${newId()}`;
      const first = await book(key);
      expect(first.statusCode).toBe(202);
      const body = first.json<{ stay: { id: string; status: string }; payment: { clientSecret: string; intentId: string } }>();
      expect(body).toMatchObject({ status: 'applied', code: 'STAY_BOOKED', stay: { status: 'pending' } });
      expect(body.payment.clientSecret).toMatch(/^pi_.+_secret_/);
      n -= 1; // the same dates again
      const again = await book(key);
      expect(again.statusCode).toBe(200);
      expect(again.json()).toMatchObject({ status: 'noop', stay: { id: body.stay.id }, payment: { intentId: body.payment.intentId } });
      const other = await book(key, { amount: 31_000 });
      expect(other.statusCode).toBe(422);
      expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
    });

    it('takes the guest credential: the answer and the stored rows carry neither the PIN nor its digest in clear', async () => {
      const res = await book(`bk-${newId()}`, { credential: { type: 'pin', value: '31415926' } });
      expect(res.statusCode).toBe(202);
      const body = res.json<{ stay: { id: string } }>();
      expect(res.body).not.toContain('31415926');
      expect(body.stay).not.toHaveProperty('guestCredential');
      const row = await t.db.query<{ credential_type: string; credential_digest: string }>(
        'SELECT credential_type, credential_digest FROM stays WHERE id = $1',
        [body.stay.id],
      );
      expect(row.rows[0]).toMatchObject({ credential_type: 'pin', credential_digest: expect.any(String) });
      expect(res.body).not.toContain(row.rows[0]?.credential_digest);
      for (const table of ['stays', 'billing_jobs', 'idempotency_keys'])
        expect(JSON.stringify((await t.db.query(`SELECT * FROM ${table}`)).rows)).not.toContain('31415926');
      const bad = await book(`bk-${newId()}`, { credential: { type: 'pin', value: 'x' } });
      expect(bad.json()).toMatchObject({ status: 'refused', code: 'INVALID_CREDENTIAL' });
    });

    it('a night another stay holds is 409 ROOM_UNAVAILABLE', async () => {
      const a = await book(`bk-${newId()}`);
      expect(a.statusCode).toBe(202);
      n -= 1;
      const b = await book(`bk-${newId()}`);
      expect(b.statusCode).toBe(409);
      expect(b.json()).toMatchObject({ status: 'refused', code: 'ROOM_UNAVAILABLE' });
    });

    it('Stripe unreachable is 503 BILLING_UNAVAILABLE and the nights stay free', async () => {
      local.faults.unavailable = true;
      try {
        const r = await book(`bk-${newId()}`);
        expect(r.statusCode).toBe(503);
        expect(r.json()).toMatchObject({ code: 'BILLING_UNAVAILABLE' });
      } finally {
        local.faults.unavailable = false;
      }
      n -= 1;
      expect((await book(`bk-${newId()}`)).statusCode).toBe(202);
    });
  });

  describe('paying and cancelling', () => {
    it('a paid stay is confirmed from the webhook, the return page shows it paid in ja and en, cancel revokes at once', async () => {
      const r = await book(`bk-${newId()}`);
      const { stay, payment } = r.json<{ stay: { id: string }; payment: { intentId: string } }>();
      const pending = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}&lang=en` });
      expect(pending.headers['content-type']).toMatch(/text\/html/);
      expect(pending.body).toContain('data-status="pending"');

      await fetch(`${local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`);
      await local.webhooks.idle();
      expect(local.webhooks.attempts().every((a) => a.status === 200)).toBe(true);
      await cloud.runBilling();
      const got = await app.inject({ method: 'GET', url: `/stays/${stay.id}`, headers: auth(admin) });
      expect(got.json()).toMatchObject({ stay: { status: 'confirmed', keyId: `key_${stay.id}` }, payment: { status: 'succeeded' } });

      const ja = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}`, headers: { 'accept-language': 'ja,en;q=0.5' } });
      expect(ja.body).toContain('data-status="paid"');
      expect(ja.body).toContain('お支払い済み');
      const en = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}&lang=en` });
      expect(en.body).toContain('Paid.');

      const c = await app.inject({
        method: 'POST',
        url: `/stays/${stay.id}/cancel`,
        headers: { ...auth(admin), 'idempotency-key': `c-${stay.id}` },
        payload: { reason: 'guest_cancelled' },
      });
      expect(c.statusCode).toBe(202);
      expect(c.json()).toMatchObject({ code: 'STAY_CANCELLED', stay: { status: 'cancelled' }, payment: { status: 'refund_pending' } });
      const key = await app.inject({ method: 'GET', url: `/keys/key_${stay.id}`, headers: auth(admin) });
      expect(key.json()).toMatchObject({ key: { status: 'revoking', revokeReason: 'stay_cancelled' } });
      await cloud.runBilling();
      expect(local.refunds().filter((x) => x.payment_intent === payment.intentId)).toHaveLength(1);
      const after = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}&lang=en` });
      expect(after.body).toContain('data-status="cancelled"');
    });
  });

  describe('a guest blocked after paying', () => {
    it('the return page says the booking is paid but entry is on hold (ask the desk), not that a key is coming; unblocked, it says the key again', async () => {
      const r = await book(`bk-${newId()}`);
      const { stay, payment } = r.json<{ stay: { id: string }; payment: { intentId: string } }>();
      await fetch(`${local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`);
      await local.webhooks.idle();
      await cloud.runBilling();
      const blockUrl = `/sites/${siteId}/blocked-people/${personId}`;
      const block = await app.inject({ method: 'PUT', url: blockUrl, headers: auth(admin), payload: { reason: 'unpaid damage' } });
      expect(block.json()).toMatchObject({ code: 'PERSON_BLOCKED' });
      try {
        const en = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}&lang=en` });
        expect(en.body).toContain('data-status="paid_on_hold"');
        expect(en.body).not.toContain('your key will reach you');
        expect(en.body).toContain('front desk');
        const ja = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}&lang=ja` });
        expect(ja.body).toContain('data-status="paid_on_hold"');
        expect(ja.body).not.toContain('鍵はまもなくお届けします');
        // the page says nothing of why: no reason, no word "blocked"
        expect(en.body).not.toMatch(/unpaid damage|blocked/i);
      } finally {
        await app.inject({ method: 'DELETE', url: blockUrl, headers: auth(admin) });
      }
      const after = await app.inject({ method: 'GET', url: `/pay/return?stay=${stay.id}&lang=en` });
      expect(after.body).toContain('data-status="paid"');
    });
  });

  describe('the Stripe webhook route', () => {
    const event = () => {
      const id = `evt_test_${newId()}`;
      return { id, body: JSON.stringify({ id, object: 'event', type: 'customer.created', data: { object: { id: 'cus_1' } } }, null, 2) };
    };
    const post = (body: string, signature: string) =>
      app.inject({
        method: 'POST',
        url: '/webhooks/stripe',
        headers: { 'content-type': 'application/json', 'stripe-signature': signature },
        payload: body,
      });

    it('stores a verified event and answers 200; the same event again is a duplicate', async () => {
      const e = event();
      const r = await post(e.body, signed(e.body));
      expect(r.statusCode).toBe(200);
      expect(r.json()).toMatchObject({ received: true, status: 'stored', eventId: e.id });
      expect((await post(e.body, signed(e.body))).json()).toMatchObject({ status: 'duplicate' });
    });

    it('a bad signature, a stale timestamp or a re-serialized body is 400 with a code and stores nothing', async () => {
      await local.webhooks.idle(); // nothing of the earlier tests still arriving
      const before = await storedEvents();
      const e = event();
      const bad = await post(
        e.body,
        signed(e.body).replace(/v1=([0-9a-f])/, (_m, c: string) => `v1=${c === '0' ? '1' : '0'}`),
      );
      expect(bad.statusCode).toBe(400);
      expect(bad.json()).toMatchObject({ status: 'refused', code: 'WEBHOOK_SIGNATURE_INVALID' });
      const stale = await post(e.body, signed(e.body, Math.floor(cloud.clock.now() / 1000) - 400));
      expect(stale.statusCode).toBe(400);
      expect(stale.json()).toMatchObject({ code: 'WEBHOOK_TIMESTAMP_STALE' });
      const reserialized = await post(JSON.stringify(JSON.parse(e.body)), signed(e.body));
      expect(reserialized.statusCode).toBe(400);
      expect(reserialized.json()).toMatchObject({ code: 'WEBHOOK_SIGNATURE_INVALID' });
      expect((await post(e.body, '')).statusCode).toBe(400);
      expect(await storedEvents()).toBe(before);
    });
  });

  describe('listing', () => {
    it('pages with a cursor and shows a token only its own sites', async () => {
      const page1 = await app.inject({ method: 'GET', url: `/stays?siteId=${siteId}&limit=1`, headers: auth(admin) });
      const p1 = page1.json<{ items: { id: string }[]; nextCursor: string | null }>();
      expect(p1.items).toHaveLength(1);
      expect(p1.nextCursor).not.toBeNull();
      const page2 = await app.inject({
        method: 'GET',
        url: `/stays?siteId=${siteId}&limit=1&cursor=${encodeURIComponent(p1.nextCursor ?? '')}`,
        headers: auth(admin),
      });
      const p2 = page2.json<{ items: { id: string }[] }>();
      expect(p2.items[0]?.id).not.toBe(p1.items[0]?.id);
      const foreign = await app.inject({ method: 'GET', url: '/stays', headers: auth(managerOther) });
      expect(foreign.json()).toEqual({ items: [], nextCursor: null });
      const one = await app.inject({ method: 'GET', url: `/stays/${p1.items[0]?.id ?? ''}`, headers: auth(managerOther) });
      expect(one.statusCode).toBe(404);
      const theirs = await book(`bk-${newId()}`, {}, managerOther);
      expect(theirs.statusCode).toBe(404);
      expect(theirs.json()).toMatchObject({ code: 'ROOM_NOT_FOUND' });
    });
  });
});
