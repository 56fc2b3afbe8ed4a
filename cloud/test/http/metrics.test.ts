import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { newCorrelationId, startEmbeddedBroker, topics, type EmbeddedBroker, type ManualClock } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { WebhookDispatcher } from '../../src/adapters/webhooks/worker.js';
import { enqueueNotification } from '../../src/app/notifications.js';
import { buildApp } from '../../src/http/app.js';
import type { Cloud } from '../../src/index.js';
import { cloudSigningKey, startCloud } from '../cloud-helpers.js';
import { DAY, T0, deps, openTestDb, seed, testLog, type TestDb } from '../helpers.js';
import { fakeGateway, waitFor, type FakeGateway } from '../mqtt-helpers.js';
import { bearer } from './harness.js';

/** The value of one series of a Prometheus text exposition: `labels` must all match (others may be there too); undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) return Number(m[3]);
  }
  return undefined;
}

describe.each(pgBackends())('cloud GET /metrics on %s', (backend) => {
  // a database and broker of its own: the outbox must hold rows no other cloud sends
  let t: TestDb;
  let broker: EmbeddedBroker;
  let cloud: Cloud & { clock: ManualClock };
  let app: FastifyInstance;
  let admin: string;
  let s: Awaited<ReturnType<typeof seed>>;
  let gw: FakeGateway;
  // the receiver of webhooks and notification webhooks: answers `answer`
  let server: Server;
  let url: string;
  let answer = 500;
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.statusCode = answer;
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    t = await openTestDb(backend);
    broker = await startEmbeddedBroker();
    cloud = await startCloud(t, broker.url, {
      env: {
        // a row that fails waits 5-10 minutes before its next attempt, and is dead at its second
        DISPATCH_MAX_ATTEMPTS: '2',
        DISPATCH_BACKOFF_BASE_MS: '600000',
        DISPATCH_BACKOFF_MAX_MS: '600000',
        // a notification is dead at its first failure; the test runs the notification dispatcher
        NOTIFY_MAX_ATTEMPTS: '1',
        NOTIFY_WEBHOOK_URL: url,
        NOTIFY_WEBHOOK_SECRET: 'metrics-test-secret-0123456789',
        TOBIRA_WEBHOOK_ALLOW_PRIVATE: 'true',
      },
      deps: { notificationDispatcher: false },
    });
    app = await buildApp({
      cloud,
      db: cloud.db,
      log: testLog,
      clock: cloud.clock,
      config: { webhookAllowPrivateNetworks: true },
      processRegistry: cloud.metricsRegistry,
    });
    admin = (await createApiToken(cloud.db, { name: 'admin', role: 'admin' }, cloud.clock.now())).token;
    s = await seed(deps(cloud.db, cloud.clock));
    gw = await fakeGateway({
      url: broker.url,
      gatewayId: s.gatewayId,
      pair: s.pair,
      cloudJwks: { keys: [(await cloudSigningKey()).publicJwk] },
      cloudIssuer: 'tobira-cloud',
      clock: cloud.clock,
    });
  });
  afterAll(async () => {
    await gw?.close();
    await app?.close();
    await cloud?.stop();
    await broker?.stop();
    await t?.close();
    await new Promise<void>((r) => server?.close(() => r()));
  });

  const scrape = async (): Promise<string> => {
    const r = await app.inject({ method: 'GET', url: '/metrics', headers: bearer(admin) });
    expect(r.statusCode).toBe(200);
    return r.body;
  };
  const g = { gateway_id: '' };
  const of = (name: string, text: string, labels: Record<string, string> = {}) => sample(text, name, labels);

  it('is for admin tokens only', async () => {
    const manager = (await createApiToken(cloud.db, { name: 'm', role: 'manager', sites: [s.siteId] }, cloud.clock.now())).token;
    expect((await app.inject({ method: 'GET', url: '/metrics', headers: bearer(manager) })).statusCode).toBe(403);
    expect((await app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(401);
  });

  it('per gateway: outbox depth and the age of its oldest undelivered downlink, publish failures, dead letters, then the dispatch lag of the row that waited', async () => {
    g.gateway_id = s.gatewayId;
    let m = await scrape();
    expect(of('tobira_cloud_outbox_depth', m, g)).toBe(0);
    expect(of('tobira_cloud_outbox_oldest_age_seconds', m, g)).toBe(0);
    const retry0 = of('tobira_cloud_publish_failures_total', m, { result: 'retry' }) ?? NaN;
    const dead0 = of('tobira_cloud_publish_failures_total', m, { result: 'dead' }) ?? NaN;
    expect(retry0).toBe(0);
    const lagCount0 = of('tobira_cloud_dispatch_lag_seconds_count', m) ?? 0;
    const lagSum0 = of('tobira_cloud_dispatch_lag_seconds_sum', m) ?? 0;

    // a downlink that can never be signed (its body fails the schema): it fails, and holds back the gateway's later rows
    const poisonAt = cloud.clock.now();
    await cloud.db.transaction(async (tx) => {
      const seq = (
        await tx.query<{ last_seq: number }>('UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq', [
          s.gatewayId,
        ])
      ).rows[0]?.last_seq;
      await tx.query(
        `INSERT INTO outbox (gateway_id, seq, jti, type, body, cid, status, next_attempt_at, created_at) VALUES ($1,$2,gen_random_uuid(),'key.grant','{"key":{}}','cid-poison','pending',$3,$3)`,
        [s.gatewayId, seq, poisonAt],
      );
    });
    await cloud.flush();
    m = await scrape();
    expect(of('tobira_cloud_publish_failures_total', m, { result: 'retry' })).toBe(retry0 + 1);

    cloud.clock.advance(30_000);
    const issued = await cloud.issueKey({
      personId: s.personId,
      doors: [s.doorA],
      credential: { type: 'pin', value: '482913' },
      validFrom: T0,
      validUntil: T0 + DAY,
    });
    expect(issued.status).toBe('applied');
    await cloud.flush();
    cloud.clock.advance(60_000);
    m = await scrape();
    expect(of('tobira_cloud_outbox_depth', m, g)).toBe(2);
    expect(of('tobira_cloud_outbox_oldest_age_seconds', m, g)).toBe(90);
    expect(of('tobira_cloud_gateway_dead_letters', m, g)).toBe(0);

    // its backoff runs out: the second attempt is its last (dead), and the grant behind it goes
    cloud.clock.advance(20 * 60_000);
    await cloud.flush();
    await cloud.flush();
    m = await scrape();
    expect(of('tobira_cloud_publish_failures_total', m, { result: 'dead' })).toBe(dead0 + 1);
    expect(of('tobira_cloud_gateway_dead_letters', m, g)).toBe(1);
    expect(of('tobira_cloud_outbox_depth', m, g)).toBe(0);
    expect(of('tobira_cloud_outbox_oldest_age_seconds', m, g)).toBe(0);
    // the grant was committed 60 s + 20 min before its PUBACK (the clock is the test's)
    expect(of('tobira_cloud_dispatch_lag_seconds_count', m)).toBe(lagCount0 + 1);
    expect(of('tobira_cloud_dispatch_lag_seconds_sum', m)).toBe(lagSum0 + 60 + 20 * 60);
    expect(of('tobira_cloud_dispatch_lag_seconds_bucket', m, { le: '900' })).toBe(0);
    expect(of('tobira_cloud_dispatch_lag_seconds_bucket', m, { le: '+Inf' })).toBe(lagCount0 + 1);
  });

  it('uplinks by result and code; presence, failing closed and seq lag from the status report', async () => {
    g.gateway_id = s.gatewayId;
    let m = await scrape();
    const applied0 = of('tobira_cloud_uplinks_total', m, { result: 'applied', code: 'REPORT_RECORDED' }) ?? 0;
    const rejected0 = of('tobira_cloud_uplinks_total', m, { result: 'rejected', code: 'MALFORMED' }) ?? 0;
    expect(of('tobira_cloud_gateway_failing_closed', m, g)).toBeUndefined();
    expect(of('tobira_cloud_gateway_online', m, g)).toBeUndefined();

    const lastSeq = Number(
      (await cloud.db.query<{ last_seq: string }>('SELECT last_seq FROM gateway_seq WHERE gateway_id = $1', [s.gatewayId])).rows[0]
        ?.last_seq,
    );
    const { jti } = await gw.send({
      seq: 1,
      type: 'gateway.status',
      body: { mode: 'normal', outboxDepth: 0, locks: [], appliedSeq: lastSeq - 1, leaseExpiresAt: null },
    });
    await waitFor(async () => (await cloud.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [jti])).rowCount === 1, 'status applied');
    await gw.sendRaw('not a JWS');
    await waitFor(
      async () => (await cloud.db.query('SELECT 1 FROM rejected_uplinks WHERE gateway_id = $1', [s.gatewayId])).rowCount === 1,
      'rejected recorded',
    );
    await gw.sendRaw(JSON.stringify({ online: true }), topics.gatewayPresence(s.gatewayId));
    await waitFor(
      async () => (await cloud.db.query('SELECT 1 FROM gateways WHERE id = $1 AND online', [s.gatewayId])).rowCount === 1,
      'online',
    );

    m = await scrape();
    expect(of('tobira_cloud_uplinks_total', m, { result: 'applied', code: 'REPORT_RECORDED' })).toBe(applied0 + 1);
    expect(of('tobira_cloud_uplinks_total', m, { result: 'rejected', code: 'MALFORMED' })).toBe(rejected0 + 1);
    // it reported no lease: it denies ordinary keys
    expect(of('tobira_cloud_gateway_failing_closed', m, g)).toBe(1);
    expect(of('tobira_cloud_gateway_online', m, g)).toBe(1);
    expect(of('tobira_cloud_gateway_seq_lag', m, g)).toBe(1);

    const { jti: fresh } = await gw.send({
      seq: 2,
      type: 'gateway.status',
      body: { mode: 'normal', outboxDepth: 0, locks: [], appliedSeq: lastSeq, leaseExpiresAt: cloud.clock.now() + 3_600_000 },
    });
    await waitFor(
      async () => (await cloud.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [fresh])).rowCount === 1,
      'status applied',
    );
    m = await scrape();
    expect(of('tobira_cloud_gateway_failing_closed', m, g)).toBe(0);
    expect(of('tobira_cloud_gateway_seq_lag', m, g)).toBe(0);
  });

  describe('webhooks and notifications', () => {
    it('webhook deliveries by result and code, and the queue rows by status', async () => {
      const reg = await app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: bearer(admin),
        payload: { siteId: s.siteId, url, events: ['key.state_changed'] },
      });
      expect(reg.statusCode).toBe(201);
      let m = await scrape();
      for (const queue of ['webhook', 'notification'])
        for (const status of ['pending', 'sending', 'dead']) expect(of('tobira_cloud_queue_rows', m, { queue, status })).toBe(0);
      const failed0 = of('tobira_cloud_webhook_deliveries_total', m, { result: 'retry', code: 'WEBHOOK_HTTP_STATUS' }) ?? 0;
      const ok0 = of('tobira_cloud_webhook_deliveries_total', m, { result: 'delivered', code: 'OK' }) ?? 0;

      const issued = await cloud.issueKey({
        personId: s.personId,
        doors: [s.doorB],
        credential: { type: 'pin', value: '771204' },
        validFrom: T0,
        validUntil: T0 + DAY,
      });
      expect(issued.status).toBe('applied');
      cloud.clock.advance(5_000);
      m = await scrape();
      expect(of('tobira_cloud_queue_rows', m, { queue: 'webhook', status: 'pending' })).toBe(1);
      expect(of('tobira_cloud_queue_oldest_age_seconds', m, { queue: 'webhook', status: 'pending' })).toBe(5);

      const worker = new WebhookDispatcher(
        { db: cloud.db, secrets: cloud.secrets, clock: cloud.clock, log: testLog, random: () => 1, telemetry: cloud.telemetry },
        { allowPrivateNetworks: true, baseMs: 1_000 },
      );
      answer = 500;
      expect(await worker.runOnce()).toBe(1);
      m = await scrape();
      expect(of('tobira_cloud_webhook_deliveries_total', m, { result: 'retry', code: 'WEBHOOK_HTTP_STATUS' })).toBe(failed0 + 1);

      answer = 204;
      cloud.clock.advance(60_000);
      expect(await worker.runOnce()).toBe(1);
      m = await scrape();
      expect(of('tobira_cloud_webhook_deliveries_total', m, { result: 'delivered', code: 'OK' })).toBe(ok0 + 1);
      expect(of('tobira_cloud_queue_rows', m, { queue: 'webhook', status: 'pending' })).toBe(0);
    });

    it('notification outbox depth, then its dead row', async () => {
      const queued = await enqueueNotification(cloud.db, {
        template: 'refund_made',
        subjectId: `metrics-${s.u}`,
        personId: s.personId,
        siteId: s.siteId,
        vars: { amount: 1_200, currency: 'jpy' },
        cid: newCorrelationId(),
        now: cloud.clock.now(),
        channel: 'webhook',
      });
      expect(queued.status).toBe('applied');
      cloud.clock.advance(7_000);
      let m = await scrape();
      expect(of('tobira_cloud_queue_rows', m, { queue: 'notification', status: 'pending' })).toBe(1);
      expect(of('tobira_cloud_queue_oldest_age_seconds', m, { queue: 'notification', status: 'pending' })).toBe(7);
      expect(of('tobira_cloud_queue_rows', m, { queue: 'notification', status: 'dead' })).toBe(0);
      answer = 503;
      expect(await cloud.runNotifications()).toBe(1);
      m = await scrape();
      expect(of('tobira_cloud_queue_rows', m, { queue: 'notification', status: 'pending' })).toBe(0);
      expect(of('tobira_cloud_queue_rows', m, { queue: 'notification', status: 'dead' })).toBe(1);
    });
  });

  it('HTTP latency by route pattern, never by URL; unmatched URLs share one series', async () => {
    await app.inject({ method: 'GET', url: `/gateways/${s.gatewayId}/health`, headers: bearer(admin) });
    await app.inject({ method: 'GET', url: `/no/such/${s.gatewayId}`, headers: bearer(admin) });
    const m = await scrape();
    expect(
      of('tobira_cloud_http_request_duration_seconds_count', m, {
        route: '/gateways/:gatewayId/health',
        method: 'GET',
        status_code: '200',
      }),
    ).toBe(1);
    expect(of('tobira_cloud_http_request_duration_seconds_count', m, { route: 'unmatched', status_code: '404' })).toBeGreaterThanOrEqual(1);
    const httpLines = m.split('\n').filter((l) => l.startsWith('tobira_cloud_http_request_duration_seconds'));
    expect(httpLines.length).toBeGreaterThan(0);
    expect(httpLines.some((l) => l.includes(s.gatewayId))).toBe(false);
  });

  it('database pool use: the pg pool, or PGlite as its one connection', async () => {
    const m = await scrape();
    const b = backend === 'pglite' ? 'pglite' : 'pg';
    expect(of('tobira_cloud_db_pool_connections', m, { backend: b, state: 'max' })).toBe(backend === 'pglite' ? 1 : 10);
    expect(of('tobira_cloud_db_pool_connections', m, { backend: b, state: 'total' })).toBeGreaterThanOrEqual(1);
    expect(of('tobira_cloud_db_pool_connections', m, { backend: b, state: 'waiting' })).toBeGreaterThanOrEqual(0);
    expect(of('tobira_cloud_db_pool_connections', m, { backend: b, state: 'idle' })).toBeGreaterThanOrEqual(0);
  });

  it("both MQTT links, each as a series, and the inbox's uplinks in flight", async () => {
    const m = await scrape();
    expect(of('tobira_cloud_mqtt_connected', m, { link: 'in' })).toBe(1);
    expect(of('tobira_cloud_mqtt_connected', m, { link: 'out' })).toBe(1);
    expect(of('tobira_cloud_uplinks_in_flight', m, {})).toBeGreaterThanOrEqual(0);
  });

  it('says in the help of every per-process metric that replicas are summed', async () => {
    const m = await scrape();
    for (const name of [
      'tobira_cloud_uplinks_total',
      'tobira_cloud_dispatch_lag_seconds',
      'tobira_cloud_publish_failures_total',
      'tobira_cloud_webhook_deliveries_total',
      'tobira_cloud_http_request_duration_seconds',
      'tobira_cloud_db_pool_connections',
      'tobira_cloud_mqtt_connected',
      'tobira_cloud_uplinks_in_flight',
    ]) {
      const help = m.split('\n').find((l) => l.startsWith(`# HELP ${name} `));
      expect(help, name).toContain('Per process');
    }
    expect(m.split('\n').find((l) => l.startsWith('# HELP tobira_cloud_outbox_depth '))).not.toContain('Per process');
  });
});
