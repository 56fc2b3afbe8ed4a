#!/usr/bin/env node
/**
 * `npm start`: the whole of Tobira on one machine, on embedded parts.
 *
 *   cloud broker (aedes, with login) -> cloud (PGlite) -> gateway gw-1 (SQLite)
 *   -> site broker (aedes, loopback, a login per lock) -> three simulated
 *   locks, with a seeded site, doors, a guest and her key.
 *
 * The cloud broker enforces per-gateway accounts (docs/architecture.md
 * "Broker accounts"): the cloud logs in with its service account (a new
 * random password at each start, never on disk), the gateway with the login
 * its provisioning gave it (kept in seed.json, mode 0600). The locks talk to
 * the gateway on a site broker of their own, as on a real site, each with
 * its own login (its password derived from its pairing secret) and ACL
 * (docs/gateway.md "Site broker logins"); the gateway's site login is in
 * seed.json too.
 *
 * Everything lives under one folder (./data, or TOBIRA_DATA_DIR) and survives
 * a restart. DATABASE_URL and MQTT_URL select a real PostgreSQL / broker
 * (with MQTT_URL, that one broker carries both links and its logins are the
 * operator's: broker accounts are not managed).
 * Ctrl-C stops everything cleanly; a second Ctrl-C forces.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { chmodSync, closeSync, mkdirSync, openSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  createCloud,
  openEmbeddedBrokerAccounts,
  parseConfig as parseCloudConfig,
  startAdminApi,
  type AedesAuthHooks,
  type BrokerAccounts,
  type Cloud,
  type Db,
} from '@tobira/cloud';
import { createGateway, parseConfig as parseGatewayConfig, siteBrokerHooks, type Gateway, type GatewayConfigInput } from '@tobira/gateway';
import {
  encodeSecret,
  generateSigningKeyPair,
  newCorrelationId,
  newPairingSecret,
  onShutdownSignals,
  startEmbeddedBroker,
  systemClock,
  type EmbeddedBroker,
} from '@tobira/shared';
import { pino } from 'pino';
import { z } from 'zod';
import { startFleet, type Fleet } from '@tobira/firmware-sim';
import { startStripeLocal } from '@tobira/stripe-local';
import { startLockPanel } from './control.js';
import { once, readJson, writeJson } from './files.js';

const Env = z.object({
  TOBIRA_DATA_DIR: z.string().default('data'),
  DATABASE_URL: z.string().url().optional(),
  MQTT_URL: z.string().url().optional(),
  TOBIRA_DEMO_HOST: z.string().default('127.0.0.1'),
  /** 1884, not 1883: a system Mosquitto may be listening there. */
  TOBIRA_DEMO_MQTT_PORT: z.coerce.number().int().min(0).max(65535).default(1884),
  /** The site broker of the locks. */
  TOBIRA_DEMO_SITE_MQTT_PORT: z.coerce.number().int().min(0).max(65535).default(1885),
  TOBIRA_DEMO_API_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  TOBIRA_DEMO_GATEWAY_PORT: z.coerce.number().int().min(0).max(65535).default(8081),
  TOBIRA_DEMO_LOCKS_PORT: z.coerce.number().int().min(0).max(65535).default(8082),
  /** The local Stripe the stays are paid through (0: a free port; the curl lines print it). */
  TOBIRA_DEMO_STRIPE_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  LOG_LEVEL: z.string().default('info'),
});

const GATEWAY_ID = 'gw-1';
const LOCKS = [
  { lockId: 'L1', doorId: 'door-101', name: 'Room 101' },
  { lockId: 'L2', doorId: 'door-102', name: 'Room 102' },
  { lockId: 'L3', doorId: 'door-lobby', name: 'Lobby' },
] as const;
const GUEST_PIN = '1234';

interface Seed {
  siteId: string;
  gatewayId: string;
  personId: string;
  keyId: string;
  gatewayConfig: GatewayConfigInput;
}

const step = (what: string) => process.stdout.write(`  • ${what} … `);
const ok = (detail = 'ok') => process.stdout.write(`${detail}\n`);

