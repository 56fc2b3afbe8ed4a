import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localDateOf } from '../src/domain/nights.js';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * The front desk over HTTP with the real SDK against the local
 * Stripe delivering signed webhooks to the listening app: each check-in gate
 * answers 422 with its code and changes nothing; a walk-in is 202 pending
 * with its client secret and gets its key once paid; block / unblock; the
 * quota view; a stay's check-in refused GUEST_BLOCKED; site scoping.
 */
const SECRET = 'whsec_tobira_walk_ins_http';

describe.each(pgBackends())('walk-in routes on %s', (backend) => {
  let h: StaysApi;
  let n = 0;
  const auth = (token: string) => ({ authorization: `Bearer ${token}` });
  const post = (url: string, payload: Record<string, unknown> | undefined, token = h.admin) =>
    h.app.inject({ method: 'POST', url, headers: auth(token), ...(payload === undefined ? {} : { payload }) });
  const get = (url: string, token = h.admin) => h.app.inject({ method: 'GET', url, headers: auth(token) });
  const plan = async (over: Record<string, unknown> = {}) => {
    const r = await post('/plans', {
      id: `plan-${h.u}-${++n}`,
      siteId: h.siteId,
      name: `Day ${n}`,
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [h.doors[0]],
      monthlyEntryQuota: 1,
      walkInAmount: 1500,
      ...over,
    });
    expect(r.statusCode).toBe(201);
    return r.json<{ id: string }>().id;
  };
  const walkIn = (planId: string, over: Record<string, unknown> = {}, token = h.admin) =>
    post(
      '/walk-ins',
      { siteId: h.siteId, planId, personId: h.personId, credential: { type: 'pin', value: String(40_000_000 + ++n) }, ...over },
      token,
    );
  const allowWalkIns = async () =>
    expect(
      (
        await h.app.inject({
          method: 'PUT',
          url: `/sites/${h.siteId}/stay-settings`,
          headers: auth(h.admin),
          payload: { walkInsAllowed: true, cancellationPolicy: { tiers: [], noShowRefundPercent: 0, quotaReturn: 'always' } },
        })
      ).statusCode,
    ).toBe(200);
  const walkInRows = async () => Number((await h.t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM walk_ins')).rows[0]?.n);

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'wi', secret: SECRET, doors: 2 });
  });
  afterAll(() => h?.close());

  it('WALK_IN_NOT_ALLOWED until the site allows walk-ins, then 202 pending with the client secret, paid by the webhook into a key', async () => {
    const planId = await plan({ monthlyEntryQuota: 5 });
    const off = await walkIn(planId);
    expect(off.statusCode).toBe(422);
    expect(off.json()).toMatchObject({ code: 'WALK_IN_NOT_ALLOWED' });
    expect(await walkInRows()).toBe(0);

    const on = await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/stay-settings`,
      headers: auth(h.admin),
      payload: { walkInsAllowed: true, cancellationPolicy: { tiers: [], noShowRefundPercent: 0, quotaReturn: 'always' } },
    });
    expect(on.statusCode).toBe(200);
    expect(on.json()).toMatchObject({ walkInsAllowed: true, cancellationPolicy: { quotaReturn: 'always' } });

    const pin = { type: 'pin', value: '40123456' };
    const r = await walkIn(planId, { id: `wi-${h.u}-http`, credential: pin });
    expect(r.statusCode).toBe(202);
    const body = r.json<{ id: string; intentId: string; clientSecret: string }>();
    expect(r.json()).toMatchObject({ status: 'applied', code: 'WALK_IN_CREATED', walkInStatus: 'pending', amount: 1500, keyId: null });
    expect(body.clientSecret).toMatch(/^pi_.+_secret_/);
    expect(r.json()).not.toHaveProperty('credential');
    expect((await walkIn(planId, { id: `wi-${h.u}-http`, credential: pin })).json()).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_ALREADY_CREATED',
    });
    // the same id with another PIN is another sale: answering it as done would leave the guest holding a PIN no door knows
    const otherPin = await walkIn(planId, { id: `wi-${h.u}-http`, credential: { type: 'pin', value: '40654321' } });
    expect(otherPin.statusCode).toBe(409);
    expect(otherPin.json()).toMatchObject({ status: 'conflict', code: 'WALK_IN_ALREADY_EXISTS' });

    const paid = await fetch(`${h.local.url}/_local/pay/${body.intentId}?card=pm_card_visa`);
    expect(paid.status).toBe(200);
    await h.local.webhooks.idle();
    await h.cloud.runBilling();
    const w = await get(`/walk-ins/${body.id}`);
    expect(w.json()).toMatchObject({ walkInStatus: 'paid', keyId: `key_${body.id}`, amountReceived: 1500 });
    expect((await get(`/keys/key_${body.id}`)).statusCode).toBe(200);

    const c = await post(`/walk-ins/${body.id}/cancel`, { reason: 'guest_cancelled' });
    expect(c.statusCode).toBe(200);
    expect(c.json()).toMatchObject({ code: 'WALK_IN_CANCELLED', walkInStatus: 'cancelled', quotaReturned: true });
    const list = await get(`/walk-ins?siteId=${h.siteId}&status=cancelled`);
    expect(list.json<{ items: { id: string }[] }>().items.map((x) => x.id)).toContain(body.id);
  });

  it('an Idempotency-Key that sold a walk-in is 422 IDEMPOTENCY_KEY_REUSED under another PIN, the same sale under the same PIN', async () => {
    const planId = await plan({ monthlyEntryQuota: 5 });
    await allowWalkIns();
    const key = `wi-reuse-${h.u}`;
    const sell = (value: string) =>
      h.app.inject({
        method: 'POST',
        url: '/walk-ins',
        headers: { ...auth(h.admin), 'idempotency-key': key },
        payload: { siteId: h.siteId, planId, personId: h.personId, credential: { type: 'pin', value } },
      });
    const first = await sell('40111111');
    expect(first.statusCode).toBe(202);
    const again = await sell('40111111');
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ status: 'noop', code: 'WALK_IN_ALREADY_CREATED', id: first.json<{ id: string }>().id });
    const other = await sell('40222222');
    expect(other.statusCode).toBe(422);
    expect(other.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
  });

  it('each gate answers 422 with its code and nothing is created', async () => {
    const before = await walkInRows();
    const quota1 = await plan();
    expect((await walkIn(`plan-none-${h.u}`)).json()).toMatchObject({ code: 'PLAN_NOT_IN_CONFIG' });
    expect((await walkIn(await plan({ walkInAmount: null }))).json()).toMatchObject({ code: 'WALK_IN_NOT_ALLOWED' });
    const mo = await walkIn(await plan({ membersOnly: true }));
    expect(mo.statusCode).toBe(422);
    expect(mo.json()).toMatchObject({ code: 'MEMBERS_ONLY_PLAN' });

    const block = await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/blocked-people/${h.personId}`,
      headers: auth(h.admin),
      payload: { reason: 'unpaid damage' },
    });
    expect(block.json()).toMatchObject({ status: 'applied', code: 'PERSON_BLOCKED', reason: 'unpaid damage' });
    const blocked = await walkIn(quota1);
    expect(blocked.statusCode).toBe(422);
    expect(blocked.json()).toMatchObject({ code: 'GUEST_BLOCKED' });
    expect((await get(`/sites/${h.siteId}/blocked-people`)).json()).toMatchObject({ items: [{ personId: h.personId }] });
    const del = () => h.app.inject({ method: 'DELETE', url: `/sites/${h.siteId}/blocked-people/${h.personId}`, headers: auth(h.admin) });
    expect((await del()).json()).toMatchObject({ status: 'applied', code: 'PERSON_UNBLOCKED', keysIssued: 0 });
    expect((await del()).json()).toMatchObject({ status: 'noop', code: 'PERSON_NOT_BLOCKED' });
    expect(await walkInRows()).toBe(before);

    expect((await walkIn(quota1)).statusCode).toBe(202);
    const over = await walkIn(quota1);
    expect(over.statusCode).toBe(422);
    expect(over.json()).toMatchObject({ code: 'QUOTA_EXHAUSTED' });
    expect(await walkInRows()).toBe(before + 1);
    const q = await get(`/plans/${quota1}/quota?personId=${h.personId}`);
    const month = localDateOf(h.cloud.clock.now(), 'Asia/Tokyo').slice(0, 7);
    expect(q.json()).toEqual({
      planId: quota1,
      monthlyEntryQuota: 1,
      currentMonth: month,
      items: [{ personId: h.personId, month, quota: 1, used: 1, left: 0 }],
    });
  });

  it('a key issued directly (POST /keys) to a person the site blocked is refused GUEST_BLOCKED, and none is made', async () => {
    const now = h.cloud.clock.now();
    const issue = (keyId: string) =>
      post('/keys', {
        keyId,
        personId: h.personId,
        doors: [h.doors[0]],
        credential: { type: 'pin', value: String(10_000_000 + Math.floor(Math.random() * 89_999_999)) },
        validFrom: now,
        validUntil: now + 86_400_000,
      });
    await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/blocked-people/${h.personId}`,
      headers: auth(h.admin),
      payload: { reason: 'threatened staff' },
    });
    const keyId = `k-blocked-${h.u}`;
    const refused = await issue(keyId);
    expect(refused.statusCode).toBe(422);
    expect(refused.json()).toMatchObject({ status: 'refused', code: 'GUEST_BLOCKED' });
    expect((await get(`/keys/${keyId}`)).statusCode).toBe(404);
    await h.app.inject({ method: 'DELETE', url: `/sites/${h.siteId}/blocked-people/${h.personId}`, headers: auth(h.admin) });
    const issued = await issue(keyId);
    expect(issued.statusCode).toBe(202);
    expect(issued.json()).toMatchObject({ code: 'KEY_ISSUED' });
  });

  it("a stay's check-in is refused GUEST_BLOCKED while the guest is blocked", async () => {
    const room = await post('/rooms', { siteId: h.siteId, name: `R${h.u}`, doors: [h.doors[1]] });
    expect(room.statusCode).toBe(201);
    const now = h.cloud.clock.now();
    const stay = await h.app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(h.admin), 'idempotency-key': `gate-${h.u}` },
      payload: {
        personId: h.personId,
        roomId: room.json<{ id: string }>().id,
        checkIn: localDateOf(now, 'Asia/Tokyo'),
        checkOut: localDateOf(now + 86_400_000, 'Asia/Tokyo'),
        amount: 10_000,
        currency: 'jpy',
      },
    });
    expect(stay.statusCode).toBe(202);
    const { stay: s, payment } = stay.json<{ stay: { id: string }; payment: { intentId: string } }>();
    expect((await fetch(`${h.local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`)).status).toBe(200);
    await h.local.webhooks.idle();
    await h.cloud.runBilling();
    await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/blocked-people/${h.personId}`,
      headers: auth(h.admin),
      payload: { reason: 'police' },
    });
    const refused = await post(`/stays/${s.id}/check-in`, undefined);
    expect(refused.statusCode).toBe(422);
    expect(refused.json()).toMatchObject({ code: 'GUEST_BLOCKED' });
    expect((await get(`/stays/${s.id}`)).json()).toMatchObject({ stay: { status: 'confirmed' } });
    await h.app.inject({ method: 'DELETE', url: `/sites/${h.siteId}/blocked-people/${h.personId}`, headers: auth(h.admin) });
    expect((await post(`/stays/${s.id}/check-in`, undefined)).json()).toMatchObject({ code: 'STAY_CHECKED_IN' });
  });

  it("another site's manager sees none of it", async () => {
    const planId = await plan();
    const r = await walkIn(planId, {}, h.managerOther);
    expect(r.statusCode).toBe(404);
    expect(r.json()).toMatchObject({ code: 'SITE_NOT_FOUND' });
    const block = await h.app.inject({
      method: 'PUT',
      url: `/sites/${h.siteId}/blocked-people/${h.personId}`,
      headers: auth(h.managerOther),
      payload: { reason: 'x' },
    });
    expect(block.statusCode).toBe(404);
    expect((await get(`/plans/${planId}/quota`, h.managerOther)).statusCode).toBe(404);
    expect((await get(`/walk-ins?siteId=${h.siteId}`, h.managerOther)).json()).toEqual({ items: [], nextCursor: null });
  });
});
