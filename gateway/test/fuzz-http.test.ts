import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CorrelationId, ManualClock, newId } from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../src/adapters/sqlite/db.js';
import { staffLists } from '../src/adapters/sqlite/staff-queries.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { TrustedTime, noCrash, nowOf, type AppContext } from '../src/app/context.js';
import { ackAlarmLocally, setSiteMode } from '../src/app/staff-actions.js';
import { health, staffStatus, type StaffStatusDeps } from '../src/app/staff-status.js';
import { buildApp } from '../src/http/app.js';
import { createMetrics } from '../src/metrics.js';
import { T0 } from './fixtures.js';

/**
 * Fuzzing of the gateway's staff HTTP API: random bodies,
 * content types, ids, correlation ids and methods on the real app (fastify
 * `inject`, no socket) over a real SQLite file, wired as gateway.ts wires it.
 * Property: no input gets a 5xx or throws out of the handler; a refusal
 * carries a stable code and changes nothing (every table counted, the
 * settings row compared); only a valid body changes what it names.
 */
const TOKEN = 'staff-token-fuzz-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

describe('gateway staff API, fuzzed', () => {
  let dir: string;
  let store: GatewayStore;
  let app: FastifyInstance;
  let alarmId: string;
  let ctx: AppContext;
  const clock = new ManualClock(T0);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-gw-fuzz-'));
    store = new GatewayStore(openDatabase(join(dir, 'gateway.sqlite')));
    store.upsertLock('lock-1', 'door-1', T0);
    alarmId = newId();
    store.insertAlarm({ alarmId, lockId: 'lock-1', kind: 'jam', at: T0 }, T0);
    ctx = {
      gatewayId: 'gw-fuzz',
      store,
      time: new TrustedTime(clock, clock),
      log: pino({ level: 'silent' }),
      metrics: createMetrics(),
      crash: noCrash,
      outboxWritten: () => {},
    };
    const statusDeps: StaffStatusDeps = {
      ...ctx,
      cloudConnected: () => true,
      siteConnected: () => true,
      stopping: () => false,
      storage: () => ({ freeBytes: 1e12, minFreeBytes: 1e6, low: false, checkedAt: T0 }),
      timeZone: 'Asia/Tokyo',
    };
    app = buildApp({
      registry: createMetrics().registry,
      staffToken: TOKEN,
      metricsToken: 'metrics-token-of-the-fuzz-0123',
      log: pino({ level: 'silent' }),
      now: () => clock.now(),
      // a fuzz run sends thousands of requests from one address; the limit has its own tests (http-guards)
      authFailures: { max: 1_000_000, windowSeconds: 1 },
      setMode: (mode, reason, cid) => setSiteMode(ctx, mode, reason ?? 'staff', cid),
      ackAlarm: (id, by, cid) => ackAlarmLocally(ctx, id, by, cid),
      staff: { status: () => staffStatus(statusDeps), ...staffLists(store.db, () => nowOf(ctx)) },
      health: () => health(statusDeps),
    });
    await app.ready();
  });
  afterAll(async () => {
    await app?.close();
    store?.db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Every table's row count and the settings row. */
  const snapshot = () => {
    const tables = store.db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
      .all() as {
      name: string;
    }[];
    const counts = Object.fromEntries(
      tables.map(({ name }) => [name, (store.db.prepare(`SELECT count(*) AS n FROM "${name}"`).get() as { n: number }).n]),
    );
    const alarms = store.db.prepare('SELECT * FROM alarms ORDER BY rowid').all();
    return { counts, settings: store.settings(), alarms };
  };

  const contentType = fc.constantFrom(
    'application/json',
    'application/json; charset=utf-8',
    'text/plain',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/octet-stream',
    '',
  );
  const body = fc.oneof(
    fc.jsonValue().map((v) => JSON.stringify(v)),
    fc
      .record(
        { mode: fc.oneof(fc.string(), fc.jsonValue()), reason: fc.oneof(fc.string({ maxLength: 300 }), fc.jsonValue()) },
        { requiredKeys: [] },
      )
      .map((v) => JSON.stringify(v)),
    fc
      .record({ note: fc.oneof(fc.string({ maxLength: 300 }), fc.jsonValue()), extra: fc.jsonValue() }, { requiredKeys: [] })
      .map((v) => JSON.stringify(v)),
    fc.string({ maxLength: 300 }),
    fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b).toString('latin1')),
    fc.constant('{"mode":"lockdown","reason":"x"'),
    fc.constant('x'.repeat(17 * 1024)),
  );

  it('random bodies and content types on POST /staff/mode never get a 5xx; a refusal writes nothing; an accepted one sets exactly that mode', async () => {
    await fc.assert(
      fc.asyncProperty(body, contentType, async (payload, type) => {
        const before = snapshot();
        const r = await app.inject({
          method: 'POST',
          url: '/staff/mode',
          headers: { ...auth, ...(type === '' ? {} : { 'content-type': type }) },
          payload,
        });
        expect(r.statusCode).toBeLessThan(500);
        const json = r.json() as { code?: string; status?: string; mode?: string };
        if (r.statusCode >= 400) {
          expect(json.code).toMatch(/^[A-Z][A-Z_]+$/);
          expect(snapshot()).toEqual(before);
        } else {
          expect(r.statusCode).toBe(200);
          expect(['normal', 'lockdown']).toContain(json.mode);
          expect(store.settings().mode).toBe(json.mode);
          setSiteMode(ctx, 'normal', 'fuzz reset', newId());
        }
      }),
      { numRuns: 150 },
    );
  }, 120_000);

  it('random alarm ids and bodies on POST /staff/alarms/:id/ack never get a 5xx; only the existing alarm is closed, once', async () => {
    const id = fc.oneof(
      fc.string({ minLength: 1, maxLength: 200 }).map(encodeURIComponent),
      fc.constant(alarmId),
      fc.constant('%'),
      fc.constant('..%2F..%2Fx'),
    );
    await fc.assert(
      fc.asyncProperty(id, body, contentType, async (alarm, payload, type) => {
        const before = snapshot();
        const r = await app.inject({
          method: 'POST',
          url: `/staff/alarms/${alarm}/ack`,
          headers: { ...auth, ...(type === '' ? {} : { 'content-type': type }) },
          payload,
        });
        expect(r.statusCode).toBeLessThan(500);
        const json = r.json() as { code?: string; status?: string };
        if (r.statusCode >= 400) {
          expect(json.code).toMatch(/^[A-Z][A-Z_]+$/);
          expect(snapshot()).toEqual(before);
        } else {
          expect(alarm).toBe(alarmId);
          expect(['applied', 'noop']).toContain(json.status);
          if (json.status === 'noop') expect(snapshot()).toEqual(before);
        }
      }),
      { numRuns: 150 },
    );
  }, 120_000);

  it('random methods, paths, tokens and correlation ids never get a 5xx and change nothing', async () => {
    const paths = fc.oneof(
      fc.constantFrom(
        '/staff/status',
        '/staff/access-events',
        '/staff/alarms',
        '/staff/locks',
        '/staff/inbox/failed',
        '/staff/rejected',
        '/staff/lock-refusals',
        '/healthz',
        '/metrics',
        '/ui/',
        '/',
      ),
      fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`)),
      fc.string({ maxLength: 100 }).map((p) => `/staff/${encodeURIComponent(p)}`),
    );
    const method = fc.constantFrom<'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD' | 'OPTIONS'>(
      'GET',
      'POST',
      'PUT',
      'PATCH',
      'DELETE',
      'HEAD',
      'OPTIONS',
    );
    const header = fc.oneof(
      fc.constant(undefined),
      fc.string({ maxLength: 200 }).filter((s) => /^[\x20-\x7e]*$/.test(s)),
    );
    await fc.assert(
      fc.asyncProperty(method, paths, fc.oneof(fc.constant(`Bearer ${TOKEN}`), header), header, async (m, url, authorization, cid) => {
        const before = snapshot();
        const r = await app.inject({
          method: m,
          url,
          headers: { ...(authorization === undefined ? {} : { authorization }), ...(cid === undefined ? {} : { 'x-correlation-id': cid }) },
        });
        // /healthz answers 503 while the site fails closed (no lease here): its verdict, not an error
        // (a malformed correlation id, the empty one included, is refused 400 before any route, by design)
        const badCid = cid !== undefined && !CorrelationId.safeParse(cid).success;
        if (url === '/healthz' && (m === 'GET' || m === 'HEAD')) expect(badCid ? [400] : [200, 503]).toContain(r.statusCode);
        else expect(r.statusCode).toBeLessThan(500);
        if (r.statusCode >= 400 && m !== 'HEAD' && url !== '/healthz')
          expect((r.json() as { code?: string }).code).toMatch(/^[A-Z][A-Z_]+$/);
        // /staff/status and /healthz read trusted time (a GET raises no floor); nothing else may change
        expect(snapshot()).toEqual(before);
      }),
      { numRuns: 150 },
    );
  }, 120_000);
});
