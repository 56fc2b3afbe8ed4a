import {
  connectMqtt,
  gatewayCloudClientId,
  generateSigningKeyPair,
  newId,
  startEmbeddedBroker,
  waitConnected,
  type EmbeddedBroker,
} from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedBrokerAccounts, setServiceAccount } from '../../src/adapters/broker/embedded.js';
import { gatewayIdOfUsername } from '../../src/adapters/broker/acl.js';
import { buildApp } from '../../src/http/app.js';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import type { Cloud } from '../../src/index.js';
import { startCloud } from '../cloud-helpers.js';
import { waitFor } from '../mqtt-helpers.js';
import { T0, openTestDb, testLog, type TestDb } from '../helpers.js';
import { bearer, openHarness, type Harness } from './harness.js';

/** The admin API with managed broker accounts (the embedded broker enforcing them). */
interface Managed {
  readonly t: TestDb;
  readonly broker: EmbeddedBroker;
  readonly cloud: Cloud;
  readonly app: FastifyInstance;
  readonly tokens: { admin: string; managerA: string; managerB: string; auditorA: string };
  readonly siteA: string;
  readonly siteB: string;
}

async function openManaged(backend: 'pglite' | 'postgres'): Promise<Managed> {
  const t = await openTestDb(backend);
  const accounts = new EmbeddedBrokerAccounts({ db: t.db, log: testLog });
  const broker = await startEmbeddedBroker({ aedes: accounts.hooks() });
  const service = await setServiceAccount(t.db, 'tobira-cloud', T0);
  const cloud = await startCloud(t, broker.url, {
    env: { MQTT_USERNAME: service.username, MQTT_PASSWORD: service.password },
    deps: { brokerAccounts: accounts },
  });
  const app = await buildApp({
    cloud,
    db: cloud.db,
    log: testLog,
    clock: cloud.clock,
    config: { gatewayBrokerUrl: 'mqtts://broker.example:8883' },
  });
  await app.ready();
  const u = newId().slice(-8);
  const siteA = `site-a-${u}`;
  const siteB = `site-b-${u}`;
  for (const id of [siteA, siteB]) expect((await cloud.createSite({ id, name: id })).status).toBe('applied');
  const now = cloud.clock.now();
  const tokens = {
    admin: (await createApiToken(cloud.db, { name: 'admin', role: 'admin' }, now)).token,
    managerA: (await createApiToken(cloud.db, { name: 'mA', role: 'manager', sites: [siteA] }, now)).token,
    managerB: (await createApiToken(cloud.db, { name: 'mB', role: 'manager', sites: [siteB] }, now)).token,
    auditorA: (await createApiToken(cloud.db, { name: 'aA', role: 'auditor', sites: [siteA] }, now)).token,
  };
  return { t, broker, cloud, app, tokens, siteA, siteB };
}

/** The client id a login may use: a gateway login is pinned to its cloud link's id (docs/architecture.md "Broker accounts"). */
const clientIdOf = (username: string) => {
  const gatewayId = gatewayIdOfUsername(username);
  return gatewayId === null ? `probe-${newId().slice(-12)}` : gatewayCloudClientId(gatewayId);
};

/** Logs in to the broker: true when the CONNACK accepts. */
async function logsIn(url: string, username: string, password: string): Promise<boolean> {
  const c = connectMqtt(url, { username, password, clientId: clientIdOf(username), reconnectPeriod: 0 });
  try {
    await waitConnected(c, 5000);
    return true;
  } catch {
    return false;
  } finally {
    c.end(true);
  }
}

