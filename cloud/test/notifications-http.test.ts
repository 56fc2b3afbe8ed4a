import { newCorrelationId, newId } from '@tobira/shared';
import { pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../src/admin-cli.js';
import { createApiToken } from '../src/adapters/db/tokens.js';
import type { Channel } from '../src/adapters/notifications/channels.js';
import { enqueueNotification } from '../src/app/notifications.js';
import { buildApp } from '../src/http/app.js';
import { startCloud } from './cloud-helpers.js';
import { openTestDb, testLog, type TestDb } from './helpers.js';

/**
 * The notifications admin API (docs/api.md): list with filters, site scoping
 * and cursor pagination, get, the operator's retry of a dead row (roles and
 * outcome codes), a person's contact and a site's locale, through a cloud
 * whose dispatcher the test drives (`runNotifications`).
 */
describe.each(pgBackends())('notifications API on %s', (backend) => {
  let t: TestDb;
  let broker: MqttTestBroker;
  let cloud: Awaited<ReturnType<typeof startCloud>>;
  let app: FastifyInstance;
  let tokens: { admin: string; managerA: string; managerB: string; auditorA: string };
  const u = newId().slice(-8);
  const siteA = `nsite-a-${u}`;
  const siteB = `nsite-b-${u}`;
  let failing = true;
  const sent: number[] = [];
  const channel: Channel = {
    send: (m) => {
      if (failing) return Promise.resolve({ ok: false, code: 'NOTIFICATION_WEBHOOK_FAILED', detail: 'HTTP 503', permanent: false });
      sent.push(m.id);
      return Promise.resolve({ ok: true });
    },
    close: () => Promise.resolve(),
  };
  const auth = (token: string) => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    t = await openTestDb(backend);
    broker = await startMqttBackend('aedes');
    cloud = await startCloud(t, broker.url, {
      env: { NOTIFY_MAX_ATTEMPTS: '2' },
      deps: { notificationDispatcher: false, notificationChannels: { log: channel } },
    });
    app = await buildApp({ cloud, db: cloud.db, log: testLog, clock: cloud.clock });
    await app.ready();
    for (const id of [siteA, siteB])
      expect(await cloud.createSite({ id, name: id === siteA ? 'Kyoto' : 'Osaka' })).toMatchObject({ status: 'applied' });
    const now = cloud.clock.now();
    tokens = {
      admin: (await createApiToken(cloud.db, { name: 'admin', role: 'admin' }, now)).token,
      managerA: (await createApiToken(cloud.db, { name: 'mA', role: 'manager', sites: [siteA] }, now)).token,
      managerB: (await createApiToken(cloud.db, { name: 'mB', role: 'manager', sites: [siteB] }, now)).token,
      auditorA: (await createApiToken(cloud.db, { name: 'aA', role: 'auditor', sites: [siteA] }, now)).token,
    };
  });
  afterAll(async () => {
    await app?.close();
    await cloud?.stop();
    await broker?.stop();
    await t?.close();
  });

  async function personAt(siteId: string, name: string) {
    const id = `np-${newId().slice(-10)}`;
    const r = await app.inject({ method: 'POST', url: '/people', headers: auth(tokens.admin), payload: { id, name, siteId } });
    expect(r.statusCode).toBe(201);
    return id;
  }
  const enqueue = (personId: string, siteId: string, subjectId: string) =>
    enqueueNotification(cloud.db, {
      template: 'refund_made',
      subjectId,
      personId,
      siteId,
      vars: { amount: 1_200, currency: 'jpy' },
      cid: newCorrelationId(),
      now: cloud.clock.now(),
      channel: 'log',
    });
  /** Dispatcher passes until the failing channel has dead-lettered everything due. */
  async function killAll() {
    for (let i = 0; i < 4; i++) {
      await cloud.runNotifications();
      cloud.clock.advance(3_600_000);
    }
  }

  it('lists, pages, filters and scopes notifications; gets one; retries a dead one with outcome codes and roles', async () => {
    const a = await personAt(siteA, 'Hana');
    const b = await personAt(siteB, 'Ken');
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) {
      const o = await enqueue(a, siteA, `rf-a-${u}-${i}`);
      if (o.status === 'applied') ids.push(o.state.id);
    }
    const ob = await enqueue(b, siteB, `rf-b-${u}`);
    if (ob.status !== 'applied') throw new Error(ob.code);
    await killAll();

    // pages of one, oldest first, without a repeat or a gap, only site A's for its manager
    const seen: number[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `/notifications?status=dead&template=refund_made&limit=1${cursor ? `&cursor=${cursor}` : ''}`;
      const r = await app.inject({ method: 'GET', url: q, headers: auth(tokens.managerA) });
      expect(r.statusCode).toBe(200);
      const page = r.json<{
        items: { id: number; siteId: string; status: string; lastCode: string; body: string }[];
        nextCursor: string | null;
      }>();
      for (const n of page.items) {
        expect(n).toMatchObject({ siteId: siteA, status: 'dead', lastCode: 'NOTIFICATION_WEBHOOK_FAILED' });
        seen.push(n.id);
      }
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(ids);
    const asAdmin = await app.inject({ method: 'GET', url: `/notifications?siteId=${siteB}`, headers: auth(tokens.admin) });
    expect(asAdmin.json<{ items: { id: number }[] }>().items.map((n) => n.id)).toEqual([ob.state.id]);
    const otherSite = await app.inject({ method: 'GET', url: `/notifications?siteId=${siteB}`, headers: auth(tokens.managerA) });
    expect(otherSite.json()).toEqual({ items: [], nextCursor: null });
    expect((await app.inject({ method: 'GET', url: '/notifications?cursor=bad', headers: auth(tokens.admin) })).statusCode).toBe(400);
    expect((await app.inject({ method: 'GET', url: '/notifications?template=nope', headers: auth(tokens.admin) })).statusCode).toBe(400);

    const first = ids[0] ?? 0;
    const got = await app.inject({ method: 'GET', url: `/notifications/${first}`, headers: auth(tokens.auditorA) });
    expect(got.statusCode).toBe(200);
    expect(got.json()).toMatchObject({ notification: { id: first, locale: 'ja', subject: '【Kyoto】返金が完了しました', attempts: 2 } });
    const hidden = await app.inject({ method: 'GET', url: `/notifications/${first}`, headers: auth(tokens.managerB) });
    expect([hidden.statusCode, hidden.json()]).toEqual([404, { status: 'refused', code: 'NOTIFICATION_NOT_FOUND' }]);

    const retry = (token: string, id = first) => app.inject({ method: 'POST', url: `/notifications/${id}/retry`, headers: auth(token) });
    expect((await retry(tokens.auditorA)).statusCode).toBe(403);
    expect([(await retry(tokens.managerB)).statusCode, (await retry(tokens.managerB)).json()]).toEqual([
      404,
      { status: 'refused', code: 'NOTIFICATION_NOT_FOUND' },
    ]);
    const ok = await retry(tokens.managerA);
    expect([ok.statusCode, ok.json()]).toEqual([200, { status: 'applied', code: 'NOTIFICATION_RETRIED' }]);
    const again = await retry(tokens.managerA);
    expect([again.statusCode, again.json()]).toEqual([
      409,
      { status: 'conflict', code: 'NOTIFICATION_NOT_DEAD', notificationStatus: 'pending' },
    ]);
    failing = false;
    await cloud.runNotifications();
    expect(sent).toEqual([first]);
    const after = await app.inject({ method: 'GET', url: `/notifications/${first}`, headers: auth(tokens.admin) });
    expect(after.json()).toMatchObject({ notification: { status: 'sent', attempts: 1 } });
    failing = true;
  });

  it("sets a person's contact and a site's locale, which later messages use; another site's is 404; auditors may not", async () => {
    const p = await personAt(siteA, 'Sam');
    const put = (token: string, url: string, payload: Record<string, unknown>) =>
      app.inject({ method: 'PUT', url, headers: auth(token), payload });
    expect((await put(tokens.auditorA, `/sites/${siteA}/locale`, { locale: 'en' })).statusCode).toBe(403);
    expect((await put(tokens.managerB, `/sites/${siteA}/locale`, { locale: 'en' })).statusCode).toBe(404);
    expect((await put(tokens.managerA, `/sites/${siteA}/locale`, { locale: 'en' })).json()).toEqual({
      status: 'applied',
      code: 'NOTIFICATION_CONTACT_SAVED',
    });
    const o1 = await enqueue(p, siteA, `rf-loc-${u}-1`);
    expect(o1).toMatchObject({ status: 'applied', state: { locale: 'en' } });
    expect((await put(tokens.managerB, `/people/${p}/contact`, { locale: 'ja' })).statusCode).toBe(404);
    expect((await put(tokens.managerA, `/people/${p}/contact`, { email: 'not-an-email' })).statusCode).toBe(400);
    const saved = await put(tokens.managerA, `/people/${p}/contact`, { email: 'sam@example.test', locale: 'ja' });
    expect([saved.statusCode, saved.json()]).toEqual([200, { status: 'applied', code: 'NOTIFICATION_CONTACT_SAVED' }]);
    const o2 = await enqueue(p, siteA, `rf-loc-${u}-2`);
    expect(o2).toMatchObject({ status: 'applied', state: { locale: 'ja' } });
    await put(tokens.admin, `/sites/${siteA}/locale`, { locale: null });
  });

  it('admin CLI: notifications list|show|retry, people contact, sites locale', async () => {
    const p = await personAt(siteA, 'Yuki');
    const o = await enqueue(p, siteA, `rf-cli-${u}`);
    if (o.status !== 'applied') throw new Error(o.code);
    await killAll();
    // the CLI's fetch goes to the app in process (same requests as over the wire)
    const viaApp: typeof fetch = async (input, init) => {
      const url = new URL(String(input));
      const headers = Object.fromEntries(new Headers(init?.headers).entries());
      const method = init?.method === 'POST' ? 'POST' : init?.method === 'PUT' ? 'PUT' : 'GET';
      const r = await app.inject({
        method,
        url: url.pathname + url.search,
        headers,
        ...(typeof init?.body === 'string' ? { payload: init.body } : {}),
      });
      return new Response(r.body, { status: r.statusCode });
    };
    const cli = async (...argv: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runAdminCli(argv, {
        env: { TOBIRA_API: 'http://cloud.test', TOBIRA_TOKEN: tokens.managerA },
        out: (x) => out.push(x),
        err: (x) => err.push(x),
        fetch: viaApp,
      });
      return { code, text: (out.join('\n') || err.join('\n')).replace(/^\d{3} /, '') };
    };
    const list = await cli('notifications', 'list', '--person', p, '--status', 'dead', '--template', 'refund_made');
    expect(list.code).toBe(0);
    expect(JSON.parse(list.text)).toMatchObject({ items: [{ id: o.state.id, status: 'dead' }], nextCursor: null });
    const show = await cli('notifications', 'show', String(o.state.id));
    expect([show.code, JSON.parse(show.text)]).toMatchObject([0, { notification: { id: o.state.id, template: 'refund_made' } }]);
    const retried = await cli('notifications', 'retry', String(o.state.id));
    expect([retried.code, JSON.parse(retried.text)]).toEqual([0, { status: 'applied', code: 'NOTIFICATION_RETRIED' }]);
    const again = await cli('notifications', 'retry', String(o.state.id));
    expect([again.code, JSON.parse(again.text)]).toMatchObject([1, { code: 'NOTIFICATION_NOT_DEAD' }]);
    expect((await cli('people', 'contact', p, '--email', 'yuki@example.test', '--locale', 'en')).code).toBe(0);
    expect((await cli('sites', 'locale', siteA, '--locale', '')).code).toBe(0);
    expect(await enqueue(p, siteA, `rf-cli-${u}-2`)).toMatchObject({ status: 'applied', state: { locale: 'en' } });
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json<{ paths: Record<string, unknown> }>();
    for (const p of [
      '/notifications',
      '/notifications/{id}',
      '/notifications/{id}/retry',
      '/people/{personId}/contact',
      '/sites/{siteId}/locale',
    ])
      expect(Object.keys(doc.paths)).toContain(p);
  });
});
