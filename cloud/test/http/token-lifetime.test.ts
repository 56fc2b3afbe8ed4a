import { pgBackends } from '@tobira/shared/testing';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/http/app.js';
import { createApiToken } from '../../src/adapters/db/tokens.js';
import { hashToken, type Role } from '../../src/domain/tokens.js';
import { testLog } from '../helpers.js';
import { DAY, bearer, count, openHarness, snapshot, type Harness } from './harness.js';

const HOUR = 3_600_000;
const EXPIRES = 'tobira-token-expires-at';

describe.each(pgBackends())('API token lifetime and rotation on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await openHarness(backend);
  });
  afterAll(async () => {
    await h?.close();
  });

  const now = () => h.cloud.clock.now();
  const mint = async (role: Role, over: { expiresInDays?: number; sites?: string[] | null } = {}) =>
    createApiToken(h.cloud.db, { name: `${role}-${now()}`, role, sites: role === 'admin' ? null : [h.siteA], ...over }, now());
  const get = (token: string, url = '/sites', app: FastifyInstance = h.app) => app.inject({ method: 'GET', url, headers: bearer(token) });
  const rotate = (token: string, id: string, payload: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
    h.app.inject({ method: 'POST', url: `/api-tokens/${id}/rotate`, headers: { ...bearer(token), ...headers }, payload });
  const row = async (id: string) =>
    (
      await h.cloud.db.query<{
        expires_at: number | null;
        revoked_at: number | null;
        rotated_to: string | null;
        last_used_at: number | null;
      }>('SELECT expires_at, revoked_at, rotated_to, last_used_at FROM api_tokens WHERE id = $1', [id])
    ).rows[0];
  const listed = async (id: string) => {
    const r = await get(h.tokens.admin, '/api-tokens');
    expect(r.statusCode).toBe(200);
    return (r.json().items as { id: string }[]).find((t) => t.id === id) as Record<string, unknown>;
  };

  describe('when a token has expired', () => {
    it('works until the last millisecond, then is 401 TOKEN_EXPIRED with a Bearer challenge', async () => {
      const t = await mint('manager', { expiresInDays: 1 });
      h.cloud.clock.advance(DAY - 1);
      expect((await get(t.token)).statusCode).toBe(200);
      h.cloud.clock.advance(1);
      const r = await get(t.token);
      expect(r.statusCode).toBe(401);
      expect(r.json()).toMatchObject({
        status: 'refused',
        code: 'TOKEN_EXPIRED',
        detail: `expired at ${new Date(t.expiresAt ?? 0).toISOString()}`,
      });
      expect(r.headers['www-authenticate']).toContain('invalid_token');
    });

    it('a write with it is refused before the body is read and writes nothing (not even last use)', async () => {
      const t = await mint('admin', { expiresInDays: 1 });
      h.cloud.clock.advance(DAY);
      const before = await snapshot(h);
      const lastUsed = (await row(t.id))?.last_used_at;
      const r = await h.app.inject({
        method: 'POST',
        url: '/sites',
        headers: { ...bearer(t.token), 'idempotency-key': `exp-${t.id}` },
        payload: { name: 'never' },
      });
      expect(r.statusCode).toBe(401);
      expect(r.json().code).toBe('TOKEN_EXPIRED');
      expect(await snapshot(h)).toEqual(before);
      expect((await row(t.id))?.last_used_at).toBe(lastUsed);
    });

    it('a revoked token is UNAUTHENTICATED, even when it has also expired', async () => {
      const t = await mint('manager', { expiresInDays: 1 });
      expect((await h.app.inject({ method: 'POST', url: `/api-tokens/${t.id}/revoke`, headers: bearer(h.tokens.admin) })).statusCode).toBe(
        200,
      );
      expect((await get(t.token)).json().code).toBe('UNAUTHENTICATED');
      h.cloud.clock.advance(DAY);
      expect((await get(t.token)).json().code).toBe('UNAUTHENTICATED');
    });

    it('GET /api-tokens shows it as expired, never the token or its hash', async () => {
      const t = await mint('manager', { expiresInDays: 1 });
      h.cloud.clock.advance(DAY);
      const item = await listed(t.id);
      expect(item).toMatchObject({
        id: t.id,
        state: 'expired',
        expiresAt: t.expiresAt,
        revokedAt: null,
        rotatedTo: null,
        rotatedFrom: null,
      });
      const body = (await get(h.tokens.admin, '/api-tokens')).body;
      expect(body).not.toContain(t.token);
      expect(body).not.toContain(hashToken(t.token));
    });
  });

  describe('lifetime at creation', () => {
    it('a token created without a lifetime gets the default (90 days)', async () => {
      const r = await h.app.inject({
        method: 'POST',
        url: '/api-tokens',
        headers: bearer(h.tokens.admin),
        payload: { name: 'pms', role: 'manager', sites: [h.siteA] },
      });
      expect(r.statusCode).toBe(201);
      expect(r.json()).toMatchObject({ status: 'applied', expiresAt: now() + 90 * DAY });
      expect((await row(r.json().id))?.expires_at).toBe(now() + 90 * DAY);
      expect(await listed(r.json().id)).toMatchObject({ state: 'active', expiresAt: now() + 90 * DAY });
    });

    it('expiresInDays sets it; out of 1..3650 is 400 and makes no token', async () => {
      const r = await h.app.inject({
        method: 'POST',
        url: '/api-tokens',
        headers: bearer(h.tokens.admin),
        payload: { name: 'short', role: 'admin', expiresInDays: 3 },
      });
      expect(r.statusCode).toBe(201);
      expect(r.json().expiresAt).toBe(now() + 3 * DAY);
      const before = await count(h, 'api_tokens');
      for (const expiresInDays of [0, 3651, 1.5, null]) {
        const bad = await h.app.inject({
          method: 'POST',
          url: '/api-tokens',
          headers: bearer(h.tokens.admin),
          payload: { name: 'bad', role: 'admin', expiresInDays },
        });
        expect(bad.statusCode).toBe(400);
      }
      expect(await count(h, 'api_tokens')).toBe(before);
    });

    it('with tokenDefaultTtlMs null a token without a lifetime never expires', async () => {
      const app = await buildApp({
        cloud: h.cloud,
        db: h.cloud.db,
        log: testLog,
        clock: h.cloud.clock,
        config: { tokenDefaultTtlMs: null },
      });
      try {
        const r = await app.inject({
          method: 'POST',
          url: '/api-tokens',
          headers: bearer(h.tokens.admin),
          payload: { name: 'forever', role: 'admin' },
        });
        expect(r.statusCode).toBe(201);
        expect(r.json().expiresAt).toBeNull();
        h.cloud.clock.advance(3650 * DAY);
        const used = await get(r.json().token, '/sites', app);
        expect(used.statusCode).toBe(200);
        expect(used.headers[EXPIRES]).toBeUndefined();
      } finally {
        await app.close();
      }
    });
  });

  describe('when a token expires within 7 days', () => {
    it('every answer carries Tobira-Token-Expires-At; earlier and without expiry, none', async () => {
      const t = await mint('auditor', { expiresInDays: 30 });
      expect((await get(t.token)).headers[EXPIRES]).toBeUndefined();
      expect((await get(h.tokens.admin)).headers[EXPIRES]).toBeUndefined();
      h.cloud.clock.advance(23 * DAY - 1);
      expect((await get(t.token)).headers[EXPIRES]).toBeUndefined();
      h.cloud.clock.advance(1);
      const r = await get(t.token);
      expect(r.statusCode).toBe(200);
      expect(r.headers[EXPIRES]).toBe(new Date(t.expiresAt ?? 0).toISOString());
      // also on a refusal after authentication
      const refused = await h.app.inject({ method: 'POST', url: '/sites', headers: bearer(t.token), payload: { name: 'x' } });
      expect(refused.statusCode).toBe(403);
      expect(refused.headers[EXPIRES]).toBe(new Date(t.expiresAt ?? 0).toISOString());
      expect(await listed(t.id)).toMatchObject({ state: 'expiring' });
    });
  });

  describe('GET /api-tokens/self', () => {
    it('shows any role its own token (expiry and state, never the token), and only its own', async () => {
      const t = await mint('auditor', { expiresInDays: 30 });
      const r = await get(t.token, '/api-tokens/self');
      expect(r.statusCode).toBe(200);
      expect(r.json().token).toMatchObject({
        id: t.id,
        role: 'auditor',
        sites: [h.siteA],
        expiresAt: t.expiresAt,
        state: 'active',
        revokedAt: null,
      });
      expect(r.body).not.toContain(t.token);
      expect(r.body).not.toContain(hashToken(t.token));
      const other = await get(h.tokens.managerA, '/api-tokens/self');
      expect(other.json().token.id).not.toBe(t.id);
      h.cloud.clock.advance(24 * DAY);
      expect((await get(t.token, '/api-tokens/self')).json().token).toMatchObject({ state: 'expiring' });
      // the list stays admin only
      expect((await get(t.token, '/api-tokens')).statusCode).toBe(403);
    });
  });

  describe('rotation', () => {
    it('an admin rotates a token: the new one (shown once, stored hashed) has the same name, role and sites', async () => {
      const old = await mint('manager', { expiresInDays: 30 });
      const r = await rotate(h.tokens.admin, old.id);
      expect(r.statusCode).toBe(201);
      const n = r.json();
      expect(n).toMatchObject({
        status: 'applied',
        code: 'MESSAGE_APPLIED',
        name: old.name,
        role: 'manager',
        sites: [h.siteA],
        expiresAt: now() + 90 * DAY,
      });
      expect(n.rotatedFrom).toEqual({ id: old.id, expiresAt: now() + HOUR, revokedAt: null });
      expect(n.token).toMatch(/^tbr_[A-Za-z0-9_-]{43}$/);
      const stored = await h.cloud.db.query<{ id: string; token_hash: string }>('SELECT id, token_hash FROM api_tokens WHERE id = $1', [
        n.id,
      ]);
      expect(stored.rows).toEqual([{ id: n.id, token_hash: hashToken(n.token) }]);
      // same scope: sees its site only, may not create sites
      expect((await get(n.token)).json().items.map((s: { id: string }) => s.id)).toEqual([h.siteA]);
      expect((await h.app.inject({ method: 'POST', url: '/sites', headers: bearer(n.token), payload: { name: 'x' } })).statusCode).toBe(
        403,
      );
      expect(await listed(old.id)).toMatchObject({ rotatedTo: n.id, state: 'expiring', expiresAt: now() + HOUR });
      expect(await listed(n.id)).toMatchObject({ rotatedFrom: old.id, rotatedTo: null, state: 'active' });
    });

    it('the old token works during the grace period and is TOKEN_EXPIRED after it', async () => {
      const old = await mint('manager');
      const r = await rotate(h.tokens.admin, old.id, { graceSeconds: 600 });
      expect(r.statusCode).toBe(201);
      h.cloud.clock.advance(600_000 - 1);
      const during = await get(old.token);
      expect(during.statusCode).toBe(200);
      expect(during.headers[EXPIRES]).toBe(new Date(now() + 1).toISOString());
      h.cloud.clock.advance(1);
      expect((await get(old.token)).json()).toMatchObject({ code: 'TOKEN_EXPIRED' });
      expect((await get(r.json().token)).statusCode).toBe(200);
    });

    it('grace 0 revokes the old token at once', async () => {
      const old = await mint('manager');
      const r = await rotate(h.tokens.admin, old.id, { graceSeconds: 0 });
      expect(r.statusCode).toBe(201);
      expect(r.json().rotatedFrom).toEqual({ id: old.id, expiresAt: null, revokedAt: now() });
      expect((await get(old.token)).json()).toMatchObject({ code: 'UNAUTHENTICATED' });
      expect(await listed(old.id)).toMatchObject({ state: 'revoked', rotatedTo: r.json().id });
      expect((await get(r.json().token)).statusCode).toBe(200);
    });

    it('a grace period never extends an earlier expiry; expiresInDays sets the new lifetime', async () => {
      const old = await mint('manager', { expiresInDays: 1 });
      h.cloud.clock.advance(DAY - 60_000); // one minute left
      const r = await rotate(h.tokens.admin, old.id, { graceSeconds: 3600, expiresInDays: 7 });
      expect(r.statusCode).toBe(201);
      expect(r.json()).toMatchObject({ expiresAt: now() + 7 * DAY, rotatedFrom: { expiresAt: old.expiresAt } });
      expect((await row(old.id))?.expires_at).toBe(old.expiresAt);
      const bad = await rotate(h.tokens.admin, r.json().id, { graceSeconds: 604_801 });
      expect(bad.statusCode).toBe(400);
    });

    it('a manager rotates its own token (no body needed)', async () => {
      const self = await mint('manager');
      const r = await h.app.inject({ method: 'POST', url: `/api-tokens/${self.id}/rotate`, headers: bearer(self.token) });
      expect(r.statusCode).toBe(201);
      expect(r.json()).toMatchObject({ role: 'manager', sites: [h.siteA] });
      expect((await get(r.json().token)).statusCode).toBe(200);
      expect((await get(self.token)).statusCode).toBe(200); // within the default hour of grace
    });

    it('a manager naming another token gets 404 TOKEN_NOT_FOUND, as for a token that does not exist, and nothing changes', async () => {
      const other = await mint('manager');
      const before = await snapshot(h);
      const otherRow = await row(other.id);
      const r = await rotate(h.tokens.managerA, other.id);
      expect(r.statusCode).toBe(404);
      expect(r.json()).toEqual({ status: 'refused', code: 'TOKEN_NOT_FOUND' });
      expect((await rotate(h.tokens.managerA, 'no-such-token')).json()).toEqual(r.json());
      expect(await snapshot(h)).toEqual(before);
      expect(await row(other.id)).toEqual(otherRow);
      expect((await get(other.token)).statusCode).toBe(200);
    });

    it('an auditor may rotate its own credential (it grants nothing new) but no other token, and still writes nothing else', async () => {
      const self = await mint('auditor');
      const r = await rotate(self.token, self.id, { graceSeconds: 0 });
      expect(r.statusCode).toBe(201);
      expect(r.json()).toMatchObject({ role: 'auditor', sites: [h.siteA] });
      const fresh = r.json().token as string;
      expect((await rotate(fresh, (await mint('auditor')).id)).statusCode).toBe(404);
      expect(
        (await h.app.inject({ method: 'POST', url: '/people', headers: bearer(fresh), payload: { name: 'x', siteId: h.siteA } }))
          .statusCode,
      ).toBe(403);
      expect((await h.app.inject({ method: 'POST', url: `/api-tokens/${r.json().id}/revoke`, headers: bearer(fresh) })).statusCode).toBe(
        403,
      );
    });

    it('a revoked, an expired, an already rotated or an unknown token is refused with its code and nothing is written', async () => {
      const revoked = await mint('manager');
      await h.app.inject({ method: 'POST', url: `/api-tokens/${revoked.id}/revoke`, headers: bearer(h.tokens.admin) });
      const expired = await mint('manager', { expiresInDays: 1 });
      const rotated = await mint('manager');
      const first = await rotate(h.tokens.admin, rotated.id);
      expect(first.statusCode).toBe(201);
      h.cloud.clock.advance(DAY);
      const before = await snapshot(h);
      expect((await rotate(h.tokens.admin, revoked.id)).json()).toEqual({ status: 'refused', code: 'TOKEN_REVOKED' });
      const e = await rotate(h.tokens.admin, expired.id);
      expect(e.statusCode).toBe(422);
      expect(e.json()).toMatchObject({ status: 'refused', code: 'TOKEN_EXPIRED' });
      const again = await rotate(h.tokens.admin, rotated.id);
      // the old one's grace ran out: it is expired, which is reported first
      expect(again.json()).toMatchObject({ code: 'TOKEN_EXPIRED' });
      const live = await mint('manager');
      const once = await rotate(h.tokens.admin, live.id);
      expect(once.statusCode).toBe(201);
      const twice = await rotate(h.tokens.admin, live.id);
      expect(twice.statusCode).toBe(422);
      expect(twice.json()).toEqual({ status: 'refused', code: 'TOKEN_ALREADY_ROTATED', detail: `rotated to ${once.json().id}` });
      const unknown = await rotate(h.tokens.admin, 'no-such-token');
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json().code).toBe('TOKEN_NOT_FOUND');
      expect((await count(h, 'api_tokens')) - before.api_tokens!).toBe(2); // live and its one successor
    });

    it('a token whose successor was revoked (its answer lost, say) may be rotated again', async () => {
      const old = await mint('manager');
      const lost = await rotate(h.tokens.admin, old.id);
      await h.app.inject({ method: 'POST', url: `/api-tokens/${lost.json().id}/revoke`, headers: bearer(h.tokens.admin) });
      const r = await rotate(h.tokens.admin, old.id);
      expect(r.statusCode).toBe(201);
      expect((await row(old.id))?.rotated_to).toBe(r.json().id);
      expect((await get(r.json().token)).statusCode).toBe(200);
    });

    it('two concurrent rotations of one token make one successor; the other is TOKEN_ALREADY_ROTATED', async () => {
      const old = await mint('manager');
      const before = await count(h, 'api_tokens');
      const rs = await Promise.all([rotate(h.tokens.admin, old.id), rotate(h.tokens.admin, old.id), rotate(old.token, old.id)]);
      expect(rs.map((r) => r.statusCode).sort()).toEqual([201, 422, 422]);
      for (const r of rs.filter((x) => x.statusCode === 422)) expect(r.json().code).toBe('TOKEN_ALREADY_ROTATED');
      expect(await count(h, 'api_tokens')).toBe(before + 1);
    });

    it('a replay under the same Idempotency-Key answers the same new token and mints no second one', async () => {
      const self = await mint('manager');
      const key = { 'idempotency-key': `rotate-${self.id}` };
      const before = await count(h, 'api_tokens');
      const a = await rotate(self.token, self.id, { graceSeconds: 300 }, key);
      expect(a.statusCode).toBe(201);
      const b = await rotate(self.token, self.id, { graceSeconds: 300 }, key);
      expect(b.statusCode).toBe(201);
      expect(b.headers['idempotent-replayed']).toBe('true');
      expect(b.json()).toEqual(a.json());
      expect(await count(h, 'api_tokens')).toBe(before + 1);
      expect((await rotate(self.token, self.id, { graceSeconds: 60 }, key)).json().code).toBe('IDEMPOTENCY_KEY_REUSED');
    });
  });

  describe('last use', () => {
    it('is written on first use, at most once a minute after that', async () => {
      const t = await mint('auditor');
      expect((await row(t.id))?.last_used_at).toBeNull();
      await get(t.token);
      const first = now();
      expect((await row(t.id))?.last_used_at).toBe(first);
      h.cloud.clock.advance(59_999);
      await get(t.token);
      expect((await row(t.id))?.last_used_at).toBe(first);
      h.cloud.clock.advance(1);
      await get(t.token);
      expect((await row(t.id))?.last_used_at).toBe(now());
      expect(await listed(t.id)).toMatchObject({ lastUsedAt: now() });
    });
  });
});