describe.each(pgBackends())('gateway broker credentials over the admin API on %s', (backend) => {
  let h: Managed;
  beforeAll(async () => {
    h = await openManaged(backend);
  });
  afterAll(async () => {
    await h?.app.close();
    await h?.cloud.stop();
    await h?.broker.stop();
    await h?.t.close();
  });

  const register = async (token: string, siteId: string, headers: Record<string, string> = {}) => {
    const gatewayId = `gw-${newId().slice(-10)}`;
    const payload = { gatewayId, siteId, publicJwk: (await generateSigningKeyPair()).publicJwk };
    const r = await h.app.inject({ method: 'POST', url: '/gateways', headers: { ...bearer(token), ...headers }, payload });
    return { gatewayId, payload, r };
  };
  const rotate = (token: string, gatewayId: string, headers: Record<string, string> = {}) =>
    h.app.inject({ method: 'POST', url: `/gateways/${gatewayId}/broker-credentials`, headers: { ...bearer(token), ...headers } });

  it("POST /gateways answers the gateway's own broker login, and it logs in", async () => {
    const { gatewayId, r } = await register(h.tokens.managerA, h.siteA);
    expect(r.statusCode).toBe(201);
    const broker = r.json().provisioning.broker;
    expect(broker).toEqual({
      url: 'mqtts://broker.example:8883',
      username: `gw:${gatewayId}`,
      password: expect.stringMatching(/^[A-Za-z0-9_-]{43,}$/),
    });
    expect(r.json().provisioning).not.toHaveProperty('mqtt');
    expect(await logsIn(h.broker.url, broker.username, broker.password)).toBe(true);
    // only a hash is stored
    const row = await h.t.db.query<{ password_hash: string }>('SELECT password_hash FROM broker_accounts WHERE username = $1', [
      broker.username,
    ]);
    expect(row.rows[0]?.password_hash).toMatch(/^scrypt\$/);
    expect(row.rows[0]?.password_hash).not.toContain(broker.password);
  });

  it('a replayed registration (same Idempotency-Key) answers the same credentials, and they still log in', async () => {
    const key = `reg-${newId()}`;
    const first = await register(h.tokens.admin, h.siteA, { 'idempotency-key': key });
    expect(first.r.statusCode).toBe(201);
    const again = await h.app.inject({
      method: 'POST',
      url: '/gateways',
      headers: { ...bearer(h.tokens.admin), 'idempotency-key': key },
      payload: first.payload,
    });
    expect(again.statusCode).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json().provisioning.broker).toEqual(first.r.json().provisioning.broker);
    const b = again.json().provisioning.broker;
    expect(await logsIn(h.broker.url, b.username, b.password)).toBe(true);
  });

  it('rotation by a manager of the site: 200 with a new password; the session open with the old one is closed, the old one no longer logs in, the new one does', async () => {
    const { gatewayId, r } = await register(h.tokens.admin, h.siteA);
    const old = r.json().provisioning.broker;
    const session = connectMqtt(h.broker.url, {
      username: old.username,
      password: old.password,
      clientId: clientIdOf(old.username),
      reconnectPeriod: 0,
    });
    let closed = false;
    session.on('close', () => void (closed = true));
    await waitConnected(session, 5000);
    const rot = await rotate(h.tokens.managerA, gatewayId);
    await waitFor(() => closed, 'the session of the old password to be closed').finally(() => session.end(true));
    expect(rot.statusCode).toBe(200);
    expect(rot.json()).toEqual({
      status: 'applied',
      code: 'BROKER_CREDENTIALS_ROTATED',
      gatewayId,
      broker: { url: 'mqtts://broker.example:8883', username: old.username, password: expect.stringMatching(/^[A-Za-z0-9_-]{43,}$/) },
    });
    expect(rot.json().broker.password).not.toBe(old.password);
    expect(await logsIn(h.broker.url, old.username, old.password)).toBe(false);
    expect(await logsIn(h.broker.url, old.username, rot.json().broker.password)).toBe(true);
  });

  it('a replayed rotation answers the same new password and does not rotate again', async () => {
    const { gatewayId } = await register(h.tokens.admin, h.siteA);
    const key = `rot-${newId()}`;
    const first = await rotate(h.tokens.admin, gatewayId, { 'idempotency-key': key });
    const again = await rotate(h.tokens.admin, gatewayId, { 'idempotency-key': key });
    expect(first.statusCode).toBe(200);
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.json()).toEqual(first.json());
    expect(await logsIn(h.broker.url, first.json().broker.username, first.json().broker.password)).toBe(true);
  });

  it("another site's manager gets a scoped 404 and the password is unchanged; an auditor of the site gets 403", async () => {
    const { gatewayId, r } = await register(h.tokens.admin, h.siteA);
    const b = r.json().provisioning.broker;
    const other = await rotate(h.tokens.managerB, gatewayId);
    expect(other.statusCode).toBe(404);
    expect(other.json()).toMatchObject({ status: 'refused', code: 'GATEWAY_NOT_FOUND' });
    const auditor = await rotate(h.tokens.auditorA, gatewayId);
    expect(auditor.statusCode).toBe(403);
    expect(auditor.json()).toMatchObject({ code: 'FORBIDDEN_ROLE' });
    expect(await logsIn(h.broker.url, b.username, b.password)).toBe(true);
    expect((await rotate(h.tokens.admin, 'gw-no-such-gateway')).statusCode).toBe(404);
  });
});

describe.each(pgBackends())('broker credentials when accounts are unmanaged, on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await openHarness(backend);
  });
  afterAll(async () => {
    await h?.close();
  });

  it('registration answers a null login, and rotation is 422 BROKER_ACCOUNTS_UNMANAGED', async () => {
    const gatewayId = `gw-${newId().slice(-10)}`;
    const r = await h.app.inject({
      method: 'POST',
      url: '/gateways',
      headers: bearer(h.tokens.admin),
      payload: { gatewayId, siteId: h.siteA, publicJwk: (await generateSigningKeyPair()).publicJwk },
    });
    expect(r.statusCode).toBe(201);
    expect(r.json().provisioning.broker).toEqual({ url: null, username: null, password: null });
    const rot = await h.app.inject({ method: 'POST', url: `/gateways/${gatewayId}/broker-credentials`, headers: bearer(h.tokens.admin) });
    expect(rot.statusCode).toBe(422);
    expect(rot.json()).toMatchObject({ status: 'refused', code: 'BROKER_ACCOUNTS_UNMANAGED' });
  });
});
