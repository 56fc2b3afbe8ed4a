import {
  ManualClock,
  connectMqtt,
  gatewayCloudClientId,
  generateSigningKeyPair,
  newId,
  startEmbeddedBroker,
  topics,
  waitConnected,
  type EmbeddedBroker,
} from '@tobira/shared';
import { pgBackends, startMosquitto, type TestMosquitto } from '@tobira/shared/testing';
import type { IClientOptions, MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynsecBrokerAccounts } from '../src/adapters/broker/dynsec.js';
import { EmbeddedBrokerAccounts, setServiceAccount } from '../src/adapters/broker/embedded.js';
import { SERVICE_ROLE, gatewayIdOfUsername } from '../src/adapters/broker/acl.js';
import type { BrokerAccounts, BrokerCredentials } from '../src/app/broker-accounts.js';
import { rotateGatewayBrokerCredentials } from '../src/app/broker-rotation.js';
import { noCrash } from '../src/app/crash.js';
import { createSite, registerGateway } from '../src/app/registry.js';
import type { Cloud } from '../src/index.js';
import { startCloud } from './cloud-helpers.js';
import { DAY, T0, capturingLogger, openTestDb, testLog, testSecrets, type TestDb } from './helpers.js';
import { waitFor } from './mqtt-helpers.js';

/**
 * Per-gateway broker accounts on real brokers: aedes with the embedded
 * accounts (in the cloud database) and Mosquitto with dynamic security,
 * each on PGlite and PostgreSQL. One contract: what a gateway's login may
 * and may not do is the same on both.
 */
type BrokerKind = 'embedded' | 'mosquitto-dynsec';

interface Setup {
  readonly url: string;
  readonly cloud: Cloud;
  readonly t: TestDb;
  readonly service: BrokerCredentials;
  readonly mosquitto: TestMosquitto | null;
  readonly dynsec: DynsecBrokerAccounts | null;
  readonly accounts: BrokerAccounts;
  close(): Promise<void>;
}

async function setUp(kind: BrokerKind, backend: 'pglite' | 'postgres'): Promise<Setup> {
  const t = await openTestDb(backend);
  const clientId = `cloud-${newId().slice(-12)}`;
  if (kind === 'embedded') {
    // a clock that stands still: a rotation in the same millisecond as the registration is still a rotation
    const accounts = new EmbeddedBrokerAccounts({ db: t.db, log: testLog, clock: new ManualClock(T0) });
    const broker: EmbeddedBroker = await startEmbeddedBroker({ aedes: accounts.hooks() });
    const service = await setServiceAccount(t.db, 'tobira-cloud', T0);
    const cloud = await startCloud(t, broker.url, {
      env: { MQTT_USERNAME: service.username, MQTT_PASSWORD: service.password, MQTT_CLIENT_ID: clientId },
      deps: { brokerAccounts: accounts },
    });
    return {
      url: broker.url,
      cloud,
      t,
      service,
      mosquitto: null,
      dynsec: null,
      accounts,
      async close() {
        await cloud.stop();
        await broker.stop();
        await t.close();
      },
    };
  }
  const mosquitto = await startMosquitto({ dynsec: true });
  const admin = mosquitto.admin as { username: string; password: string };
  const dynsec = new DynsecBrokerAccounts({
    url: mosquitto.url,
    username: admin.username,
    password: admin.password,
    timeoutMs: 3000,
    log: testLog,
  });
  await dynsec.start();
  expect(dynsec.ready).toBe(true);
  const service = { username: 'tobira-cloud', password: newId() };
  const made = await dynsec.command({ command: 'createClient', ...service, roles: [{ rolename: SERVICE_ROLE }] }, testLog);
  expect(made.error).toBeUndefined();
  const cloud = await startCloud(t, mosquitto.url, {
    env: { MQTT_USERNAME: service.username, MQTT_PASSWORD: service.password, MQTT_CLIENT_ID: clientId },
    deps: { brokerAccounts: dynsec },
  });
  return {
    url: mosquitto.url,
    cloud,
    t,
    service,
    mosquitto,
    dynsec,
    accounts: dynsec,
    async close() {
      await cloud.stop();
      await dynsec.stop();
      await mosquitto.stop();
      await t.close();
    },
  };
}

