import fc from 'fast-check';
import { generateSigningKeyPair, newId } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../src/adapters/db/tokens.js';
import { buildApp } from '../src/http/app.js';
import { startCloud } from './cloud-helpers.js';
import { T0, openTestDb, testLog, type TestDb } from './helpers.js';

/**
 * The admin API's bodies, path ids and headers fuzzed on every write route
 * (`http/fuzz.test.ts` covers the first routes' bodies and list
 * queries): stays and their actions, rooms, stay settings, API tokens,
 * webhooks, alarms, dead letters (outbox and billing), broker credentials,
 * and the original resources again. Billing is configured (the local
 * Stripe), so no route is refused for its absence. Property: never a 5xx;
 * a 4xx carries a stable code and changes no row of any table (but the
 * answer stored under its Idempotency-Key, as documented); whatever
 * the token may not do is refused before anything is read.
 */
describe.each(pgBackends())('admin API write routes fuzzed on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let local: StripeLocal;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let app: FastifyInstance;
  let admin: string;
  let auditor: string;
  let ids: { siteId: string; gatewayId: string; doorId: string; personId: string; roomId: string };
  const numRuns = Number(process.env.TOBIRA_FUZZ_RUNS ?? (backend === 'postgres' ? 30 : 120));

  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    local = await startStripeLocal({ seed: `fuzz-http-${backend}` });
    const stripe = stripeClient(local, { maxNetworkRetries: 0, timeout: 5_000 });
    cloud = await startCloud(t, broker.url, { env: { STRIPE_WEBHOOK_SECRET: 'whsec_fuzz_http' }, deps: { stripe, billingWorker: false } });
    app = await buildApp({ cloud, db: cloud.db, log: testLog, clock: cloud.clock });
    await app.ready();
    const u = newId().slice(-8);
    const siteId = `site-fz-${u}`;
    expect((await cloud.createSite({ id: siteId, name: siteId })).status).toBe('applied');
    const gatewayId = `gw-fz-${u}`;
    const pair = await generateSigningKeyPair();
    expect((await cloud.registerGateway({ gatewayId, siteId, publicJwk: pair.publicJwk })).status).toBe('applied');
    const doorId = `door-fz-${u}`;
    expect((await cloud.createDoor({ id: doorId, gatewayId, name: 'Front' })).status).toBe('applied');
    const personId = `person-fz-${u}`;
    expect((await cloud.createPerson({ id: personId, name: 'Guest' })).status).toBe('applied');
    admin = (await createApiToken(cloud.db, { name: 'admin', role: 'admin' }, T0)).token;
    auditor = (await createApiToken(cloud.db, { name: 'auditor', role: 'auditor', sites: [siteId] }, T0)).token;
    const room = await app.inject({
      method: 'POST',
      url: '/rooms',
      headers: { authorization: `Bearer ${admin}` },
      payload: { siteId, name: '101', doors: [doorId] },
    });
    expect(room.statusCode).toBe(201);
    ids = { siteId, gatewayId, doorId, personId, roomId: room.json<{ id: string }>().id };
  });
  afterAll(async () => {
    await app?.close();
    await cloud?.stop();
    await local?.close();
    await broker?.stop();
    await t?.close();
  });

  /** Row count of every table in the schema (one query). */
  let countQuery: string | null = null;
  const counts = async (): Promise<Record<string, number>> => {
    if (countQuery === null) {
      const tables = await t.db.query<{ name: string }>(
        "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
      );
      countQuery = tables.rows.map(({ name }) => `SELECT '${name}' AS name, count(*)::int AS n FROM "${name}"`).join(' UNION ALL ');
    }
    const r = await t.db.query<{ name: string; n: number }>(countQuery);
    return Object.fromEntries(r.rows.map((x) => [x.name, Number(x.n)]));
  };

  /** A path id: one that exists, a made-up one, or junk (escaped, so the URL stays a URL). */
  const id = (real: () => string) =>
    fc.oneof(
      fc.constant(null).map(() => real()),
      fc.constant(null).map(() => `x-${newId()}`),
      fc.string({ minLength: 1, maxLength: 300 }).map(encodeURIComponent),
      fc.constantFrom('%00', '..', '%2F', 'a%00b', '1'.repeat(40)),
    );
  const route = fc.oneof(
    fc
      .constantFrom('/stays', '/rooms', '/api-tokens', '/webhooks', '/keys', '/people', '/doors', '/gateways', '/sites')
      .map((p) => ({ method: 'POST' as const, url: p })),
    fc
      .tuple(
        id(() => `stay_${newId()}`),
        fc.constantFrom('cancel', 'check-in', 'check-out'),
      )
      .map(([s, a]) => ({ method: 'POST' as const, url: `/stays/${s}/${a}` })),
    id(() => ids.siteId).map((s) => ({ method: 'PUT' as const, url: `/sites/${s}/stay-settings` })),
    fc
      .tuple(
        id(() => newId()),
        fc.constantFrom('revoke', 'rotate'),
      )
      .map(([x, a]) => ({ method: 'POST' as const, url: `/api-tokens/${x}/${a}` })),
    id(() => newId()).map((x) => ({ method: 'POST' as const, url: `/webhooks/${x}/disable` })),
    id(() => newId()).map((x) => ({ method: 'POST' as const, url: `/alarms/${x}/ack` })),
    fc
      .oneof(
        id(() => '1'),
        fc.integer().map(String),
      )
      .map((x) => ({ method: 'POST' as const, url: `/dead-letters/${x}/retry` })),
    fc
      .tuple(
        fc.oneof(fc.constantFrom('job', 'event', 'jobs', 'events'), fc.string({ maxLength: 20 }).map(encodeURIComponent)),
        id(() => '1'),
      )
      .filter(([k]) => k !== '')
      .map(([k, x]) => ({ method: 'POST' as const, url: `/billing/dead-letters/${k}/${x}/retry` })),
    id(() => ids.gatewayId).map((g) => ({ method: 'POST' as const, url: `/gateways/${g}/broker-credentials` })),
    id(() => `key-${newId()}`).map((k) => ({ method: 'POST' as const, url: `/keys/${k}/revoke` })),
  );
  /** Bodies: random JSON, raw text and bytes, and near misses of each route's valid body. */
  const body = () =>
    fc.oneof(
      fc.jsonValue().map((v) => JSON.stringify(v)),
      fc.string({ maxLength: 200 }),
      fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b).toString('latin1')),
      fc
        .record({
          field: fc.constantFrom(
            'personId',
            'roomId',
            'checkIn',
            'checkOut',
            'amount',
            'currency',
            'credential',
            'siteId',
            'name',
            'doors',
            'role',
            'sites',
            'sharedDoors',
            'holdMinutes',
            'note',
            'reason',
            'url',
            'events',
            'x',
          ),
          value: fc.oneof(fc.jsonValue(), fc.constant('a\u0000b'), fc.constant(-1), fc.constant(1e308), fc.constant('2027-02-30')),
        })
        .map(({ field, value }) =>
          JSON.stringify({
            personId: ids.personId,
            roomId: ids.roomId,
            checkIn: '2027-03-01',
            checkOut: '2027-03-03',
            amount: 30_000,
            currency: 'jpy',
            siteId: ids.siteId,
            name: 'n',
            doors: [ids.doorId],
            role: 'manager',
            sites: [ids.siteId],
            sharedDoors: [],
            holdMinutes: 20,
            [field]: value,
          }),
        ),
    );
  const headers = fc.record(
    {
      'content-type': fc.constantFrom(
        'application/json',
        'text/plain',
        'application/x-www-form-urlencoded',
        'application/json; charset=latin1',
      ),
      'idempotency-key': fc.oneof(
        fc.constant(null).map(() => newId()),
        fc.string({ maxLength: 300 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
      ),
      'x-correlation-id': fc.string({ maxLength: 200 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
    },
    { requiredKeys: ['content-type'] },
  );

  it('random bodies, path ids and headers on every write route: never a 5xx; a 4xx has a code and writes nothing', async () => {
    await fc.assert(
      fc.asyncProperty(route, body(), headers, fc.constantFrom('admin', 'admin', 'admin', 'auditor'), async (r, payload, h, who) => {
        const before = await counts();
        const res = await app.inject({
          method: r.method,
          url: r.url,
          headers: { ...h, authorization: `Bearer ${who === 'admin' ? admin : auditor}` },
          payload,
        });
        expect(res.statusCode, `${r.method} ${r.url} ${payload} -> ${res.body}`).toBeLessThan(500);
        if (res.statusCode >= 400) {
          expect(res.json<{ code?: string }>().code, res.body).toMatch(/^[A-Z][A-Z0-9_]+$/);
          // 4xx answers are stored under their Idempotency-Key (api.md), so a replay gets the same answer: one row at most
          const after = await counts();
          const stored = (after.idempotency_keys ?? 0) - (before.idempotency_keys ?? 0);
          expect(stored).toBeLessThanOrEqual(h['idempotency-key'] === undefined ? 0 : 1);
          expect({ ...after, idempotency_keys: 0 }, `${r.method} ${r.url} ${payload} -> ${res.body}`).toEqual({
            ...before,
            idempotency_keys: 0,
          });
        }
        if (who === 'auditor') expect(res.statusCode, res.body).toBeGreaterThanOrEqual(400);
      }),
      { numRuns },
    );
  }, 300_000);
});
