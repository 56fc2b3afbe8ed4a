import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { readSettings, setMode } from '../src/adapters/sqlite/settings.js';
import { listStaffActions } from '../src/adapters/sqlite/staff-actions.js';
import { staffLists } from '../src/adapters/sqlite/staff-queries.js';
import { SESSIONS_PER_ACCOUNT, SETUP_CODE_TTL_MS, StaffAccounts, type StaffAudit } from '../src/app/staff-accounts.js';
import { staffAudit } from '../src/app/staff-audit.js';
import { buildApp } from '../src/http/app.js';
import { SignInThrottle } from '../src/http/sign-in-throttle.js';
import { createMetrics } from '../src/metrics.js';
import { T0 } from './fixtures.js';

const TOKEN = 'staff-token-for-account-tests';
const SUP = { username: 'aiko', displayName: 'Aiko Tanaka', password: 'correct horse battery' };
const STAFF = { username: 'ken', displayName: 'Ken Sato', password: 'front desk evening shift', role: 'staff' as const };
const IDLE = 30 * 60_000;
const MAX = 12 * 3600_000;

describe('staff accounts, sessions, CSRF and sign-in throttling (real SQLite file, the HTTP app)', () => {
  let dir: string;
  let db: WritableDb;
  let app: FastifyInstance;
  let accounts: StaffAccounts;
  let now = T0;
  let audit: StaffAudit;

  const build = (secureCookies = false) => {
    audit = staffAudit(db, () => now, { maxRows: 1000 });
    accounts = new StaffAccounts({ db, now: () => now, log: pino({ level: 'silent' }), idleMs: IDLE, absoluteMs: MAX, audit });
    return buildApp({
      registry: createMetrics().registry,
      staffToken: TOKEN,
      log: pino({ level: 'silent' }),
      now: () => now,
      accounts,
      secureCookies,
      setMode: (mode, by, cid, actor) => {
        const changed = db
          .transaction(() => {
            const c = setMode(db, mode);
            if (actor)
              audit({ actor, action: 'set_mode', target: mode, detail: by ?? 'staff', result: c ? 'applied' : 'noop', code: null, cid });
            return c;
          })
          .immediate();
        return { mode, changed };
      },
      ackAlarm: () => ({ status: 'refused', code: 'ALARM_NOT_FOUND' }),
      health: () => {
        throw new Error('not in this test');
      },
      staff: {
        ...staffLists(db, () => now),
        status: () => {
          throw new Error('not in this test');
        },
      },
    });
  };

  beforeEach(() => {
    now = T0;
    dir = mkdtempSync(join(tmpdir(), 'tobira-accounts-'));
    db = openDatabase(join(dir, 'g.sqlite'));
    app = build();
  });
  afterEach(async () => {
    await app.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const cookieOf = (r: LightMyRequestResponse) => {
    const c = r.cookies.find((x) => x.name === 'tobira_staff' || x.name === '__Host-tobira_staff');
    if (c === undefined) throw new Error(`no session cookie in ${r.statusCode} ${r.body}`);
    return c;
  };
  const req = (
    method: 'GET' | 'POST' | 'DELETE',
    url: string,
    o: { cookie?: string; csrf?: string; body?: unknown; ip?: string; bearer?: string } = {},
  ) =>
    app.inject({
      method,
      url,
      remoteAddress: o.ip ?? '10.0.0.1',
      headers: {
        ...(o.cookie ? { cookie: `tobira_staff=${o.cookie}` } : {}),
        ...(o.csrf ? { 'x-csrf-token': o.csrf } : {}),
        ...(o.bearer ? { authorization: `Bearer ${o.bearer}` } : {}),
      },
      ...(o.body === undefined ? {} : { payload: o.body as Record<string, unknown> }),
    });

  /** The first supervisor through the setup code; returns its session. */
  const setUp = async () => {
    const code = accounts.issueSetupCode();
    if (code === null) throw new Error('no setup code');
    const r = await req('POST', '/staff/setup', { body: { code: code.code, ...SUP } });
    expect(r.statusCode, r.body).toBe(200);
    return { cookie: cookieOf(r).value, csrf: r.json<{ csrfToken: string }>().csrfToken };
  };
  const signIn = async (username: string, password: string, ip = '10.0.0.1') => {
    const r = await req('POST', '/staff/session', { body: { username, password }, ip });
    return {
      r,
      cookie: r.statusCode === 200 ? cookieOf(r).value : '',
      csrf: r.statusCode === 200 ? r.json<{ csrfToken: string }>().csrfToken : '',
    };
  };

  describe('the one-time setup code', () => {
    it('is needed while there is no account, stored only as a hash, single use, and refused when wrong or expired', async () => {
      expect((await req('GET', '/staff/setup')).json()).toEqual({ required: true });
      const issued = accounts.issueSetupCode()!;
      expect(issued.code).toMatch(/^[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}$/);
      const row = JSON.stringify(db.prepare('SELECT * FROM staff_setup_code').all());
      expect(row).not.toContain(issued.code);
      expect(row).not.toContain(issued.code.replace(/-/g, ''));

      const wrong = await req('POST', '/staff/setup', { body: { code: 'AAAA-BBBB-CCCC-DDDD', ...SUP } });
      expect([wrong.statusCode, wrong.json()]).toEqual([403, { code: 'SETUP_CODE_INVALID' }]);
      const weak = await req('POST', '/staff/setup', { body: { code: issued.code, ...SUP, password: 'short' } });
      expect([weak.statusCode, weak.json().code]).toEqual([422, 'WEAK_PASSWORD']);

      now = T0 + SETUP_CODE_TTL_MS;
      const late = await req('POST', '/staff/setup', { body: { code: issued.code, ...SUP } });
      expect([late.statusCode, late.json()]).toEqual([403, { code: 'SETUP_CODE_INVALID' }]);
      expect(db.prepare('SELECT count(*) AS n FROM staff_accounts').get()).toEqual({ n: 0 });

      // a restart makes a new code; typed in lower case with spaces it still works, once
      const fresh = accounts.issueSetupCode()!;
      const ok = await req('POST', '/staff/setup', { body: { code: fresh.code.toLowerCase().replace(/-/g, ' '), ...SUP } });
      expect(ok.statusCode, ok.body).toBe(200);
      expect(ok.json().account).toMatchObject({ username: 'aiko', displayName: 'Aiko Tanaka', role: 'supervisor', disabled: false });
      const again = await req('POST', '/staff/setup', { body: { code: fresh.code, ...SUP, username: 'mallory' } });
      expect([again.statusCode, again.json()]).toEqual([409, { code: 'SETUP_ALREADY_DONE' }]);
      expect(accounts.issueSetupCode()).toBeNull();
      expect(db.prepare('SELECT count(*) AS n FROM staff_setup_code').get()).toEqual({ n: 0 });
      expect((await req('GET', '/staff/setup')).json()).toEqual({ required: false });
    });

    it('wrong setup codes are throttled per address', async () => {
      accounts.issueSetupCode();
      for (let i = 0; i < 3; i++)
        expect((await req('POST', '/staff/setup', { body: { code: `WRONG-${i}`, ...SUP } })).statusCode).toBe(403);
      const r = await req('POST', '/staff/setup', { body: { code: 'WRONG-4', ...SUP } });
      expect([r.statusCode, r.json().code]).toEqual([429, 'SIGN_IN_THROTTLED']);
      expect((await req('POST', '/staff/setup', { body: { code: 'WRONG-5', ...SUP }, ip: '10.0.0.9' })).statusCode).toBe(403);
    });
  });

  describe('sessions', () => {
    it('keeps at most SESSIONS_PER_ACCOUNT live sessions per account: a further sign-in ends the oldest', async () => {
      const sup = await setUp();
      const mine: string[] = [];
      for (let i = 0; i < SESSIONS_PER_ACCOUNT + 2; i++) {
        const s = await signIn('aiko', SUP.password);
        expect(s.r.statusCode).toBe(200);
        mine.push(s.cookie);
      }
      // the setup session and the first sign-in are the oldest: ended
      const alive = async (cookie: string) => (await req('GET', '/staff/session', { cookie })).statusCode;
      expect(await alive(sup.cookie)).toBe(401);
      expect(await alive(mine[0]!)).toBe(401);
      for (const c of mine.slice(2)) expect(await alive(c)).toBe(200);
      expect(db.prepare('SELECT count(*) AS n FROM staff_sessions').get()).toEqual({ n: SESSIONS_PER_ACCOUNT });
    });

    it('sign-in sets an HttpOnly SameSite=Strict cookie with a new id each time; only its hash is stored', async () => {
      await setUp();
      const a = await signIn('AIKO', SUP.password);
      const b = await signIn('aiko', SUP.password);
      expect(a.r.statusCode).toBe(200);
      const c = cookieOf(a.r);
      expect(c).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/' });
      expect(c.secure).toBeFalsy();
      expect(a.cookie).not.toBe(b.cookie);
      const rows = JSON.stringify(db.prepare('SELECT * FROM staff_sessions').all());
      expect(rows).not.toContain(a.cookie);
      expect(rows).not.toContain(b.cookie);
      const me = await req('GET', '/staff/session', { cookie: a.cookie });
      expect(me.json()).toMatchObject({ via: 'session', account: { username: 'aiko', role: 'supervisor' }, csrfToken: a.csrf });
      const hashes = JSON.stringify(db.prepare('SELECT password_hash FROM staff_accounts').all());
      expect(hashes).toContain('$argon2id$');
      expect(hashes).not.toContain(SUP.password);
    });

    it('a sign-in while a session cookie is sent ends that session (no fixation)', async () => {
      const first = await setUp();
      const r = await app.inject({
        method: 'POST',
        url: '/staff/session',
        headers: { cookie: `tobira_staff=${first.cookie}` },
        payload: { username: 'aiko', password: SUP.password },
      });
      expect(r.statusCode).toBe(200);
      expect(cookieOf(r).value).not.toBe(first.cookie);
      expect((await req('GET', '/staff/status', { cookie: first.cookie })).statusCode).toBe(401);
    });

    it('with TLS the cookie is __Host- prefixed and Secure', async () => {
      await app.close();
      app = build(true);
      accounts.issueSetupCode();
      const code = accounts.issueSetupCode()!;
      const r = await req('POST', '/staff/setup', { body: { code: code.code, ...SUP } });
      expect(cookieOf(r)).toMatchObject({ name: '__Host-tobira_staff', secure: true, httpOnly: true, sameSite: 'Strict', path: '/' });
    });

    it('wrong password and unknown user get the same answer', async () => {
      await setUp();
      const wrong = await signIn('aiko', 'not the password at all');
      const nobody = await signIn('nobody', 'not the password at all');
      expect([wrong.r.statusCode, wrong.r.json()]).toEqual([401, { code: 'BAD_CREDENTIALS' }]);
      expect([nobody.r.statusCode, nobody.r.json()]).toEqual([401, { code: 'BAD_CREDENTIALS' }]);
    });

    it('ends after the idle timeout, and after the absolute timeout even when in use', async () => {
      await setUp();
      const s = await signIn('aiko', SUP.password);
      now += IDLE - 1000;
      expect((await req('GET', '/staff/session', { cookie: s.cookie })).statusCode).toBe(200);
      now += IDLE - 1000;
      expect((await req('GET', '/staff/session', { cookie: s.cookie })).statusCode).toBe(200);
      now += IDLE;
      const idle = await req('GET', '/staff/session', { cookie: s.cookie });
      expect([idle.statusCode, idle.json()]).toEqual([401, { code: 'UNAUTHORIZED' }]);

      const t = await signIn('aiko', SUP.password);
      const end = now + MAX;
      while (now + IDLE / 2 < end) {
        now += IDLE / 2;
        expect((await req('GET', '/staff/session', { cookie: t.cookie })).statusCode).toBe(200);
      }
      now = end;
      expect((await req('GET', '/staff/session', { cookie: t.cookie })).statusCode).toBe(401);
    });

    it('sign-out ends the session at once and is audited', async () => {
      await setUp();
      const s = await signIn('aiko', SUP.password);
      const out = await req('DELETE', '/staff/session', { cookie: s.cookie, csrf: s.csrf });
      expect(out.statusCode).toBe(200);
      expect((await req('GET', '/staff/status', { cookie: s.cookie })).statusCode).toBe(401);
      const actions = listStaffActions(db, { cursor: null, limit: 10 }).items.map((a) => [a.action, a.actorName]);
      expect(actions).toEqual([
        ['sign_out', 'Aiko Tanaka'],
        ['sign_in', 'Aiko Tanaka'],
        ['setup', 'Aiko Tanaka'],
      ]);
    });
  });

  describe('CSRF', () => {
    it('a state-changing request with the session cookie needs the session token; the bearer token does not', async () => {
      const s = await setUp();
      const none = await req('POST', '/staff/mode', { cookie: s.cookie, body: { mode: 'lockdown', reason: 'drill' } });
      expect([none.statusCode, none.json()]).toEqual([403, { code: 'CSRF_TOKEN_INVALID' }]);
      const other = await signIn('aiko', SUP.password);
      const wrong = await req('POST', '/staff/mode', { cookie: s.cookie, csrf: other.csrf, body: { mode: 'lockdown', reason: 'drill' } });
      expect([wrong.statusCode, wrong.json()]).toEqual([403, { code: 'CSRF_TOKEN_INVALID' }]);
      const signOut = await req('DELETE', '/staff/session', { cookie: s.cookie });
      expect(signOut.statusCode).toBe(403);
      expect(readSettings(db).mode).toBe('normal');

      const ok = await req('POST', '/staff/mode', { cookie: s.cookie, csrf: s.csrf, body: { mode: 'lockdown', reason: 'drill' } });
      expect([ok.statusCode, ok.json()]).toEqual([200, { status: 'applied', mode: 'lockdown' }]);
      const bearer = await req('POST', '/staff/mode', { bearer: TOKEN, body: { mode: 'normal', reason: 'cron' } });
      expect(bearer.statusCode).toBe(200);
      const audited = listStaffActions(db, { action: 'set_mode', cursor: null, limit: 10 }).items;
      expect(audited.map((a) => [a.actorName, a.actorId === null, a.target, a.detail])).toEqual([
        ['API token', true, 'normal', 'cron'],
        ['Aiko Tanaka', false, 'lockdown', 'drill'],
      ]);
    });
  });

  describe('accounts (supervisors only)', () => {
    it('a staff member cannot manage accounts even with a hand-made request; the API token neither', async () => {
      const sup = await setUp();
      const made = await req('POST', '/staff/accounts', { cookie: sup.cookie, csrf: sup.csrf, body: STAFF });
      expect(made.statusCode, made.body).toBe(201);
      const ken = await signIn('ken', STAFF.password);
      const r = await req('POST', '/staff/accounts', {
        cookie: ken.cookie,
        csrf: ken.csrf,
        body: { username: 'eve', displayName: 'Eve', role: 'supervisor', password: 'a long enough password' },
      });
      expect([r.statusCode, r.json()]).toEqual([403, { code: 'NOT_SUPERVISOR' }]);
      expect((await req('GET', '/staff/accounts', { cookie: ken.cookie })).statusCode).toBe(403);
      const byToken = await req('POST', `/staff/accounts/${made.json().account.accountId}/disable`, { bearer: TOKEN });
      expect([byToken.statusCode, byToken.json()]).toEqual([403, { code: 'NOT_SUPERVISOR' }]);
      const dup = await req('POST', '/staff/accounts', { cookie: sup.cookie, csrf: sup.csrf, body: { ...STAFF, username: 'KEN' } });
      expect([dup.statusCode, dup.json()]).toEqual([409, { code: 'USERNAME_TAKEN' }]);
    });

    it('disabling an account ends its session at once; a reset password ends them too; the last supervisor stays', async () => {
      const sup = await setUp();
      const made = await req('POST', '/staff/accounts', { cookie: sup.cookie, csrf: sup.csrf, body: STAFF });
      const kenId: string = made.json().account.accountId;
      const ken = await signIn('ken', STAFF.password);
      expect((await req('GET', '/staff/status', { cookie: ken.cookie })).statusCode).not.toBe(401);
      const off = await req('POST', `/staff/accounts/${kenId}/disable`, { cookie: sup.cookie, csrf: sup.csrf });
      expect([off.statusCode, off.json().status, off.json().account.disabled]).toEqual([200, 'applied', true]);
      expect((await req('GET', '/staff/session', { cookie: ken.cookie })).statusCode).toBe(401);
      expect((await signIn('ken', STAFF.password)).r.json()).toEqual({ code: 'ACCOUNT_DISABLED' });
      expect((await req('POST', `/staff/accounts/${kenId}/disable`, { cookie: sup.cookie, csrf: sup.csrf })).json().status).toBe('noop');
      expect((await req('POST', `/staff/accounts/${kenId}/enable`, { cookie: sup.cookie, csrf: sup.csrf })).json().status).toBe('applied');

      const again = await signIn('ken', STAFF.password);
      const reset = await req('POST', `/staff/accounts/${kenId}/password`, {
        cookie: sup.cookie,
        csrf: sup.csrf,
        body: { password: 'a brand new password', currentPassword: SUP.password },
      });
      expect(reset.statusCode).toBe(200);
      expect((await req('GET', '/staff/session', { cookie: again.cookie })).statusCode).toBe(401);
      expect((await signIn('ken', STAFF.password)).r.statusCode).toBe(401);
      expect((await signIn('ken', 'a brand new password')).r.statusCode).toBe(200);

      const supId = (await req('GET', '/staff/session', { cookie: sup.cookie })).json().account.accountId;
      const last = await req('POST', `/staff/accounts/${supId}/disable`, { cookie: sup.cookie, csrf: sup.csrf });
      expect([last.statusCode, last.json()]).toEqual([409, { code: 'LAST_SUPERVISOR' }]);
      const kinds = listStaffActions(db, { cursor: null, limit: 50 }).items.map((a) => a.action);
      expect(kinds).toEqual(expect.arrayContaining(['account_create', 'account_disable', 'account_enable', 'account_password_reset']));
    });
    it("a supervisor's own password is not reset through the supervisors' reset: a session left open must not replace it without the current one", async () => {
      const sup = await setUp();
      const supId: string = (await req('GET', '/staff/session', { cookie: sup.cookie })).json().account.accountId;
      const own = await req('POST', `/staff/accounts/${supId}/password`, {
        cookie: sup.cookie,
        csrf: sup.csrf,
        body: { password: 'an attacker chosen password', currentPassword: SUP.password },
      });
      expect([own.statusCode, own.json()]).toEqual([409, { code: 'PASSWORD_RESET_OWN' }]);
      expect((await signIn('aiko', 'an attacker chosen password')).r.statusCode).toBe(401);
      expect((await signIn('aiko', SUP.password)).r.statusCode).toBe(200);
      // the session stays and nothing was recorded as a reset
      expect((await req('GET', '/staff/session', { cookie: sup.cookie })).statusCode).toBe(200);
      const kinds = listStaffActions(db, { cursor: null, limit: 50 }).items.map((a) => a.action);
      expect(kinds).not.toContain('account_password_reset');
      // the way that remains asks for the current password
      const change = await req('POST', '/staff/session/password', {
        cookie: sup.cookie,
        csrf: sup.csrf,
        body: { currentPassword: 'not the password at all', newPassword: 'an attacker chosen password' },
      });
      expect([change.statusCode, change.json()]).toEqual([403, { code: 'CURRENT_PASSWORD_WRONG' }]);
    });
  });

  describe('sign-in throttling', () => {
    it('slows wrong passwords from one address without locking the supervisor out from hers', async () => {
      await setUp();
      // the supervisor signed in from her desk before
      expect((await signIn('aiko', SUP.password, '10.0.0.1')).r.statusCode).toBe(200);
      for (let i = 0; i < 3; i++) expect((await signIn('aiko', `guess number ${i}`, '192.0.2.7')).r.statusCode).toBe(401);
      const slowed = await signIn('aiko', SUP.password, '192.0.2.7');
      expect([slowed.r.statusCode, slowed.r.json().code]).toEqual([429, 'SIGN_IN_THROTTLED']);
      expect(Number(slowed.r.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      // the owner, elsewhere: untouched
      expect((await signIn('aiko', SUP.password, '10.0.0.1')).r.statusCode).toBe(200);
      // a guesser on many addresses: the account-wide counter slows new addresses, not the owner's
      for (let i = 0; i < 25; i++) await signIn('aiko', `spray ${i}`, `198.51.100.${i}`);
      expect((await signIn('aiko', 'spray again', '198.51.100.200')).r.statusCode).toBe(429);
      expect((await signIn('aiko', SUP.password, '10.0.0.1')).r.statusCode).toBe(200);
      // and the slowed address may try again after the wait
      now += 60_000;
      expect((await signIn('aiko', SUP.password, '192.0.2.7')).r.statusCode).toBe(200);
    });

    it('holds one address and name to `free` tries in flight, right password or not: a success resets the settled failures, not the other tries in flight', () => {
      const t = 0;
      const th = new SignInThrottle(() => t, { free: 3 });
      // three tries start at once (each counted until its answer is known); a fourth waits
      for (let i = 0; i < 3; i++) {
        expect(th.waitFor('a', 'ken')).toBe(0);
        expect(th.attempt('a', 'ken')).toBe(0);
      }
      expect(th.waitFor('a', 'ken')).toBeGreaterThan(0);
      // one is right: only its own place frees; the two still in flight stay counted
      th.succeeded('a', 'ken');
      expect(th.waitFor('a', 'ken')).toBe(0);
      expect(th.attempt('a', 'ken')).toBe(0);
      expect(th.waitFor('a', 'ken')).toBeGreaterThan(0);
      // the rest are right too: nothing is left counted
      for (let i = 0; i < 3; i++) th.succeeded('a', 'ken');
      for (let i = 0; i < 3; i++) expect(th.attempt('a', 'ken')).toBe(0);
      expect(th.waitFor('a', 'ken')).toBeGreaterThan(0);
      for (let i = 0; i < 3; i++) th.succeeded('a', 'ken');

      // wrong guesses settle as failures; a later right password resets them, but not a try still in flight
      th.attempt('a', 'aiko');
      th.failed('a', 'aiko');
      th.attempt('a', 'aiko');
      th.failed('a', 'aiko');
      th.attempt('a', 'aiko'); // in flight
      expect(th.waitFor('a', 'aiko')).toBeGreaterThan(0);
      th.succeeded('a', 'aiko'); // that one was right: the two failures are forgotten
      expect(th.waitFor('a', 'aiko')).toBe(0);
      th.attempt('a', 'aiko');
      th.attempt('a', 'aiko');
      th.succeeded('a', 'aiko');
      // one still in flight: two more may start, not three
      expect(th.attempt('a', 'aiko')).toBe(0);
      expect(th.attempt('a', 'aiko')).toBe(0);
      expect(th.waitFor('a', 'aiko')).toBeGreaterThan(0);
      // a shed try gives its place back
      th.refund('a', 'aiko');
      expect(th.waitFor('a', 'aiko')).toBe(0);
    });

    it('backs off exponentially per address and name, capped, and forgets after a window', () => {
      let t = 0;
      const th = new SignInThrottle(() => t, { free: 2, baseDelayMs: 1000, maxDelayMs: 8000, windowMs: 60_000, perAddressMax: 1000 });
      const waits: number[] = [];
      for (let i = 0; i < 7; i++) {
        t += th.waitFor('a', 'u');
        th.attempt('a', 'u');
        waits.push(th.waitFor('a', 'u'));
      }
      expect(waits).toEqual([0, 1000, 2000, 4000, 8000, 8000, 8000]);
      expect(th.waitFor('b', 'u')).toBe(0);
      expect(th.waitFor('a', 'v')).toBe(0);
      t += 60_000;
      expect(th.waitFor('a', 'u')).toBe(0);
      th.attempt('a', 'u');
      expect(th.waitFor('a', 'u')).toBe(0);
    });
  });
});
