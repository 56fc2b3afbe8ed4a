import { generateSigningKeyPair, newId, type ManualClock } from '@tobira/shared';
import { startMqttBackend, type MqttTestBroker, type PgBackendName } from '@tobira/shared/testing';
import type { FastifyInstance } from 'fastify';
import type { Cloud } from '../../src/index.js';
import { buildApp } from '../../src/http/app.js';
import type { ApiConfig } from '../../src/http/context.js';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { startCloud } from '../cloud-helpers.js';
import { DAY, T0, openTestDb, testLog, type TestDb } from '../helpers.js';

export { DAY, T0 };

export interface Harness {
  readonly t: TestDb;
  readonly broker: MqttTestBroker;
  readonly cloud: Cloud & { clock: ManualClock };
  readonly app: FastifyInstance;
  /** admin (all sites), manager of site A, manager of site B, auditor of site A */
  readonly tokens: { admin: string; managerA: string; managerB: string; auditorA: string };
  readonly siteA: string;
  readonly siteB: string;
  close(): Promise<void>;
}

/** One database, broker, cloud and app per describe block (PGlite start is slow); tests isolate by fresh ids. */
export async function openHarness(backend: PgBackendName, config: Partial<ApiConfig> = {}): Promise<Harness> {
  const t = await openTestDb(backend);
  const broker = await startMqttBackend('aedes');
  const cloud = await startCloud(t, broker.url);
  const app = await buildApp({ cloud, db: cloud.db, log: testLog, clock: cloud.clock, config, processRegistry: cloud.metricsRegistry });
  await app.ready();
  const u = newId().slice(-8);
  const siteA = `site-a-${u}`;
  const siteB = `site-b-${u}`;
  for (const id of [siteA, siteB]) {
    const s = await cloud.createSite({ id, name: id });
    if (s.status !== 'applied') throw new Error('site');
  }
  const now = cloud.clock.now();
  const tokens = {
    admin: (await createApiToken(cloud.db, { name: 'admin', role: 'admin' }, now)).token,
    managerA: (await createApiToken(cloud.db, { name: 'mA', role: 'manager', sites: [siteA] }, now)).token,
    managerB: (await createApiToken(cloud.db, { name: 'mB', role: 'manager', sites: [siteB] }, now)).token,
    auditorA: (await createApiToken(cloud.db, { name: 'aA', role: 'auditor', sites: [siteA] }, now)).token,
  };
  return {
    t,
    broker,
    cloud,
    app,
    tokens,
    siteA,
    siteB,
    async close() {
      await app.close();
      await cloud.stop();
      await broker.stop();
      await t.close();
    },
  };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** A gateway with one door and a person at `siteId`, made through the API; returns their ids. */
export async function seedSite(h: Harness, siteId: string, token = h.tokens.admin) {
  const u = newId().slice(-10);
  const pair = await generateSigningKeyPair();
  const gatewayId = `gw-${u}`;
  const gw = await h.app.inject({
    method: 'POST',
    url: '/gateways',
    headers: bearer(token),
    payload: { gatewayId, siteId, publicJwk: pair.publicJwk },
  });
  if (gw.statusCode !== 201) throw new Error(`gateway ${gw.statusCode} ${gw.body}`);
  const door = await h.app.inject({
    method: 'POST',
    url: '/doors',
    headers: bearer(token),
    payload: { id: `door-${u}`, gatewayId, name: 'Front' },
  });
  if (door.statusCode !== 201) throw new Error(`door ${door.statusCode} ${door.body}`);
  const person = await h.app.inject({
    method: 'POST',
    url: '/people',
    headers: bearer(token),
    payload: { id: `person-${u}`, name: 'Hana', siteId },
  });
  if (person.statusCode !== 201) throw new Error(`person ${person.statusCode} ${person.body}`);
  return { u, gatewayId, doorId: `door-${u}`, personId: `person-${u}`, pair, provisioning: gw.json().provisioning };
}

export async function count(h: Harness, table: string): Promise<number> {
  const r = await h.cloud.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return r.rows[0]?.n ?? 0;
}

/** Row counts of every table a write could touch: "nothing was written" is these unchanged. */
export async function snapshot(h: Harness): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const table of [
    'sites',
    'gateways',
    'doors',
    'people',
    'keys',
    'key_history',
    'outbox',
    'idempotency_keys',
    'api_person_sites',
    'api_tokens',
  ]) {
    out[table] = await count(h, table);
  }
  return out;
}

let pin = 100000;
/** A fresh PIN per call, so keys never collide on CREDENTIAL_IN_USE. */
export const nextPin = (): string => String(pin++);

export function issueBody(s: { personId: string; doorId: string }, over: Record<string, unknown> = {}) {
  return {
    personId: s.personId,
    doors: [s.doorId],
    credential: { type: 'pin', value: nextPin() },
    validFrom: T0,
    validUntil: T0 + DAY,
    ...over,
  };
}
