import type { AddressInfo } from 'node:net';
import { encodeCursor, generateSigningKeyPair, newId } from '@tobira/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken, revokeApiToken } from '../../src/adapters/db/tokens.js';
import { routesOf } from '../../src/http/app.js';
import { T0 } from '../helpers.js';
import { openStaysApi, type StaysApi } from '../stays-harness.js';
import { MATRIX, type Access, type Expect, type Row, type SiteFixtures } from './authz-matrix.table.js';

/**
 * The generated authorization matrix (expected answers: authz-matrix.table.ts).
 * One app on PGlite, listening, with a local Stripe; the fixtures of two sites
 * made once through the API; then every route of the route table (Fastify's
 * registered routes, which must agree with the OpenAPI document) × every
 * principal × a resource of the caller's own site and of the other site,
 * over real HTTP with real tokens.
 */
const SECRET = 'whsec_tobira_authz_matrix';
const DAY_MS = 86_400_000;

type PrincipalName = 'none' | 'expired' | 'revoked' | 'admin' | 'adminB' | 'managerA' | 'managerB' | 'auditorA' | 'auditorB';

interface Res {
  status: number;
  body: Record<string, unknown>;
  text: string;
}

/** What a principal gets before a row's own answers are looked at (the table's PRINCIPAL RULES); null: the row decides. */
function ruleAnswer(p: PrincipalName, access: Access): Expect | null {
  if (access === 'public') return null;
  if (p === 'none' || p === 'revoked') return { status: 401, code: 'UNAUTHENTICATED' };
  if (p === 'expired') return { status: 401, code: 'TOKEN_EXPIRED' };
  const role = p.startsWith('admin') ? 'admin' : p.startsWith('manager') ? 'manager' : 'auditor';
  if (role === 'auditor' && (access === 'write' || access === 'admin' || access === 'tokenAdmin'))
    return { status: 403, code: 'FORBIDDEN_ROLE' };
  if (role === 'manager' && (access === 'admin' || access === 'tokenAdmin')) return { status: 403, code: 'FORBIDDEN_ROLE' };
  if (p === 'adminB' && access === 'admin') return { status: 403, code: 'FORBIDDEN_ROLE' };
  if (role !== 'admin' && access === 'self') return { status: 404, code: 'TOKEN_NOT_FOUND' };
  return null;
}

const FOREIGN: readonly PrincipalName[] = ['managerB', 'auditorB', 'adminB'];
const OWN: readonly PrincipalName[] = ['auditorA', 'managerA', 'admin'];
const REFUSED_ALWAYS: readonly PrincipalName[] = ['none', 'expired', 'revoked'];

