import { createServer } from 'node:net';
import { pgBackends } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Tx } from '../../src/adapters/db/db.js';
import { openPgDb } from '../../src/adapters/db/pg.js';
import { buildApp } from '../../src/http/app.js';
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

describe.each(pgBackends())('cloud /healthz on %s', (backend) => {
  let h: Harness;
  const apps: { close(): Promise<unknown> }[] = [];
  beforeEach(async () => {
    h = await openHarness(backend);
  });
  afterEach(async () => {
    for (const a of apps.splice(0)) await a.close();
    await h?.close();
  });

  /** The API over another database handle (the cloud itself keeps its own). */
  const appOver = async (db: Tx, config: { healthDbTimeoutMs?: number } = {}, log = testLog) => {
    const app = await buildApp({ cloud: h.cloud, db, log, clock: h.cloud.clock, config });
    apps.push(app);
    return app;
  };

  it('is 200 ok, with no token, when the database answers and the broker link is up', async () => {
    const r = await h.app.inject({ method: 'GET', url: '/healthz' });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({ ok: true, status: 'ok', reasons: [] });
  });

  it('is 503 DATABASE_UNREACHABLE when its database is closed, logged with the correlation id', async () => {
    const other = await openTestDb(backend);
    await other.close();
    const { log, lines } = await capturingLogger();
    const app = await appOver(other.db, {}, log);
    const r = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-correlation-id': 'cid-health-db' } });
    expect(r.statusCode).toBe(503);
    expect(r.json()).toEqual({ ok: false, status: 'unavailable', code: 'SERVICE_UNAVAILABLE', reasons: ['DATABASE_UNREACHABLE'] });
    expect(r.headers['retry-after']).toBe('5');
    expect(lines.find((l) => l.msg === 'health check failed')).toMatchObject({ cid: 'cid-health-db', code: 'SERVICE_UNAVAILABLE', reasons: ['DATABASE_UNREACHABLE'], level: 40 });
  });

  it('is 503 DATABASE_UNREACHABLE when the PostgreSQL server refuses connections', async () => {
    const db = openPgDb(`postgres://postgres@127.0.0.1:${await closedPort()}/none`, testLog);
    try {
      const r = await (await appOver(db)).inject({ method: 'GET', url: '/healthz' });
      expect(r.statusCode).toBe(503);
      expect(r.json().reasons).toEqual(['DATABASE_UNREACHABLE']);
    } finally {
      await db.close();
    }
  });

  it('is 503 DATABASE_UNREACHABLE when the database does not answer within healthDbTimeoutMs, instead of hanging', async () => {
    const hung: Tx = { query: () => new Promise(() => {}), exec: () => new Promise(() => {}), transaction: () => new Promise(() => {}) };
    const r = await (await appOver(hung, { healthDbTimeoutMs: 50 })).inject({ method: 'GET', url: '/healthz' });
    expect(r.statusCode).toBe(503);
    expect(r.json().reasons).toEqual(['DATABASE_UNREACHABLE']);
  });

  it('is 503 BROKER_DISCONNECTED when the broker goes away', async () => {
    await h.broker.stop();
    await waitFor(() => !h.cloud.mqttConnected, 'cloud MQTT link down');
    const r = await h.app.inject({ method: 'GET', url: '/healthz' });
    expect(r.statusCode).toBe(503);
    expect(r.json()).toEqual({ ok: false, status: 'unavailable', code: 'SERVICE_UNAVAILABLE', reasons: ['BROKER_DISCONNECTED'] });
  });
});
