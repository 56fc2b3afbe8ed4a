import { createServer } from 'node:net';
import { startEmbeddedBroker } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Tx } from '../../src/adapters/db/db.js';
import { openPgDb } from '../../src/adapters/db/pg.js';
import { buildApp } from '../../src/http/app.js';
import type { AdminCloud } from '../../src/http/context.js';
import { startCloud } from '../cloud-helpers.js';
import { capturingLogger, openTestDb, testLog } from '../helpers.js';
import { waitFor } from '../mqtt-helpers.js';
import { openHarness, type Harness } from './harness.js';

/** A local port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

describe.each(pgBackends())('cloud /healthz and /readyz on %s', (backend) => {
  // one harness for the file (PGlite starts slowly): each test breaks only a database handle or a broker of its own
  let h: Harness;
  const cleanups: (() => Promise<unknown>)[] = [];
  beforeAll(async () => {
    h = await openHarness(backend);
  });
  afterAll(async () => {
    await h?.close();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  /** The API over another database handle (the cloud itself keeps its own). */
  const appOver = async (db: Tx, config: { healthDbTimeoutMs?: number } = {}, log = testLog, cloud: AdminCloud = h.cloud) => {
    const app = await buildApp({ cloud, db, log, clock: h.cloud.clock, config });
    cleanups.push(() => app.close());
    return app;
  };

  it('/healthz is 200 while the process answers, with no token, even when its database and broker are gone (liveness, not readiness)', async () => {
    const other = await openTestDb(backend);
    await other.close();
    const broker = await startEmbeddedBroker();
    const cloud = await startCloud(h.t, broker.url);
    cleanups.push(
      () => broker.stop().catch(() => {}),
      () => cloud.stop(),
    );
    await broker.stop();
    await waitFor(() => !cloud.mqttConnected, 'cloud MQTT link down');
    const app = await appOver(other.db, {}, testLog, cloud);
    const live = await app.inject({ method: 'GET', url: '/healthz' });
    expect(live.statusCode).toBe(200);
    expect(live.json()).toEqual({ ok: true, status: 'ok', reasons: [] });
    const ready = await app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json().reasons).toEqual(['DATABASE_UNREACHABLE', 'BROKER_DISCONNECTED']);
  });

  it('/readyz is 200 ok, with no token, when the database answers and the broker link is up', async () => {
    const r = await h.app.inject({ method: 'GET', url: '/readyz' });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({ ok: true, status: 'ok', reasons: [] });
  });

  it('/readyz is 503 DATABASE_UNREACHABLE when its database is closed, logged with the correlation id', async () => {
    const other = await openTestDb(backend);
    await other.close();
    const { log, lines } = await capturingLogger();
    const app = await appOver(other.db, {}, log);
    const r = await app.inject({ method: 'GET', url: '/readyz', headers: { 'x-correlation-id': 'cid-health-db' } });
    expect(r.statusCode).toBe(503);
    expect(r.json()).toEqual({ ok: false, status: 'unavailable', code: 'SERVICE_UNAVAILABLE', reasons: ['DATABASE_UNREACHABLE'] });
    expect(r.headers['retry-after']).toBe('5');
    expect(lines.find((l) => l.msg === 'readiness check failed')).toMatchObject({
      cid: 'cid-health-db',
      code: 'SERVICE_UNAVAILABLE',
      reasons: ['DATABASE_UNREACHABLE'],
      level: 40,
    });
  });

  it('/readyz is 503 DATABASE_UNREACHABLE when the PostgreSQL server refuses connections', async () => {
    const db = openPgDb(`postgres://postgres@127.0.0.1:${await closedPort()}/none`, testLog);
    try {
      const r = await (await appOver(db)).inject({ method: 'GET', url: '/readyz' });
      expect(r.statusCode).toBe(503);
      expect(r.json().reasons).toEqual(['DATABASE_UNREACHABLE']);
    } finally {
      await db.close();
    }
  });

  it('/readyz is 503 DATABASE_UNREACHABLE when the database does not answer within healthDbTimeoutMs, instead of hanging', async () => {
    const hung: Tx = { query: () => new Promise(() => {}), exec: () => new Promise(() => {}), transaction: () => new Promise(() => {}) };
    const r = await (await appOver(hung, { healthDbTimeoutMs: 50 })).inject({ method: 'GET', url: '/readyz' });
    expect(r.statusCode).toBe(503);
    expect(r.json().reasons).toEqual(['DATABASE_UNREACHABLE']);
  });

  it('/readyz is 503 BROKER_DISCONNECTED when the broker goes away (an aedes broker of its own on a free port, stopped)', async () => {
    const broker = await startEmbeddedBroker();
    const cloud = await startCloud(h.t, broker.url);
    cleanups.push(
      () => broker.stop().catch(() => {}),
      () => cloud.stop(),
    );
    const app = await appOver(h.cloud.db, {}, testLog, cloud);
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    await broker.stop();
    await waitFor(() => !cloud.mqttConnected, 'cloud MQTT link down');
    const r = await app.inject({ method: 'GET', url: '/readyz' });
    expect(r.statusCode).toBe(503);
    expect(r.json()).toEqual({ ok: false, status: 'unavailable', code: 'SERVICE_UNAVAILABLE', reasons: ['BROKER_DISCONNECTED'] });
  });
});
