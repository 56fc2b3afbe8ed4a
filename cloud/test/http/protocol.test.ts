import { randomBytes } from 'node:crypto';
import { ManualClock, generateSigningKeyPair, newId } from '@tobira/shared';
import { pgBackends, waitFor } from '@tobira/shared/testing';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, routesOf } from '../../src/http/app.js';
import type { Tx } from '../../src/adapters/db/db.js';
import type { AdminCloud } from '../../src/http/context.js';
import { IDEMPOTENCY_LOCK_MS, claim, complete } from '../../src/adapters/db/idempotency.js';
import { requestHash } from '../../src/http/idempotency.js';
import { IDEMPOTENCY_RETENTION_MS, purgeApiTables } from '../../src/adapters/db/api-purge.js';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { capturingLogger, testLog } from '../helpers.js';
import { bearer, count, issueBody, openHarness, seedSite, type Harness } from './harness.js';

describe.each(pgBackends())('admin API protocol on %s', (backend) => {
  let h: Harness;
  let s: Awaited<ReturnType<typeof seedSite>>;
  beforeAll(async () => {
    h = await openHarness(backend);
    s = await seedSite(h, h.siteA);
  });
  afterAll(async () => {
    await h?.close();
  });

  describe('Idempotency-Key', () => {
    it('a replay answers the stored response and creates nothing more', async () => {
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `replay-${s.u}` };
      const body = issueBody(s);
      const first = await h.app.inject({ method: 'POST', url: '/keys', headers, payload: body });
      expect(first.statusCode).toBe(202);
      const keys = await count(h, 'keys');
      const outbox = await count(h, 'outbox');
      const again = await h.app.inject({ method: 'POST', url: '/keys', headers, payload: { ...body } });
      expect(again.statusCode).toBe(202);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.json()).toEqual(first.json());
      expect([again.headers.etag, again.headers.location]).toEqual([first.headers.etag, first.headers.location]);
      expect(await count(h, 'keys')).toBe(keys);
      expect(await count(h, 'outbox')).toBe(outbox);
    });

    it('the same body with its fields in another order is the same request', async () => {
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `order-${s.u}`, 'content-type': 'application/json' };
      const a = await h.app.inject({ method: 'POST', url: '/people', headers, payload: `{"name":"Mei","siteId":"${h.siteA}"}` });
      const b = await h.app.inject({ method: 'POST', url: '/people', headers, payload: `{"siteId":"${h.siteA}","name":"Mei"}` });
      expect(a.statusCode).toBe(201);
      expect(b.statusCode).toBe(201);
      expect(b.json().person.id).toBe(a.json().person.id);
    });

    it('a duplicate while the first is in flight is a retryable 409 IDEMPOTENCY_IN_PROGRESS; after a crashed holder lock runs out the retry runs the request once', async () => {
      const key = `inflight-${s.u}`;
      const body = { name: 'Ren', siteId: h.siteA };
      const tokenId =
        (await h.cloud.db.query<{ id: string }>(`SELECT id FROM api_tokens WHERE name = 'mA' AND $1 = ANY(sites)`, [h.siteA])).rows[0]
          ?.id ?? '';
      // the first request claimed the key and then its process died before committing (its effect and answer commit together, so neither is there)
      const hash = requestHash('POST', '/people', {}, body, { ifMatch: null });
      expect(await claim(h.cloud.db, tokenId, key, hash, h.cloud.clock.now())).toMatchObject({ kind: 'run' });
      const people = await count(h, 'people');
      const dup = await h.app.inject({
        method: 'POST',
        url: '/people',
        headers: { ...bearer(h.tokens.managerA), 'idempotency-key': key },
        payload: body,
      });
      expect(dup.statusCode).toBe(409);
      expect(dup.json()).toMatchObject({ status: 'conflict', code: 'IDEMPOTENCY_IN_PROGRESS' });
      expect(dup.headers['retry-after']).toBe('1');
      expect(await count(h, 'people')).toBe(people);
      h.cloud.clock.advance(IDEMPOTENCY_LOCK_MS + 1);
      const retry = await h.app.inject({
        method: 'POST',
        url: '/people',
        headers: { ...bearer(h.tokens.managerA), 'idempotency-key': key },
        payload: body,
      });
      expect(retry.statusCode).toBe(201);
      expect(retry.json().person).toMatchObject({ name: 'Ren', sites: [h.siteA] });
      const replay = await h.app.inject({
        method: 'POST',
        url: '/people',
        headers: { ...bearer(h.tokens.managerA), 'idempotency-key': key },
        payload: body,
      });
      expect(replay.json().person.id).toBe(retry.json().person.id);
      expect(await count(h, 'people')).toBe(people + 1);
    });

    it("a holder slowed past its lock and taken over does not run: it gets 409 IDEMPOTENCY_CLAIM_LOST, nothing of it commits, and the stored answer is the new holder's", async () => {
      const { log, lines } = await capturingLogger();
      const clock = new ManualClock(h.cloud.clock.now());
      // the first request stalls between claiming the key and opening its transaction (a GC pause, a slow event loop)
      let stall: Promise<void> | null = null;
      let resume = (): void => undefined;
      let stalled = (): void => undefined;
      const atStall = new Promise<void>((r) => (stalled = r));
      const db: Tx = {
        query: (sql, params) => h.cloud.db.query(sql, params),
        exec: (sql) => h.cloud.db.exec(sql),
        transaction: async (fn) => {
          const s_ = stall;
          stall = null;
          if (s_ !== null) {
            stalled();
            await s_;
          }
          return h.cloud.db.transaction(fn);
        },
      };
      const app = await buildApp({ cloud: h.cloud, db, log, clock });
      try {
        const name = `fenced-${s.u}`;
        const req = {
          method: 'POST' as const,
          url: '/api-tokens',
          headers: { ...bearer(h.tokens.admin), 'idempotency-key': `fence.${s.u}` },
          payload: { name, role: 'auditor', sites: [h.siteA] },
        };
        stall = new Promise<void>((r) => (resume = r));
        const slow = app.inject({ ...req, headers: { ...req.headers, 'x-correlation-id': `slow-${s.u}` } });
        await atStall;
        clock.advance(IDEMPOTENCY_LOCK_MS + 1);
        const fast = await app.inject(req);
        expect(fast.statusCode).toBe(201);
        resume();
        const late = await slow;
        expect(late.statusCode).toBe(409);
        expect(late.json()).toMatchObject({ status: 'conflict', code: 'IDEMPOTENCY_CLAIM_LOST' });
        expect(lines.some((l) => l.code === 'IDEMPOTENCY_CLAIM_LOST' && l.cid === `slow-${s.u}`)).toBe(true);
        // exactly one effect: the slow request created its token inside its transaction, and that rolled back
        const made = (await h.cloud.db.query<{ id: string }>('SELECT id FROM api_tokens WHERE name = $1', [name])).rows;
        expect(made.map((r) => r.id)).toEqual([fast.json().id]);
        const replay = await app.inject(req);
        expect(replay.statusCode).toBe(201);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.json()).toEqual(fast.json());
      } finally {
        resume();
        await app.close();
      }
    });

    it('a holder still running inside its unit past its lock keeps the key: the retry waits for it (PostgreSQL) or replays it, and the request runs once', async () => {
      const clock = new ManualClock(h.cloud.clock.now());
      // the first request stalls inside its unit, in the verb (a slow query, a slow broker)
      let stall: Promise<void> | null = null;
      let resume = (): void => undefined;
      let stalled = (): void => undefined;
      const inVerb = new Promise<void>((r) => (stalled = r));
      const cloud: AdminCloud = {
        ...h.cloud,
        createPerson: async (...args: Parameters<AdminCloud['createPerson']>) => {
          const s_ = stall;
          stall = null;
          if (s_ !== null) {
            stalled();
            await s_;
          }
          return h.cloud.createPerson(...args);
        },
      };
      const app = await buildApp({ cloud, db: h.cloud.db, log: testLog, clock });
      try {
        const name = `held-${s.u}`;
        const req = {
          method: 'POST' as const,
          url: '/people',
          headers: { ...bearer(h.tokens.managerA), 'idempotency-key': `held.${s.u}` },
          payload: { name, siteId: h.siteA },
        };
        stall = new Promise<void>((r) => (resume = r));
        const slow = app.inject(req);
        await inVerb;
        clock.advance(IDEMPOTENCY_LOCK_MS + 1);
        let retried = false;
        const retry = app.inject(req).finally(() => (retried = true));
        if (h.cloud.db.kind === 'pg') {
          // let the retry get as far as it can: done, or waiting for the first holder's row lock
          await waitFor(
            async () =>
              retried ||
              ((
                await h.cloud.db.query<{ n: number }>(
                  `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
                )
              ).rows[0]?.n ?? 0) > 0,
            'the retry to finish or wait for the lock',
          );
        }
        resume();
        const [first, second] = await Promise.all([slow, retry]);
        expect(first.statusCode).toBe(201);
        const replayed =
          second.statusCode === 201 &&
          second.headers['idempotent-replayed'] === 'true' &&
          JSON.stringify(second.json()) === JSON.stringify(first.json());
        const toldToWait = second.statusCode === 409 && second.json().code === 'IDEMPOTENCY_IN_PROGRESS';
        expect(replayed || toldToWait).toBe(true);
        const made = (await h.cloud.db.query<{ id: string }>('SELECT id FROM people WHERE name = $1', [name])).rows;
        expect(made.map((r) => r.id)).toEqual([first.json().person.id]);
        const again = await app.inject(req);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.json()).toEqual(first.json());
      } finally {
        resume();
        await app.close();
      }
    });

    it('the effect and the stored response are one transaction: when storing the response fails, the effect is rolled back and the key is free for a retry', async () => {
      const key = `atomic-${s.u}`;
      // the database refuses to store this one response (as a crash or a lost connection at that point would)
      await h.cloud.db.exec(`
        CREATE FUNCTION refuse_response_${s.u}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.key = '${key}' AND NEW.state = 'done' THEN RAISE EXCEPTION 'storing the response failed'; END IF; RETURN NEW; END $$;
        CREATE TRIGGER refuse_response_${s.u} BEFORE UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION refuse_response_${s.u}();`);
      const people = await count(h, 'people');
      const links = await count(h, 'api_person_sites');
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': key };
      const body = { name: 'Aoi', siteId: h.siteA };
      const failed = await h.app.inject({ method: 'POST', url: '/people', headers, payload: body });
      expect(failed.statusCode).toBe(500);
      expect(failed.json()).toMatchObject({ status: 'refused', code: 'INTERNAL' });
      expect(await count(h, 'people')).toBe(people);
      expect(await count(h, 'api_person_sites')).toBe(links);
      expect((await h.cloud.db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [key])).rowCount).toBe(0);
      await h.cloud.db.exec(`DROP TRIGGER refuse_response_${s.u} ON idempotency_keys; DROP FUNCTION refuse_response_${s.u}();`);
      const retry = await h.app.inject({ method: 'POST', url: '/people', headers, payload: body });
      expect(retry.statusCode).toBe(201);
      expect(await count(h, 'people')).toBe(people + 1);
    });

    it('a gateway registration replayed under its Idempotency-Key shows the same provisioning (pepper included) and registers nothing more', async () => {
      const pair = await generateSigningKeyPair();
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `gw-${s.u}` };
      const payload = { gatewayId: `gw-replay-${s.u}`, siteId: h.siteA, publicJwk: pair.publicJwk };
      const first = await h.app.inject({ method: 'POST', url: '/gateways', headers, payload });
      expect(first.statusCode).toBe(201);
      const gateways = await count(h, 'gateways');
      const again = await h.app.inject({ method: 'POST', url: '/gateways', headers, payload });
      expect(again.statusCode).toBe(201);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.json().provisioning.credentialPepper).toBe(first.json().provisioning.credentialPepper);
      expect(await count(h, 'gateways')).toBe(gateways);
      // at rest the stored answer is sealed under the caller's token: the pepper is not in the database's copy
      const stored = await h.cloud.db.query<{ response: string }>(
        'SELECT response::text AS response FROM idempotency_keys WHERE key = $1',
        [`gw-${s.u}`],
      );
      expect(stored.rows[0]?.response).not.toContain(first.json().provisioning.credentialPepper);
      expect(JSON.parse(stored.rows[0]?.response ?? '{}')).toMatchObject({
        v: 1,
        iv: expect.any(String),
        tag: expect.any(String),
        data: expect.any(String),
      });
      // without the key, the same registration is refused: the pepper is shown once
      const bare = await h.app.inject({ method: 'POST', url: '/gateways', headers: bearer(h.tokens.managerA), payload });
      expect(bare.json()).toMatchObject({ status: 'refused', code: 'GATEWAY_ALREADY_EXISTS' });
    });

    it('concurrent duplicates make one key: each answer is the 202 or a retryable 409 IDEMPOTENCY_IN_PROGRESS', async () => {
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `race-${s.u}` };
      const body = issueBody(s);
      const keys = await count(h, 'keys');
      const answers = await Promise.all(
        Array.from({ length: 6 }, () => h.app.inject({ method: 'POST', url: '/keys', headers, payload: body })),
      );
      for (const a of answers) {
        if (a.statusCode === 409) expect(a.json()).toMatchObject({ status: 'conflict', code: 'IDEMPOTENCY_IN_PROGRESS' });
        else expect(a.statusCode).toBe(202);
      }
      expect(answers.filter((a) => a.statusCode === 202).length).toBeGreaterThanOrEqual(1);
      expect(await count(h, 'keys')).toBe(keys + 1);
    });

    it('keys are per token: another token may use the same Idempotency-Key', async () => {
      const key = `shared-${s.u}`;
      const a = await h.app.inject({
        method: 'POST',
        url: '/people',
        headers: { ...bearer(h.tokens.managerA), 'idempotency-key': key },
        payload: { name: 'A', siteId: h.siteA },
      });
      const b = await h.app.inject({
        method: 'POST',
        url: '/people',
        headers: { ...bearer(h.tokens.managerB), 'idempotency-key': key },
        payload: { name: 'B', siteId: h.siteB },
      });
      expect([a.statusCode, b.statusCode]).toEqual([201, 201]);
      expect(a.json().person.id).not.toBe(b.json().person.id);
    });

    it('a refused request is stored too: its replay is the same refusal', async () => {
      const headers = { ...bearer(h.tokens.managerA), 'idempotency-key': `refused-${s.u}` };
      const body = issueBody(s, { validFrom: 1000, validUntil: 2000 });
      const a = await h.app.inject({ method: 'POST', url: '/keys', headers, payload: body });
      const b = await h.app.inject({ method: 'POST', url: '/keys', headers, payload: body });
      expect([a.statusCode, b.statusCode]).toEqual([422, 422]);
      expect(b.headers['idempotent-replayed']).toBe('true');
    });
  });

  describe('retention', () => {
    it('purges finished idempotency keys after a day and keeps in-progress ones and recent ones', async () => {
      const tokenId = (await h.cloud.db.query<{ id: string }>(`SELECT id FROM api_tokens WHERE name = 'admin'`)).rows[0]?.id ?? '';
      const now = h.cloud.clock.now();
      const old = now - IDEMPOTENCY_RETENTION_MS - 1;
      const run = async (key: string, at: number): Promise<string> => {
        const c = await claim(h.cloud.db, tokenId, key, 'h', at);
        if (c.kind !== 'run') throw new Error(`claim ${c.kind}`);
        return c.token;
      };
      expect(await complete(h.cloud.db, tokenId, `old-done-${s.u}`, await run(`old-done-${s.u}`, old), 201, {})).toBe(true);
      await run(`old-running-${s.u}`, old);
      expect(await complete(h.cloud.db, tokenId, `new-done-${s.u}`, await run(`new-done-${s.u}`, now), 201, {})).toBe(true);
      await purgeApiTables(h.cloud.db, now);
      const left = (
        await h.cloud.db.query<{ key: string }>('SELECT key FROM idempotency_keys WHERE token_id = $1 AND key LIKE $2 ORDER BY key', [
          tokenId,
          `%-${s.u}`,
        ])
      ).rows;
      expect(left.map((x) => x.key)).toEqual([`new-done-${s.u}`, `old-running-${s.u}`]);
    });
  });

  describe('correlation', () => {
    it('X-Correlation-Id is echoed, bound to every log line of the request, and carried into the key, its outbox row and its history', async () => {
      const { log, lines } = await capturingLogger();
      const app = await buildApp({ cloud: h.cloud, db: h.cloud.db, log, clock: h.cloud.clock });
      try {
        const cid = `corr-${s.u}`;
        const r = await app.inject({
          method: 'POST',
          url: '/keys',
          headers: { ...bearer(h.tokens.managerA), 'x-correlation-id': cid },
          payload: issueBody(s),
        });
        expect(r.statusCode).toBe(202);
        expect(r.headers['x-correlation-id']).toBe(cid);
        expect(lines.length).toBeGreaterThanOrEqual(2);
        for (const l of lines) expect(l.cid).toBe(cid);
        const keyId = r.json().key.id as string;
        expect(r.json().key.cid).toBe(cid);
        const rows = await h.cloud.db.query<{ cid: string }>(
          'SELECT cid FROM outbox WHERE key_id = $1 UNION ALL SELECT cid FROM key_history WHERE key_id = $1',
          [keyId],
        );
        expect(rows.rows.map((x) => x.cid)).toEqual([cid, cid]);
      } finally {
        await app.close();
      }
    });

    it('without X-Correlation-Id one is generated, echoed and logged', async () => {
      const { log, lines } = await capturingLogger();
      const app = await buildApp({ cloud: h.cloud, db: h.cloud.db, log, clock: h.cloud.clock });
      try {
        const r = await app.inject({ method: 'GET', url: '/keys', headers: bearer(h.tokens.managerA) });
        const cid = r.headers['x-correlation-id'] as string;
        expect(cid).toMatch(/^[0-9a-f-]{36}$/);
        expect(lines.length).toBeGreaterThan(0);
        for (const l of lines) expect(l.cid).toBe(cid);
      } finally {
        await app.close();
      }
    });
  });

  describe('errors', () => {
    const failing = (e: unknown): AdminCloud =>
      ({
        createPerson: () => Promise.reject(e),
      }) as unknown as AdminCloud;

    it('a 5xx hides its details from the caller and logs them with the correlation id', async () => {
      const { log, lines } = await capturingLogger();
      const app = await buildApp({
        cloud: failing(new Error('secret connection string postgres://u:pw@db')),
        db: h.cloud.db,
        log,
        clock: h.cloud.clock,
      });
      try {
        const r = await app.inject({
          method: 'POST',
          url: '/people',
          headers: { ...bearer(h.tokens.admin), 'x-correlation-id': 'corr-500' },
          payload: { name: 'X', siteId: h.siteA },
        });
        expect(r.statusCode).toBe(500);
        expect(r.json()).toMatchObject({ status: 'refused', code: 'INTERNAL' });
        expect(r.body).not.toContain('secret');
        const err = lines.find((l) => l.level === 50);
        expect(err).toMatchObject({ cid: 'corr-500' });
        expect(JSON.stringify(err)).toContain('secret connection string');
      } finally {
        await app.close();
      }
    });

    it('a database that is down is 503 SERVICE_UNAVAILABLE, and an Idempotency-Key of a failed request can be used again', async () => {
      const app = await buildApp({
        cloud: failing(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })),
        db: h.cloud.db,
        log: testLog,
        clock: h.cloud.clock,
      });
      try {
        const headers = { ...bearer(h.tokens.admin), 'idempotency-key': `down-${s.u}` };
        const r = await app.inject({ method: 'POST', url: '/people', headers, payload: { name: 'X', siteId: h.siteA } });
        expect(r.statusCode).toBe(503);
        expect(r.json()).toMatchObject({ status: 'refused', code: 'SERVICE_UNAVAILABLE' });
        const ok = await h.app.inject({ method: 'POST', url: '/people', headers, payload: { name: 'X', siteId: h.siteA } });
        expect(ok.statusCode).toBe(201);
      } finally {
        await app.close();
      }
    });
    // node-postgres raises these without a code when the server drops the connection mid-request
    it.each([
      'Connection terminated unexpectedly',
      'Connection terminated',
      'Client has encountered a connection error and is not queryable',
      'timeout exceeded when trying to connect',
      'Connection terminated due to connection timeout',
    ])('a lost database connection (%s) is 503 SERVICE_UNAVAILABLE, not 500', async (message) => {
      const app = await buildApp({ cloud: failing(new Error(message)), db: h.cloud.db, log: testLog, clock: h.cloud.clock });
      try {
        const r = await app.inject({
          method: 'POST',
          url: '/people',
          headers: bearer(h.tokens.admin),
          payload: { name: 'X', siteId: h.siteA },
        });
        expect(r.statusCode).toBe(503);
        expect(r.headers['retry-after']).toBe('5');
        expect(r.json()).toMatchObject({ status: 'refused', code: 'SERVICE_UNAVAILABLE' });
      } finally {
        await app.close();
      }
    });
  });

  describe('rate limiting', () => {
    it('is per token: past the limit a token gets 429 RATE_LIMITED while another token is unaffected', async () => {
      const clock = new ManualClock(h.cloud.clock.now());
      const app = await buildApp({
        cloud: h.cloud,
        db: h.cloud.db,
        log: testLog,
        clock,
        config: { rateLimitMax: 3, rateLimitWindowMs: 60_000 },
      });
      try {
        const t = (await createApiToken(h.cloud.db, { name: `rl-${newId()}`, role: 'auditor', sites: [h.siteA] })).token;
        const codes: number[] = [];
        for (let i = 0; i < 4; i++) codes.push((await app.inject({ method: 'GET', url: '/sites', headers: bearer(t) })).statusCode);
        expect(codes).toEqual([200, 200, 200, 429]);
        const limited = await app.inject({ method: 'GET', url: '/sites', headers: bearer(t) });
        expect(limited.json()).toMatchObject({ status: 'refused', code: 'RATE_LIMITED' });
        expect(limited.headers['retry-after']).toBeDefined();
        expect((await app.inject({ method: 'GET', url: '/sites', headers: bearer(h.tokens.auditorA) })).statusCode).toBe(200);
      } finally {
        await app.close();
      }
    });
  });

  describe('rate limiting before authentication', () => {
    it('a flood of bad or missing tokens from one address gets 429 RATE_LIMITED past the per-IP budget, before any token lookup; other addresses are unaffected', async () => {
      const { log, lines } = await capturingLogger();
      let tokenLookups = 0;
      const db: Tx = {
        query: (sql, params) => {
          if (sql.includes('api_tokens')) tokenLookups++;
          return h.cloud.db.query(sql, params);
        },
        exec: (sql) => h.cloud.db.exec(sql),
        transaction: (fn) => h.cloud.db.transaction(fn),
      };
      const app = await buildApp({
        cloud: h.cloud,
        db,
        log,
        clock: h.cloud.clock,
        config: { rateLimitIpMax: 4, rateLimitMax: 100, rateLimitWindowMs: 60_000 },
      });
      try {
        const attacker = '203.0.113.7';
        // well formed, so each one costs a lookup until the limiter stops it
        const forged = { authorization: `Bearer tbr_${randomBytes(32).toString('base64url')}` };
        const first: number[] = [];
        for (const headers of [forged, {}, forged, {}])
          first.push((await app.inject({ method: 'GET', url: '/sites', headers, remoteAddress: attacker })).statusCode);
        expect(first).toEqual([401, 401, 401, 401]);
        const looked = tokenLookups;
        expect(looked).toBe(2);
        for (const headers of [forged, {}, bearer(h.tokens.admin)]) {
          const r = await app.inject({
            method: 'GET',
            url: '/sites',
            headers: { ...headers, 'x-correlation-id': `flood-${newId()}` },
            remoteAddress: attacker,
          });
          expect(r.statusCode).toBe(429);
          expect(r.json()).toMatchObject({ status: 'refused', code: 'RATE_LIMITED' });
          expect(Number(r.headers['retry-after'])).toBeGreaterThan(0);
          expect(lines.some((l) => l.code === 'RATE_LIMITED' && l.cid === r.headers['x-correlation-id'])).toBe(true);
        }
        expect(tokenLookups).toBe(looked);
        const other = await app.inject({ method: 'GET', url: '/sites', headers: bearer(h.tokens.admin), remoteAddress: '198.51.100.9' });
        expect(other.statusCode).toBe(200);
      } finally {
        await app.close();
      }
    });
  });

  describe('OpenAPI', () => {
    it('is served at /openapi.json without a token, validates against the OpenAPI 3 schema, and lists every route', async () => {
      const r = await h.app.inject({ method: 'GET', url: '/openapi.json' });
      expect(r.statusCode).toBe(200);
      const doc = r.json() as {
        openapi: string;
        info: { title: string; version: string };
        paths: Record<
          string,
          Record<
            string,
            { responses: Record<string, { content?: Record<string, { schema: unknown }> }>; parameters?: { in: string; name: string }[] }
          >
        >;
      };
      expect(doc.openapi).toMatch(/^3\.\d+\.\d+$/);
      // validated against the official OpenAPI JSON schema of its version
      const validation = await new Validator().validate(r.json() as Record<string, unknown>);
      expect(validation.errors ?? []).toEqual([]);
      expect(validation.valid).toBe(true);
      expect(doc.info.title).toBeTruthy();
      expect(doc.info.version).toBeTruthy();
      const documented = new Set<string>();
      for (const [path, ops] of Object.entries(doc.paths)) {
        expect(path.startsWith('/')).toBe(true);
        for (const [method, op] of Object.entries(ops)) {
          documented.add(`${method.toUpperCase()} ${path}`);
          const statuses = Object.keys(op.responses);
          expect(statuses.some((x) => /^2\d\d$/.test(x))).toBe(true);
          for (const st of statuses) {
            expect(st).toMatch(/^[1-5]\d\d$/);
            expect(op.responses[st]?.content?.['application/json']?.schema).toBeDefined();
          }
          for (const name of [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1])) {
            expect(op.parameters?.some((p) => p.in === 'path' && p.name === name)).toBe(true);
          }
        }
      }
      const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"#\/([^"]+)"/g)].map((m) => m[1] ?? '');
      for (const ref of refs) {
        let node: unknown = doc;
        for (const part of ref.split('/')) node = (node as Record<string, unknown> | undefined)?.[part];
        expect([ref, node !== undefined]).toEqual([ref, true]);
      }
      const routes = routesOf(h.app).filter((x) => !x.hidden);
      expect(routes.length).toBeGreaterThanOrEqual(20);
      for (const route of routes) expect(documented).toContain(`${route.method} ${route.url.replace(/:(\w+)/g, '{$1}')}`);
    });

    it('interactive docs are served at /docs', async () => {
      const r = await h.app.inject({ method: 'GET', url: '/docs/' });
      expect(r.statusCode).toBe(200);
      expect(r.headers['content-type']).toContain('text/html');
    });
  });
});
