import { randomBytes } from 'node:crypto';
import { systemClock } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isDatabaseUnavailable, whenDatabaseAnswers, type Db } from '../src/adapters/db/db.js';
import { startAdminApi, type AdminApi } from '../src/cloud.js';
import { startCloud } from './cloud-helpers.js';
import { openTestDb, testLog, type TestDb } from './helpers.js';

const terminated = () => new Error('Connection terminated unexpectedly');
const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

describe('a cloud started while its database is away', () => {
  it('tries again until the database answers, one DATABASE_UNAVAILABLE line a try', async () => {
    const lines: object[] = [];
    const pauses: number[] = [];
    let calls = 0;
    const r = await whenDatabaseAnswers(
      () => {
        calls += 1;
        if (calls === 1) return Promise.reject(terminated());
        if (calls === 2) return Promise.reject(refused());
        return Promise.resolve('migrated');
      },
      { warn: (o) => lines.push(o) },
      60_000,
      (ms) => (pauses.push(ms), Promise.resolve()),
    );
    expect(r).toBe('migrated');
    expect(lines).toMatchObject([
      { code: 'DATABASE_UNAVAILABLE', attempt: 1 },
      { code: 'DATABASE_UNAVAILABLE', attempt: 2 },
    ]);
    expect(pauses[1]).toBeGreaterThan(pauses[0]!);
  });

  it('throws at once what is no outage (a refused migration, a wrong query), and an outage longer than the wait', async () => {
    const wrong = Object.assign(new Error('relation "x" does not exist'), { code: '42P01' });
    await expect(whenDatabaseAnswers(() => Promise.reject(wrong), { warn: () => {} })).rejects.toBe(wrong);
    expect(isDatabaseUnavailable(wrong)).toBe(false);
    const e = terminated();
    await expect(whenDatabaseAnswers(() => Promise.reject(e), { warn: () => {} }, 0)).rejects.toBe(e);
  });
});

/**
 * A database whose link is cut once on the first statement of each start-up step after the migrations (the key ring
 * check, the resealing, the signing key, the bootstrap token): what a cut between two start-up steps
 * does. Every other call goes to the real database.
 */
function cutOnceOnEach(db: Db, matches: readonly RegExp[]): { db: Db; cut: string[]; stop(): void } {
  const cut: string[] = [];
  const left = [...matches];
  let cutting = true;
  const proxy = new Proxy(db, {
    get(target, prop) {
      if (prop === 'query')
        return (sql: string, params?: readonly unknown[]) => {
          const i = cutting ? left.findIndex((m) => m.test(sql)) : -1;
          if (i >= 0) {
            left.splice(i, 1);
            cut.push(sql.trim().slice(0, 60));
            return Promise.reject(new Error('Connection terminated unexpectedly'));
          }
          return target.query(sql, params);
        };
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return {
    db: proxy,
    cut,
    stop: () => {
      cutting = false;
    },
  };
}

describe.each(pgBackends())('a cloud whose database link is cut between start-up steps, on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let cloud: Awaited<ReturnType<typeof startCloud>> | undefined;
  let api: AdminApi | undefined;
  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
  });
  afterAll(async () => {
    await api?.close();
    await cloud?.stop();
    await broker?.stop();
    await t?.close();
  });

  it('starts anyway (each step tried again, DATABASE_UNAVAILABLE), and the bootstrap admin token it installs works', async () => {
    const flaky = cutOnceOnEach(t.db, [/_sealed/i, /signing_keys/i, /api_tokens/i]);
    cloud = await startCloud(t, broker.url, { deps: { db: flaky.db } });
    const token = `tbr_${randomBytes(32).toString('base64url')}`;
    api = await startAdminApi({ cloud, db: flaky.db, log: testLog, clock: systemClock, webhooks: false, bootstrapAdminToken: token });
    flaky.stop();
    expect(flaky.cut.some((s) => /api_tokens/i.test(s))).toBe(true);
    expect(flaky.cut).toHaveLength(3);
    const r = await fetch(`${api.url}/api-tokens`, { headers: { authorization: `Bearer ${token}` } });
    expect(r.status).toBe(200);
  });
});