describe('the cloud admin API authorization matrix', () => {
  let h: StaysApi;
  let base: string;
  const tokens = {} as Record<PrincipalName, string | null>;
  let A: SiteFixtures;
  let B: SiteFixtures;
  /** Site B's fixtures but for the person both sites share (created for site A, a key at each site), and that person's key at site A. */
  let S: SiteFixtures;
  let sharedKeyA = '';
  let counter = 0;
  const n = () => String(1_000_000 + ++counter);
  const failures: string[] = [];

  const call = async (token: string | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const withBody = body !== undefined;
    const r = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(token === null ? {} : { authorization: `Bearer ${token}` }),
        ...(withBody ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      ...(withBody ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // HTML or Prometheus text: `text` tells
    }
    return { status: r.status, body: parsed, text } satisfies Res;
  };
  const made = async (p: Promise<Res>, status: number): Promise<Record<string, unknown>> => {
    const r = await p;
    if (r.status !== status) throw new Error(`fixture: expected ${status}, got ${r.status} ${r.text}`);
    return r.body;
  };

  /** Makes one site's fixtures through the API as an admin; ids carry the site's letter so no id is a part of another. */
  async function fixtures(letter: 'A' | 'B', site: string, gateway: string, door: string): Promise<SiteFixtures> {
    const admin = tokens.admin;
    const u = h.u;
    const id = (kind: string) => `${kind}-${letter}-${u}`;
    const f = { site, gateway, door, n } as { -readonly [K in keyof SiteFixtures]: SiteFixtures[K] };
    f.person = id('person');
    f.personName = `Secret Name ${letter} ${u}`;
    await made(call(admin, 'POST', '/people', { id: f.person, name: f.personName, siteId: site }), 201);
    f.key = id('key');
    const key = { personId: f.person, doors: [door], validFrom: T0, validUntil: T0 + DAY_MS };
    await made(call(admin, 'POST', '/keys', { keyId: f.key, ...key, credential: { type: 'pin', value: `1${n().padStart(7, '0')}` } }), 202);
    await made(call(admin, 'POST', '/keys', { ...key, credential: { type: 'pin', value: `2${n().padStart(7, '0')}` } }), 202);
    await made(call(admin, 'PUT', `/sites/${site}/stay-settings`, { walkInsAllowed: true }), 200);
    f.room = id('room');
    await made(call(admin, 'POST', '/rooms', { id: f.room, siteId: site, name: id('Room'), doors: [door] }), 201);
    f.plan = id('plan');
    const plan = { amount: 5000, currency: 'jpy', interval: 'month', walkInAmount: 1500, doors: [door] };
    await made(call(admin, 'POST', '/plans', { id: f.plan, siteId: site, name: id('Plan'), ...plan }), 201);
    await made(call(admin, 'POST', '/plans', { siteId: site, name: id('Plan2'), ...plan }), 201);
    f.membership = id('membership');
    await made(call(admin, 'POST', '/memberships', { id: f.membership, planId: f.plan, personId: f.person }), 201);
    f.walkIn = id('walkin');
    const wi = {
      id: f.walkIn,
      siteId: site,
      planId: f.plan,
      personId: f.person,
      credential: { type: 'pin', value: `3${n().padStart(7, '0')}` },
    };
    await made(call(admin, 'POST', '/walk-ins', wi), 202);
    const stay = await made(
      call(
        admin,
        'POST',
        '/stays',
        { personId: f.person, roomId: f.room, checkIn: '2030-06-01', checkOut: '2030-06-03', amount: 20_000, currency: 'jpy' },
        { 'idempotency-key': id('booking') },
      ),
      202,
    );
    f.stay = (stay.stay as { id: string }).id;
    const hook = await made(call(admin, 'POST', '/webhooks', { siteId: site, url: 'http://127.0.0.1:9/hook', events: ['alarm'] }), 201);
    f.webhook = (hook.webhook as { id: string }).id;
    const mode = await made(call(admin, 'POST', `/sites/${site}/mode`, { mode: 'lockdown', reason: 'matrix fixture' }), 202);
    const request = mode.request as { requestId?: string; id?: string };
    f.modeRequest = String(request.requestId ?? request.id);
    f.alarm = newId();
    await h.cloud.db.query(
      'INSERT INTO alarms (alarm_id, gateway_id, lock_id, door_id, kind, at, cid, received_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)',
      [f.alarm, gateway, id('lock'), door, 'jam', T0, newId(), T0],
    );
    f.token = (await createApiToken(h.cloud.db, { name: id('pms'), role: 'manager', sites: [site] }, T0)).id;
    return f;
  }

  beforeAll(async () => {
    h = await openStaysApi('pglite', {
      tag: 'mx',
      secret: SECRET,
      api: { rateLimitMax: 1_000_000, rateLimitIpMax: 1_000_000, webhookAllowPrivateNetworks: true },
    });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const db = h.cloud.db;
    const token = async (name: string, role: 'admin' | 'manager' | 'auditor', sites: string[] | null) =>
      (await createApiToken(db, { name, role, sites }, T0)).token;
    const siteA = h.siteId;
    const siteB = h.otherSiteId;
    tokens.none = null;
    tokens.admin = h.admin;
    tokens.adminB = await token('admin of B', 'admin', [siteB]);
    tokens.managerA = await token('manager of A', 'manager', [siteA]);
    tokens.managerB = h.managerOther;
    tokens.auditorA = await token('auditor of A', 'auditor', [siteA]);
    tokens.auditorB = await token('auditor of B', 'auditor', [siteB]);
    tokens.expired = (await createApiToken(db, { name: 'expired', role: 'admin', expiresInDays: 1 }, T0 - 2 * DAY_MS)).token;
    const revoked = await createApiToken(db, { name: 'revoked', role: 'admin' }, T0);
    await revokeApiToken(db, revoked.id, T0);
    tokens.revoked = revoked.token;
    const pair = await generateSigningKeyPair();
    const gwB = `gwb-${h.u}`;
    await made(call(tokens.admin, 'POST', '/gateways', { gatewayId: gwB, siteId: siteB, publicJwk: pair.publicJwk }), 201);
    const doorB = `doorb-${h.u}`;
    await made(call(tokens.admin, 'POST', '/doors', { id: doorB, gatewayId: gwB, name: 'B front' }), 201);
    A = await fixtures('A', siteA, h.gatewayId, h.doors[0] ?? '');
    B = await fixtures('B', siteB, gwB, doorB);
    const shared = `person-S-${h.u}`;
    await made(call(tokens.admin, 'POST', '/people', { id: shared, name: `Shared Name ${h.u}`, siteId: siteA }), 201);
    sharedKeyA = `key-S-${h.u}`;
    const validity = { validFrom: T0, validUntil: T0 + DAY_MS };
    await made(
      call(tokens.admin, 'POST', '/keys', {
        keyId: sharedKeyA,
        personId: shared,
        doors: [A.door],
        credential: { type: 'pin', value: `4${n().padStart(7, '0')}` },
        ...validity,
      }),
      202,
    );
    await made(
      call(tokens.admin, 'POST', '/keys', {
        personId: shared,
        doors: [B.door],
        credential: { type: 'pin', value: `5${n().padStart(7, '0')}` },
        ...validity,
      }),
      202,
    );
    S = { ...B, person: shared };
  }, 120_000);
  afterAll(() => h?.close());

  const pathOf = (route: string, row: Row, t: SiteFixtures, extraQuery: Record<string, string> = {}) => {
    const [, url = ''] = route.split(' ');
    const params = row.params?.(t) ?? {};
    const path = url.replace(/:(\w+)/g, (_m, name: string) => {
      const v = params[name];
      if (v === undefined) throw new Error(`${route}: the row names no value for :${name}`);
      return encodeURIComponent(v);
    });
    const q = new URLSearchParams({ ...(row.query?.(t) ?? {}), ...extraQuery }).toString();
    return q === '' ? path : `${path}?${q}`;
  };
  const request = (
    p: PrincipalName,
    route: string,
    row: Row,
    t: SiteFixtures,
    me: SiteFixtures,
    opts: { query?: Record<string, string>; body?: unknown } = {},
  ) => {
    const [method = 'GET'] = route.split(' ');
    const path = pathOf(route, row, t, opts.query);
    const body = opts.body ?? row.body?.(t, me);
    return { method, path, body, headers: row.headers?.(t) ?? {}, send: () => call(tokens[p], method, path, body, row.headers?.(t) ?? {}) };
  };
  /** Site A's ids and names, but those the request sent itself. */
  const secretsOfA = (sent: string) =>
    [
      A.site,
      A.gateway,
      A.door,
      A.person,
      A.personName,
      A.key,
      A.room,
      A.plan,
      A.membership,
      A.walkIn,
      A.stay,
      A.webhook,
      A.modeRequest,
      A.alarm,
      A.token,
      sharedKeyA,
    ].filter((v) => !sent.includes(v) && !sent.includes(encodeURIComponent(v)));
  const check = (what: string, r: Res, want: Expect | readonly number[]) => {
    const statuses = Array.isArray(want) ? want : [(want as Expect).status];
    const code = Array.isArray(want) ? undefined : (want as Expect).code;
    if (!statuses.includes(r.status) || (code !== undefined && r.body.code !== code))
      failures.push(`${what}: expected ${statuses.join('|')}${code ? ` ${code}` : ''}, got ${r.status} ${r.text.slice(0, 300)}`);
    if (r.status >= 400 && (typeof r.body.code !== 'string' || typeof r.body.status !== 'string'))
      failures.push(`${what}: an error answer without the API body: ${r.text.slice(0, 200)}`);
  };
  const checkNoLeak = (what: string, sent: string, r: Res) => {
    for (const s of secretsOfA(sent))
      if (r.text.includes(s)) failures.push(`${what}: the answer shows site A's ${s}: ${r.text.slice(0, 300)}`);
  };

  it('has a row for every route, and the registered routes and the OpenAPI document agree', async () => {
    const registered = routesOf(h.app).filter((r) => !r.url.startsWith('/docs'));
    const names = registered.map((r) => `${r.method} ${r.url}`);
    const doc = (await call(null, 'GET', '/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
    const documented = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ':$1')}`),
    );
    expect(documented.sort()).toEqual(
      registered
        .filter((r) => !r.hidden)
        .map((r) => `${r.method} ${r.url}`)
        .sort(),
    );
    expect(
      names.filter((x) => MATRIX[x] === undefined),
      'routes without a row in authz-matrix.table.ts',
    ).toEqual([]);
    expect(
      Object.keys(MATRIX).filter((x) => !names.includes(x)),
      'rows for routes that do not exist',
    ).toEqual([]);
  });

  it('has a `shared` answer for every route that names a person', () => {
    const named = Object.entries(MATRIX).filter(([, row]) => {
      if (row.access === 'public') return false;
      const sent = JSON.stringify([row.params?.(A), row.query?.(A), row.body?.(A, B), row.list?.filters(A)]);
      return sent.includes(A.person);
    });
    expect(
      named.filter(([, row]) => row.shared === undefined).map(([route]) => route),
      'routes naming a person without a `shared` answer in authz-matrix.table.ts',
    ).toEqual([]);
  });

  it('answers every principal as the table says, and no answer to site B shows anything of site A', async () => {
    const rows = Object.entries(MATRIX);
    // refusals and site B's attempts first: none of them may change site A's rows
    for (const [route, row] of rows) {
      for (const p of [...REFUSED_ALWAYS, ...FOREIGN, ...OWN]) {
        const rule = ruleAnswer(p, row.access);
        const isForeign = FOREIGN.includes(p);
        if (rule === null && !isForeign) continue;
        const rq = request(p, route, row, A, B);
        const r = await rq.send();
        const sent = `${rq.path} ${JSON.stringify(rq.body ?? null)} ${JSON.stringify(rq.headers)}`;
        check(`${p} ${rq.method} ${rq.path}`, r, rule ?? row.foreign);
        if (isForeign && row.access !== 'public') checkNoLeak(`${p} ${rq.method} ${rq.path}`, sent, r);
      }
      if (row.taken) {
        const rq = request('managerB', route, row, A, B, { body: row.taken(A, B) });
        const r = await rq.send();
        check(`managerB ${rq.method} ${rq.path} under site A's id`, r, { status: 409, code: 'ID_UNAVAILABLE' });
        checkNoLeak(`managerB ${rq.method} ${rq.path} under site A's id`, `${rq.path} ${JSON.stringify(rq.body)}`, r);
      }
      if (row.shared) {
        const shared = row.shared;
        for (const p of FOREIGN) {
          if (ruleAnswer(p, row.access) !== null) continue;
          const rq = request(p, route, row, S, B, {
            ...(shared.query ? { query: shared.query(S) } : {}),
            ...(shared.body ? { body: shared.body(S) } : {}),
          });
          const r = await rq.send();
          const what = `${p} ${rq.method} ${rq.path} naming the shared person`;
          check(what, r, shared.answer);
          checkNoLeak(what, `${rq.path} ${JSON.stringify(rq.body ?? null)}`, r);
        }
      }
      if (row.list) {
        const probes: Record<string, string>[] = [
          ...Object.entries(row.list.filters(A)).map(([k, v]) => ({ [k]: v })),
          row.list.filters(A),
          ...(row.list.cursor ? [{ cursor: encodeCursor([T0, A.key]) }, { cursor: encodeCursor([T0, A.person]) }] : []),
        ];
        for (const query of probes) {
          for (const p of ['managerB', 'adminB', 'auditorB'] as const) {
            if (ruleAnswer(p, row.access) !== null) continue;
            const rq = request(p, route, row, A, B, { query });
            const r = await rq.send();
            if (r.status !== 200 && r.status !== 404 && !(r.status === 400 && r.body.code === 'BAD_REQUEST'))
              failures.push(`${p} ${rq.method} ${rq.path}: a list filter or cursor of site A answered ${r.status} ${r.text.slice(0, 200)}`);
            const items = (r.body.items ?? []) as unknown[];
            if (query.cursor === undefined && items.length > 0)
              failures.push(`${p} ${rq.method} ${rq.path}: a filter naming site A's rows listed ${items.length} rows`);
            checkNoLeak(`${p} ${rq.method} ${rq.path}`, rq.path.replace(/cursor=[^&]*/, ''), r);
          }
        }
      }
    }
    // then site A's own callers, reads before writes, in the table's order
    for (const [route, row] of rows) {
      for (const p of OWN) {
        if (ruleAnswer(p, row.access) !== null) continue;
        const rq = request(p, route, row, A, A);
        const r = await rq.send();
        check(`${p} (own site) ${rq.method} ${rq.path}`, r, row.own);
      }
    }
    expect(failures).toEqual([]);
  }, 300_000);
});
