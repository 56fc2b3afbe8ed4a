import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { NO_CLAIMS, newCorrelationId, newId, newMessageId, type DownlinkMessage } from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { DEFAULT_RETENTION, GatewayStore } from '../src/adapters/sqlite/store.js';
import { T0 } from './fixtures.js';
import { accessRow, capturingLog, staffAppOver, walk } from './staff-helpers.js';

const TOKEN = 'staff-token-for-read-tests';
const auth = { authorization: `Bearer ${TOKEN}` };
const DAY = 86_400_000;

const STAFF_GETS = [
  '/staff/status',
  '/staff/locks',
  '/staff/access-events',
  '/staff/alarms',
  '/staff/inbox/failed',
  '/staff/rejected',
  '/staff/lock-refusals',
];

describe('staff read API over a real SQLite file', () => {
  let dir: string;
  let db: WritableDb;
  let store: GatewayStore;
  let app: FastifyInstance;
  const open = (retention?: ConstructorParameters<typeof GatewayStore>[2]) => {
    db = openDatabase(join(dir, 'g.sqlite'));
    store = new GatewayStore(db, { maxRows: 1000 }, retention);
    store.upsertLock('lock-1', 'door-1', T0);
    store.upsertLock('lock-2', 'door-2', T0);
  };
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-staff-'));
    open();
    app = staffAppOver(store, { staffToken: TOKEN, now: () => T0 });
  });
  afterEach(async () => {
    await app.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const get = (url: string, headers: Record<string, string> = auth) => app.inject({ method: 'GET', url, headers });

  describe('when the caller is not staff', () => {
    it('with no API token configured: a bearer token is answered 503 STAFF_AUTH_NOT_CONFIGURED, no credential at all 401', async () => {
      store.insertAccess(accessRow());
      const bare = staffAppOver(store, { staffToken: undefined });
      for (const url of STAFF_GETS) {
        for (const headers of [auth, { authorization: 'Bearer ' }]) {
          const r = await bare.inject({ method: 'GET', url, headers });
          expect(r.statusCode, url).toBe(503);
          expect(r.json()).toEqual({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
        }
        const none = await bare.inject({ method: 'GET', url });
        expect([none.statusCode, none.json()], url).toEqual([401, { code: 'UNAUTHORIZED' }]);
      }
      await bare.close();
    });

    it('answers 401 UNAUTHORIZED with nothing else for a missing, wrong, prefixed or non-bearer token, before looking at the query', async () => {
      store.insertAccess(accessRow());
      const shapes = [
        {},
        { authorization: `Bearer ${TOKEN}x` },
        { authorization: `Bearer ${TOKEN.slice(0, -1)}` },
        { authorization: TOKEN },
        { authorization: `Basic ${TOKEN}` },
      ];
      // every shape on every route from one address: above the default attempt limit on purpose (that limit: http-guards.test.ts)
      await app.close();
      app = staffAppOver(store, {
        staffToken: TOKEN,
        now: () => T0,
        authFailures: { max: STAFF_GETS.length * shapes.length + 1, windowSeconds: 300 },
      });
      for (const url of STAFF_GETS) {
        for (const headers of shapes) {
          // a bad query too: a refused caller must not learn which parameters exist
          const r = await get(`${url}?limit=0&surprise=1`, headers);
          expect(r.statusCode, `${url} ${JSON.stringify(headers)}`).toBe(401);
          expect(r.json()).toEqual({ code: 'UNAUTHORIZED' });
        }
      }
      expect((await get('/staff/access-events')).statusCode).toBe(200);
    });
  });

  describe('correlation ids and logs', () => {
    it('echoes a given X-Correlation-Id, makes one otherwise, refuses a malformed one, and logs one line per request with it and never the token', async () => {
      const cap = capturingLog();
      const logged = staffAppOver(store, { staffToken: TOKEN, log: cap.log });
      const given = newCorrelationId();
      const a = await logged.inject({ method: 'GET', url: '/staff/locks', headers: { ...auth, 'x-correlation-id': given } });
      expect(a.headers['x-correlation-id']).toBe(given);
      const b = await logged.inject({ method: 'GET', url: '/staff/locks', headers: { authorization: 'Bearer nope-nope-nope-nope' } });
      const made = b.headers['x-correlation-id'];
      expect(typeof made).toBe('string');
      expect(made).not.toBe(given);
      const c = await logged.inject({
        method: 'GET',
        url: '/staff/locks',
        headers: { ...auth, 'x-correlation-id': 'has spaces/and slashes' },
      });
      expect(c.statusCode).toBe(400);
      expect(c.json()).toMatchObject({ code: 'BAD_REQUEST' });

      const lines = cap.lines().filter((l) => l.msg === 'http request');
      expect(lines.map((l) => [l.cid, l.status])).toEqual([
        [given, 200],
        [made, 401],
        [c.headers['x-correlation-id'], 400],
      ]);
      expect(cap.lines().find((l) => l.msg === 'staff request refused')).toMatchObject({ cid: made, code: 'UNAUTHORIZED' });
      expect(cap.raw()).not.toContain(TOKEN);
      expect(cap.raw()).not.toContain('nope-nope');
      await logged.close();
    });
  });

  describe('when the query is bad', () => {
    it.each([
      ['/staff/access-events?surprise=1', 'surprise'],
      ['/staff/access-events?limit=0', 'limit'],
      ['/staff/access-events?limit=501', 'limit'],
      ['/staff/access-events?limit=ten', 'limit'],
      ['/staff/access-events?allowed=yes', 'allowed'],
      ['/staff/access-events?since=yesterday', 'since'],
      ['/staff/access-events?until=-5', 'until'],
      ['/staff/access-events?code=lower_case', 'code'],
      ['/staff/access-events?lock=a&lock=b', 'lock'],
      ['/staff/access-events?cursor=not-a-cursor', 'cursor'],
      // a cursor of another list's shape is not a cursor of this one
      [`/staff/access-events?cursor=${Buffer.from(JSON.stringify([0, T0, 'x'])).toString('base64url')}`, 'cursor'],
      [`/staff/alarms?cursor=${Buffer.from(JSON.stringify([T0, 1])).toString('base64url')}`, 'cursor'],
      ['/staff/alarms?status=closed', 'status'],
      ['/staff/locks?limit=5', 'limit'],
      ['/staff/status?verbose=1', 'verbose'],
      ['/staff/inbox/failed?since=1.5', 'since'],
      ['/staff/rejected?door=d', 'door'],
      ['/staff/rejected?cid=has%20space', 'cid'],
      ['/staff/lock-refusals?origin=cloud', 'origin'],
    ])('answers 400 BAD_REQUEST naming the problem for %s', async (url, named) => {
      const r = await get(url);
      expect(r.statusCode).toBe(400);
      const body = r.json<{ code: string; detail: string }>();
      expect(body.code).toBe('BAD_REQUEST');
      expect(body.detail).toContain(named);
    });
  });

  describe('when the query is anything at all', () => {
    it('answers 200 or 400 with a code, never a 5xx, for random parameters on every list', async () => {
      store.insertAccess(accessRow());
      store.insertAlarm({ alarmId: newId(), lockId: 'lock-1', kind: 'jam', at: T0 }, T0);
      store.recordLockRefusal(
        { origin: 'gateway', lockId: 'lock-1', channel: 'state', topic: 't', code: 'MALFORMED', detail: 'd', bytes: 1 },
        T0,
      );
      const names = fc.constantFrom('door', 'lock', 'allowed', 'code', 'since', 'until', 'limit', 'cursor', 'status', 'origin', 'x', '');
      const values = fc.oneof(
        fc.string(),
        fc.constantFrom('true', 'false', '0', '1', '500', '501', 'open', 'all', 'lock', 'ALLOWED', 'lock-1', '9'.repeat(20)),
        fc.nat().map(String),
        fc.base64String(),
      );
      await fc.assert(
        // (status is read from a running gateway in staff-api.test.ts; here it has no source)
        fc.asyncProperty(
          fc.constantFrom(...STAFF_GETS.filter((p) => p !== '/staff/status')),
          fc.array(fc.tuple(names, values), { maxLength: 4 }),
          async (path, params) => {
            const q = new URLSearchParams(params).toString();
            const r = await get(`${path}?${q}`);
            expect([200, 400], `${path}?${q}: ${r.body}`).toContain(r.statusCode);
            if (r.statusCode === 400) expect(r.json<{ code: string }>().code).toBe('BAD_REQUEST');
          },
        ),
        { numRuns: 300 },
      );
    });
  });

  describe('access events', () => {
    it('filters by door, lock, allowed, code and time window (since inclusive, until exclusive), newest first', async () => {
      const rows = [
        accessRow({ at: T0, lockId: 'lock-1', doorId: 'door-1', allowed: true, code: 'ALLOWED' }),
        accessRow({ at: T0 + 1, lockId: 'lock-2', doorId: 'door-2', allowed: false, code: 'CLOUD_STALE' }),
        accessRow({ at: T0 + 2, lockId: 'lock-1', doorId: 'door-1', allowed: false, code: 'UNKNOWN_CREDENTIAL' }),
        accessRow({ at: T0 + 3, lockId: 'lock-2', doorId: 'door-2', allowed: true, code: 'ALLOWED' }),
      ];
      for (const r of rows) store.insertAccess(r);
      const ids = async (q: string) =>
        (await get(`/staff/access-events${q}`)).json<{ items: { eventId: string }[] }>().items.map((i) => i.eventId);
      const e = rows.map((r) => r.eventId);
      expect(await ids('')).toEqual([e[3], e[2], e[1], e[0]]);
      expect(await ids('?door=door-1')).toEqual([e[2], e[0]]);
      expect(await ids('?lock=lock-2')).toEqual([e[3], e[1]]);
      expect(await ids('?allowed=true')).toEqual([e[3], e[0]]);
      expect(await ids('?allowed=false&lock=lock-1')).toEqual([e[2]]);
      expect(await ids('?code=CLOUD_STALE')).toEqual([e[1]]);
      expect(await ids(`?since=${T0 + 1}&until=${T0 + 3}`)).toEqual([e[2], e[1]]);
      expect(await ids('?door=door-9')).toEqual([]);
    });

    it('exposes the decision and its attribution but no credential value or digest', async () => {
      const cmd = newId();
      store.insertAccess(
        accessRow({
          allowed: true,
          code: 'ALLOWED',
          keyId: 'key-1',
          keyVersion: 2,
          personId: 'person-1',
          commandId: cmd,
          commandExpiresAt: T0 + 10_000,
          holdMs: 5000,
        }),
      );
      const item = (await get('/staff/access-events')).json<{ items: Record<string, unknown>[] }>().items[0]!;
      expect(Object.keys(item).sort()).toEqual(
        [
          'allowed',
          'at',
          'doorName',
          'personName',
          'by',
          'cid',
          'code',
          'commandExpiresAt',
          'commandId',
          'credentialType',
          'doorId',
          'eventId',
          'keyId',
          'keyVersion',
          'lockId',
          'personId',
          'requestId',
        ].sort(),
      );
      expect(item).toMatchObject({
        allowed: true,
        code: 'ALLOWED',
        keyId: 'key-1',
        keyVersion: 2,
        personId: 'person-1',
        credentialType: 'pin',
        commandId: cmd,
      });
    });

    it('walks every row exactly once across pages, in (time, id) order newest first, whatever the rows, filter and page size', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.record({ dt: fc.integer({ min: 0, max: 5 }), lock: fc.constantFrom('lock-1', 'lock-2'), allowed: fc.boolean() }), {
            maxLength: 40,
          }),
          fc.integer({ min: 1, max: 7 }),
          fc.option(fc.constantFrom('lock-1', 'lock-2'), { nil: undefined }),
          async (specs, limit, lock) => {
            db.exec('DELETE FROM access_log');
            // insertion order is not time order: ties in `at` are broken by id
            const inserted = specs.map((s) => {
              const r = accessRow({
                at: T0 + s.dt,
                lockId: s.lock,
                allowed: s.allowed,
                code: s.allowed ? 'ALLOWED' : 'UNKNOWN_CREDENTIAL',
              });
              store.insertAccess(r);
              return r;
            });
            const idOf = new Map(
              (db.prepare('SELECT event_id, id FROM access_log').all() as { event_id: string; id: number }[]).map((r) => [
                r.event_id,
                r.id,
              ]),
            );
            const expected = inserted
              .filter((r) => lock === undefined || r.lockId === lock)
              .sort((a, b) => b.at - a.at || idOf.get(b.eventId)! - idOf.get(a.eventId)!)
              .map((r) => r.eventId);
            const { items, pages } = await walk<{ eventId: string }>(app, TOKEN, '/staff/access-events', {
              limit: String(limit),
              ...(lock ? { lock } : {}),
            });
            expect(items.map((i) => i.eventId)).toEqual(expected);
            expect(pages).toBe(Math.max(1, Math.ceil(expected.length / limit)));
          },
        ),
        { numRuns: 60 },
      );
    });

    it('does not repeat or skip a row when newer rows arrive between pages', async () => {
      const old = [0, 1, 2, 3].map((i) => accessRow({ at: T0 + i }));
      for (const r of old) store.insertAccess(r);
      const first = (await get('/staff/access-events?limit=2')).json<{ items: { eventId: string }[]; nextCursor: string }>();
      store.insertAccess(accessRow({ at: T0 + 10 }));
      const second = (await get(`/staff/access-events?limit=2&cursor=${first.nextCursor}`)).json<{
        items: { eventId: string }[];
        nextCursor: string | null;
      }>();
      expect([...first.items, ...second.items].map((i) => i.eventId)).toEqual([old[3], old[2], old[1], old[0]].map((r) => r!.eventId));
      expect(second.nextCursor).toBeNull();
    });
  });

  describe('alarms', () => {
    it('lists open alarms first and closed ones after, each newest first, and status=open only the open ones; pages walk each once', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.record({ dt: fc.integer({ min: 0, max: 4 }), closed: fc.boolean() }), { maxLength: 25 }),
          fc.integer({ min: 1, max: 5 }),
          async (specs, limit) => {
            db.exec('DELETE FROM alarms');
            const alarms = specs.map((s, i) => ({
              alarmId: newId(),
              lockId: i % 2 === 0 ? 'lock-1' : 'lock-2',
              kind: 'forced_open',
              at: T0 + s.dt,
              closed: s.closed,
            }));
            for (const a of alarms) {
              store.insertAlarm(a, T0 + 100);
              // closing is a future staff verb; until then a closed alarm can only be made by hand
              if (a.closed) db.prepare("UPDATE alarms SET closed_at = ?, closed_by = 'test' WHERE alarm_id = ?").run(T0 + 200, a.alarmId);
            }
            const order = (xs: typeof alarms) =>
              [...xs].sort((a, b) => b.at - a.at || (a.alarmId < b.alarmId ? 1 : -1)).map((a) => a.alarmId);
            const all = await walk<{ alarmId: string; status: string }>(app, TOKEN, '/staff/alarms', {
              limit: String(limit),
              status: 'all',
            });
            expect(all.items.map((a) => a.alarmId)).toEqual([
              ...order(alarms.filter((a) => !a.closed)),
              ...order(alarms.filter((a) => a.closed)),
            ]);
            const open = await walk<{ alarmId: string; status: string }>(app, TOKEN, '/staff/alarms', {
              limit: String(limit),
              status: 'open',
            });
            expect(open.items.map((a) => a.alarmId)).toEqual(order(alarms.filter((a) => !a.closed)));
            expect(open.items.every((a) => a.status === 'open')).toBe(true);
          },
        ),
        { numRuns: 40 },
      );
    });

    it('gives each alarm its door (from the lock) and counts open alarms per lock', async () => {
      store.insertAlarm({ alarmId: newId(), lockId: 'lock-2', kind: 'tamper', at: T0 }, T0 + 5);
      const a = (await get('/staff/alarms?lock=lock-2')).json<{ items: unknown[] }>().items;
      expect(a).toEqual([
        expect.objectContaining({
          lockId: 'lock-2',
          doorId: 'door-2',
          kind: 'tamper',
          status: 'open',
          at: T0,
          receivedAt: T0 + 5,
          closedAt: null,
        }),
      ]);
      expect((await get('/staff/alarms?lock=lock-1')).json<{ items: unknown[] }>().items).toEqual([]);
      const locks = (await get('/staff/locks')).json<{ items: { lockId: string; openAlarms: number }[]; nextCursor: null }>();
      expect(locks.items.map((l) => [l.lockId, l.openAlarms])).toEqual([
        ['lock-1', 0],
        ['lock-2', 1],
      ]);
      expect(locks.nextCursor).toBeNull();
    });
  });

  describe('locks', () => {
    it('shows presence, last reported state and lockout as the table holds them', async () => {
      store.setLockOnline('lock-1', true, T0);
      store.setLockState('lock-1', { bolt: 'locked', door: 'closed', battery: 77, at: T0 - 5 }, T0);
      store.setLockout('lock-2', { failures: 3, lockedOutUntil: T0 + 60_000 }, T0);
      const items = (await get('/staff/locks')).json<{ items: unknown[] }>().items;
      expect(items).toEqual([
        {
          lockId: 'lock-1',
          doorId: 'door-1',
          doorName: null,
          online: true,
          state: { bolt: 'locked', door: 'closed', battery: 77, at: T0 - 5 },
          lockout: { failures: 0, lockedOutUntil: null, lockedOut: false },
          openAlarms: 0,
          updatedAt: T0,
        },
        {
          lockId: 'lock-2',
          doorId: 'door-2',
          doorName: null,
          online: false,
          state: { bolt: null, door: null, battery: null, at: null },
          lockout: { failures: 3, lockedOutUntil: T0 + 60_000, lockedOut: true },
          openAlarms: 0,
          updatedAt: T0,
        },
      ]);
    });
  });

  describe('failed inbox rows and rejected downlinks', () => {
    const revoke = (keyId: string, version: number, seq: number): DownlinkMessage =>
      ({
        jti: newMessageId(),
        iss: 'tobira-cloud',
        aud: 'gw',
        iat: T0 / 1000,
        exp: T0 / 1000 + 60,
        cid: newCorrelationId(),
        type: 'key.revoke',
        seq,
        body: { keyId, version, reason: 'staff_revoked' },
      }) as DownlinkMessage;

    it('lists only failed rows, newest failure first, with the key they name; pages walk each once', async () => {
      const msgs = [revoke('key-a', 2, 1), revoke('key-b', 3, 2), revoke('key-c', 4, 3), revoke('key-d', 5, 4)];
      for (const m of msgs) store.insertInbox(m, T0);
      const ids = (db.prepare('SELECT id, jti FROM inbox ORDER BY id').all() as { id: number; jti: string }[]).map((r) => r.id);
      store.failInbox(ids[0]!, 'disk on fire', true, T0 + 10);
      store.failInbox(ids[1]!, 'still retrying', false, T0 + 11); // not failed yet
      store.failInbox(ids[2]!, 'boom', true, T0 + 12);
      store.failInbox(ids[3]!, 'boom again', true, T0 + 12);
      const { items, pages } = await walk<Record<string, unknown>>(app, TOKEN, '/staff/inbox/failed', { limit: '2' });
      expect(pages).toBe(2);
      expect(items.map((i) => i.keyId)).toEqual(['key-d', 'key-c', 'key-a']);
      expect(items[2]).toEqual({
        jti: msgs[0]!.jti,
        type: 'key.revoke',
        seq: 1,
        keyId: 'key-a',
        keyVersion: 2,
        attempts: 0,
        code: 'APPLY_FAILED',
        lastError: 'disk on fire',
        receivedAt: T0,
        failedAt: T0 + 10,
        cid: msgs[0]!.cid,
      });
      expect((await get(`/staff/inbox/failed?since=${T0 + 12}`)).json<{ items: unknown[] }>().items).toHaveLength(2);
    });

    it('lists rejected downlinks newest first, filtered by code, with what each claimed (null when it claimed nothing)', async () => {
      const claimed = { jti: newMessageId(), cid: 'cloud-cid-1', type: 'key.grant', seq: 7, iss: 'tobira-cloud' };
      store.recordRejected(
        { topic: 'tobira/v1/gw/gw/down', code: 'BAD_SIGNATURE', detail: 'signature does not verify', bytes: 300, claimed },
        T0,
      );
      store.recordRejected(
        { topic: 'tobira/v1/gw/gw/down', code: 'EXPIRED', detail: 'exp in the past', bytes: 310, claimed: NO_CLAIMS },
        T0 + 1,
      );
      const all = (await get('/staff/rejected')).json<{ items: Record<string, unknown>[] }>().items;
      expect(all.map((r) => r.code)).toEqual(['EXPIRED', 'BAD_SIGNATURE']);
      expect(all[1]).toEqual({
        id: expect.any(Number),
        at: T0,
        topic: 'tobira/v1/gw/gw/down',
        code: 'BAD_SIGNATURE',
        detail: 'signature does not verify',
        bytes: 300,
        claimedJti: claimed.jti,
        claimedCid: 'cloud-cid-1',
        claimedType: 'key.grant',
        claimedSeq: 7,
        claimedIssuer: 'tobira-cloud',
      });
      expect(all[0]).toMatchObject({ claimedJti: null, claimedCid: null, claimedType: null, claimedSeq: null, claimedIssuer: null });
      expect((await get('/staff/rejected?code=EXPIRED')).json<{ items: unknown[] }>().items).toHaveLength(1);
    });
  });

  describe('rejected downlinks retention', () => {
    const rejected = (i: number) => ({ topic: 't', code: 'MALFORMED', detail: `n${i}`, bytes: i, claimed: NO_CLAIMS });
    const details = () => (db.prepare('SELECT detail FROM rejected ORDER BY id').all() as { detail: string }[]).map((r) => r.detail);

    it('keeps only the newest rows once the row bound is reached, on every insert', async () => {
      db.close();
      open({ rejectedMaxRows: 4 });
      const small = staffAppOver(store, { staffToken: TOKEN });
      for (let i = 1; i <= 9; i++) {
        store.recordRejected(rejected(i), T0 + i);
        expect(store.rejectedCount()).toBe(Math.min(i, 4));
      }
      const { items } = await walk<{ detail: string }>(small, TOKEN, '/staff/rejected', { limit: '3' });
      expect(items.map((r) => r.detail)).toEqual(['n9', 'n8', 'n7', 'n6']);
      await small.close();
    });

    it('drops rows older than the age bound when the purge runs, and only those; lock refusals keep their own bound', () => {
      db.close();
      open({ rejectedMaxAgeMs: DAY });
      store.recordRejected(rejected(1), T0 - 2 * DAY);
      store.recordRejected(rejected(2), T0 - DAY - 1);
      store.recordRejected(rejected(3), T0 - DAY);
      store.recordRejected(rejected(4), T0);
      store.recordLockRefusal(
        { origin: 'gateway', lockId: 'lock-1', channel: 'state', topic: 't', code: 'SCHEMA_INVALID', detail: 'old', bytes: 1 },
        T0 - 2 * DAY,
      );
      expect(store.purgeRejected(T0)).toBe(2);
      expect(details()).toEqual(['n3', 'n4']);
      expect(store.purgeLockRefusals(T0)).toBe(0); // 30 days by default
    });

    it('defaults to 10,000 rows and 30 days', () => {
      expect(DEFAULT_RETENTION).toMatchObject({ rejectedMaxRows: 10_000, rejectedMaxAgeMs: 30 * DAY });
      store.recordRejected(rejected(1), T0 - 30 * DAY - 1);
      store.recordRejected(rejected(2), T0 - 30 * DAY);
      expect(store.purgeRejected(T0)).toBe(1);
      expect(details()).toEqual(['n2']);
    });

    it('commits with synchronous back at FULL, and joins the caller transaction when there is one', () => {
      store.recordRejected(rejected(1), T0);
      expect(db.pragma('synchronous', { simple: true })).toBe(2);
      expect(() =>
        db
          .transaction(() => {
            store.recordRejected(rejected(2), T0);
            throw new Error('rollback');
          })
          .immediate(),
      ).toThrow('rollback');
      expect(details()).toEqual(['n1']);
    });
  });

  describe('lock refusals retention', () => {
    const refusal = (i: number) => ({
      origin: 'gateway' as const,
      lockId: 'lock-1',
      channel: 'state',
      topic: 't',
      code: 'SCHEMA_INVALID',
      detail: `n${i}`,
      bytes: i,
    });

    it('keeps only the newest rows once the row bound is reached, on every insert', async () => {
      db.close();
      open({ lockRefusalsMaxRows: 5 });
      const small = staffAppOver(store, { staffToken: TOKEN });
      for (let i = 1; i <= 12; i++) {
        store.recordLockRefusal(refusal(i), T0 + i);
        expect((db.prepare('SELECT count(*) AS n FROM lock_refusals').get() as { n: number }).n).toBe(Math.min(i, 5));
      }
      const { items } = await walk<{ detail: string }>(small, TOKEN, '/staff/lock-refusals', { limit: '2' });
      expect(items.map((r) => r.detail)).toEqual(['n12', 'n11', 'n10', 'n9', 'n8']);
      await small.close();
    });

    it('drops rows older than the age bound when the purge runs, and only those', () => {
      db.close();
      open({ lockRefusalsMaxAgeMs: DAY });
      store.recordLockRefusal(refusal(1), T0 - 2 * DAY);
      store.recordLockRefusal(refusal(2), T0 - DAY - 1);
      store.recordLockRefusal(refusal(3), T0 - DAY);
      store.recordLockRefusal(refusal(4), T0);
      expect(store.purgeLockRefusals(T0)).toBe(2);
      expect((db.prepare('SELECT detail FROM lock_refusals ORDER BY id').all() as { detail: string }[]).map((r) => r.detail)).toEqual([
        'n3',
        'n4',
      ]);
    });

    it('joins the caller transaction when there is one (a rollback takes the refusal with it)', () => {
      expect(() =>
        db
          .transaction(() => {
            store.recordLockRefusal(refusal(1), T0);
            throw new Error('rollback');
          })
          .immediate(),
      ).toThrow('rollback');
      expect(db.prepare('SELECT count(*) AS n FROM lock_refusals').get()).toEqual({ n: 0 });
      expect(db.pragma('synchronous', { simple: true })).toBe(2);
    });
  });
});
