import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '@tobira/shared';
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
 * The staff API's router limits: Fastify's default `maxParamLength` (100)
 * would answer a longer path segment itself (414 with Fastify's body, before
 * any hook), below the 128 characters a cloud id may have. Every segment up
 * to 512 characters reaches the routes; longer is this API's own 414
 * URI_TOO_LONG, a malformed URL its own 400 BAD_REQUEST.
 */
const TOKEN = 'staff-token-path-length-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

describe('gateway staff API path segments', () => {
  let dir: string;
  let store: GatewayStore;
  let app: FastifyInstance;
  const clock = new ManualClock(T0);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-gw-path-'));
    store = new GatewayStore(openDatabase(join(dir, 'gateway.sqlite')));
    const ctx: AppContext = {
      gatewayId: 'gw-path',
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
      log: pino({ level: 'silent' }),
      now: () => clock.now(),
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

  it('routes a 128-character segment to its route (answered by the route, not the router)', async () => {
    for (const url of [`/staff/alarms/${'a'.repeat(128)}/ack`, `/staff/locks/${'l'.repeat(128)}/unlock`]) {
      const r = await app.inject({ method: 'POST', url, headers: { ...auth, 'content-type': 'application/json' }, payload: '{}' });
      expect(r.statusCode, `${url}: ${r.body}`).not.toBe(414);
      expect(r.json()).toHaveProperty('code');
      expect(r.json().code).not.toMatch(/^FST_/);
    }
  });

  it('answers a longer segment with its own 414 URI_TOO_LONG and a malformed URL with its own 400 BAD_REQUEST', async () => {
    const long = await app.inject({ method: 'POST', url: `/staff/alarms/${'a'.repeat(513)}/ack`, headers: auth });
    expect(long.statusCode).toBe(414);
    expect(long.json()).toEqual({ code: 'URI_TOO_LONG', detail: 'a path segment is too long' });
    const bad = await app.inject({ method: 'POST', url: '/staff/alarms/%E0%A4%A/ack', headers: auth });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ code: 'BAD_REQUEST' });
  });
});
