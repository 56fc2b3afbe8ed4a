import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../src/adapters/db/tokens.js';
import { T0 } from './helpers.js';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * Stays for operators: the stay and payment
 * webhooks, raised once per status change by the triggers of migration
 * 0017 and never on a noop; the check-in route (outcomes, idempotency,
 * roles and site scope).
 */
const SECRET = 'whsec_tobira_stay_ops';
const EVENTS = [
  'stay.confirmed',
  'stay.cancelled',
  'stay.expired',
  'stay.failed',
  'stay.checked_out',
  'payment.succeeded',
  'payment.refunded',
] as const;

describe.each(pgBackends())('stay operations on %s', (backend) => {
  let h: StaysApi;
  let t: StaysApi['t'];
  let local: StaysApi['local'];
  let cloud: StaysApi['cloud'];
  let app: StaysApi['app'];
  let admin: string;
  let auditor: string;
  let managerOther: string;
  let siteId: string;
  let roomId: string;
  let personId: string;
  let n = 0;

  const auth = (token: string) => ({ authorization: `Bearer ${token}` });
  const firstNight = (k: number) => Date.UTC(2027, 2, 1) + k * 4 * 86_400_000;
  const book = async () => {
    n += 1;
    const start = firstNight(n);
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    const r = await app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(admin), 'idempotency-key': `bk-${newId()}` },
      payload: { personId, roomId, checkIn: iso(start), checkOut: iso(start + 2 * 86_400_000), amount: 30_000, currency: 'jpy' },
    });
    expect(r.statusCode).toBe(202);
    return { ...r.json<{ stay: { id: string }; payment: { id: string; intentId: string } }>(), start };
  };
  const pay = async (intentId: string) => {
    await fetch(`${local.url}/_local/pay/${intentId}?card=pm_card_visa`);
    await local.webhooks.idle();
    await cloud.runBilling();
  };
  /** The webhook rows queued for a subject (a stay or payment id), by type. */
  const hooks = async (subject: string) =>
    (
      await t.db.query<{ type: string; body: Record<string, unknown>; cid: string | null }>(
        "SELECT type, body, cid FROM webhook_outbox WHERE body->>'stayId' = $1 OR body->>'paymentId' = $1 ORDER BY id",
        [subject],
      )
    ).rows;
  const post = (url: string, token = admin, key = `k-${newId()}`, payload?: Record<string, unknown>) =>
    app.inject({ method: 'POST', url, headers: { ...auth(token), 'idempotency-key': key }, ...(payload ? { payload } : {}) });

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'so', secret: SECRET });
    ({ t, local, cloud, app, admin, managerOther, siteId, personId } = h);
    const { u } = h;
    auditor = (await createApiToken(cloud.db, { name: 'aud', role: 'auditor', sites: [siteId] }, T0)).token;
    const doorId = h.doors[0] as string;
    const room = await app.inject({
      method: 'POST',
      url: '/rooms',
      headers: auth(admin),
      payload: { siteId, name: '301', doors: [doorId] },
    });
    expect(room.statusCode).toBe(201);
    roomId = room.json<{ id: string }>().id;
    // written directly: the API refuses an address that does not resolve, and nothing is delivered here (only queued)
    await t.db.query(
      "INSERT INTO webhook_endpoints (id, site_id, url, secret, events, created_at) VALUES ($1, $2, 'https://hooks.example.invalid/t', 's', $3, $4)",
      [`wh-${u}`, siteId, [...EVENTS], T0],
    );
  });
  afterAll(() => h?.close());

  it('an endpoint may subscribe to the stay and payment events, and an unknown one is refused', async () => {
    const bad = await post('/webhooks', admin, undefined, { siteId, url: 'https://hooks.example.invalid/x', events: ['stay.booked'] });
    expect(bad.statusCode).toBe(400);
  });

  it('cancel raises stay.cancelled, the refund payment.refunded, each once', async () => {
    const { stay, payment } = await book();
    await pay(payment.intentId);
    const c = await post(`/stays/${stay.id}/cancel`, admin, undefined, { reason: 'guest_cancelled' });
    expect(c.statusCode).toBe(202);
    expect((await post(`/stays/${stay.id}/cancel`, admin, undefined, { reason: 'guest_cancelled' })).json()).toMatchObject({
      status: 'noop',
    });
    await cloud.runBilling();
    await local.webhooks.idle();
    await cloud.runBilling();
    await cloud.runBilling();
    const got = await hooks(stay.id);
    expect(got.filter((h) => h.type === 'stay.cancelled')).toHaveLength(1);
    expect(got.filter((h) => h.type === 'payment.refunded')).toHaveLength(1);
    expect(got.find((h) => h.type === 'stay.cancelled')?.body).toMatchObject({ cancelReason: 'guest_cancelled', code: 'STAY_CANCELLED' });
    expect(got.find((h) => h.type === 'payment.refunded')?.body).toMatchObject({
      paymentId: payment.id,
      siteId,
      amountRefunded: 30_000,
      status: 'refunded',
      from: 'refund_pending',
    });

    const ledger = await app.inject({ method: 'GET', url: `/stays/${stay.id}/payments`, headers: auth(auditor) });
    expect(ledger.statusCode).toBe(200);
    expect(ledger.json()).toMatchObject({
      items: [{ id: payment.id, status: 'refunded', amountRefunded: 30_000, refunds: [{ amount: 30_000, status: 'succeeded' }] }],
    });
    expect(ledger.json<{ items: { refunds: Record<string, unknown>[] }[] }>().items[0]?.refunds[0]).not.toHaveProperty('idempotencyKey');
    expect((await app.inject({ method: 'GET', url: `/stays/${stay.id}/payments`, headers: auth(managerOther) })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/stays/no-such-stay/payments', headers: auth(admin) })).statusCode).toBe(404);
  });

  it('a no-show before check-in time is refused NO_SHOW_BEFORE_CHECK_IN (the policy would keep the money of a guest who may still come); after it, the no-show cancels', async () => {
    const { stay, payment, start } = await book();
    await pay(payment.intentId);
    const early = await post(`/stays/${stay.id}/cancel`, admin, `ns-${stay.id}`, { reason: 'no_show' });
    expect(early.statusCode).toBe(422);
    expect(early.json()).toMatchObject({ status: 'refused', code: 'NO_SHOW_BEFORE_CHECK_IN' });
    const kept = await app.inject({ method: 'GET', url: `/stays/${stay.id}`, headers: auth(admin) });
    expect(kept.json()).toMatchObject({ stay: { status: 'confirmed' }, payment: { status: 'succeeded' } });
    expect(await hooks(stay.id)).not.toContainEqual(expect.objectContaining({ type: 'stay.cancelled' }));
    // past the site's check-in time on the check-in day (then back: the local Stripe signs its webhooks in real time)
    const was = cloud.clock.now();
    cloud.clock.set(start + 16 * 3_600_000);
    try {
      const late = await post(`/stays/${stay.id}/cancel`, admin, `ns2-${stay.id}`, { reason: 'no_show' });
      expect(late.statusCode).toBe(202);
      expect(late.json()).toMatchObject({ code: 'STAY_CANCELLED', stay: { status: 'cancelled', cancelReason: 'no_show' } });
    } finally {
      cloud.clock.set(was);
    }
  });

  it('confirm, check in, check out: each webhook once per transition with the ids, site, status, code and cid; noops raise none', async () => {
    const { stay, payment, start } = await book();
    expect(await hooks(stay.id)).toEqual([]);
    await pay(payment.intentId);
    await cloud.runBilling();
    const confirmed = await hooks(stay.id);
    expect(confirmed.map((h) => h.type)).toEqual(['payment.succeeded', 'stay.confirmed']);
    expect(confirmed[0]?.body).toMatchObject({
      paymentId: payment.id,
      stayId: stay.id,
      siteId,
      status: 'succeeded',
      amountReceived: 30_000,
    });
    expect(confirmed[1]?.body).toMatchObject({ stayId: stay.id, siteId, status: 'confirmed', from: 'pending', code: 'STAY_CONFIRMED' });
    expect(confirmed[1]?.cid).toEqual(expect.any(String));

    const early = await post(`/stays/${stay.id}/check-in`);
    expect(early.statusCode).toBe(422);
    expect(early.json()).toMatchObject({ code: 'STAY_NOT_STARTED' });
    cloud.clock.set(start + 16 * 3_600_000);
    expect((await post(`/stays/${stay.id}/check-in`, auditor)).statusCode).toBe(403);
    expect((await post(`/stays/${stay.id}/check-in`, managerOther)).statusCode).toBe(404);
    const key = `ci-${stay.id}`;
    const ci = await post(`/stays/${stay.id}/check-in`, admin, key);
    expect(ci.statusCode).toBe(200);
    expect(ci.json()).toMatchObject({ status: 'applied', stay: { id: stay.id, status: 'checked_in' } });
    const replay = await post(`/stays/${stay.id}/check-in`, admin, key);
    expect(replay.statusCode).toBe(200);
    expect(replay.json()).toEqual(ci.json());
    const again = await post(`/stays/${stay.id}/check-in`);
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ status: 'noop', stay: { status: 'checked_in' } });
    expect((await post(`/stays/no-such-stay/check-in`)).statusCode).toBe(404);
    // checked_in has no webhook of its own
    expect((await hooks(stay.id)).map((h) => h.type)).toEqual(['payment.succeeded', 'stay.confirmed']);

    const co = await post(`/stays/${stay.id}/check-out`);
    expect(co.json()).toMatchObject({ status: 'applied', stay: { status: 'checked_out' } });
    expect((await post(`/stays/${stay.id}/check-out`)).json()).toMatchObject({ status: 'noop' });
    // checking in a stay that is over changes nothing
    const late = await post(`/stays/${stay.id}/check-in`);
    expect(late.statusCode).toBe(200);
    expect(late.json()).toMatchObject({ status: 'noop', stay: { status: 'checked_out' } });
    await cloud.runBilling();
    const all = await hooks(stay.id);
    expect(all.map((h) => h.type)).toEqual(['payment.succeeded', 'stay.confirmed', 'stay.checked_out']);
    expect(all[2]?.body).toMatchObject({ stayId: stay.id, siteId, status: 'checked_out', from: 'checked_in', code: 'STAY_CHECKED_OUT' });
  });

  it('a hold that runs out raises stay.expired once', async () => {
    const { stay } = await book();
    cloud.clock.advance(2 * 3_600_000);
    await cloud.runBilling();
    await cloud.runBilling();
    const got = await hooks(stay.id);
    expect(got.map((h) => h.type)).toEqual(['stay.expired']);
    expect(got[0]?.body).toMatchObject({ stayId: stay.id, siteId, status: 'expired', from: 'pending' });
  });

  it('a booking Stripe cannot take keeps no stay and raises no stay webhook', async () => {
    const before = await t.db.query<{ n: string }>('SELECT count(*)::text AS n FROM stays WHERE site_id = $1', [siteId]);
    const hooksBefore = await t.db.query<{ n: string }>("SELECT count(*)::text AS n FROM webhook_outbox WHERE type LIKE 'stay.%'");
    local.faults.unavailable = true;
    try {
      n += 1;
      const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
      const r = await post('/stays', admin, `bk-${newId()}`, {
        personId,
        roomId,
        checkIn: iso(firstNight(n)),
        checkOut: iso(firstNight(n) + 86_400_000),
        amount: 10_000,
        currency: 'jpy',
      });
      expect(r.statusCode).toBe(503);
    } finally {
      local.faults.unavailable = false;
    }
    // a refusal changes nothing: the booking is withdrawn, so there is no stay to tell anyone about
    const after = await t.db.query<{ n: string }>('SELECT count(*)::text AS n FROM stays WHERE site_id = $1', [siteId]);
    expect(after.rows[0]?.n).toBe(before.rows[0]?.n);
    const hooksAfter = await t.db.query<{ n: string }>("SELECT count(*)::text AS n FROM webhook_outbox WHERE type LIKE 'stay.%'");
    expect(hooksAfter.rows[0]?.n).toBe(hooksBefore.rows[0]?.n);
  });

  it("lists dead Stripe events and dead billing jobs with their codes and sites, scoped by the token's sites and filtered by siteId, and admins retry them", async () => {
    const u = newId();
    const { stay, payment } = await book();
    const deadEvent = (id: string, objectId: string, type = 'payment_intent.succeeded', payload = '{}') =>
      t.db.query(
        `INSERT INTO payment_webhook_events (event_id, type, object_id, payload, cid, received_at, status, attempts, next_attempt_at, last_error, dead_code)
         VALUES ($1, $2, $3, $4::jsonb, 'cid-dead-event', $5, 'dead', 8, $5, 'no such payment', 'PAYMENT_NOT_FOUND')`,
        [id, type, objectId, payload, T0],
      );
    const deadJob = async (kind: string, subject: string) =>
      Number(
        (
          await t.db.query<{ id: string }>(
            `INSERT INTO billing_jobs (kind, subject_id, dedupe_key, body, cid, status, attempts, next_attempt_at, last_error, last_code, created_at)
             VALUES ($1, $2, $3, '{}', 'cid-dead-job', 'dead', 8, $4, 'card_declined', 'BILLING_REFUSED', $4) RETURNING id`,
            [kind, subject, `dead-${kind}-${subject}-${u}`, T0],
          )
        ).rows[0]?.id,
      );
    // one of ours at the site (by intent, and a charge naming the intent) and one that names no payment of ours
    await deadEvent(`evt_${u}`, 'pi_x');
    await deadEvent(`evt_site_${u}`, payment.intentId);
    await deadEvent(
      `evt_ch_${u}`,
      `ch_${u}`,
      'charge.refunded',
      JSON.stringify({ data: { object: { payment_intent: payment.intentId } } }),
    );
    const jobId = await deadJob('refund', 'ref_x');
    const payJob = await deadJob('cancel_intent', payment.id);
    const stayJob = await deadJob('notify', stay.id);
    const list = (kind: string, token = admin, q = '') =>
      app.inject({ method: 'GET', url: `/billing/dead-letters?kind=${kind}${q}`, headers: auth(token) });
    const events = async (token = admin, q = '') =>
      (await list('webhook-events', token, q)).json<{ items: { eventId: string; siteId: string | null }[] }>().items;
    const jobs = async (token = admin, q = '') =>
      (await list('billing-jobs', token, q)).json<{ items: { id: number; siteId: string | null }[] }>().items;

    expect(await events()).toContainEqual(
      expect.objectContaining({ eventId: `evt_${u}`, code: 'PAYMENT_NOT_FOUND', cid: 'cid-dead-event', attempts: 8, siteId: null }),
    );
    expect(await events()).toContainEqual(expect.objectContaining({ eventId: `evt_site_${u}`, siteId }));
    expect(await events()).toContainEqual(expect.objectContaining({ eventId: `evt_ch_${u}`, siteId }));
    expect(await jobs()).toContainEqual(
      expect.objectContaining({ id: jobId, kind: 'refund', code: 'BILLING_REFUSED', cid: 'cid-dead-job', siteId: null }),
    );
    expect(await jobs()).toContainEqual(expect.objectContaining({ id: payJob, siteId }));
    expect(await jobs()).toContainEqual(expect.objectContaining({ id: stayJob, siteId }));
    // the site's auditor sees the site's dead letters only; a manager of another site sees none of them
    expect((await events(auditor)).map((e) => e.eventId).sort()).toEqual([`evt_ch_${u}`, `evt_site_${u}`].sort());
    expect((await jobs(auditor)).map((j) => j.id).sort()).toEqual([payJob, stayJob].sort());
    expect(await events(managerOther)).toEqual([]);
    expect(await jobs(managerOther)).toEqual([]);
    // siteId filters, for admins too; a site outside the token's scope is an empty list, not another site's rows
    expect((await jobs(admin, `&siteId=${siteId}`)).map((j) => j.id).sort()).toEqual([payJob, stayJob].sort());
    expect((await events(admin, `&siteId=${siteId}`)).every((e) => e.siteId === siteId)).toBe(true);
    expect(await jobs(managerOther, `&siteId=${siteId}`)).toEqual([]);
    expect((await list('billing-jobs', admin, '&siteId=bad%20id')).statusCode).toBe(400);
    expect((await post(`/billing/dead-letters/billing-jobs/${jobId}/retry`, managerOther)).statusCode).toBe(403);
    const key = `retry-${u}`;
    const retried = await post(`/billing/dead-letters/billing-jobs/${jobId}/retry`, admin, key);
    expect(retried.json()).toEqual({ status: 'applied', code: 'MESSAGE_APPLIED' });
    expect((await post(`/billing/dead-letters/billing-jobs/${jobId}/retry`, admin, key)).json()).toEqual(retried.json());
    expect((await post(`/billing/dead-letters/billing-jobs/${jobId}/retry`)).statusCode).toBe(404);
    expect((await post(`/billing/dead-letters/webhook-events/evt_${u}/retry`)).statusCode).toBe(200);
    expect((await post(`/billing/dead-letters/webhook-events/evt_${u}/retry`)).statusCode).toBe(404);
    expect((await post('/billing/dead-letters/billing-jobs/not-a-number/retry')).statusCode).toBe(404);
    const rows = await t.db.query<{ status: string; attempts: number }>(
      'SELECT status, attempts FROM payment_webhook_events WHERE event_id = $1 UNION ALL SELECT status, attempts FROM billing_jobs WHERE id = $2',
      [`evt_${u}`, jobId],
    );
    expect(rows.rows).toEqual([
      { status: 'pending', attempts: 0 },
      { status: 'pending', attempts: 0 },
    ]);
    expect((await list('billing-jobs')).json<{ items: { id: number }[] }>().items.map((j) => j.id)).not.toContain(jobId);
  });
});