async function main(): Promise<void> {
  const env = Env.parse(process.env);
  const data = resolve(env.TOBIRA_DATA_DIR);
  // the demo's folder holds the databases, keys and tokens of its parts: its owner's only
  mkdirSync(join(data, 'logs'), { recursive: true, mode: 0o700 });
  chmodSync(data, 0o700);
  chmodSync(join(data, 'logs'), 0o700);
  const logFile = join(data, 'logs', 'demo.log');
  closeSync(openSync(logFile, 'a', 0o600));
  chmodSync(logFile, 0o600);
  const root = pino(
    { level: env.LOG_LEVEL, base: { svc: 'demo' }, timestamp: pino.stdTimeFunctions.isoTime },
    pino.destination({ dest: logFile, mkdir: true, sync: false }),
  );
  const log = root.child({ cid: newCorrelationId() });
  const parts: { name: string; stop: () => Promise<unknown> }[] = [];

  const shutdown = async (sig: string) => {
    process.stdout.write(`\n${sig}: stopping (Ctrl-C again to force)\n`);
    log.info({ sig }, 'demo stopping');
    for (const p of [...parts].reverse()) {
      step(`stopping ${p.name}`);
      try {
        await p.stop();
        ok();
      } catch (e) {
        ok(`failed: ${(e as Error).message}`);
      }
    }
    root.flush();
    process.exit(0);
  };
  onShutdownSignals({
    graceful: (sig) => void shutdown(sig),
    forced: () => {
      process.stdout.write('\nsecond signal: exiting now (committed data is safe on disk)\n');
      process.exit(1);
    },
  });

  process.stdout.write(`\nTobira demo — data in ${data} (JSON logs: ${logFile})\n\n`);

  // 1. cloud database and broker accounts, then the brokers
  const cloudKey = await once(join(data, 'cloud', 'signing-key.json'), async () => (await generateSigningKeyPair()).privateJwk, true);
  // the cloud's key-encryption key (there is no default): made once for this data folder, mode 0600 like the signing key
  const cloudKek = await once(join(data, 'cloud', 'kek.json'), () => ({ kek: randomBytes(32).toString('base64') }), true);
  const dbConfig = env.DATABASE_URL ? { DATABASE_URL: env.DATABASE_URL } : { PGLITE_DATA_DIR: join(data, 'cloud', 'db') };
  let mqttUrl = env.MQTT_URL;
  let cloudLogin: { MQTT_USERNAME: string; MQTT_PASSWORD: string } | Record<string, never> = {};
  let db: Db | undefined;
  let brokerAccounts: BrokerAccounts | undefined;
  if (mqttUrl === undefined) {
    step(
      env.DATABASE_URL
        ? 'cloud database on PostgreSQL (DATABASE_URL)'
        : `cloud database: embedded PostgreSQL (PGlite, ${join(data, 'cloud', 'db')})`,
    );
    const opened = await openEmbeddedBrokerAccounts(parseCloudConfig(dbConfig), {
      log: root.child({ part: 'broker-accounts' }),
      clock: systemClock,
    });
    const openedDb = opened.db;
    db = openedDb;
    brokerAccounts = opened.accounts;
    cloudLogin = { MQTT_USERNAME: opened.service.username, MQTT_PASSWORD: opened.service.password };
    parts.push({ name: 'database', stop: () => openedDb.close() });
    ok();
    const cloudBroker = await listen(
      'cloud MQTT broker (gateway logins enforced)',
      env.TOBIRA_DEMO_HOST,
      env.TOBIRA_DEMO_MQTT_PORT,
      'TOBIRA_DEMO_MQTT_PORT',
      opened.accounts.hooks(),
    );
    parts.push({ name: 'MQTT broker', stop: () => cloudBroker.stop() });
    mqttUrl = cloudBroker.url;
  } else {
    process.stdout.write(`  • MQTT broker: ${mqttUrl} (MQTT_URL; its logins are the operator's)\n`);
  }
  const cloudUrl = mqttUrl;

  // 1b. the local Stripe (no internet needed): the cloud's real SDK talks to it, and it signs the webhooks it sends back
  step('local Stripe (stripe-local)');
  const stripeLocal = await startStripeLocal({
    host: env.TOBIRA_DEMO_HOST,
    port: env.TOBIRA_DEMO_STRIPE_PORT,
    // its state is in memory: a seed per start keeps its ids apart from the ones an earlier run left in the database
    seed: Date.now().toString(36),
    log: root.child({ part: 'stripe-local' }),
  });
  const stripeWebhookSecret = `whsec_${randomBytes(24).toString('base64url')}`;
  parts.push({ name: 'local Stripe', stop: () => stripeLocal.close() });
  ok(stripeLocal.url);

  // 2. cloud
  step(env.DATABASE_URL ? 'cloud on PostgreSQL (DATABASE_URL)' : `cloud on embedded PostgreSQL (PGlite, ${join(data, 'cloud', 'db')})`);
  const cloud: Cloud = createCloud(
    parseCloudConfig({
      ...dbConfig,
      MQTT_URL: cloudUrl,
      MQTT_CLIENT_ID: 'tobira-cloud-demo',
      CLOUD_SIGNING_JWK: JSON.stringify(cloudKey),
      TOBIRA_KEK: cloudKek.kek,
      STRIPE_SECRET_KEY: stripeLocal.secretKey,
      STRIPE_WEBHOOK_SECRET: stripeWebhookSecret,
      STRIPE_API_HOST: stripeLocal.host,
      STRIPE_API_PORT: String(stripeLocal.port),
      STRIPE_API_PROTOCOL: 'http',
      ...cloudLogin,
    }),
    { log: root.child({ part: 'cloud' }), clock: systemClock, ...(db ? { db } : {}), ...(brokerAccounts ? { brokerAccounts } : {}) },
  );
  await cloud.start();
  parts.push({ name: 'cloud', stop: () => cloud.stop() });
  ok();

  // 2b. admin API, with an admin token made for this data folder (there is no default token)
  const adminToken = await once(
    join(data, 'cloud', 'admin-token.json'),
    () => ({ token: `tbr_${randomBytes(32).toString('base64url')}` }),
    true,
  );
  step(`admin API on ${env.TOBIRA_DEMO_HOST}:${env.TOBIRA_DEMO_API_PORT}`);
  const api = await startAdminApi({
    cloud,
    db: cloud.db,
    log: root.child({ part: 'api' }),
    clock: systemClock,
    host: env.TOBIRA_DEMO_HOST,
    port: env.TOBIRA_DEMO_API_PORT,
    bootstrapAdminToken: adminToken.token,
    // everything runs on this one box, so a webhook receiver will be local too: SSRF guard off (docs/api.md "Webhooks")
    config: { webhookAllowPrivateNetworks: true, gatewayBrokerUrl: cloudUrl },
    telemetry: cloud.telemetry,
    processRegistry: cloud.metricsRegistry,
  });
  parts.push({ name: 'admin API', stop: () => api.close() });
  ok(api.url);
  stripeLocal.webhooks.add({ url: `${api.url}/webhooks/stripe`, secret: stripeWebhookSecret });

  // 3. seed (first run only)
  const seedFile = join(data, 'seed.json');
  let seed = readJson<Seed>(seedFile);
  if (seed === undefined) {
    step('seeding a site, gateway gw-1, three doors, a guest and her key');
    seed = await seedDemo(cloud, data);
    writeJson(seedFile, seed, true);
    ok();
  } else if (brokerAccounts && seed.gatewayConfig.cloud.username === undefined) {
    // a data folder from before broker logins: give the gateway its own now
    step(`giving ${GATEWAY_ID} its own cloud broker login`);
    const r = await cloud.rotateGatewayBrokerCredentials({ gatewayId: GATEWAY_ID });
    if (r.status !== 'applied') throw new Error(`broker login for ${GATEWAY_ID}: ${r.code}`);
    seed = { ...seed, gatewayConfig: { ...seed.gatewayConfig, cloud: { ...seed.gatewayConfig.cloud, ...r.state.mqtt } } };
    writeJson(seedFile, seed, true);
    ok();
  }

  // stays (docs/payments.md): Room 102 is bookable, the lobby opens for every stay; both idempotent, so on every start
  const room = await cloud.createRoom({ id: 'room-102', siteId: seed.siteId, name: 'Room 102', doors: ['door-102'] });
  const settings = await cloud.setStaySettings({ siteId: seed.siteId, sharedDoors: ['door-lobby'] });
  if (room.status === 'refused' || settings.status !== 'applied') throw new Error(`setting up stays: ${room.code} ${settings.code}`);

  if (seed.gatewayConfig.staffToken === undefined) {
    // a data folder seeded before the staff UI: give the gateway a random staff token now (there is no default)
    seed = { ...seed, gatewayConfig: { ...seed.gatewayConfig, staffToken: encodeSecret(newPairingSecret()) } };
    writeJson(seedFile, seed, true);
  }
  if (seed.gatewayConfig.metricsToken === undefined) {
    // the gateway's /metrics needs its own token (it is never open); a data folder seeded before that gets one now
    seed = { ...seed, gatewayConfig: { ...seed.gatewayConfig, metricsToken: encodeSecret(newPairingSecret()) } };
    writeJson(seedFile, seed, true);
  }

  if (seed.gatewayConfig.timeZone === undefined) {
    // a data folder seeded before provisioning carried the site's zone: ask the admin API for it now
    step(`the time zone of site ${seed.siteId}`);
    const timeZone = await siteTimeZone(api.url, adminToken.token, seed.siteId);
    if (typeof timeZone === 'string') {
      seed = { ...seed, gatewayConfig: { ...seed.gatewayConfig, timeZone } };
      writeJson(seedFile, seed, true);
      ok(timeZone);
    } else {
      // not fatal: the staff UI then shows the browser's zone, and says so
      ok(`not known (${timeZone.problem}); the staff UI shows the browser's zone`);
    }
  }

  if (seed.gatewayConfig.site.username === undefined) {
    // a data folder seeded before site broker logins: give the gateway its own site login now (the locks' derive from their secrets)
    seed = { ...seed, gatewayConfig: { ...seed.gatewayConfig, site: { ...seed.gatewayConfig.site, ...newSiteLogin() } } };
    writeJson(seedFile, seed, true);
  }

  // 4. the site broker, with a login per lock (derived from its pairing secret) and one for the gateway
  let locksUrl = cloudUrl;
  if (brokerAccounts) {
    const hooks = siteBrokerHooks(
      parseGatewayConfig({
        ...seed.gatewayConfig,
        cloud: { ...seed.gatewayConfig.cloud, url: cloudUrl },
        site: { ...seed.gatewayConfig.site, url: 'mqtt://127.0.0.1:1' },
      }),
      root.child({ part: 'site-broker' }),
    );
    // Plaintext, so loopback only (startEmbeddedBroker refuses another host): the demo's locks run in this
    // process. A real site's broker is TLS only, with the gateway's site CA (docs/gateway.md "Site TLS").
    const siteBroker = await listen(
      'site MQTT broker (lock logins enforced) in plaintext',
      env.TOBIRA_DEMO_HOST,
      env.TOBIRA_DEMO_SITE_MQTT_PORT,
      'TOBIRA_DEMO_SITE_MQTT_PORT',
      hooks,
    );
    parts.push({ name: 'site MQTT broker', stop: () => siteBroker.stop() });
    locksUrl = siteBroker.url;
  }

  // 5. gateway
  step(`gateway ${GATEWAY_ID} (SQLite ${seed.gatewayConfig.sqlitePath})`);
  const gateway: Gateway = createGateway(
    parseGatewayConfig({
      ...seed.gatewayConfig,
      // with MQTT_URL the broker's logins are the operator's, not the ones the embedded broker gave
      cloud: brokerAccounts ? { ...seed.gatewayConfig.cloud, url: cloudUrl } : { ...withoutLogin(seed.gatewayConfig.cloud), url: cloudUrl },
      // with MQTT_URL the locks and the gateway share the operator's broker and its logins
      site: brokerAccounts ? { ...seed.gatewayConfig.site, url: locksUrl } : { url: locksUrl },
      http: { host: env.TOBIRA_DEMO_HOST, port: env.TOBIRA_DEMO_GATEWAY_PORT },
    }),
    { log: root.child({ part: 'gateway' }) },
  );
  await gateway.start();
  parts.push({ name: 'gateway', stop: () => gateway.stop() });
  ok(gateway.httpUrl ?? 'no http');

  // 6. locks
  step(`simulated locks ${LOCKS.map((l) => l.lockId).join(', ')}${brokerAccounts ? ', each with its own site login' : ''}`);
  const secrets = readJson<Record<string, string>>(join(data, GATEWAY_ID, 'lock-secrets.json')) ?? {};
  const fleet: Fleet = await startFleet({
    url: locksUrl,
    gatewayId: GATEWAY_ID,
    locks: LOCKS.map((l) => l.lockId),
    secrets,
    siteLogin: brokerAccounts !== undefined,
    // the locks' replay windows outlive a restart of the demo, as a real lock's non-volatile memory does
    replayWindowDir: join(data, GATEWAY_ID, 'lock-replay'),
    log: root.child({ part: 'sim' }),
  });
  parts.push({ name: 'locks', stop: () => fleet.stop() });
  ok();
  step("waiting for the gateway's first proven sync with the cloud (until then it fails closed)");
  await cloud.sendHeartbeats();
  // (after a restart the stored lease counts only once the cloud has answered this process: TIME_UNPROVEN)
  const synced = await waitUntil(() => gateway.timeProven && (gateway.store.settings().leaseExpiresAt ?? 0) > Date.now(), 30_000);
  ok(synced ? 'in sync' : 'not yet: doors answer CLOUD_STALE until it is (see the gateway /healthz)');
  const panel = await startLockPanel(fleet, env.TOBIRA_DEMO_HOST, env.TOBIRA_DEMO_LOCKS_PORT);
  parts.push({ name: 'lock panel', stop: () => panel.app.close() });

  const staffToken = seed.gatewayConfig.staffToken ?? '';
  const auth = `-H 'authorization: Bearer ${adminToken.token}'`;
  const json = `-H 'content-type: application/json'`;
  // A fresh PIN and key id each run, so the printed examples work as printed on every start.
  const pin = String(randomInt(100000, 1000000));
  const keyId = `demo-key-${randomBytes(3).toString('hex')}`;
  const now = Date.now();
  const issueBody = JSON.stringify({
    keyId,
    personId: seed.personId,
    doors: ['door-102'],
    credential: { type: 'pin', value: pin },
    validFrom: now,
    validUntil: now + 86_400_000,
  });
  const presentBody = (value: string) => `'{"type":"pin","value":"${value}"}'`;
  // A stay under way now (check-in yesterday, check-out tomorrow, site dates), so its key opens at once: the
  // guest's PIN, chosen at booking, opens Room 102 and the lobby. Each start books a room of its own on Room
  // 102's door.
  const siteDay = (ms: number) => new Intl.DateTimeFormat('en-CA', { timeZone: 'Asia/Tokyo' }).format(ms);
  const tag = randomBytes(3).toString('hex');
  // one physical door is never double booked (nights are held per door too): an earlier start's demo stay
  // still holding Room 102's door is cancelled by the desk first, so this start's booking line works
  for (const status of ['pending', 'confirmed', 'checked_in']) {
    const r = await fetch(`${api.url}/stays?siteId=${seed.siteId}&status=${status}&limit=100`, {
      headers: { authorization: `Bearer ${adminToken.token}` },
    });
    const page = z.object({ items: z.array(z.object({ id: z.string(), roomId: z.string() })) }).parse(await r.json());
    for (const st of page.items)
      if (st.roomId.startsWith('room-102-')) await cloud.cancelStay({ stayId: st.id, reason: 'staff_cancelled' });
  }
  const stayRoom = await cloud.createRoom({ id: `room-102-${tag}`, siteId: seed.siteId, name: `Room 102 (${tag})`, doors: ['door-102'] });
  if (stayRoom.status !== 'applied') throw new Error(`setting up the stay's room: ${stayRoom.code}`);
  // 8 digits: never the 6-digit key PIN of step 3 (a PIN another live key at the gateway holds is refused)
  const stayPin = String(randomInt(10_000_000, 100_000_000));
  const stayBody = JSON.stringify({
    personId: seed.personId,
    roomId: stayRoom.state.id,
    checkIn: siteDay(now - 86_400_000),
    checkOut: siteDay(now + 86_400_000),
    amount: 36_000,
    currency: 'jpy',
    credential: { type: 'pin', value: stayPin },
  });
  const bookingKey = `demo-booking-${tag}`;
  // A membership plan of its own each start: the members' lounge behind the lobby door, billed monthly by a
  // Stripe subscription on the local Stripe. The member's PIN has 7 digits: never one of the 6- or 8-digit PINs above.
  const plan = await cloud.createPlan({
    id: `plan-lounge-${tag}`,
    siteId: seed.siteId,
    name: `Members' lounge (${tag})`,
    amount: 8000,
    currency: 'jpy',
    interval: 'month',
    doors: ['door-lobby'],
    membersOnly: true,
    monthlyEntryQuota: 20,
  });
  if (plan.status !== 'applied') throw new Error(`seeding the plan: ${plan.code}`);
  const memberPin = String(randomInt(1_000_000, 10_000_000));
  const membershipId = `mem-${tag}`;
  const applyBody = JSON.stringify({
    id: membershipId,
    planId: plan.state.id,
    personId: seed.personId,
    credential: { type: 'pin', value: memberPin },
  });
  process.stdout.write(
    [
      '',
      'Tobira is running.',
      '',
      `  Admin API:     ${api.url}   (OpenAPI: ${api.url}/openapi.json, interactive docs: ${api.url}/docs)`,
      `    admin token: ${adminToken.token}`,
      `  Gateway ${GATEWAY_ID} (site ${seed.siteId}):  ${gateway.httpUrl}/healthz   ${gateway.httpUrl}/metrics`,
      `    staff web UI: ${gateway.httpUrl}/ui/   ${
        gateway.setupCode === null
          ? '(sign in with your staff account)'
          : `(no staff account yet: create the first supervisor with the one-time setup code ${gateway.setupCode.code})`
      }`,
      `    staff token: ${staffToken}   (API bearer for automation, acts as staff; people sign in with their accounts)`,
      `    metrics token: ${seed.gatewayConfig.metricsToken ?? ''}   (bearer for the gateway's /metrics)`,
      `  Lock panel (simulated doors):   ${panel.url}/locks`,
      `  Seeded guest ${seed.personId} with PIN ${GUEST_PIN} for Room 101 (L1) and the Lobby (L3).`,
      '',
      'Try it:',
      '',
      '  # 1. present the guest PIN at Room 101: allowed, the bolt opens (and relocks after 5 s)',
      `  curl -s -X POST ${panel.url}/locks/L1/present ${json} -d ${presentBody(GUEST_PIN)}`,
      '',
      '  # 2. the same PIN at Room 102: denied with DOOR_NOT_PERMITTED',
      `  curl -s -X POST ${panel.url}/locks/L2/present ${json} -d ${presentBody(GUEST_PIN)}`,
      '',
      `  # 3. issue her a key for Room 102 with PIN ${pin} (202: queued for the gateway)`,
      `  curl -s -X POST ${api.url}/keys ${auth} ${json} -d '${issueBody}'`,
      '',
      '  # 4. watch its delivery status (pending until the gateway acks, then succeeded)',
      `  curl -s ${api.url}/keys/${keyId} ${auth}`,
      '',
      '  # 5. present the new PIN at Room 102: allowed',
      `  curl -s -X POST ${panel.url}/locks/L2/present ${json} -d ${presentBody(pin)}`,
      '',
      '  # 6. the audit log of every door decision, attributed to a person',
      `  curl -s '${api.url}/access-events?limit=20' ${auth}`,
      '',
      '  # 7. lock the whole site down (only staff master keys open doors), then lift it',
      `  curl -s -X POST ${gateway.httpUrl}/staff/mode -H 'authorization: Bearer ${staffToken}' ${json} -d '{"mode":"lockdown"}'`,
      `  curl -s -X POST ${gateway.httpUrl}/staff/mode -H 'authorization: Bearer ${staffToken}' ${json} -d '{"mode":"normal"}'`,
      '',
      `  # 8. book Room 102 from yesterday to tomorrow with the guest PIN ${stayPin} (202: the stay is pending, holding the nights;`,
      '  #    payment.clientSecret is for Stripe.js; nothing opens yet: only a paid stay gets its key)',
      `  curl -s -X POST ${api.url}/stays ${auth} ${json} -H 'idempotency-key: ${bookingKey}' -d '${stayBody}'`,
      '',
      "  # 9. pay it as the guest's browser would, with a test card (PI = payment.intentId from step 8)",
      `  curl -s "${stripeLocal.url}/_local/pay/$PI?card=pm_card_visa"`,
      '',
      '  # 10. the signed webhook from the local Stripe confirms it at once and issues the key (Room 102 + Lobby); STAY = stay.id',
      `  curl -s ${api.url}/stays/$STAY ${auth}`,
      `  curl -s "${api.url}/pay/return?stay=$STAY&lang=ja"   # the guest's return page`,
      '',
      "  # 11. the stay's key reaches the gateway (delivery: pending, then succeeded; after the cancel in 13: revoked)",
      `  curl -s ${api.url}/keys/key_$STAY ${auth}`,
      '',
      `  # 12. the guest PIN ${stayPin} opens Room 102 at the simulated lock`,
      `  curl -s -X POST ${panel.url}/locks/L2/present ${json} -d ${presentBody(stayPin)}`,
      '',
      '  # 13. the hotel cancels the stay (staff_cancelled: a full refund whatever the policy; a guest cancelling a stay',
      '  #     already under way gets what the cancellation policy allows, by default nothing): the key is revoked at once',
      `  curl -s -X POST ${api.url}/stays/$STAY/cancel ${auth} ${json} -d '{"reason":"staff_cancelled"}'`,
      '',
      '  # 14. once the gateway has the revoke (step 11 says revoked), the same PIN is denied: KEY_REVOKED',
      `  curl -s -X POST ${panel.url}/locks/L2/present ${json} -d ${presentBody(stayPin)}`,
      '',
      "  # 15. the refund, made exactly once (the local Stripe's charge.refunded events for this intent)",
      `  curl -s -u ${stripeLocal.secretKey}: "${stripeLocal.url}/v1/events?type=charge.refunded"`,
      '',
      `Memberships (plan ${plan.state.id}: the lobby, 8000 JPY a month, members only):`,
      '',
      `  # 16. ${seed.personId} applies with the PIN ${memberPin} (201: applied, under review; the PIN is kept only as a digest)`,
      `  curl -s -X POST ${api.url}/memberships ${auth} ${json} -d '${applyBody}'`,
      '',
      '  # 17. staff approve it: Stripe first (price, customer, subscription), then the approval; INVOICE = firstInvoiceId',
      `  curl -s -X POST ${api.url}/memberships/${membershipId}/approve ${auth}`,
      '',
      '  # 18. the member pays the first invoice on the local Stripe with a test card',
      `  curl -s "${stripeLocal.url}/_local/invoices/$INVOICE/pay?card=pm_card_visa"`,
      '',
      '  # 19. the signed invoice webhook makes it active with a key for the lobby (membershipStatus active, keyId)',
      `  curl -s ${api.url}/memberships/${membershipId} ${auth}`,
      '',
      `  # 20. the member's PIN ${memberPin} opens the lobby at the simulated lock (once the key is delivered)`,
      `  curl -s -X POST ${panel.url}/locks/L3/present ${json} -d ${presentBody(memberPin)}`,
      '',
      '  # 21. make the local Stripe unreachable, then self-cancel: 503 BILLING_UNAVAILABLE and nothing changed',
      '  #     (step 19 still says active, version unchanged; the PIN still opens the lobby)',
      `  curl -s -X POST ${stripeLocal.url}/_local/faults ${json} -d '{"api":{"unavailable":true}}'`,
      `  curl -s -X POST ${api.url}/memberships/${membershipId}/self-cancel ${auth} ${json} -d '{}'`,
      '',
      '  # 22. Stripe back: self-cancel sets the subscription to cancel at period end FIRST, then the membership is ending',
      '  #     (the key works to the period end, then is revoked); the member is told in their language (GET /notifications)',
      `  curl -s -X POST ${stripeLocal.url}/_local/faults/reset`,
      `  curl -s -X POST ${api.url}/memberships/${membershipId}/self-cancel ${auth} ${json} -d '{}'`,
      `  curl -s '${api.url}/notifications?personId=${seed.personId}&template=membership_ending' ${auth}`,
      '',
      'Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
  log.info({ api: api.url, gateway: gateway.httpUrl, panel: panel.url, mqttUrl: cloudUrl, siteMqttUrl: locksUrl }, 'demo ready');
}

/** A site's time zone as the admin API reports it, or what went wrong. */
async function siteTimeZone(apiUrl: string, token: string, siteId: string): Promise<string | { problem: string }> {
  try {
    const r = await fetch(`${apiUrl}/sites/${encodeURIComponent(siteId)}`, { headers: { authorization: `Bearer ${token}` } });
    if (!r.ok) return { problem: `the admin API answered ${r.status}` };
    const timeZone = ((await r.json()) as { site?: { timeZone?: unknown } }).site?.timeZone;
    return typeof timeZone === 'string' ? timeZone : { problem: 'the site has none' };
  } catch (e) {
    return { problem: (e as Error).message };
  }
}

/** Starts an embedded broker (with the given auth hooks) and says where. */
async function listen(what: string, host: string, port: number, portVar: string, hooks?: AedesAuthHooks): Promise<EmbeddedBroker> {
  step(`${what} on ${host}:${port}`);
  let broker: EmbeddedBroker;
  try {
    broker = await startEmbeddedBroker({ host, port, ...(hooks ? { aedes: hooks } : {}) });
  } catch (e) {
    throw new Error(`cannot listen on port ${port} (${(e as Error).message}); set ${portVar} or MQTT_URL`, { cause: e });
  }
  ok(broker.url);
  return broker;
}

/** The gateway's own login on the site broker: a username no lock id can be (lock ids hold no '.'), a random password. */
function newSiteLogin(): { username: string; password: string } {
  return { username: `gw.${GATEWAY_ID}`, password: randomBytes(32).toString('base64url') };
}

function withoutLogin<T extends { username?: string | undefined; password?: string | undefined }>(c: T): Omit<T, 'username' | 'password'> {
  const { username: _u, password: _p, ...rest } = c;
  return rest;
}

async function waitUntil(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

async function seedDemo(cloud: Cloud, data: string): Promise<Seed> {
  const site = await cloud.createSite({ id: 'site-demo', name: 'Hotel Tobira (demo)', timeZone: 'Asia/Tokyo', offlineGraceSeconds: 300 });
  if (site.status !== 'applied') throw new Error(`seeding the site: ${site.code}`);
  const pair = await generateSigningKeyPair();
  const keyPairFile = join(data, GATEWAY_ID, 'gateway-key.json');
  writeJson(keyPairFile, pair, true);
  const prov = await cloud.registerGateway({ gatewayId: GATEWAY_ID, siteId: site.state.id, publicJwk: pair.publicJwk });
  if (prov.status !== 'applied') {
    throw new Error(
      `registering ${GATEWAY_ID}: ${prov.code} (the database already knows it but ${data} has no seed: use a fresh database or the data folder that seeded it)`,
    );
  }
  for (const l of LOCKS) {
    const door = await cloud.createDoor({ id: l.doorId, gatewayId: GATEWAY_ID, name: l.name });
    if (door.status !== 'applied') throw new Error(`seeding ${l.doorId}: ${door.code}`);
  }
  const person = await cloud.createPerson({ id: 'guest-aiko', name: 'Aiko Tanaka' });
  if (person.status !== 'applied') throw new Error(`seeding the guest: ${person.code}`);
  const now = Date.now();
  const key = await cloud.issueKey({
    personId: person.state.id,
    doors: ['door-101', 'door-lobby'],
    credential: { type: 'pin', value: GUEST_PIN },
    validFrom: now - 60_000,
    validUntil: now + 7 * 86_400_000,
  });
  if (key.status !== 'applied') throw new Error(`seeding the key: ${key.code}`);
  const secrets = Object.fromEntries(LOCKS.map((l) => [l.lockId, encodeSecret(newPairingSecret())]));
  writeJson(join(data, GATEWAY_ID, 'lock-secrets.json'), secrets, true);
  const p = prov.state;
  return {
    siteId: site.state.id,
    gatewayId: GATEWAY_ID,
    personId: person.state.id,
    keyId: key.state.id,
    gatewayConfig: {
      gatewayId: GATEWAY_ID,
      keyPairFile,
      cloud: {
        url: 'mqtt://127.0.0.1:1', // replaced at start with the running broker's
        issuer: p.cloudIssuer,
        jwks: p.cloudJwks as GatewayConfigInput['cloud']['jwks'],
        ...(p.mqtt ?? {}),
      },
      site: { url: 'mqtt://127.0.0.1:1', ...newSiteLogin() },
      sqlitePath: join(data, GATEWAY_ID, 'gateway.sqlite'),
      offlineGraceSeconds: p.offlineGraceSeconds,
      timeZone: p.timeZone,
      locks: LOCKS.map((l) => ({ lockId: l.lockId, doorId: l.doorId, pairingSecret: secrets[l.lockId] as string })),
      credentialPepper: p.credentialPepper,
      staffToken: encodeSecret(newPairingSecret()),
      metricsToken: encodeSecret(newPairingSecret()),
    },
  };
}

main().catch((e: unknown) => {
  process.stderr.write(`\ndemo failed to start: ${(e as Error).message}\n`);
  process.exit(1);
});
