import { randomUUID } from 'node:crypto';
import { topics } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../../src/admin-cli.js';
import { cloudSigningKey } from '../cloud-helpers.js';
import { fakeGateway, waitFor, type FakeGateway } from '../mqtt-helpers.js';
import { bearer, issueBody, openHarness, seedSite, type Harness } from './harness.js';

const HOUR = 3_600_000;

describe.each(pgBackends())("the operator's view on %s", (backend) => {
  let h: Harness;
  const gateways: FakeGateway[] = [];
  beforeAll(async () => {
    // webhook endpoints below point at a local address: the SSRF guard is off (webhook-egress.test.ts tests it on)
    h = await openHarness(backend, { webhookAllowPrivateNetworks: true });
  });
  afterAll(async () => {
    for (const g of gateways) await g.close();
    await h?.close();
  });

  /** A gateway registered through the API at `siteId`, and a stand-in that signs its uplinks and sends them over the broker. */
  async function gatewayAt(siteId: string) {
    const s = await seedSite(h, siteId);
    const key = await cloudSigningKey();
    const gw = await fakeGateway({
      url: h.broker.url,
      gatewayId: s.gatewayId,
      pair: s.pair,
      cloudJwks: { keys: [key.publicJwk] },
      cloudIssuer: 'tobira-cloud',
      clock: h.cloud.clock,
    });
    gateways.push(gw);
    let seq = 0;
    const sent = async (draft: Record<string, unknown>) => {
      const m = await gw.send({ seq: ++seq, ...draft });
      // applied (or deduped) once its jti is in the inbox
      await waitFor(
        async () => (await h.cloud.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [m.jti])).rowCount === 1,
        `uplink ${m.jti}`,
      );
      return m;
    };
    return {
      ...s,
      gw,
      alarm: (body: { alarmId?: string; lockId?: string; kind?: string; at: number }) =>
        sent({
          type: 'alarm',
          body: { alarmId: randomUUID(), lockId: 'lock-1', doorId: s.doorId, kind: 'door_ajar', ...body },
        }),
      status: (body: { appliedSeq: number; leaseExpiresAt: number | null; outboxDepth?: number }) =>
        sent({ type: 'gateway.status', body: { mode: 'normal', outboxDepth: 0, locks: [], ...body } }),
      presence: async (online: boolean) => {
        const before = await presenceAt(s.gatewayId);
        h.cloud.clock.advance(1_000);
        await gw.sendRaw(JSON.stringify({ online }), topics.gatewayPresence(s.gatewayId));
        await waitFor(async () => (await presenceAt(s.gatewayId)) !== before, 'presence recorded');
      },
    };
  }
  const presenceAt = async (gatewayId: string) =>
    (await h.cloud.db.query<{ presence_at: string | null }>('SELECT presence_at FROM gateways WHERE id = $1', [gatewayId])).rows[0]
      ?.presence_at ?? null;

  const get = (url: string, token = h.tokens.admin) => h.app.inject({ method: 'GET', url, headers: bearer(token) });
  const ack = (alarmId: string, token = h.tokens.managerA) =>
    h.app.inject({ method: 'POST', url: `/alarms/${alarmId}/ack`, headers: bearer(token) });

  /** Every page of a list, following nextCursor. */
  async function allPages<T>(url: string, token = h.tokens.admin): Promise<{ pages: number; items: T[] }> {
    const items: T[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r = await get(`${url}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`, token);
      expect(r.statusCode).toBe(200);
      const body = r.json() as { items: T[]; nextCursor: string | null };
      items.push(...body.items);
      cursor = body.nextCursor;
      pages++;
    } while (cursor !== null);
    return { pages, items };
  }

  describe('alarms', () => {
    it("are listed newest first, page by page without a repeat or a gap, and a site manager never sees another site's", async () => {
      const a = await gatewayAt(h.siteA);
      const b = await gatewayAt(h.siteB);
      const t = h.cloud.clock.now();
      // two share a time: the alarm id breaks the tie, so a page boundary between them loses neither
      for (const at of [t - 5_000, t - 4_000, t - 4_000, t - 2_000, t - 1_000]) await a.alarm({ at });
      await b.alarm({ at: t - 3_000 });

      const { pages, items } = await allPages<{ alarmId: string; at: number; siteId: string }>(
        `/alarms?gatewayId=${a.gatewayId}&limit=2`,
        h.tokens.managerA,
      );
      expect(pages).toBe(3);
      expect(items.map((x) => x.at)).toEqual([t - 1_000, t - 2_000, t - 4_000, t - 4_000, t - 5_000]);
      expect(new Set(items.map((x) => x.alarmId)).size).toBe(5);
      expect(items.every((x) => x.siteId === h.siteA)).toBe(true);

      const mine = (await get(`/alarms?limit=500`, h.tokens.managerA)).json() as { items: { gatewayId: string }[] };
      expect(mine.items.some((x) => x.gatewayId === b.gatewayId)).toBe(false);
      expect((await get(`/alarms?gatewayId=${b.gatewayId}`, h.tokens.managerA)).json().items).toEqual([]);
      expect((await get(`/alarms?gatewayId=${b.gatewayId}`, h.tokens.managerB)).json().items).toHaveLength(1);
      expect(
        (await get(`/alarms?siteId=${h.siteA}&gatewayId=${a.gatewayId}&from=${t - 4_000}&to=${t - 1_000}`, h.tokens.auditorA)).json().items,
      ).toHaveLength(3);
    });

    it("filter by lock and kind (the gateway's lock_events_throttled too); a bad kind or cursor is 400", async () => {
      const a = await gatewayAt(h.siteA);
      const t = h.cloud.clock.now();
      await a.alarm({ at: t, lockId: 'lock-x', kind: 'tamper' });
      await a.alarm({ at: t, lockId: 'lock-y', kind: 'jam' });
      const byLock = (await get(`/alarms?gatewayId=${a.gatewayId}&lockId=lock-x`)).json() as { items: { kind: string }[] };
      expect(byLock.items.map((x) => x.kind)).toEqual(['tamper']);
      const byKind = (await get(`/alarms?gatewayId=${a.gatewayId}&kind=jam`)).json() as { items: { lockId: string }[] };
      expect(byKind.items.map((x) => x.lockId)).toEqual(['lock-y']);
      // the gateway's own alarm about a lock over its event budget is taken and filtered like a lock's
      await a.alarm({ at: t, lockId: 'lock-z', kind: 'lock_events_throttled' });
      const throttled = (await get(`/alarms?gatewayId=${a.gatewayId}&kind=lock_events_throttled`)).json() as {
        items: { lockId: string }[];
      };
      expect(throttled.items.map((x) => x.lockId)).toEqual(['lock-z']);
      expect((await get(`/alarms?kind=not_a_kind`)).statusCode).toBe(400);
      const bad = await get('/alarms?cursor=bm90LWEtY3Vyc29y');
      expect(bad.statusCode).toBe(400);
      expect(bad.json()).toMatchObject({ code: 'BAD_REQUEST' });
    });

    it('an ack records the token and the time once; a second ack is a noop; auditors may not; another site or no alarm is 404', async () => {
      const a = await gatewayAt(h.siteA);
      const alarmId = randomUUID();
      await a.alarm({ alarmId, at: h.cloud.clock.now() });
      const ackTime = h.cloud.clock.now();

      const byAuditor = await ack(alarmId, h.tokens.auditorA);
      expect(byAuditor.statusCode).toBe(403);
      expect(byAuditor.json()).toMatchObject({ code: 'FORBIDDEN_ROLE' });
      const byOtherSite = await ack(alarmId, h.tokens.managerB);
      expect(byOtherSite.statusCode).toBe(404);
      expect(byOtherSite.json()).toMatchObject({ status: 'refused', code: 'ALARM_NOT_FOUND' });
      expect((await ack(randomUUID())).statusCode).toBe(404);
      expect((await ack('not-a-uuid')).statusCode).toBe(400);

      const first = await ack(alarmId);
      expect(first.statusCode).toBe(200);
      expect(first.json()).toMatchObject({
        status: 'applied',
        code: 'ALARM_ACKNOWLEDGED',
        alarm: { alarmId, ackedAt: ackTime, ackedBy: 'mA' },
      });

      h.cloud.clock.advance(60_000);
      const second = await ack(alarmId, h.tokens.admin);
      expect(second.statusCode).toBe(200);
      expect(second.json()).toMatchObject({ status: 'noop', code: 'ALARM_ALREADY_ACKED', alarm: { ackedAt: ackTime, ackedBy: 'mA' } });

      const open = (await get(`/alarms?gatewayId=${a.gatewayId}&state=open`)).json() as { items: unknown[] };
      expect(open.items).toEqual([]);
      const acked = (await get(`/alarms?gatewayId=${a.gatewayId}&state=acknowledged`)).json() as { items: { alarmId: string }[] };
      expect(acked.items.map((x) => x.alarmId)).toEqual([alarmId]);
    });
  });

  describe('rejected uplinks', () => {
    it('are listed newest first with their code, paged without repeats, and scoped to the gateways of the token sites', async () => {
      const a = await gatewayAt(h.siteA);
      const b = await gatewayAt(h.siteB);
      for (let i = 0; i < 3; i++) {
        h.cloud.clock.advance(1_000);
        await a.gw.sendRaw(`garbage-${i}`);
      }
      await b.gw.sendRaw('garbage-b');
      await waitFor(
        async () =>
          (await h.cloud.db.query('SELECT 1 FROM rejected_uplinks WHERE gateway_id = ANY($1)', [[a.gatewayId, b.gatewayId]])).rowCount ===
          4,
        'rejected rows',
      );
      const { pages, items } = await allPages<{ id: number; gatewayId: string; code: string; at: number }>(
        `/rejected-uplinks?gatewayId=${a.gatewayId}&limit=2`,
        h.tokens.managerA,
      );
      expect(pages).toBe(2);
      expect(items).toHaveLength(3);
      expect(new Set(items.map((x) => x.id)).size).toBe(3);
      expect(items.map((x) => x.at)).toEqual([...items.map((x) => x.at)].sort((x, y) => y - x));
      expect(items.every((x) => x.code === 'MALFORMED')).toBe(true);

      expect((await get(`/rejected-uplinks?gatewayId=${b.gatewayId}`, h.tokens.managerA)).json().items).toEqual([]);
      const mine = (await get('/rejected-uplinks?limit=500', h.tokens.managerA)).json() as { items: { gatewayId: string | null }[] };
      expect(mine.items.every((x) => x.gatewayId !== b.gatewayId && x.gatewayId !== null)).toBe(true);
      expect((await get(`/rejected-uplinks?gatewayId=${b.gatewayId}&code=MALFORMED`)).json().items).toHaveLength(1);
      expect((await get(`/rejected-uplinks?gatewayId=${b.gatewayId}&code=BAD_SIGNATURE`)).json().items).toHaveLength(0);
    });
  });

  describe('gateway health', () => {
    it("shows a real status report's figures: lease left, applied vs handed-out seq, outbox depth, clock skew, failing closed and why", async () => {
      const a = await gatewayAt(h.siteA);
      const before = (await get(`/gateways/${a.gatewayId}/health`)).json() as { health: Record<string, unknown> };
      expect(before.health).toMatchObject({
        lastStatusAt: null,
        failingClosed: null,
        failClosedReason: null,
        lastSeq: 0,
        appliedSeq: null,
      });

      const issued = await h.app.inject({ method: 'POST', url: '/keys', headers: bearer(h.tokens.managerA), payload: issueBody(a) });
      expect(issued.statusCode).toBe(202);
      const now = h.cloud.clock.now();
      await a.presence(true);
      await a.status({ appliedSeq: 0, leaseExpiresAt: now + HOUR, outboxDepth: 3 });
      // the skew is written after the message's transaction commits
      await waitFor(
        async () =>
          (await h.cloud.db.query('SELECT 1 FROM gateways WHERE id = $1 AND clock_skew_at IS NOT NULL', [a.gatewayId])).rowCount === 1,
        'clock skew recorded',
      );
      const fresh = (await get(`/gateways/${a.gatewayId}/health`, h.tokens.auditorA)).json() as { health: Record<string, unknown> };
      const at = h.cloud.clock.now();
      expect(fresh.health).toMatchObject({
        gatewayId: a.gatewayId,
        siteId: h.siteA,
        online: true,
        lastStatusAt: at,
        mode: 'normal',
        leaseExpiresAt: now + HOUR,
        leaseLeftMs: now + HOUR - at,
        appliedSeq: 0,
        lastSeq: 1,
        seqLag: 1,
        outboxDepth: 3,
        clockSkewMs: 0,
        deadLetters: 0,
        failingClosed: false,
        failClosedReason: null,
      });

      h.cloud.clock.advance(2 * HOUR);
      const stale = (await get(`/gateways/${a.gatewayId}/health`)).json() as { health: Record<string, unknown> };
      // its last report's lease has run out since, and it still had a seq to apply
      expect(stale.health).toMatchObject({ leaseLeftMs: 0, failingClosed: true, failClosedReason: 'BEHIND_CLOUD' });

      await a.status({ appliedSeq: 1, leaseExpiresAt: null });
      expect((await get(`/gateways/${a.gatewayId}/health`)).json().health).toMatchObject({
        appliedSeq: 1,
        seqLag: 0,
        leaseLeftMs: null,
        failingClosed: true,
        failClosedReason: 'NO_LEASE',
      });
      await a.status({ appliedSeq: 1, leaseExpiresAt: h.cloud.clock.now() - 1 });
      expect((await get(`/gateways/${a.gatewayId}/health`)).json().health).toMatchObject({ failClosedReason: 'LEASE_EXPIRED' });

      expect((await get(`/gateways/${a.gatewayId}/health`, h.tokens.managerB)).statusCode).toBe(404);
      expect((await get('/gateways/gw-nobody/health')).json()).toMatchObject({ code: 'GATEWAY_NOT_FOUND' });
    });

    it("the fleet view lists every gateway's health by site, page by page without a repeat or a gap, scoped, and filtered on failing closed", async () => {
      const siteId = `site-fleet-${randomUUID().slice(0, 8)}`;
      expect(
        (await h.app.inject({ method: 'POST', url: '/sites', headers: bearer(h.tokens.admin), payload: { id: siteId, name: 'Fleet' } }))
          .statusCode,
      ).toBe(201);
      const gws = [await gatewayAt(siteId), await gatewayAt(siteId), await gatewayAt(siteId)];
      const now = h.cloud.clock.now();
      const [fresh, closed] = gws;
      await fresh?.status({ appliedSeq: 0, leaseExpiresAt: now + HOUR });
      await closed?.status({ appliedSeq: 0, leaseExpiresAt: null });

      type Item = {
        gatewayId: string;
        siteId: string;
        failingClosed: boolean | null;
        failClosedReason: string | null;
        leaseLeftMs: number | null;
      };
      const { pages, items } = await allPages<Item>(`/gateway-health?siteId=${siteId}&limit=2`);
      expect(pages).toBe(2);
      expect(items.map((x) => x.gatewayId)).toEqual(gws.map((x) => x.gatewayId).sort());
      expect(items.every((x) => x.siteId === siteId)).toBe(true);
      const byId = new Map(items.map((x) => [x.gatewayId, x]));
      // the same figures as the gateway's own health route
      expect(byId.get(fresh?.gatewayId ?? '')).toMatchObject({ failingClosed: false, leaseLeftMs: HOUR });
      expect(byId.get(closed?.gatewayId ?? '')).toMatchObject({ failingClosed: true, failClosedReason: 'NO_LEASE', leaseLeftMs: null });
      expect(byId.get(gws[2]?.gatewayId ?? '')).toMatchObject({ failingClosed: null });
      const one = (await get(`/gateways/${closed?.gatewayId ?? ''}/health`)).json() as { health: Item };
      expect(byId.get(closed?.gatewayId ?? '')).toEqual(one.health);

      const failing = (await get(`/gateway-health?siteId=${siteId}&failingClosed=true`)).json() as { items: Item[] };
      expect(failing.items.map((x) => x.gatewayId)).toEqual([closed?.gatewayId]);
      const notFailing = (await get(`/gateway-health?siteId=${siteId}&failingClosed=false`)).json() as { items: Item[] };
      expect(notFailing.items.map((x) => x.gatewayId)).toEqual([fresh?.gatewayId]);

      // a manager of another site sees none of them, even naming the site
      expect((await get(`/gateway-health?siteId=${siteId}`, h.tokens.managerA)).json().items).toEqual([]);
      const mine = (await get('/gateway-health?limit=500', h.tokens.managerA)).json() as { items: Item[] };
      expect(mine.items.length).toBeGreaterThan(0);
      expect(mine.items.every((x) => x.siteId === h.siteA)).toBe(true);
      const bad = await get('/gateway-health?cursor=bm90LWEtY3Vyc29y');
      expect(bad.statusCode).toBe(400);
      expect((await get('/gateway-health?failingClosed=yes')).statusCode).toBe(400);
    });
  });

  describe('the admin CLI', () => {
    /** The CLI, its requests answered by the app in process (cli.test.ts runs it against a listening server). */
    async function cli(token: string, ...argv: string[]): Promise<{ code: number; status: number; json: Record<string, unknown> }> {
      const lines: string[] = [];
      const code = await runAdminCli(argv, {
        env: { TOBIRA_API: 'http://api.test', TOBIRA_TOKEN: token },
        out: (x) => lines.push(x),
        err: (x) => lines.push(x),
        fetch: async (input, init) => {
          const u = new URL(String(input));
          const r = await h.app.inject({
            method: init?.method === 'POST' ? 'POST' : 'GET',
            url: `${u.pathname}${u.search}`,
            headers: Object.fromEntries(Object.entries(init?.headers ?? {})),
            ...(typeof init?.body === 'string' ? { payload: init.body } : {}),
          });
          return new Response(r.body, { status: r.statusCode, headers: { 'content-type': 'application/json' } });
        },
      });
      const m = /^(\d{3}) ([\s\S]*)$/.exec(lines.join('\n'));
      return { code, status: Number(m?.[1]), json: JSON.parse(m?.[2] ?? '{}') as Record<string, unknown> };
    }

    it('lists and acknowledges alarms, lists rejected uplinks and shows a gateway health', async () => {
      const a = await gatewayAt(h.siteA);
      const alarmId = randomUUID();
      await a.alarm({ alarmId, at: h.cloud.clock.now(), kind: 'low_battery' });
      await a.gw.sendRaw('garbage-cli');
      await waitFor(
        async () => (await h.cloud.db.query('SELECT 1 FROM rejected_uplinks WHERE gateway_id = $1', [a.gatewayId])).rowCount === 1,
        'rejected row',
      );

      const open = await cli(h.tokens.managerA, 'alarms', '--site', h.siteA, '--gateway', a.gatewayId, '--open', '--kind', 'low_battery');
      expect(open).toMatchObject({ code: 0, status: 200, json: { items: [expect.objectContaining({ alarmId, ackedAt: null })] } });
      expect(await cli(h.tokens.auditorA, 'alarms', 'ack', alarmId)).toMatchObject({ code: 1, status: 403 });
      expect(await cli(h.tokens.managerA, 'alarms', 'ack', alarmId)).toMatchObject({
        code: 0,
        json: { status: 'applied', code: 'ALARM_ACKNOWLEDGED' },
      });
      expect(await cli(h.tokens.managerA, 'alarms', 'ack', alarmId)).toMatchObject({
        code: 0,
        json: { status: 'noop', code: 'ALARM_ALREADY_ACKED' },
      });
      expect((await cli(h.tokens.managerA, 'alarms', '--gateway', a.gatewayId, '--acknowledged')).json.items).toEqual([
        expect.objectContaining({ alarmId, ackedBy: 'mA' }),
      ]);
      expect((await cli(h.tokens.managerA, 'alarms', '--open', '--acknowledged')).code).toBe(2);

      const rejected = await cli(h.tokens.managerA, 'rejected-uplinks', '--gateway', a.gatewayId, '--code', 'MALFORMED');
      expect(rejected).toMatchObject({
        code: 0,
        json: { items: [expect.objectContaining({ gatewayId: a.gatewayId, code: 'MALFORMED' })] },
      });

      expect(await cli(h.tokens.auditorA, 'gateway', 'health', a.gatewayId)).toMatchObject({
        code: 0,
        json: { health: { gatewayId: a.gatewayId, lastSeq: 0, failingClosed: null } },
      });
      expect(await cli(h.tokens.managerB, 'gateway', 'health', a.gatewayId)).toMatchObject({ code: 1, status: 404 });
    });
  });

  describe('webhooks out', () => {
    const outbox = async (endpointId: string) =>
      (
        await h.cloud.db.query<{ type: string; body: Record<string, unknown>; cid: string | null }>(
          'SELECT type, body, cid FROM webhook_outbox WHERE endpoint_id = $1 ORDER BY id',
          [endpointId],
        )
      ).rows;
    async function endpoint(events: string[]): Promise<string> {
      const r = await h.app.inject({
        method: 'POST',
        url: '/webhooks',
        headers: bearer(h.tokens.managerA),
        payload: { siteId: h.siteA, url: 'http://127.0.0.1:9/hook', events },
      });
      if (r.statusCode !== 201) throw new Error(`webhook ${r.statusCode} ${r.body}`);
      return (r.json() as { webhook: { id: string } }).webhook.id;
    }

    it('alarm.raised is queued once per alarm, even when the gateway sends it twice', async () => {
      const a = await gatewayAt(h.siteA);
      const id = await endpoint(['alarm.raised']);
      const alarmId = randomUUID();
      const m = await a.alarm({ alarmId, at: h.cloud.clock.now(), kind: 'forced_open' });
      await a.alarm({ alarmId, at: h.cloud.clock.now(), kind: 'forced_open' });
      const rows = await outbox(id);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        type: 'alarm.raised',
        cid: m.cid,
        body: { alarmId, siteId: h.siteA, gatewayId: a.gatewayId, kind: 'forced_open', doorId: a.doorId },
      });
    });

    it('gateway.offline is queued once per going offline, not for a repeated offline presence', async () => {
      const a = await gatewayAt(h.siteA);
      const id = await endpoint(['gateway.offline']);
      await a.presence(true);
      await a.presence(false);
      await a.presence(false);
      expect(await outbox(id)).toHaveLength(1);
      await a.presence(true);
      expect(await outbox(id)).toHaveLength(1);
      await a.presence(false);
      const rows = await outbox(id);
      expect(rows.map((r) => r.type)).toEqual(['gateway.offline', 'gateway.offline']);
      expect(rows[1]?.body).toMatchObject({ gatewayId: a.gatewayId, siteId: h.siteA, at: h.cloud.clock.now() });
    });

    it('gateway.failing_closed is queued once when a status report says it fails closed, again only after it recovered', async () => {
      const a = await gatewayAt(h.siteA);
      const id = await endpoint(['gateway.failing_closed']);
      const now = () => h.cloud.clock.now();
      await a.status({ appliedSeq: 0, leaseExpiresAt: now() + HOUR });
      expect(await outbox(id)).toHaveLength(0);
      h.cloud.clock.advance(1_000);
      const failing = await a.status({ appliedSeq: 0, leaseExpiresAt: now() - 1 });
      h.cloud.clock.advance(1_000);
      await a.status({ appliedSeq: 0, leaseExpiresAt: now() - 1_001 });
      let rows = await outbox(id);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({
        type: 'gateway.failing_closed',
        cid: failing.cid,
        body: { gatewayId: a.gatewayId, siteId: h.siteA, reason: 'LEASE_EXPIRED', appliedSeq: 0, lastSeq: 0 },
      });
      await a.status({ appliedSeq: 0, leaseExpiresAt: now() + HOUR });
      await a.status({ appliedSeq: 0, leaseExpiresAt: null });
      rows = await outbox(id);
      expect(rows.map((r) => r.body.reason)).toEqual(['LEASE_EXPIRED', 'NO_LEASE']);
    });

    it('an endpoint subscribed to other events gets none of these', async () => {
      const a = await gatewayAt(h.siteA);
      const id = await endpoint(['key.state_changed']);
      await a.alarm({ at: h.cloud.clock.now() });
      await a.presence(false);
      await a.status({ appliedSeq: 0, leaseExpiresAt: null });
      expect(await outbox(id)).toEqual([]);
    });
  });
});
