import type { AddressInfo } from 'node:net';
import { OUTCOME_CODES } from '@tobira/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PARAM_LENGTH, routesOf } from '../../src/http/app.js';
import { API_CODES } from '../../src/http/codes.js';
import { DAY, T0, bearer, nextPin, openHarness, seedSite, type Harness } from './harness.js';

/**
 * Every path parameter of every route (generated from the routes the app
 * registered, with each parameter's schema from the OpenAPI document) takes
 * the longest value its schema accepts, over real HTTP: the router never
 * answers for the API with its own 414 (Fastify's default `maxParamLength`
 * is 100, ids have up to 128 characters), a longer segment is the API's own
 * 414 URI_TOO_LONG and a malformed URL its own 400 BAD_REQUEST.
 */
interface ParamSchema {
  type?: string;
  pattern?: string;
  maxLength?: number;
  maximum?: number;
  format?: string;
  enum?: string[];
}
interface OpenApiParam {
  in: string;
  name: string;
  schema?: ParamSchema;
}

const KNOWN_CODES = new Set<string>([...Object.keys(API_CODES), ...Object.keys(OUTCOME_CODES)]);

/** The longest string of one repeated letter the schema accepts (at most MAX_PARAM_LENGTH), or a large integer. */
function longestAccepted(s: ParamSchema | undefined): string {
  if (s?.type === 'integer' || s?.type === 'number') return String(Math.min(s.maximum ?? Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER));
  if (s?.format === 'uuid') return 'ffffffff-ffff-ffff-ffff-ffffffffffff';
  if (s?.enum !== undefined) return [...s.enum].sort((a, b) => b.length - a.length)[0] ?? '';
  const re = s?.pattern === undefined ? null : new RegExp(s.pattern);
  for (let n = Math.min(s?.maxLength ?? MAX_PARAM_LENGTH, MAX_PARAM_LENGTH); n > 0; n--) {
    const v = 'a'.repeat(n);
    if (re === null || re.test(v)) return v;
  }
  throw new Error(`no value of repeated letters fits ${JSON.stringify(s)}`);
}

/** A short value the schema accepts, for the parameters beside the one under test. */
function shortAccepted(s: ParamSchema | undefined): string {
  const long = longestAccepted(s);
  return s?.type === 'string' && s.format === undefined && s.enum === undefined ? long.slice(0, 8) : long;
}

describe('path parameters of every route', () => {
  let h: Harness;
  let base: string;
  let params: Map<string, Map<string, ParamSchema | undefined>>;
  const routes = () => routesOf(h.app).filter((r) => r.url.includes('/:') && !r.url.startsWith('/docs') && !r.url.includes('*'));

  const send = async (method: string, path: string) => {
    const withBody = method === 'POST' || method === 'PUT' || method === 'PATCH';
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { ...bearer(h.tokens.admin), ...(withBody ? { 'content-type': 'application/json' } : {}) },
      ...(withBody ? { body: '{}' } : {}),
    });
    const text = await r.text();
    return { status: r.status, text, type: r.headers.get('content-type') ?? '' };
  };

  beforeAll(async () => {
    h = await openHarness('pglite', { rateLimitMax: 100_000, rateLimitIpMax: 100_000 });
    await h.app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const doc = (await h.app.inject({ method: 'GET', url: '/openapi.json' })).json<{
      paths: Record<string, Record<string, { parameters?: OpenApiParam[] }>>;
    }>();
    params = new Map();
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const m = new Map<string, ParamSchema | undefined>();
        for (const p of op.parameters ?? []) if (p.in === 'path') m.set(p.name, p.schema);
        params.set(`${method.toUpperCase()} ${path}`, m);
      }
    }
  });
  afterAll(() => h?.close());

  it('the route table has routes with path parameters, each described in the OpenAPI document', () => {
    expect(routes().length).toBeGreaterThan(30);
    for (const r of routes().filter((x) => !x.hidden)) {
      const key = `${r.method} ${r.url.replace(/:(\w+)/g, '{$1}')}`;
      const names = [...r.url.matchAll(/:(\w+)/g)].map((m) => m[1]);
      expect([...(params.get(key)?.keys() ?? [])].sort(), key).toEqual(names.sort());
    }
  });

  it('takes the longest value each schema accepts in every parameter: never the router 414, always the API body', async () => {
    for (const r of routes()) {
      const schemas = params.get(`${r.method} ${r.url.replace(/:(\w+)/g, '{$1}')}`) ?? new Map<string, ParamSchema | undefined>();
      const names = [...r.url.matchAll(/:(\w+)/g)].map((m) => m[1] ?? '');
      for (const name of names) {
        const path = r.url.replace(/:(\w+)/g, (_m, n: string) =>
          n === name ? longestAccepted(schemas.get(n)) : shortAccepted(schemas.get(n)),
        );
        const res = await send(r.method, path);
        const what = `${r.method} ${path}: ${res.status} ${res.text.slice(0, 200)}`;
        expect(res.status, what).not.toBe(414);
        expect(res.type, what).toMatch(/^(application\/json|text\/html|text\/plain)/);
        if (res.status >= 400) {
          const body = JSON.parse(res.text) as { status?: string; code?: string; detail?: string };
          expect(body.status, what).toMatch(/^(refused|conflict)$/);
          expect(KNOWN_CODES.has(body.code ?? ''), what).toBe(true);
          // the parameter itself passed its schema: a 400 is about the body, never the path
          expect(body.detail ?? '', what).not.toMatch(/^params/);
        }
      }
    }
  });

  it('answers a segment longer than any id with the API body 414 URI_TOO_LONG, and a malformed URL with 400 BAD_REQUEST', async () => {
    for (const r of routes()) {
      const path = r.url.replace(/:(\w+)/g, () => 'a'.repeat(MAX_PARAM_LENGTH + 1));
      const res = await send(r.method, path);
      expect(res.status, `${r.method} ${r.url}`).toBe(414);
      expect(JSON.parse(res.text)).toMatchObject({ status: 'refused', code: 'URI_TOO_LONG' });
    }
    const bad = await send('GET', '/keys/%E0%A4%A');
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text)).toMatchObject({ status: 'refused', code: 'BAD_REQUEST' });
  });

  it('issues, reads and revokes a key whose id has 128 characters', async () => {
    const s = await seedSite(h, h.siteA);
    const keyId = `k${'x'.repeat(120)}${s.u.slice(-7)}`;
    expect(keyId).toHaveLength(128);
    const issue = await fetch(`${base}/keys`, {
      method: 'POST',
      headers: { ...bearer(h.tokens.managerA), 'content-type': 'application/json' },
      body: JSON.stringify({
        keyId,
        personId: s.personId,
        doors: [s.doorId],
        credential: { type: 'pin', value: nextPin() },
        validFrom: T0,
        validUntil: T0 + DAY,
      }),
    });
    expect(issue.status).toBe(202);
    expect((await fetch(`${base}/keys/${keyId}`, { headers: bearer(h.tokens.managerA) })).status).toBe(200);
    const revoke = await fetch(`${base}/keys/${keyId}/revoke`, {
      method: 'POST',
      headers: { ...bearer(h.tokens.managerA), 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'credential_lost' }),
    });
    expect(revoke.status).toBe(202);
    expect(await revoke.json()).toMatchObject({ status: 'applied', key: { id: keyId, status: 'revoking' } });
  });
});
