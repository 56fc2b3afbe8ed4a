import fc from 'fast-check';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type { FastifyInstance } from 'fastify';
import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/http/app.js';
import { startCloud } from './cloud-helpers.js';
import { openTestDb, testLog, type TestDb } from './helpers.js';

/**
 * `POST /webhooks/stripe` fuzzed: random bodies with random
 * signatures, and valid signatures (the real SDK's
 * `generateTestHeaderString`) over random JSON and near-events. Property:
 * never a 5xx; a refusal is 400 with a stable code and stores nothing; a
 * 200 stores exactly one event (or none, for a duplicate). Every table of
 * the schema is counted before and after. PGlite always; PostgreSQL (few
 * runs) when TOBIRA_TEST_PG_URL is set.
 */
const SECRET = 'whsec_tobira_fuzz_webhook';

describe.each(pgBackends())('Stripe webhook route fuzzed on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let local: StripeLocal;
  let stripe: Stripe;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let app: FastifyInstance;
  const numRuns = backend === 'postgres' ? 25 : 100;

  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    local = await startStripeLocal({ seed: `fuzz-webhook-${backend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 0, timeout: 5_000 });
    cloud = await startCloud(t, broker.url, { env: { STRIPE_WEBHOOK_SECRET: SECRET }, deps: { stripe, billingWorker: false } });
    app = await buildApp({ cloud, db: cloud.db, log: testLog, clock: cloud.clock });
    await app.ready();
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

  const now = () => Math.floor(cloud.clock.now() / 1000);
  const sign = (payload: string, timestamp = now()) => stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, timestamp });
  const post = (payload: string | Buffer, signature: string | undefined, contentType = 'application/json') =>
    app.inject({
      method: 'POST',
      url: '/webhooks/stripe',
      headers: {
        ...(contentType === '' ? {} : { 'content-type': contentType }),
        ...(signature === undefined ? {} : { 'stripe-signature': signature }),
      },
      payload,
    });

  const expectRefusedOrStored = async (r: Awaited<ReturnType<typeof post>>, before: Record<string, number>) => {
    expect(r.statusCode, r.body).toBeLessThan(500);
    const after = await counts();
    if (r.statusCode === 200) {
      const body = r.json<{ status: string }>();
      const stored = body.status === 'stored' ? 1 : 0;
      expect(after).toEqual({ ...before, payment_webhook_events: (before.payment_webhook_events ?? 0) + stored });
    } else {
      expect(r.statusCode).toBe(400);
      expect(r.json<{ code: string }>().code).toMatch(/^WEBHOOK_[A-Z_]+$/);
      expect(after).toEqual(before);
    }
  };

  /** Random JSON text; also events of Stripe's shape with a random part. */
  const jsonBody = fc.oneof(
    fc.jsonValue().map((v) => JSON.stringify(v)),
    fc
      .record(
        {
          id: fc.oneof(fc.string(), fc.jsonValue(), fc.constant('evt_\u0000x'), fc.string({ minLength: 300, maxLength: 600 })),
          object: fc.constantFrom('event', 'x'),
          type: fc.oneof(
            fc.constantFrom('payment_intent.succeeded', 'charge.refunded', 'payment_intent.payment_failed'),
            fc.string(),
            fc.jsonValue(),
          ),
          data: fc.oneof(
            fc.jsonValue(),
            fc.record({ object: fc.jsonValue() }),
            fc.record({ object: fc.record({ id: fc.jsonValue(), metadata: fc.jsonValue() }) }),
          ),
          created: fc.oneof(fc.integer(), fc.jsonValue()),
        },
        { requiredKeys: [] },
      )
      .map((v) => JSON.stringify(v)),
  );

  it('random bodies with random or missing signatures: 400 with a code, nothing stored', async () => {
    const header = fc.oneof(
      fc.constant(undefined),
      fc.string({ maxLength: 200 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
      fc
        .tuple(fc.integer({ min: 0, max: 2 ** 31 }), fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), maxLength: 64 }))
        .map(([ts, h]) => `t=${ts},v1=${h}`),
    );
    const body = fc.oneof(
      jsonBody,
      fc.string({ maxLength: 300 }),
      fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
    );
    await fc.assert(
      fc.asyncProperty(
        body,
        header,
        fc.constantFrom('application/json', 'text/plain', 'application/octet-stream', ''),
        async (payload, sig, type) => {
          const before = await counts();
          const r = await post(payload, sig, type);
          await expectRefusedOrStored(r, before);
          expect(r.statusCode).toBe(400);
        },
      ),
      { numRuns },
    );
  }, 300_000);

  it('valid signatures over random JSON and near-events: never a 5xx; a 200 stores one event, a 400 nothing', async () => {
    await fc.assert(
      fc.asyncProperty(jsonBody, fc.constantFrom(0, 0, 0, -400, 400, -1_000_000), async (payload, skew) => {
        const before = await counts();
        const r = await post(payload, sign(payload, now() + skew));
        await expectRefusedOrStored(r, before);
      }),
      { numRuns },
    );
  }, 300_000);

  it('a valid signature over bytes that are not UTF-8 JSON is 400 WEBHOOK_MALFORMED or a signature refusal, never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 200 }), async (bytes) => {
        const payload = Buffer.from(bytes);
        const before = await counts();
        const r = await post(payload, sign(payload.toString('utf8')), 'application/octet-stream');
        await expectRefusedOrStored(r, before);
      }),
      { numRuns: Math.ceil(numRuns / 2) },
    );
  }, 300_000);
});
