import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { generateSync } from 'otplib';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';
import { listStaffActions } from '../src/adapters/sqlite/staff-actions.js';
import { staffLists } from '../src/adapters/sqlite/staff-queries.js';
import { CHALLENGE_TTL_MS, StaffAccounts } from '../src/app/staff-accounts.js';
import { staffAudit } from '../src/app/staff-audit.js';
import { openSecret, sealKeyOf, type TotpPolicy } from '../src/app/staff-totp.js';
import { buildApp } from '../src/http/app.js';
import { createMetrics } from '../src/metrics.js';
import { T0 } from './fixtures.js';
import { capturingLog } from './staff-helpers.js';

const SUP = { username: 'aiko', displayName: 'Aiko Tanaka', password: 'correct horse battery' };
const SUP2 = { username: 'haru', displayName: 'Haru Ito', password: 'second supervisor phrase', role: 'supervisor' as const };
const STAFF = { username: 'ken', displayName: 'Ken Sato', password: 'front desk evening shift', role: 'staff' as const };
const PEPPER = randomBytes(32);

/**
 * Supervisors' TOTP second factor over the HTTP app on a real SQLite file:
 * enrolment, the code step of a sign-in and every refusal of it, recovery
 * codes, turning it off and resetting it, the site policy, and the secret at
 * rest. Codes are made with otplib at the test's clock.
 */