interface Probe {
  readonly client: MqttClient;
  readonly messages: { topic: string; payload: string }[];
  /** How many times the connection closed (no reconnects: at most once). */
  closes(): number;
  /** Granted QoS per filter (128: refused). */
  subscribe(filter: string): Promise<number>;
  close(): Promise<void>;
}

/** The client id a login connects with unless told otherwise: a gateway login's own (the broker pins it), else a fresh one. */
function ownClientId(username: string | undefined): string {
  const gatewayId = username === undefined ? null : gatewayIdOfUsername(username);
  return gatewayId === null ? `probe-${newId().slice(-12)}` : gatewayCloudClientId(gatewayId);
}

async function login(url: string, creds: { username: string; password: string }, extra: IClientOptions = {}): Promise<Probe> {
  const client = connectMqtt(url, { ...creds, clientId: ownClientId(creds.username), reconnectPeriod: 0, clean: true, ...extra });
  const messages: Probe['messages'] = [];
  client.on('message', (topic, payload) => messages.push({ topic, payload: payload.toString() }));
  let closes = 0;
  client.on('close', () => void closes++);
  try {
    await waitConnected(client, 5000);
  } catch (e) {
    client.end(true);
    throw e;
  }
  return {
    client,
    messages,
    closes: () => closes,
    subscribe: (filter) =>
      new Promise((resolve, reject) =>
        client.subscribe(filter, { qos: 1 }, (err, granted) => {
          // mqtt.js rejects a SUBACK failure (128) as an error carrying the packet
          const codes = (err as { packet?: { granted?: number[] } } | null)?.packet?.granted ?? granted?.map((g) => g.qos);
          if (codes?.[0] !== undefined) resolve(codes[0]);
          else reject(err ?? new Error('no SUBACK code'));
        }),
      ),
    close: () => client.endAsync(true),
  };
}

/** The CONNACK return code of a refused login (4 bad user name or password, 5 not authorized). */
async function refusedCode(
  url: string,
  creds: { username?: string; password?: string },
  clientId = ownClientId(creds.username),
): Promise<number> {
  const client = connectMqtt(url, { ...creds, clientId, reconnectPeriod: 0 });
  try {
    await waitConnected(client, 5000);
    return 0;
  } catch (e) {
    return (e as { code?: number }).code ?? -1;
  } finally {
    client.end(true);
  }
}

const kinds: BrokerKind[] = ['embedded', 'mosquitto-dynsec'];

