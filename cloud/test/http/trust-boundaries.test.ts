import type { AddressInfo } from 'node:net';
import { generateSigningKeyPair, newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { openStaysApi, type StaysApi } from '../stays-harness.js';
import { T0 } from '../helpers.js';

/**
 * The admin API's trust boundary between sites, attacked from outside: real
 * HTTP against the listening app, real tokens of site A's and site B's
 * managers. Site A (the harness's site, with a local Stripe) holds a key, a
 * room, a plan, a membership, a walk-in and a guest; site B's manager, with
 * a gateway, door, room, plan and person of its own, names them.
 */
const SECRET = 'whsec_tobira_trust_boundaries';
const DAY_MS = 86_400_000;

interface Res {
  status: number;
  body: Record<string, unknown>;
  text: string;
}

describe.each(pgBackends())('the trust boundary between sites on %s', (backend) => {
  let h: StaysApi;
  let base: string;
  let managerA: string;
  let managerB: string;
  const A = { keyId: '', roomId: '', planId: '', membershipId: '', walkInId: '', personId: '', name: '' };
  const B = { siteId: '', gatewayId: '', doorId: '', roomId: '', planId: '', personId: '' };
  let pin = 700_000;
  const nextPin = () => String(pin++);

  const call = async (token: string | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // not JSON: `text` tells
    }
    return { status: r.status, body: parsed, text } satisfies Res;
  };
  const ok = async (p: Promise<Res>, status: number): Promise<Res> => {
    const r = await p;
    if (r.status !== status) throw new Error(`expected ${status}, got ${r.status} ${r.text}`);
    return r;
  };
  /** Nothing of site A's rows in an answer to site B: no id, no name, not its site. */
  const revealsNothingOfA = (r: Res) => {
    for (const v of [h.siteId, h.gatewayId, ...h.doors, A.personId, A.name, A.roomId, A.planId])
      expect(r.text, `answer names ${v}`).not.toContain(v);
  };

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'tb', secret: SECRET });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const u = h.u;
    B.siteId = h.otherSiteId;
    managerA = (await createApiToken(h.cloud.db, { name: 'mA', role: 'manager', sites: [h.siteId] }, T0)).token;
    managerB = h.managerOther;
    const admin = h.admin;
    // site A: a guest of its own, a key, a room, a plan sold at the desk, a membership and a walk-in
    A.personId = `guest-a-${u}`;
    A.name = `Hana Secret ${u}`;
    await ok(call(admin, 'POST', '/people', { id: A.personId, name: A.name, siteId: h.siteId }), 201);
    A.keyId = `key-a-${u}`;
    const key = { personId: A.personId, doors: [h.doors[0]], validFrom: T0, validUntil: T0 + DAY_MS };
    await ok(call(admin, 'POST', '/keys', { keyId: A.keyId, ...key, credential: { type: 'pin', value: nextPin() } }), 202);
    A.roomId = `room-a-${u}`;
    await ok(call(admin, 'POST', '/rooms', { id: A.roomId, siteId: h.siteId, name: `Room A ${u}`, doors: [h.doors[0]] }), 201);
    await ok(call(admin, 'PUT', `/sites/${h.siteId}/stay-settings`, { walkInsAllowed: true }), 200);
    A.planId = `plan-a-${u}`;
    const plan = { amount: 5000, currency: 'jpy', interval: 'month', walkInAmount: 1500 };
    await ok(call(admin, 'POST', '/plans', { id: A.planId, siteId: h.siteId, name: `Plan A ${u}`, doors: [h.doors[0]], ...plan }), 201);
    A.membershipId = `mem-a-${u}`;
    await ok(call(admin, 'POST', '/memberships', { id: A.membershipId, planId: A.planId, personId: A.personId }), 201);
    A.walkInId = `wi-a-${u}`;
    const wi = { id: A.walkInId, siteId: h.siteId, planId: A.planId, personId: A.personId, credential: { type: 'pin', value: nextPin() } };
    await ok(call(admin, 'POST', '/walk-ins', wi), 202);
    // site B: its manager's own gateway, door, room, plan and person
    const pair = await generateSigningKeyPair();
    B.gatewayId = `gw-b-${u}`;
    await ok(call(managerB, 'POST', '/gateways', { gatewayId: B.gatewayId, siteId: B.siteId, publicJwk: pair.publicJwk }), 201);
    B.doorId = `door-b-${u}`;
    await ok(call(managerB, 'POST', '/doors', { id: B.doorId, gatewayId: B.gatewayId, name: 'B front' }), 201);
    B.personId = `person-b-${u}`;
    await ok(call(managerB, 'POST', '/people', { id: B.personId, name: 'B guest', siteId: B.siteId }), 201);
    B.roomId = `room-b-${u}`;
    await ok(call(managerB, 'POST', '/rooms', { id: B.roomId, siteId: B.siteId, name: 'Room B', doors: [B.doorId] }), 201);
    await ok(call(managerB, 'PUT', `/sites/${B.siteId}/stay-settings`, { walkInsAllowed: true }), 200);
    B.planId = `plan-b-${u}`;
    await ok(call(managerB, 'POST', '/plans', { id: B.planId, siteId: B.siteId, name: 'Plan B', doors: [B.doorId], ...plan }), 201);
  });
  afterAll(() => h?.close());

  describe("when site B's manager creates a row under an id site A holds", () => {
    it("a key: 409 ID_UNAVAILABLE with nothing of site A's key (not its site, person, doors, validity or status)", async () => {
      const r = await call(managerB, 'POST', '/keys', {
        keyId: A.keyId,
        personId: B.personId,
        doors: [B.doorId],
        credential: { type: 'pin', value: nextPin() },
        validFrom: T0,
        validUntil: T0 + DAY_MS,
      });
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({ status: 'conflict', code: 'ID_UNAVAILABLE' });
      expect(r.body).not.toHaveProperty('key');
      revealsNothingOfA(r);
      // and site A's key is as it was
      const own = await call(managerA, 'GET', `/keys/${A.keyId}`);
      expect(own.body).toMatchObject({ key: { personId: A.personId } });
    });

    it("a room, a membership, a walk-in and a plan: 409 ID_UNAVAILABLE, nothing of site A's row", async () => {
      const answers = [
        await call(managerB, 'POST', '/rooms', { id: A.roomId, siteId: B.siteId, name: 'Room B2', doors: [B.doorId] }),
        await call(managerB, 'POST', '/memberships', { id: A.membershipId, planId: B.planId, personId: B.personId }),
        await call(managerB, 'POST', '/walk-ins', {
          id: A.walkInId,
          siteId: B.siteId,
          planId: B.planId,
          personId: B.personId,
          credential: { type: 'pin', value: nextPin() },
        }),
        await call(managerB, 'POST', '/plans', {
          id: A.planId,
          siteId: B.siteId,
          name: 'Plan B2',
          doors: [B.doorId],
          amount: 5000,
          currency: 'jpy',
          interval: 'month',
        }),
      ];
      for (const r of answers) {
        expect(r.status, r.text).toBe(409);
        expect(r.body).toMatchObject({ status: 'conflict', code: 'ID_UNAVAILABLE' });
        expect(Object.keys(r.body).sort()).toEqual(['cid', 'code', 'detail', 'status']);
        revealsNothingOfA(r);
      }
    });

    it('a person, a door or a gateway: the same answer whichever kind of row holds the id, nothing of it', async () => {
      const pair = await generateSigningKeyPair();
      const answers = [
        await call(managerB, 'POST', '/people', { id: A.personId, name: 'x', siteId: B.siteId }),
        await call(managerB, 'POST', '/doors', { id: h.doors[0], gatewayId: B.gatewayId, name: 'x' }),
        await call(managerB, 'POST', '/gateways', { gatewayId: h.gatewayId, siteId: B.siteId, publicJwk: pair.publicJwk }),
      ];
      const shapes = answers.map((r) => ({ status: r.status, code: r.body.code, detail: r.body.detail }));
      expect(shapes).toEqual(Array(3).fill({ status: 409, code: 'ID_UNAVAILABLE', detail: shapes[0]?.detail }));
      for (const r of answers) revealsNothingOfA(r);
    });
  });

  describe("when site B's manager names site A's guest", () => {
    it('a stay at its own room for her is refused PERSON_NOT_FOUND, and her record and contact stay closed to it', async () => {
      const r = await call(
        managerB,
        'POST',
        '/stays',
        { personId: A.personId, roomId: B.roomId, checkIn: '2030-04-01', checkOut: '2030-04-03', amount: 24_000, currency: 'jpy' },
        { 'idempotency-key': `bk-${newId()}` },
      );
      expect(r.status, r.text).toBe(404);
      expect(r.body).toMatchObject({ status: 'refused', code: 'PERSON_NOT_FOUND' });
      const stays = await h.cloud.db.query('SELECT 1 FROM stays WHERE person_id = $1', [A.personId]);
      expect(stays.rows).toEqual([]);
      expect((await call(managerB, 'GET', `/people/${A.personId}`)).status).toBe(404);
      const contact = await call(managerB, 'PUT', `/people/${A.personId}/contact`, { email: 'attacker@example.com' });
      expect(contact.status).toBe(404);
    });

    it('a walk-in and a membership of its own plan for her are refused PERSON_NOT_FOUND, nothing created', async () => {
      const before = await h.cloud.db.query<{ n: number }>(
        'SELECT (SELECT count(*) FROM walk_ins WHERE person_id = $1)::int + (SELECT count(*) FROM memberships WHERE person_id = $1)::int AS n',
        [A.personId],
      );
      const wi = await call(managerB, 'POST', '/walk-ins', {
        siteId: B.siteId,
        planId: B.planId,
        personId: A.personId,
        credential: { type: 'pin', value: nextPin() },
      });
      const mem = await call(managerB, 'POST', '/memberships', { planId: B.planId, personId: A.personId });
      for (const r of [wi, mem]) {
        expect(r.status, r.text).toBe(404);
        expect(r.body).toMatchObject({ status: 'refused', code: 'PERSON_NOT_FOUND' });
        revealsNothingOfA(r);
      }
      const after = await h.cloud.db.query<{ n: number }>(
        'SELECT (SELECT count(*) FROM walk_ins WHERE person_id = $1)::int + (SELECT count(*) FROM memberships WHERE person_id = $1)::int AS n',
        [A.personId],
      );
      expect(after.rows).toEqual(before.rows);
    });

    it("a walk-in on site A's plan, or a stay in site A's room, is refused as not found", async () => {
      const wi = await call(managerB, 'POST', '/walk-ins', {
        siteId: B.siteId,
        planId: A.planId,
        personId: B.personId,
        credential: { type: 'pin', value: nextPin() },
      });
      expect(wi.status, wi.text).toBe(404);
      expect(wi.body).toMatchObject({ code: 'PLAN_NOT_FOUND' });
      const stay = await call(
        managerB,
        'POST',
        '/stays',
        { personId: B.personId, roomId: A.roomId, checkIn: '2030-05-01', checkOut: '2030-05-02', amount: 1000, currency: 'jpy' },
        { 'idempotency-key': `bk-${newId()}` },
      );
      expect(stay.status, stay.text).toBe(404);
      expect(stay.body).toMatchObject({ code: 'ROOM_NOT_FOUND' });
    });

    it('blocking or unblocking her at its own site answers exactly as for an id nobody holds', async () => {
      const nobody = `nobody-${newId()}`;
      for (const method of ['PUT', 'DELETE'] as const) {
        const body = method === 'PUT' ? { reason: 'probe' } : undefined;
        const hers = await call(managerB, method, `/sites/${B.siteId}/blocked-people/${A.personId}`, body);
        const none = await call(managerB, method, `/sites/${B.siteId}/blocked-people/${nobody}`, body);
        expect(hers.status, hers.text).toBe(404);
        expect({ ...hers.body, cid: null }).toEqual({ ...none.body, cid: null });
      }
      const blocks = await h.cloud.db.query('SELECT 1 FROM blocked_people WHERE person_id = $1', [A.personId]);
      expect(blocks.rows).toEqual([]);
    });
  });

  describe('answers carrying a secret', () => {
    const raw = async (token: string, method: string, path: string, body?: unknown) =>
      fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    it('a new API token, its rotation, a gateway provisioning and a webhook secret are kept by no cache and never sniffed', async () => {
      const pair = await generateSigningKeyPair();
      const made = await raw(h.admin, 'POST', '/api-tokens', { name: `nc-${h.u}`, role: 'auditor', sites: [B.siteId] });
      const id = ((await made.clone().json()) as { id: string }).id;
      const answers = [
        made,
        await raw(h.admin, 'POST', `/api-tokens/${id}/rotate`, { graceSeconds: 0 }),
        await raw(managerB, 'POST', '/gateways', { gatewayId: `gw-nc-${h.u}`, siteId: B.siteId, publicJwk: pair.publicJwk }),
      ];
      for (const r of answers) {
        expect(r.status).toBe(201);
        expect(r.headers.get('cache-control')).toBe('no-store');
        expect(r.headers.get('x-content-type-options')).toBe('nosniff');
      }
      // an ordinary read is not marked no-store, but is never sniffed either
      const read = await raw(managerB, 'GET', `/gateways/gw-nc-${h.u}`);
      expect(read.headers.get('cache-control')).toBeNull();
      expect(read.headers.get('x-content-type-options')).toBe('nosniff');
    });
  });

  describe('token rotation', () => {
    it('a token that rotates itself never outlives the lifetime its admin gave it, however often and whatever it asks', async () => {
      const made = await ok(
        call(h.admin, 'POST', '/api-tokens', { name: `pms-${h.u}`, role: 'manager', sites: [B.siteId], expiresInDays: 1 }),
        201,
      );
      const original = made.body.expiresAt as number;
      let token = made.body.token as string;
      let id = made.body.id as string;
      for (let i = 0; i < 3; i++) {
        const r = await ok(call(token, 'POST', `/api-tokens/${id}/rotate`, { graceSeconds: 0, expiresInDays: 3650 }), 201);
        expect(r.body.expiresAt).toBeLessThanOrEqual(original);
        token = r.body.token as string;
        id = r.body.id as string;
      }
      const self = await ok(call(token, 'GET', '/api-tokens/self'), 200);
      expect((self.body.token as { expiresAt: number }).expiresAt).toBeLessThanOrEqual(original);
    });

    it('an admin may give a token a longer life when it rotates it', async () => {
      const made = await ok(
        call(h.admin, 'POST', '/api-tokens', { name: `pms2-${h.u}`, role: 'auditor', sites: [B.siteId], expiresInDays: 1 }),
        201,
      );
      const r = await ok(call(h.admin, 'POST', `/api-tokens/${made.body.id as string}/rotate`, { expiresInDays: 30 }), 201);
      expect(r.body.expiresAt).toBeGreaterThan((made.body.expiresAt as number) + 20 * DAY_MS);
    });
  });
});
