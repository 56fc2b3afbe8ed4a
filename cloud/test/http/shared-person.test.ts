import type { AddressInfo } from 'node:net';
import { generateSigningKeyPair, newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { openStaysApi, type StaysApi } from '../stays-harness.js';
import { T0 } from '../helpers.js';

/**
 * A person two sites share, attacked from outside by the manager of one of
 * them: real HTTP against the listening app. Hana is created for site A and
 * holds a key at each site (issued by a chain token covering both). Site B's
 * manager sees her, and must see only site B in what it reads of her, and may
 * not change what site A relies on too (her contact); its block of her is
 * site B's alone.
 */
const SECRET = 'whsec_tobira_shared_person';
const DAY_MS = 86_400_000;

interface Res {
  status: number;
  body: Record<string, unknown>;
  text: string;
}

describe.each(pgBackends())('a person two sites share, on %s', (backend) => {
  let h: StaysApi;
  let base: string;
  let managerA: string;
  let managerB: string;
  let chain: string;
  const A = { siteId: '', keyId: '', webhookId: '' };
  const B = { siteId: '', gatewayId: '', doorId: '', keyId: '', webhookId: '', personId: '' };
  let shared = '';
  let pin = 810_000;
  const nextPin = () => String(pin++);

  const call = async (token: string | null, method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
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
  /** Nothing of site A in an answer to site B: not its site, gateway, doors or key. */
  const revealsNothingOfA = (r: Res) => {
    for (const v of [A.siteId, h.gatewayId, ...h.doors, A.keyId, A.webhookId]) expect(r.text, `answer names ${v}`).not.toContain(v);
  };
  const contactOf = async (personId: string) =>
    (await h.cloud.db.query<{ email: string | null; locale: string | null }>('SELECT email, locale FROM people WHERE id = $1', [personId]))
      .rows[0];
  const keyStatus = async (keyId: string) =>
    ((await ok(call(h.admin, 'GET', `/keys/${keyId}`), 200)).body.key as { status: string }).status;

  beforeAll(async () => {
    h = await openStaysApi(backend, { tag: 'sp', secret: SECRET, api: { webhookAllowPrivateNetworks: true } });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const u = h.u;
    A.siteId = h.siteId;
    B.siteId = h.otherSiteId;
    managerA = (await createApiToken(h.cloud.db, { name: 'mA', role: 'manager', sites: [A.siteId] }, T0)).token;
    managerB = h.managerOther;
    chain = (await createApiToken(h.cloud.db, { name: 'chain', role: 'manager', sites: [A.siteId, B.siteId] }, T0)).token;
    const pair = await generateSigningKeyPair();
    B.gatewayId = `gw-b-${u}`;
    await ok(call(managerB, 'POST', '/gateways', { gatewayId: B.gatewayId, siteId: B.siteId, publicJwk: pair.publicJwk }), 201);
    B.doorId = `door-b-${u}`;
    await ok(call(managerB, 'POST', '/doors', { id: B.doorId, gatewayId: B.gatewayId, name: 'B front' }), 201);
    B.personId = `person-b-${u}`;
    await ok(call(managerB, 'POST', '/people', { id: B.personId, name: 'B only', siteId: B.siteId }), 201);
    // each site's webhook, told of every key change at its site
    for (const [s, token] of [
      [A, managerA],
      [B, managerB],
    ] as const) {
      const hook = await ok(
        call(token, 'POST', '/webhooks', { siteId: s.siteId, url: 'http://127.0.0.1:9/hook', events: ['key.state_changed'] }),
        201,
      );
      s.webhookId = (hook.body.webhook as { id: string }).id;
    }
    // Hana: created for site A, with a key at each site from the chain's token
    shared = `hana-${u}`;
    await ok(call(chain, 'POST', '/people', { id: shared, name: 'Hana', siteId: A.siteId }), 201);
    const validity = { validFrom: T0, validUntil: T0 + 30 * DAY_MS };
    A.keyId = `key-a-${u}`;
    await ok(
      call(chain, 'POST', '/keys', {
        keyId: A.keyId,
        personId: shared,
        doors: [h.doors[0]],
        credential: { type: 'pin', value: nextPin() },
        ...validity,
      }),
      202,
    );
    B.keyId = `key-b-${u}`;
    await ok(
      call(chain, 'POST', '/keys', {
        keyId: B.keyId,
        personId: shared,
        doors: [B.doorId],
        credential: { type: 'pin', value: nextPin() },
        ...validity,
      }),
      202,
    );
    await ok(call(chain, 'PUT', `/people/${shared}/contact`, { email: 'hana@example.com', locale: 'ja' }), 200);
  });
  afterAll(() => h?.close());

  describe("what site B's manager reads of her", () => {
    it('GET /people/{id}: her, with site B as her only site, nothing of site A', async () => {
      const r = await ok(call(managerB, 'GET', `/people/${shared}`), 200);
      expect(r.body).toEqual({ person: { id: shared, name: 'Hana', sites: [B.siteId], createdAt: expect.any(Number) } });
      revealsNothingOfA(r);
    });

    it('GET /people, with and without the siteId filter: her with site B only', async () => {
      for (const path of ['/people', `/people?siteId=${B.siteId}`]) {
        const r = await ok(call(managerB, 'GET', path), 200);
        const items = r.body.items as { id: string; sites: string[] }[];
        expect(items.find((p) => p.id === shared)?.sites, path).toEqual([B.siteId]);
        revealsNothingOfA(r);
      }
      // site A's filter lists none of her
      const a = await ok(call(managerB, 'GET', `/people?siteId=${A.siteId}`), 200);
      expect(a.body.items).toEqual([]);
    });

    it('each site sees its own site, a token of both and an admin see both', async () => {
      const sitesFor = async (token: string) =>
        ((await ok(call(token, 'GET', `/people/${shared}`), 200)).body.person as { sites: string[] }).sites;
      expect(await sitesFor(managerA)).toEqual([A.siteId]);
      expect(await sitesFor(chain)).toEqual([A.siteId, B.siteId].sort());
      expect(await sitesFor(h.admin)).toEqual([A.siteId, B.siteId].sort());
    });

    it('creating her again for site B: a refusal that carries nothing of site A', async () => {
      const r = await call(managerB, 'POST', '/people', { id: shared, name: 'Hana', siteId: B.siteId });
      expect(r.status, r.text).toBeGreaterThanOrEqual(400);
      expect(r.body).not.toHaveProperty('person');
      revealsNothingOfA(r);
      const sites = await h.cloud.db.query('SELECT site_id FROM api_person_sites WHERE person_id = $1', [shared]);
      expect(sites.rows).toEqual([{ site_id: A.siteId }]);
    });
  });

  describe('her contact, which every site of hers sends its notices to', () => {
    it("site B's manager may not change it: 403 PERSON_SHARED naming no site, and it is unchanged", async () => {
      const before = await contactOf(shared);
      for (const body of [
        { email: 'attacker@example.com' },
        { email: null },
        { locale: 'en' },
        { email: 'attacker@example.com', locale: 'en' },
      ]) {
        const r = await call(managerB, 'PUT', `/people/${shared}/contact`, body);
        expect(r.status, r.text).toBe(403);
        expect(r.body).toMatchObject({ status: 'refused', code: 'PERSON_SHARED' });
        expect(Object.keys(r.body).sort()).toEqual(['code', 'detail', 'status']);
        revealsNothingOfA(r);
      }
      expect(await contactOf(shared)).toEqual(before);
      expect(before).toEqual({ email: 'hana@example.com', locale: 'ja' });
    });

    it("nor may site A's manager, whose token does not cover site B either", async () => {
      const r = await call(managerA, 'PUT', `/people/${shared}/contact`, { email: 'a-desk@example.com' });
      expect(r.status, r.text).toBe(403);
      expect(r.body).toMatchObject({ code: 'PERSON_SHARED' });
      expect(r.text).not.toContain(B.siteId);
      expect((await contactOf(shared))?.email).toBe('hana@example.com');
    });

    it('a token covering both sites, or an admin, may', async () => {
      await ok(call(chain, 'PUT', `/people/${shared}/contact`, { email: 'hana2@example.com' }), 200);
      expect((await contactOf(shared))?.email).toBe('hana2@example.com');
      await ok(call(h.admin, 'PUT', `/people/${shared}/contact`, { email: 'hana@example.com' }), 200);
      expect((await contactOf(shared))?.email).toBe('hana@example.com');
    });

    it("a person of site B alone is still site B's to change", async () => {
      const r = await ok(call(managerB, 'PUT', `/people/${B.personId}/contact`, { email: 'b-only@example.com' }), 200);
      expect(r.body).toMatchObject({ status: 'applied', code: 'NOTIFICATION_CONTACT_SAVED' });
      expect((await contactOf(B.personId))?.email).toBe('b-only@example.com');
    });

    it('once site A issues a key to a site B person, her contact is no longer site B alone to change', async () => {
      const p = `late-${newId()}`;
      await ok(call(managerB, 'POST', '/people', { id: p, name: 'Late', siteId: B.siteId }), 201);
      await ok(call(managerB, 'PUT', `/people/${p}/contact`, { email: 'late@example.com' }), 200);
      await ok(
        call(chain, 'POST', '/keys', {
          personId: p,
          doors: [h.doors[0]],
          credential: { type: 'pin', value: nextPin() },
          validFrom: T0,
          validUntil: T0 + DAY_MS,
        }),
        202,
      );
      const r = await call(managerB, 'PUT', `/people/${p}/contact`, { email: 'attacker@example.com' });
      expect(r.status, r.text).toBe(403);
      expect(r.body).toMatchObject({ code: 'PERSON_SHARED' });
      expect((await contactOf(p))?.email).toBe('late@example.com');
    });
  });

  describe("site B's block of her", () => {
    it("revokes her key at site B only: her key at site A, site A's block list and site A's webhook are untouched", async () => {
      const aKeyBefore = await keyStatus(A.keyId);
      const hookRows = async (endpoint: string) =>
        (await h.cloud.db.query<{ body: unknown }>('SELECT body FROM webhook_outbox WHERE endpoint_id = $1 ORDER BY id', [endpoint])).rows;
      const aHooksBefore = (await hookRows(A.webhookId)).length;
      const bHooksBefore = (await hookRows(B.webhookId)).length;

      const r = await ok(call(managerB, 'PUT', `/sites/${B.siteId}/blocked-people/${shared}`, { reason: 'unpaid minibar' }), 200);
      expect(r.body).toMatchObject({ status: 'applied', code: 'PERSON_BLOCKED', siteId: B.siteId, personId: shared, keysRevoked: 1 });
      revealsNothingOfA(r);

      expect(await keyStatus(A.keyId)).toBe(aKeyBefore);
      expect(await keyStatus(B.keyId)).not.toBe(aKeyBefore);
      expect((await ok(call(managerA, 'GET', `/sites/${A.siteId}/blocked-people`), 200)).body.items).toEqual([]);
      const blocks = await h.cloud.db.query('SELECT site_id FROM blocked_people WHERE person_id = $1', [shared]);
      expect(blocks.rows).toEqual([{ site_id: B.siteId }]);
      // site A is told nothing; site B is told of its own key only
      expect((await hookRows(A.webhookId)).length).toBe(aHooksBefore);
      const bHooks = (await hookRows(B.webhookId)).slice(bHooksBefore);
      expect(bHooks.length).toBeGreaterThan(0);
      for (const row of bHooks) {
        const text = JSON.stringify(row.body);
        expect(text).toContain(B.keyId);
        for (const v of [A.siteId, A.keyId, h.gatewayId]) expect(text).not.toContain(v);
      }

      // site A may still issue her a key
      const aKey = await call(managerA, 'POST', '/keys', {
        personId: shared,
        doors: [h.doors[0]],
        credential: { type: 'pin', value: nextPin() },
        validFrom: T0,
        validUntil: T0 + DAY_MS,
      });
      expect(aKey.status, aKey.text).toBe(202);

      // lifting it is site B's alone too
      const lift = await ok(call(managerB, 'DELETE', `/sites/${B.siteId}/blocked-people/${shared}`), 200);
      expect(lift.body).toMatchObject({ status: 'applied', code: 'PERSON_UNBLOCKED' });
      revealsNothingOfA(lift);
    });
  });
});
