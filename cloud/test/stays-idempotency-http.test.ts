import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { noFaults } from '@tobira/stripe-local';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * Bookings and walk-ins under one Idempotency-Key, attacked over real HTTP
 * (the listening admin API, parallel sockets) with the real SDK against the
 * local Stripe and its fault knobs:
 * - N identical requests at once: each answers the first one's outcome (202,
 *   or 200 noop with the same stay / walk-in and intent) or 409
 *   IDEMPOTENCY_IN_PROGRESS, never a 5xx; one row, one PaymentIntent.
 * - Stripe down: 503 BILLING_UNAVAILABLE changes nothing (no stay, nights,
 *   payment or job; no walk-in, no quota use) and is not the key's final
 *   answer: the same key books once Stripe is back.
 * PGlite and PostgreSQL.
 */
const SECRET = 'whsec_tobira_stays_idempotency';
const N = 8;

describe.each(pgBackends())('one Idempotency-Key, many requests, on %s', (backend) => {
  let h: StaysApi;
  let base: string;
  let roomId: string;
  let planId: string;
  let n = 0;

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'idem', secret: SECRET });
    const addr = h.app.server.address();
    if (addr === null || typeof addr === 'string') throw new Error('not listening');
    base = `http://127.0.0.1:${addr.port}`;
    const room = await post('/rooms', `room-${newId()}`, { siteId: h.siteId, name: '301', doors: [h.doors[0]] });
    expect(room.status).toBe(201);
    roomId = room.json.id as string;
    expect(
      (
        await fetch(`${base}/sites/${h.siteId}/stay-settings`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' },
          body: JSON.stringify({ walkInsAllowed: true }),
        })
      ).status,
    ).toBe(200);
    const plan = await post('/plans', `plan-${newId()}`, {
      id: `plan-${h.u}`,
      siteId: h.siteId,
      name: 'Day',
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [h.doors[0]],
      monthlyEntryQuota: 50,
      walkInAmount: 1500,
    });
    expect(plan.status).toBe(201);
    planId = plan.json.id as string;
  });
  afterEach(() => {
    Object.assign(h.local.faults, noFaults());
  });
  afterAll(() => h?.close());

  async function post(path: string, key: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
    const r = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    });
    return { status: r.status, json: (await r.json()) as Record<string, unknown> };
  }
  const booking = () => {
    n += 1;
    const start = Date.UTC(2028, 0, 1) + n * 4 * 86_400_000;
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    return { personId: h.personId, roomId, checkIn: iso(start), checkOut: iso(start + 2 * 86_400_000), amount: 20_000, currency: 'jpy' };
  };
  const sale = () => ({ siteId: h.siteId, planId, personId: h.personId, credential: { type: 'pin', value: String(50_000_000 + ++n) } });
  const count = async (sql: string, params: unknown[]) => Number((await h.t.db.query<{ n: number }>(sql, params)).rows[0]?.n);
  const intentsFor = (subjectId: string) =>
    h.local
      .events()
      .filter(
        (e) =>
          e.type === 'payment_intent.created' &&
          (e.data.object as { metadata?: Record<string, string> }).metadata?.subject_id === subjectId,
      ).length;
  const quotaUsed = async () =>
    count('SELECT coalesce(sum(used), 0)::int AS n FROM quota_usage WHERE plan_id = $1 AND person_id = $2', [planId, h.personId]);

  describe('N identical requests at once', () => {
    it('POST /stays: the first outcome or 409 in flight, never a 5xx; one stay, one PaymentIntent', async () => {
      // Stripe answers slowly, so the requests overlap the first one's call
      h.local.faults.delayMs = 300;
      const key = `bk-par-${newId()}`;
      const body = booking();
      const answers = await Promise.all(Array.from({ length: N }, () => post('/stays', key, body)));
      const statuses = answers.map((a) => a.status);
      for (const a of answers) expect([200, 202, 409], JSON.stringify(a)).toContain(a.status);
      expect(statuses.filter((s) => s === 202)).toHaveLength(1);
      for (const a of answers.filter((x) => x.status === 409)) expect(a.json).toMatchObject({ code: 'IDEMPOTENCY_IN_PROGRESS' });
      const ok = answers.filter((a) => a.status !== 409);
      const stayIds = new Set(ok.map((a) => (a.json.stay as { id: string }).id));
      const intents = new Set(ok.map((a) => (a.json.payment as { intentId: string }).intentId));
      expect(stayIds.size).toBe(1);
      expect(intents.size).toBe(1);
      const [stayId] = [...stayIds];
      expect(await count('SELECT count(*)::int AS n FROM stays WHERE id = $1 AND status = $2', [stayId, 'pending'])).toBe(1);
      expect(intentsFor(stayId ?? '')).toBe(1);
      // once the first has answered, a repeat is the same stay and intent (200 noop)
      h.local.faults.delayMs = 0;
      const again = await post('/stays', key, body);
      expect(again.status).toBe(200);
      expect(again.json).toMatchObject({
        status: 'noop',
        code: 'STAY_ALREADY_BOOKED',
        stay: { id: stayId },
        payment: { intentId: [...intents][0] },
      });
    });

    it('POST /walk-ins: the first outcome or 409 in flight, never a 5xx; one walk-in, one quota use, one PaymentIntent', async () => {
      h.local.faults.delayMs = 300;
      const key = `wi-par-${newId()}`;
      const body = sale();
      const used = await quotaUsed();
      const answers = await Promise.all(Array.from({ length: N }, () => post('/walk-ins', key, body)));
      for (const a of answers) expect([200, 202, 409], JSON.stringify(a)).toContain(a.status);
      expect(answers.filter((a) => a.status === 202)).toHaveLength(1);
      for (const a of answers.filter((x) => x.status === 409)) expect(a.json).toMatchObject({ code: 'IDEMPOTENCY_IN_PROGRESS' });
      const ok = answers.filter((a) => a.status !== 409);
      const ids = new Set(ok.map((a) => a.json.id as string));
      expect(ids.size).toBe(1);
      expect(new Set(ok.map((a) => a.json.intentId as string)).size).toBe(1);
      const [id] = [...ids];
      expect(await count('SELECT count(*)::int AS n FROM walk_ins WHERE id = $1', [id])).toBe(1);
      expect(await quotaUsed()).toBe(used + 1);
      expect(intentsFor(id ?? '')).toBe(1);
      h.local.faults.delayMs = 0;
      expect((await post('/walk-ins', key, body)).json).toMatchObject({ status: 'noop', id, code: 'WALK_IN_ALREADY_CREATED' });
    });
  });

  describe('when Stripe is down', () => {
    it('POST /stays: 503 changes nothing, and the same key books once Stripe is back', async () => {
      const key = `bk-down-${newId()}`;
      const body = booking();
      const rows = () =>
        Promise.all([
          count('SELECT count(*)::int AS n FROM stays WHERE room_id = $1 AND check_in = $2::date', [roomId, body.checkIn]),
          count('SELECT count(*)::int AS n FROM stay_nights WHERE room_id = $1', [roomId]),
          count('SELECT count(*)::int AS n FROM payments', []),
          count('SELECT count(*)::int AS n FROM billing_jobs', []),
          count('SELECT count(*)::int AS n FROM idempotency_keys WHERE key = $1', [key]),
        ]);
      const before = await rows();
      h.local.faults.unavailable = true;
      const down = await post('/stays', key, body);
      expect(down.status).toBe(503);
      expect(down.json).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
      expect(await rows()).toEqual(before);
      // the same answer again while it is down: still nothing kept
      expect((await post('/stays', key, body)).status).toBe(503);
      expect(await rows()).toEqual(before);

      h.local.faults.unavailable = false;
      const up = await post('/stays', key, body);
      expect(up.status).toBe(202);
      expect(up.json).toMatchObject({ status: 'applied', code: 'STAY_BOOKED', stay: { status: 'pending' } });
      const stay = up.json.stay as { id: string };
      expect((up.json.payment as { intentId: string | null }).intentId).toMatch(/^pi_/);
      expect(intentsFor(stay.id)).toBe(1);
    });

    it('POST /walk-ins: 503 changes nothing (no walk-in, no quota use), and the same key sells once Stripe is back', async () => {
      const key = `wi-down-${newId()}`;
      const body = sale();
      const walkIns = () => count('SELECT count(*)::int AS n FROM walk_ins', []);
      const [w0, q0] = [await walkIns(), await quotaUsed()];
      h.local.faults.unavailable = true;
      const down = await post('/walk-ins', key, body);
      expect(down.status).toBe(503);
      expect(down.json).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
      expect([await walkIns(), await quotaUsed()]).toEqual([w0, q0]);

      h.local.faults.unavailable = false;
      const up = await post('/walk-ins', key, body);
      expect(up.status).toBe(202);
      expect(up.json).toMatchObject({ status: 'applied', code: 'WALK_IN_CREATED', walkInStatus: 'pending' });
      expect(up.json.intentId).toMatch(/^pi_/);
      expect([await walkIns(), await quotaUsed()]).toEqual([w0 + 1, q0 + 1]);
    });
  });
});