describe('staff TOTP second factor (real SQLite file, the HTTP app)', () => {
  let dir: string;
  let db: WritableDb;
  let app: FastifyInstance;
  let accounts: StaffAccounts;
  let now = T0;
  let cap: ReturnType<typeof capturingLog>;

  const build = (policy: TotpPolicy, pepper: Buffer = PEPPER) => {
    const audit = staffAudit(db, () => now, { maxRows: 1000 });
    cap = capturingLog();
    accounts = new StaffAccounts({
      db,
      now: () => now,
      log: cap.log,
      idleMs: 30 * 60_000,
      absoluteMs: 12 * 3600_000,
      audit,
      totp: { policy, sealKey: sealKeyOf(pepper), issuer: 'Tobira gw-test' },
    });
    return buildApp({
      registry: createMetrics().registry,
      staffToken: undefined,
      log: pino({ level: 'silent' }),
      now: () => now,
      accounts,
      setMode: () => {
        throw new Error('not in this test');
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
  const rebuild = async (policy: TotpPolicy, pepper?: Buffer) => {
    await app.close();
    app = build(policy, pepper);
  };

  beforeEach(() => {
    now = T0;
    dir = mkdtempSync(join(tmpdir(), 'tobira-totp-'));
    db = openDatabase(join(dir, 'g.sqlite'));
    app = build('optional');
  });
  afterEach(async () => {
    await app.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const cookieOf = (r: LightMyRequestResponse) => {
    const c = r.cookies.find((x) => x.name === 'tobira_staff');
    if (c === undefined) throw new Error(`no session cookie in ${r.statusCode} ${r.body}`);
    return c.value;
  };
  const req = (method: 'GET' | 'POST', url: string, o: { s?: Session; body?: unknown; ip?: string } = {}) =>
    app.inject({
      method,
      url,
      remoteAddress: o.ip ?? '10.0.0.1',
      headers: o.s ? { cookie: `tobira_staff=${o.s.cookie}`, 'x-csrf-token': o.s.csrf } : {},
      ...(o.body === undefined ? {} : { payload: o.body as Record<string, unknown> }),
    });
  interface Session {
    cookie: string;
    csrf: string;
  }
  const sessionOf = (r: LightMyRequestResponse): Session => ({ cookie: cookieOf(r), csrf: r.json<{ csrfToken: string }>().csrfToken });
  const answer = (r: LightMyRequestResponse) => [r.statusCode, r.json<{ code?: string }>().code];
  const codeAt = (secret: string, at = now) => generateSync({ secret, epoch: Math.floor(at / 1000) });

  const setUp = async (): Promise<Session> => {
    const code = accounts.issueSetupCode();
    if (code === null) throw new Error('no setup code');
    const r = await req('POST', '/staff/setup', { body: { code: code.code, ...SUP } });
    expect(r.statusCode, r.body).toBe(200);
    return sessionOf(r);
  };
  const password = (username: string, pw: string, ip = '10.0.0.1') =>
    req('POST', '/staff/session', { body: { username, password: pw }, ip });
  /** Enrols the session's supervisor; returns the secret and the recovery codes. */
  const enrol = async (s: Session, currentPassword: string = SUP.password) => {
    const start = await req('POST', '/staff/totp/enrolment', { s, body: { currentPassword } });
    expect(start.statusCode, start.body).toBe(200);
    const { secret } = start.json<{ secret: string }>();
    const done = await req('POST', '/staff/totp/enrolment/confirm', { s, body: { code: codeAt(secret) } });
    expect(done.statusCode, done.body).toBe(200);
    return { secret, recoveryCodes: done.json<{ recoveryCodes: string[] }>().recoveryCodes };
  };
  const challengeOf = async (username = SUP.username, pw = SUP.password, ip = '10.0.0.1') => {
    const r = await password(username, pw, ip);
    expect(answer(r), r.body).toEqual([401, 'TOTP_REQUIRED']);
    expect(r.cookies).toHaveLength(0);
    return r.json<{ challenge: string }>().challenge;
  };

  it('enrolment: a secret shown once with its otpauth:// URI and QR image, confirmed by a current code, then 10 recovery codes', async () => {
    const s = await setUp();
    const start = await req('POST', '/staff/totp/enrolment', { s, body: { currentPassword: SUP.password } });
    expect(start.statusCode).toBe(200);
    const { secret, uri, qr } = start.json<{ secret: string; uri: string; qr: { size: number; rows: string[] } }>();
    expect(secret).toMatch(/^[A-Z2-7]{32}$/);
    expect(uri).toMatch(/^otpauth:\/\/totp\/Tobira%20gw-test:aiko\?/);
    expect(new URL(uri).searchParams.get('secret')).toBe(secret);
    // the QR code of the URI, as its modules (version 3 or more for a URI this long: 29+ modules a side)
    expect(qr.size).toBeGreaterThanOrEqual(29);
    expect(qr.rows).toHaveLength(qr.size);
    for (const row of qr.rows) expect(row).toMatch(new RegExp(`^[01]{${qr.size}}$`));
    expect(qr.rows[0]!.slice(0, 7)).toBe('1111111'); // a finder pattern's top edge
    // not asked at sign-in until confirmed
    expect((await password(SUP.username, SUP.password)).statusCode).toBe(200);

    const wrong = await req('POST', '/staff/totp/enrolment/confirm', { s, body: { code: codeAt(secret, now - 120_000) } });
    expect(answer(wrong)).toEqual([403, 'TOTP_INVALID']);
    const ok = await req('POST', '/staff/totp/enrolment/confirm', { s, body: { code: codeAt(secret) } });
    expect(ok.statusCode).toBe(200);
    const codes = ok.json<{ recoveryCodes: string[] }>().recoveryCodes;
    expect(codes).toHaveLength(10);
    expect(new Set(codes).size).toBe(10);
    for (const c of codes) expect(c).toMatch(/^[0-9A-Z]{5}-[0-9A-Z]{5}$/);

    const again = await req('POST', '/staff/totp/enrolment', { s, body: { currentPassword: SUP.password } });
    expect(answer(again)).toEqual([409, 'TOTP_ALREADY_ENROLLED']);
    const late = await req('POST', '/staff/totp/enrolment/confirm', { s, body: { code: codeAt(secret) } });
    expect(answer(late)).toEqual([409, 'TOTP_NOT_ENROLLING']);
    expect((await req('GET', '/staff/session', { s })).json()).toMatchObject({ account: { totp: true }, totpPolicy: 'optional' });
    expect(listStaffActions(db, { limit: 50, cursor: null }).items.map((a) => a.action)).toContain('account_totp_enrol');
  });

  it('at rest: the database file holds neither the secret nor a recovery code, and the box opens only with the pepper and for its account', async () => {
    const s = await setUp();
    const { secret, recoveryCodes } = await enrol(s);
    db.pragma('wal_checkpoint(TRUNCATE)');
    const file = readFileSync(join(dir, 'g.sqlite')).toString('latin1');
    expect(file).not.toContain(secret);
    for (const c of recoveryCodes) {
      expect(file).not.toContain(c);
      expect(file).not.toContain(c.replace('-', ''));
    }
    const row = db.prepare('SELECT account_id, secret_box FROM staff_totp').get() as { account_id: string; secret_box: string };
    expect(openSecret(sealKeyOf(PEPPER), row.account_id, row.secret_box)).toBe(secret);
    expect(openSecret(sealKeyOf(randomBytes(32)), row.account_id, row.secret_box)).toBeNull();
    expect(openSecret(sealKeyOf(PEPPER), 'another-account', row.secret_box)).toBeNull();

    // a gateway started with another pepper cannot check codes (logged), but the recovery codes still work
    await rebuild('optional', randomBytes(32));
    const ch = await challengeOf();
    now += 30_000;
    const r = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) } });
    expect(answer(r)).toEqual([401, 'TOTP_INVALID']);
    expect(cap.lines().some((l) => l.code === 'TOTP_SECRET_UNREADABLE')).toBe(true);
    const rec = await req('POST', '/staff/session/totp', { body: { challenge: ch, recoveryCode: recoveryCodes[0] } });
    expect(rec.statusCode, rec.body).toBe(200);
  });

  it('sign-in: the password, then a code bound to the challenge; a session only after both; each refusal has its code', async () => {
    const s = await setUp();
    const { secret } = await enrol(s);

    // the code accepted at enrolment is spent: the same code again is a replay
    const ch = await challengeOf();
    const replay = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) } });
    expect(answer(replay)).toEqual([401, 'TOTP_REPLAYED']);
    expect(replay.cookies).toHaveLength(0);
    const bogus = await req('POST', '/staff/session/totp', { body: { challenge: 'not-a-challenge', code: '123456' } });
    expect(answer(bogus)).toEqual([401, 'TOTP_CHALLENGE_INVALID']);
    const malformed = await req('POST', '/staff/session/totp', { body: { challenge: ch } });
    expect(answer(malformed)).toEqual([422, 'BAD_REQUEST']);

    now += 30_000;
    // another address cannot use the challenge
    const elsewhere = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) }, ip: '10.0.0.66' });
    expect(answer(elsewhere)).toEqual([401, 'TOTP_CHALLENGE_INVALID']);
    // two steps ahead is outside the drift window
    const ahead = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret, now + 60_000) } });
    expect(answer(ahead)).toEqual([401, 'TOTP_INVALID']);
    const ok = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) } });
    expect(ok.statusCode, ok.body).toBe(200);
    const signed = sessionOf(ok);
    expect((await req('GET', '/staff/session', { s: signed })).json()).toMatchObject({ account: { username: 'aiko', totp: true } });
    // the challenge was single use
    const reuse = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret, now + 30_000) } });
    expect(answer(reuse)).toEqual([401, 'TOTP_CHALLENGE_INVALID']);
    // the same code within its window, on a new challenge: still a replay
    const ch2 = await challengeOf();
    expect(answer(await req('POST', '/staff/session/totp', { body: { challenge: ch2, code: codeAt(secret) } }))).toEqual([
      401,
      'TOTP_REPLAYED',
    ]);
    // clock drift: the authenticator one step behind the gateway still works (a step not used before)
    now += 90_000;
    const behind = await req('POST', '/staff/session/totp', { body: { challenge: ch2, code: codeAt(secret, now - 30_000) } });
    expect(behind.statusCode, behind.body).toBe(200);
    // a challenge expires
    const ch3 = await challengeOf();
    now += CHALLENGE_TTL_MS;
    expect(answer(await req('POST', '/staff/session/totp', { body: { challenge: ch3, code: codeAt(secret) } }))).toEqual([
      401,
      'TOTP_CHALLENGE_INVALID',
    ]);
    const kinds = listStaffActions(db, { limit: 50, cursor: null }).items.filter((a) => a.action === 'sign_in');
    expect(kinds.map((a) => a.detail)).toEqual(expect.arrayContaining(['totp']));
  });

  it('a staff member and a supervisor without a second factor sign in with the password alone under policy optional', async () => {
    const s = await setUp();
    expect((await req('POST', '/staff/accounts', { s, body: STAFF })).statusCode).toBe(201);
    expect((await password(STAFF.username, STAFF.password)).statusCode).toBe(200);
    expect((await password(SUP.username, SUP.password)).statusCode).toBe(200);
    const ken = sessionOf(await password(STAFF.username, STAFF.password));
    expect(answer(await req('POST', '/staff/totp/enrolment', { s: ken }))).toEqual([403, 'NOT_SUPERVISOR']);
  });

  it('recovery codes: each signs in once (RECOVERY_CODE_USED after), an unknown one is RECOVERY_CODE_INVALID', async () => {
    const s = await setUp();
    const { recoveryCodes } = await enrol(s);
    const ch = await challengeOf();
    const unknown = await req('POST', '/staff/session/totp', { body: { challenge: ch, recoveryCode: 'AAAAA-BBBBB' } });
    expect(answer(unknown)).toEqual([401, 'RECOVERY_CODE_INVALID']);
    // typed in lower case without the dash still works
    const ok = await req('POST', '/staff/session/totp', {
      body: { challenge: ch, recoveryCode: recoveryCodes[3]!.toLowerCase().replace('-', '') },
    });
    expect(ok.statusCode, ok.body).toBe(200);
    const ch2 = await challengeOf();
    const used = await req('POST', '/staff/session/totp', { body: { challenge: ch2, recoveryCode: recoveryCodes[3] } });
    expect(answer(used)).toEqual([401, 'RECOVERY_CODE_USED']);
    expect(
      listStaffActions(db, { limit: 50, cursor: null }).items.some((a) => a.action === 'sign_in' && a.detail === 'recovery code'),
    ).toBe(true);
  });

  it('wrong codes count toward the sign-in throttle, and the right password in between does not wipe their count', async () => {
    const s = await setUp();
    const { secret } = await enrol(s);
    now += 30_000;
    for (let i = 0; i < 3; i++) {
      const ch = await challengeOf();
      expect(answer(await req('POST', '/staff/session/totp', { body: { challenge: ch, code: '000000' } }))).toEqual([401, 'TOTP_INVALID']);
    }
    // three free failures are spent: the next try from this address for this name waits, password or code
    expect(answer(await password(SUP.username, SUP.password))).toEqual([429, 'SIGN_IN_THROTTLED']);
    now += 1000;
    const ch = await challengeOf();
    const r = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) } });
    expect(answer(r)).toEqual([429, 'SIGN_IN_THROTTLED']);
    now += 2000;
    const late = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) } });
    expect(late.statusCode, late.body).toBe(200);
    // another address is not slowed
    now += 30_000;
    const ch4 = await challengeOf(SUP.username, SUP.password, '10.0.0.2');
    const other = await req('POST', '/staff/session/totp', { body: { challenge: ch4, code: codeAt(secret) }, ip: '10.0.0.2' });
    expect(other.statusCode, other.body).toBe(200);
  });

  it('a challenge dies after five wrong codes', async () => {
    const s = await setUp();
    const { secret } = await enrol(s);
    now += 30_000;
    const ch = await challengeOf();
    for (let i = 0; i < 5; i++) {
      now += 10_000; // past the throttle's doubling waits (1, 2, 4 s), within the challenge's 5 min
      const r = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: '000000' } });
      expect(answer(r)).toEqual([401, 'TOTP_INVALID']);
    }
    now += 10_000;
    const r = await req('POST', '/staff/session/totp', { body: { challenge: ch, code: codeAt(secret) } });
    expect(answer(r)).toEqual([401, 'TOTP_CHALLENGE_INVALID']);
  });

  it('policy required: a supervisor without a second factor enrols with the challenge before any session; the first code signs in', async () => {
    await setUp();
    await rebuild('required');
    const r = await password(SUP.username, SUP.password);
    expect(answer(r)).toEqual([401, 'TOTP_ENROLMENT_REQUIRED']);
    expect(r.cookies).toHaveLength(0);
    const { challenge } = r.json<{ challenge: string }>();
    // the challenge is no session
    expect((await req('GET', '/staff/status', { s: { cookie: challenge, csrf: '' } })).statusCode).toBe(401);
    const early = await req('POST', '/staff/session/totp', { body: { challenge, code: '123456' } });
    expect(answer(early)).toEqual([409, 'TOTP_NOT_ENROLLING']);
    const start = await req('POST', '/staff/session/totp/enrolment', { body: { challenge } });
    expect(start.statusCode, start.body).toBe(200);
    const { secret } = start.json<{ secret: string }>();
    const done = await req('POST', '/staff/session/totp', { body: { challenge, code: codeAt(secret) } });
    expect(done.statusCode, done.body).toBe(200);
    expect(done.json<{ recoveryCodes: string[] }>().recoveryCodes).toHaveLength(10);
    expect(cookieOf(done)).toBeTruthy();
    expect(
      listStaffActions(db, { limit: 50, cursor: null }).items.some((a) => a.action === 'account_totp_enrol' && a.detail === 'at sign-in'),
    ).toBe(true);
    // from now on the code is asked
    await challengeOf();
    const bad = await req('POST', '/staff/session/totp/enrolment', { body: { challenge: 'no-such-challenge' } });
    expect(answer(bad)).toEqual([401, 'TOTP_CHALLENGE_INVALID']);
  });

  it('policy off: no code is asked and no enrolment starts', async () => {
    const s = await setUp();
    await enrol(s);
    await rebuild('off');
    const r = await password(SUP.username, SUP.password);
    expect(r.statusCode).toBe(200);
    expect(answer(await req('POST', '/staff/totp/enrolment', { s: sessionOf(r), body: { currentPassword: SUP.password } }))).toEqual([
      409,
      'TOTP_POLICY_OFF',
    ]);
  });

  it('turning it off: the supervisor with password and a current code', async () => {
    const s = await setUp();
    const { secret } = await enrol(s);
    now += 30_000;
    const wrongPw = await req('POST', '/staff/totp/disable', { s, body: { password: 'not my password at all', code: codeAt(secret) } });
    expect(answer(wrongPw)).toEqual([403, 'CURRENT_PASSWORD_WRONG']);
    const wrongCode = await req('POST', '/staff/totp/disable', { s, body: { password: SUP.password, code: '000000' } });
    expect(answer(wrongCode)).toEqual([403, 'TOTP_INVALID']);
    now += 60_000;
    const ok = await req('POST', '/staff/totp/disable', { s, body: { password: SUP.password, code: codeAt(secret) } });
    expect(ok.json()).toEqual({ status: 'applied' });
    const again = await req('POST', '/staff/totp/disable', { s, body: { password: SUP.password, code: codeAt(secret) } });
    expect(answer(again)).toEqual([409, 'TOTP_NOT_ENROLLED']);
    expect((await password(SUP.username, SUP.password)).statusCode).toBe(200);
    expect(db.prepare('SELECT count(*) AS n FROM staff_recovery_codes').get()).toEqual({ n: 0 });
  });

  it("resetting another supervisor's: with a reason, audited, their sessions end; not one's own, not by staff", async () => {
    const aiko = await setUp();
    expect((await req('POST', '/staff/accounts', { s: aiko, body: { ...SUP2, currentPassword: SUP.password } })).statusCode).toBe(201);
    expect((await req('POST', '/staff/accounts', { s: aiko, body: STAFF })).statusCode).toBe(201);
    const haru = sessionOf(await password(SUP2.username, SUP2.password));
    await enrol(haru, SUP2.password);
    const list = (await req('GET', '/staff/accounts', { s: aiko })).json<{
      items: { accountId: string; username: string; totp: boolean }[];
    }>();
    const target = list.items.find((a) => a.username === 'haru')!;
    expect(target.totp).toBe(true);
    const me = list.items.find((a) => a.username === 'aiko')!;
    const url = `/staff/accounts/${target.accountId}/totp/reset`;

    expect(answer(await req('POST', url, { s: aiko, body: { reason: '   ', currentPassword: SUP.password } }))).toEqual([
      422,
      'REASON_REQUIRED',
    ]);
    expect(
      answer(
        await req('POST', `/staff/accounts/${me.accountId}/totp/reset`, {
          s: aiko,
          body: { reason: 'mine', currentPassword: SUP.password },
        }),
      ),
    ).toEqual([409, 'TOTP_RESET_OWN']);
    const ken = sessionOf(await password(STAFF.username, STAFF.password));
    expect(answer(await req('POST', url, { s: ken, body: { reason: 'lost phone' } }))).toEqual([403, 'NOT_SUPERVISOR']);
    expect(
      answer(await req('POST', '/staff/accounts/no-such/totp/reset', { s: aiko, body: { reason: 'x', currentPassword: SUP.password } })),
    ).toEqual([404, 'ACCOUNT_NOT_FOUND']);

    const ok = await req('POST', url, { s: aiko, body: { reason: 'lost phone', currentPassword: SUP.password } });
    expect(ok.json()).toEqual({ status: 'applied' });
    expect((await req('GET', '/staff/status', { s: haru })).statusCode).toBe(401);
    expect((await req('POST', url, { s: aiko, body: { reason: 'lost phone', currentPassword: SUP.password } })).json()).toEqual({
      status: 'noop',
    });
    const row = listStaffActions(db, { limit: 50, cursor: null }).items.find((a) => a.action === 'account_totp_reset');
    expect(row).toMatchObject({ actorName: 'Aiko Tanaka', target: target.accountId, detail: 'haru: lost phone', result: 'applied' });
    expect((await password(SUP2.username, SUP2.password)).statusCode).toBe(200);
  });
});