describe.each(kinds.flatMap((k) => pgBackends().map((b) => [k, b] as const)))('broker accounts on %s with %s', (kind, backend) => {
  let s: Setup;
  beforeAll(async () => {
    s = await setUp(kind, backend);
  });
  afterAll(async () => {
    await s?.close();
  });

  /** A site, a registered gateway with one door, and a person: the gateway's broker login is in the provisioning. */
  async function gateway() {
    const u = newId().slice(-10);
    const gatewayId = `gw-${u}`;
    const site = await s.cloud.createSite({ id: `site-${u}`, name: 'S' });
    if (site.status !== 'applied') throw new Error(site.code);
    const prov = await s.cloud.registerGateway({ gatewayId, siteId: `site-${u}`, publicJwk: (await generateSigningKeyPair()).publicJwk });
    if (prov.status !== 'applied' || prov.state.mqtt === null) throw new Error(`register: ${prov.code}`);
    const door = await s.cloud.createDoor({ id: `door-${u}`, gatewayId, name: 'D' });
    const person = await s.cloud.createPerson({ id: `person-${u}`, name: 'P' });
    if (door.status !== 'applied' || person.status !== 'applied') throw new Error('seed');
    let pin = 100000 + Math.floor(Math.random() * 800000);
    return {
      gatewayId,
      creds: prov.state.mqtt,
      issue: async () => {
        const k = await s.cloud.issueKey({
          personId: `person-${u}`,
          doors: [`door-${u}`],
          credential: { type: 'pin', value: String(pin++) },
          validFrom: T0,
          validUntil: T0 + DAY,
        });
        if (k.status !== 'applied') throw new Error(`issue: ${k.code}`);
        return k.state.id;
      },
    };
  }

  it('a registered gateway logs in with its credentials, subscribes to its down and receives its grant', async () => {
    const g = await gateway();
    expect(g.creds.username).toBe(`gw:${g.gatewayId}`);
    expect(Buffer.from(g.creds.password, 'base64url').length).toBeGreaterThanOrEqual(32);
    const p = await login(s.url, g.creds);
    try {
      expect(await p.subscribe(topics.gatewayDown(g.gatewayId))).toBe(1);
      const keyId = await g.issue();
      await s.cloud.flush();
      const got = await waitFor(() => p.messages.find((m) => m.topic === topics.gatewayDown(g.gatewayId)), 'the grant on its down topic');
      expect(got.payload.split('.')).toHaveLength(3); // a JWS
      expect(keyId).toBeTruthy();
    } finally {
      await p.close();
    }
  });

  it('a wrong password, an unknown user and no login at all are refused at CONNACK', async () => {
    const g = await gateway();
    expect([4, 5]).toContain(await refusedCode(s.url, { username: g.creds.username, password: `${g.creds.password}x` }));
    expect([4, 5]).toContain(await refusedCode(s.url, { username: 'gw:no-such-gateway', password: g.creds.password }));
    expect([4, 5]).toContain(await refusedCode(s.url, {}));
  });

  it("subscribing to another gateway's down is refused (SUBACK 128), and it never receives the other's grants", async () => {
    const a = await gateway();
    const b = await gateway();
    const pa = await login(s.url, a.creds);
    const pb = await login(s.url, b.creds);
    try {
      expect(await pa.subscribe(topics.gatewayDown(b.gatewayId))).toBe(128);
      expect(await pa.subscribe('tobira/v1/gw/+/down')).toBe(128);
      expect(await pa.subscribe('tobira/v1/gw/#')).toBe(128);
      expect(await pa.subscribe('#')).toBe(128);
      expect(await pa.subscribe(topics.gatewayUp(b.gatewayId))).toBe(128);
      expect(await pa.subscribe(topics.gatewayDown(a.gatewayId))).toBe(1);
      expect(await pb.subscribe(topics.gatewayDown(b.gatewayId))).toBe(1);
      await b.issue();
      await s.cloud.flush();
      await waitFor(() => pb.messages.some((m) => m.topic === topics.gatewayDown(b.gatewayId)), "b's grant");
      // then one of its own, so that anything of b's routed to a would have arrived first
      await a.issue();
      await s.cloud.flush();
      await waitFor(() => pa.messages.some((m) => m.topic === topics.gatewayDown(a.gatewayId)), "a's own grant");
      expect(pa.messages.map((m) => m.topic)).toEqual([topics.gatewayDown(a.gatewayId)]);
    } finally {
      await pa.close();
      await pb.close();
    }
  });

  it("a publish to another gateway's up is dropped: the service account sees every gateway's own up, never the forged one", async () => {
    const a = await gateway();
    const b = await gateway();
    const watcher = await login(s.url, s.service);
    const pa = await login(s.url, a.creds);
    const pb = await login(s.url, b.creds);
    try {
      expect(await watcher.subscribe('tobira/v1/gw/+/up')).toBe(1);
      // QoS 0: Mosquitto drops it silently, aedes closes the connection; neither delivers it
      pa.client.publish(topics.gatewayUp(b.gatewayId), 'forged-by-a', { qos: 0 });
      pa.client.publish(topics.gatewayPresence(b.gatewayId), 'forged-presence', { qos: 0, retain: true });
      await pb.client.publishAsync(topics.gatewayUp(b.gatewayId), 'from-b', { qos: 1 });
      const pa2 = await login(s.url, a.creds);
      await pa2.client.publishAsync(topics.gatewayUp(a.gatewayId), 'from-a', { qos: 1 });
      await pa2.close();
      await waitFor(
        () => watcher.messages.some((m) => m.payload === 'from-a') && watcher.messages.some((m) => m.payload === 'from-b'),
        'both gateways’ own ups',
      );
      expect(watcher.messages.map((m) => m.payload)).not.toContain('forged-by-a');
      // the cloud got b's own (unsigned, so rejected) message and nothing else on b's up
      await waitFor(async () => (await s.cloud.listRejectedUplinks({ gatewayId: b.gatewayId })).length > 0, "the cloud to see b's message");
      expect(await s.cloud.listRejectedUplinks({ gatewayId: b.gatewayId })).toHaveLength(1);
    } finally {
      await watcher.close();
      await pa.close().catch(() => {});
      await pb.close();
    }
  });

  describe("when a gateway's login presents a client id that is not its own", () => {
    it("gateway A's credentials under gateway B's client id are refused at CONNACK, and B's live session is not taken over", async () => {
      const a = await gateway();
      const b = await gateway();
      // B online with a persistent session, as the real gateway runs
      const pb = await login(s.url, b.creds, { clean: false });
      try {
        expect(await pb.subscribe(topics.gatewayDown(b.gatewayId))).toBe(1);
        expect(await refusedCode(s.url, a.creds, gatewayCloudClientId(b.gatewayId))).toBe(5);
        // B's own round trip after the attempt: had the broker let A in under B's id, B would have been evicted
        await pb.client.publishAsync(topics.gatewayUp(b.gatewayId), 'still-b', { qos: 1 });
        expect(pb.closes()).toBe(0);
        await b.issue();
        await s.cloud.flush();
        await waitFor(() => pb.messages.some((m) => m.topic === topics.gatewayDown(b.gatewayId)), "b's grant, still delivered to b");
      } finally {
        await pb.close();
      }
    });

    it("any other client id is refused too (a made-up one, the cloud's own, the site link's), and the gateway's own still logs in", async () => {
      const g = await gateway();
      for (const clientId of [
        `probe-${newId().slice(-12)}`,
        'tobira-cloud',
        `${gatewayCloudClientId(g.gatewayId)}-site`,
        `${gatewayCloudClientId(g.gatewayId)}x`,
        g.gatewayId,
      ]) {
        expect(await refusedCode(s.url, g.creds, clientId), clientId).toBe(5);
      }
      expect(await refusedCode(s.url, g.creds, gatewayCloudClientId(g.gatewayId))).toBe(0);
    });

    it('the service login is not pinned: each cloud replica connects under its own id', async () => {
      expect(await refusedCode(s.url, s.service, `cloud-replica-${newId().slice(-12)}`)).toBe(0);
    });
  });

  it('rotation: the old password no longer logs in, the new one does; the gateway id must exist', async () => {
    const g = await gateway();
    // a login first, so that a cache of verified passwords would hold the old one
    await (await login(s.url, g.creds)).close();
    const r = await s.cloud.rotateGatewayBrokerCredentials({ gatewayId: g.gatewayId });
    if (r.status !== 'applied') throw new Error(r.code);
    expect(r.code).toBe('BROKER_CREDENTIALS_ROTATED');
    expect(r.state.mqtt.username).toBe(g.creds.username);
    expect(r.state.mqtt.password).not.toBe(g.creds.password);
    expect([4, 5]).toContain(await refusedCode(s.url, g.creds));
    const p = await login(s.url, r.state.mqtt);
    expect(await p.subscribe(topics.gatewayDown(g.gatewayId))).toBe(1);
    await p.close();
    expect(await s.cloud.rotateGatewayBrokerCredentials({ gatewayId: 'no-such-gateway' })).toMatchObject({
      status: 'refused',
      code: 'GATEWAY_NOT_FOUND',
    });
  });

  describe('when a gateway is connected and its password is rotated', () => {
    it('its session is disconnected, the old password cannot log in again, the new one can; the cut is logged with the caller’s cid', async () => {
      const g = await gateway();
      // one live session: the login is pinned to one client id, and a second connection under it replaces the first
      const first = await login(s.url, g.creds);
      try {
        expect(await first.subscribe(topics.gatewayDown(g.gatewayId))).toBe(1);
        const { log, lines } = await capturingLogger();
        const cid = `corr-cut-${newId()}` as never;
        const o = await rotateGatewayBrokerCredentials(
          { db: s.t.db, clock: new ManualClock(T0), log, crash: noCrash, wake: () => {}, brokerAccounts: s.accounts, secrets: testSecrets },
          { gatewayId: g.gatewayId, cid },
        );
        if (o.status !== 'applied') throw new Error(o.code);
        await waitFor(() => first.closes() > 0, 'the session of the old password to be closed by the broker');
        expect([4, 5]).toContain(await refusedCode(s.url, g.creds));
        const cut = lines.find((l) => l.msg === 'broker sessions of the old password cut');
        // aedes counts the sessions it closed; dynsec kicks without a count
        expect(cut).toMatchObject({ cid, gatewayId: g.gatewayId, sessionsCut: kind === 'embedded' ? 1 : null });
        const p = await login(s.url, o.state.mqtt);
        try {
          expect(await p.subscribe(topics.gatewayDown(g.gatewayId))).toBe(1);
          await p.client.publishAsync(topics.gatewayUp(g.gatewayId), 'after-rotation', { qos: 1 });
          expect(p.closes()).toBe(0);
        } finally {
          await p.close();
        }
      } finally {
        await first.close();
      }
    });

    it("another gateway's session stays open, and a first registration cuts nobody", async () => {
      const a = await gateway();
      const b = await gateway();
      const pa = await login(s.url, a.creds);
      const pb = await login(s.url, b.creds);
      try {
        expect(await pb.subscribe(topics.gatewayDown(b.gatewayId))).toBe(1);
        const { log, lines } = await capturingLogger();
        const d = {
          db: s.t.db,
          clock: new ManualClock(T0),
          log,
          crash: noCrash,
          wake: () => {},
          brokerAccounts: s.accounts,
          secrets: testSecrets,
        };
        const u = newId().slice(-10);
        const site = await createSite(d, { id: `site-first-${u}`, name: 'First' });
        if (site.status !== 'applied') throw new Error(site.code);
        const fresh = await registerGateway(
          d,
          { issuer: 'tobira-cloud', jwks: { keys: [] } },
          { gatewayId: `gw-first-${u}`, siteId: site.state.id, publicJwk: (await generateSigningKeyPair()).publicJwk },
        );
        expect(fresh.status).toBe('applied');
        expect(lines.map((l) => l.msg)).not.toContain('broker sessions of the old password cut');
        expect(await rotateGatewayBrokerCredentials(d, { gatewayId: a.gatewayId })).toMatchObject({ status: 'applied' });
        await waitFor(() => pa.closes() > 0, "a's session to be closed by its rotation");
        // b's own round trip after a's cut: had the broker closed b with a, this PUBACK would never come
        await pb.client.publishAsync(topics.gatewayUp(b.gatewayId), 'still-here', { qos: 1 });
        expect(await pb.subscribe(topics.gatewayDown(b.gatewayId))).toBe(1);
        expect(pb.closes()).toBe(0);
        expect(pb.client.connected).toBe(true);
      } finally {
        await pa.close();
        await pb.close();
      }
    });
  });

  it("rotation's log lines, the broker adapter's included, carry the caller's correlation id", async () => {
    const g = await gateway();
    const { log, lines } = await capturingLogger();
    const cid = `corr-rotate-${newId()}` as never;
    const o = await rotateGatewayBrokerCredentials(
      { db: s.t.db, clock: new ManualClock(T0), log, crash: noCrash, wake: () => {}, brokerAccounts: s.accounts, secrets: testSecrets },
      { gatewayId: g.gatewayId, cid },
    );
    expect(o.status).toBe('applied');
    const mine = lines.filter((l) => l.gatewayId === g.gatewayId);
    expect(mine.map((l) => l.msg)).toContain(kind === 'embedded' ? 'broker account password set' : 'broker account password rotated');
    for (const l of lines) expect(l.cid).toBe(cid);
  });

  it("registration's log lines, the broker adapter's included, carry the caller's correlation id", async () => {
    const { log, lines } = await capturingLogger();
    const cid = `corr-register-${newId()}` as never;
    const d = {
      db: s.t.db,
      clock: new ManualClock(T0),
      log,
      crash: noCrash,
      wake: () => {},
      brokerAccounts: s.accounts,
      secrets: testSecrets,
    };
    const u = newId().slice(-10);
    const site = await createSite(d, { id: `site-reg-${u}`, name: 'Reg' });
    if (site.status !== 'applied') throw new Error(site.code);
    lines.length = 0;
    const pair = await generateSigningKeyPair();
    const o = await registerGateway(
      d,
      { issuer: 'tobira-cloud', jwks: { keys: [] } },
      { gatewayId: `gw-reg-${u}`, siteId: site.state.id, publicJwk: pair.publicJwk, cid },
    );
    expect(o.status).toBe('applied');
    expect(lines.map((l) => l.msg)).toEqual(
      expect.arrayContaining(['gateway registered', kind === 'embedded' ? 'broker account password set' : 'broker account created']),
    );
    for (const l of lines) expect(l.cid).toBe(cid);
  });

  it("registering a taken gateway id again leaves the gateway's broker password as it was", async () => {
    const g = await gateway();
    const again = await s.cloud.registerGateway({
      gatewayId: g.gatewayId,
      siteId: `site-${g.gatewayId.slice(3)}`,
      publicJwk: (await generateSigningKeyPair()).publicJwk,
    });
    expect(again).toMatchObject({ status: 'refused', code: 'GATEWAY_ALREADY_EXISTS' });
    const p = await login(s.url, g.creds);
    await p.close();
  });

  if (kind === 'mosquitto-dynsec') {
    it('broker down: registration answers BROKER_UNAVAILABLE and writes no gateway row; back up, it works again', async () => {
      const m = s.mosquitto as TestMosquitto;
      const dynsec = s.dynsec as DynsecBrokerAccounts;
      const u = newId().slice(-10);
      expect((await s.cloud.createSite({ id: `site-${u}`, name: 'S' })).status).toBe('applied');
      const jwk = (await generateSigningKeyPair()).publicJwk;
      await m.pause();
      try {
        await waitFor(() => !dynsec.ready, 'the admin link to notice');
        const o = await s.cloud.registerGateway({ gatewayId: `gw-${u}`, siteId: `site-${u}`, publicJwk: jwk });
        expect(o).toMatchObject({ status: 'refused', code: 'BROKER_UNAVAILABLE' });
        const rows = await s.t.db.query('SELECT id FROM gateways WHERE id = $1', [`gw-${u}`]);
        expect(rows.rowCount).toBe(0);
        expect((await s.t.db.query('SELECT 1 FROM gateway_seq WHERE gateway_id = $1', [`gw-${u}`])).rowCount).toBe(0);
      } finally {
        await m.resume();
      }
      await waitFor(() => dynsec.ready, 'the admin link to come back', 20_000);
      const o = await s.cloud.registerGateway({ gatewayId: `gw-${u}`, siteId: `site-${u}`, publicJwk: jwk });
      expect(o.status).toBe('applied');
    });

    it('a command the broker does not answer in time throws BrokerUnavailable (so the registration rolls back)', async () => {
      // the service login may not publish to $CONTROL: Mosquitto drops the command and no answer ever comes
      const silent = new DynsecBrokerAccounts({
        url: s.url,
        username: s.service.username,
        password: s.service.password,
        timeoutMs: 300,
        log: testLog,
      });
      await silent.start();
      try {
        expect(silent.ready).toBe(false);
        await expect(silent.command({ command: 'getDefaultACLAccess' }, testLog)).rejects.toMatchObject({
          name: 'BrokerUnavailable',
          message: expect.stringContaining('no answer'),
        });
        await expect(silent.provisionGateway(s.t.db, 'gw-never', testLog)).rejects.toMatchObject({ name: 'BrokerUnavailable' });
      } finally {
        await silent.stop();
      }
    });
  }
});
