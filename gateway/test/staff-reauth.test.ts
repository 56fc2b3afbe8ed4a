import { generateSync } from 'otplib';
import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runSite, type Running } from './harness.js';
import { capturingLog } from './staff-helpers.js';
import { makeAccounts, STAFF, SUPERVISOR } from './ui-browser.js';

/**
 * Re-authentication of the acting supervisor (docs/gateway.md "Staff
 * accounts and sessions"): a supervisor's session cookie alone, stolen or
 * left open, cannot grant or move lasting authority. Every such action asks
 * for the acting supervisor's current password; without it (403
 * REAUTH_REQUIRED) or with a wrong one (403 REAUTH_FAILED, counted in the
 * sign-in throttle before the Argon2 await) nothing changes. A running
 * gateway over real HTTP (real SQLite file, embedded broker).
 */

const SUP2 = { username: 'haru', displayName: 'Haru Ito', password: 'second supervisor phrase' } as const;
const WRONG = 'not the supervisor password';

interface Answer {
  status: number;
  body: Record<string, unknown>;
}
interface Signed {
  readonly cookie: string;
  readonly csrf: string;
}

describe('re-authentication of the acting supervisor (a running gateway, real HTTP)', () => {
  let broker: MqttTestBroker;
  let s: Running;
  let cap: ReturnType<typeof capturingLog>;

  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
    cap = capturingLog();
    s = await runSite(broker.url, broker.url, broker.unique, { deps: { log: cap.log } });
    await makeAccounts(s);
  });
  afterEach(async () => {
    await s.close();
    await broker.stop();
  });

  const send = async (method: string, path: string, o: { who?: Signed; body?: unknown; cid?: string } = {}): Promise<Answer> => {
    const r = await fetch(`${s.gw.httpUrl!}${path}`, {
      method,
      headers: {
        ...(o.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(o.who === undefined ? {} : { cookie: o.who.cookie, 'x-csrf-token': o.who.csrf }),
        ...(o.cid === undefined ? {} : { 'x-correlation-id': o.cid }),
      },
      ...(o.body === undefined ? {} : { body: JSON.stringify(o.body) }),
    });
    const text = await r.text();
    return { status: r.status, body: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
  };
  const signInAnswer = (who: { username: string; password: string }) =>
    send('POST', '/staff/session', { body: { username: who.username, password: who.password } });
  const signIn = async (who: { username: string; password: string }): Promise<Signed> => {
    const r = await fetch(`${s.gw.httpUrl!}/staff/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: who.username, password: who.password }),
    });
    expect(r.status).toBe(200);
    return { cookie: (r.headers.get('set-cookie') ?? '').split(';')[0]!, csrf: ((await r.json()) as { csrfToken: string }).csrfToken };
  };
  const codeOf = (secret: string) => generateSync({ secret, epoch: Math.floor(s.f.clock.now() / 1000) });
  const accountsOf = async (who: Signed) => {
    const r = await send('GET', '/staff/accounts', { who });
    expect(r.status).toBe(200);
    return r.body.items as { accountId: string; username: string; role: string; totp: boolean }[];
  };
  const idOf = async (who: Signed, username: string) => {
    const a = (await accountsOf(who)).find((x) => x.username === username);
    if (a === undefined) throw new Error(`no account ${username}`);
    return a.accountId;
  };

  /** A second supervisor with a confirmed second factor (the target of a TOTP reset). */
  const secondSupervisor = async () => {
    const made = await s.gw.accounts.create(
      { accountId: null, username: 'setup', displayName: 'Test setup', role: 'supervisor', via: 'session' },
      { ...SUP2, role: 'supervisor' },
      'test-setup',
    );
    if (made.status !== 'applied') throw new Error(`account refused: ${made.code}`);
    const haru = await signIn(SUP2);
    const start = await send('POST', '/staff/totp/enrolment', { who: haru, body: { currentPassword: SUP2.password } });
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    const done = await send('POST', '/staff/totp/enrolment/confirm', { who: haru, body: { code: codeOf(String(start.body.secret)) } });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
  };

  /**
   * Every action that grants or moves lasting authority: the request (its body without the re-authentication),
   * what it applies, and how to see that it changed nothing.
   */
  const GUARDED: readonly {
    readonly action: string;
    readonly request: (sup: Signed) => Promise<{ method: string; path: string; body: Record<string, unknown> }>;
    readonly applied: number;
    readonly unchanged: (sup: Signed) => Promise<void>;
    readonly changed: (sup: Signed) => Promise<void>;
  }[] = [
    {
      action: 'creating a supervisor account',
      request: async () => ({
        method: 'POST',
        path: '/staff/accounts',
        body: { username: 'eve', displayName: 'Eve', role: 'supervisor', password: 'a passphrase the thief chose' },
      }),
      applied: 201,
      unchanged: async (sup) => {
        expect((await accountsOf(sup)).map((a) => a.username)).not.toContain('eve');
        expect((await signInAnswer({ username: 'eve', password: 'a passphrase the thief chose' })).body).toEqual({
          code: 'BAD_CREDENTIALS',
        });
      },
      changed: async (sup) => {
        expect((await accountsOf(sup)).find((a) => a.username === 'eve')?.role).toBe('supervisor');
      },
    },
    {
      action: "resetting another account's password",
      request: async (sup) => ({
        method: 'POST',
        path: `/staff/accounts/${await idOf(sup, STAFF.username)}/password`,
        body: { password: 'a passphrase the thief chose' },
      }),
      applied: 200,
      unchanged: async () => {
        expect((await signInAnswer(STAFF)).status).toBe(200);
      },
      changed: async () => {
        expect((await signInAnswer(STAFF)).body).toEqual({ code: 'BAD_CREDENTIALS' });
        expect((await signInAnswer({ username: STAFF.username, password: 'a passphrase the thief chose' })).status).toBe(200);
      },
    },
    {
      action: "resetting another supervisor's second factor",
      request: async (sup) => {
        await secondSupervisor();
        return { method: 'POST', path: `/staff/accounts/${await idOf(sup, SUP2.username)}/totp/reset`, body: { reason: 'lost phone' } };
      },
      applied: 200,
      unchanged: async (sup) => {
        expect((await accountsOf(sup)).find((a) => a.username === SUP2.username)?.totp).toBe(true);
        expect((await signInAnswer(SUP2)).body).toMatchObject({ code: 'TOTP_REQUIRED' });
      },
      changed: async (sup) => {
        expect((await accountsOf(sup)).find((a) => a.username === SUP2.username)?.totp).toBe(false);
      },
    },
    {
      action: 'enabling a disabled supervisor account',
      request: async (sup) => {
        const made = await s.gw.accounts.create(
          { accountId: null, username: 'setup', displayName: 'Test setup', role: 'supervisor', via: 'session' },
          { ...SUP2, role: 'supervisor' },
          'test-setup',
        );
        if (made.status !== 'applied') throw new Error(`account refused: ${made.code}`);
        const off = await send('POST', `/staff/accounts/${made.account.accountId}/disable`, { who: sup });
        expect(off.status).toBe(200);
        return { method: 'POST', path: `/staff/accounts/${made.account.accountId}/enable`, body: {} };
      },
      applied: 200,
      unchanged: async () => {
        expect((await signInAnswer(SUP2)).body).toEqual({ code: 'ACCOUNT_DISABLED' });
      },
      changed: async () => {
        expect((await signInAnswer(SUP2)).status).toBe(200);
      },
    },
    {
      action: 'starting an enrolment of its own second factor',
      request: async () => ({ method: 'POST', path: '/staff/totp/enrolment', body: {} }),
      applied: 200,
      unchanged: async (sup) => {
        // nothing is pending: there is no enrolment to confirm
        expect((await send('POST', '/staff/totp/enrolment/confirm', { who: sup, body: { code: '000000' } })).body).toEqual({
          code: 'TOTP_NOT_ENROLLING',
        });
      },
      changed: async (sup) => {
        expect((await accountsOf(sup)).find((a) => a.username === SUPERVISOR.username)?.totp).toBe(false);
        expect((await send('POST', '/staff/totp/enrolment/confirm', { who: sup, body: { code: '000000' } })).body).toEqual({
          code: 'TOTP_INVALID',
        });
      },
    },
  ];

  for (const g of GUARDED)
    it(`${g.action}: refused without the acting supervisor's password (REAUTH_REQUIRED) and with a wrong one (REAUTH_FAILED), nothing changed; applied with it`, async () => {
      const sup = await signIn(SUPERVISOR);
      const r = await g.request(sup);
      const missing = await send(r.method, r.path, { who: sup, body: r.body });
      expect([missing.status, missing.body]).toEqual([403, { code: 'REAUTH_REQUIRED' }]);
      await g.unchanged(sup);
      const runs = s.gw.accounts.passwordWork.runs;
      const wrong = await send(r.method, r.path, { who: sup, body: { ...r.body, currentPassword: WRONG }, cid: 'reauth-wrong-1' });
      expect([wrong.status, wrong.body]).toEqual([403, { code: 'REAUTH_FAILED' }]);
      // the wrong password was checked by the process's one Argon2 budget, once
      expect(s.gw.accounts.passwordWork.runs).toBe(runs + 1);
      await g.unchanged(sup);
      expect(cap.lines().find((l) => l.code === 'REAUTH_FAILED')).toMatchObject({ cid: 'reauth-wrong-1', level: 40 });
      // the session itself goes on: a wrong re-authentication is no sign-out
      expect((await send('GET', '/staff/session', { who: sup })).status).toBe(200);

      const right = await send(r.method, r.path, { who: sup, body: { ...r.body, currentPassword: SUPERVISOR.password } });
      expect(right.status, JSON.stringify(right.body)).toBe(g.applied);
      await g.changed(sup);
    });

  it("a session's wrong re-authentications count in the sign-in throttle like wrong passwords: after 3 the right one is refused 429, as is a sign-in to that name from that address", async () => {
    const sup = await signIn(SUPERVISOR);
    const kenId = await idOf(sup, STAFF.username);
    const reset = (currentPassword: string) =>
      send('POST', `/staff/accounts/${kenId}/password`, { who: sup, body: { password: 'a passphrase the thief chose', currentPassword } });
    for (let i = 0; i < 3; i++) expect((await reset(`${WRONG} ${i}`)).body).toEqual({ code: 'REAUTH_FAILED' });
    const held = await reset(SUPERVISOR.password);
    expect([held.status, held.body.code]).toEqual([429, 'SIGN_IN_THROTTLED']);
    expect((await signInAnswer(SUPERVISOR)).status).toBe(429);
    expect((await signInAnswer(STAFF)).status).toBe(200);
    // after the wait the right password is taken
    s.f.clock.advance(2_000);
    expect((await reset(SUPERVISOR.password)).status).toBe(200);
  });

  it('counts a re-authentication before its Argon2 await: of 12 wrong passwords sent at once at most 3 are checked, the rest 429', async () => {
    const sup = await signIn(SUPERVISOR);
    const runs = s.gw.accounts.passwordWork.runs;
    const burst = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        send('POST', '/staff/accounts', {
          who: sup,
          body: {
            username: `eve${i}`,
            displayName: 'Eve',
            role: 'supervisor',
            password: 'a passphrase the thief chose',
            currentPassword: WRONG,
          },
        }),
      ),
    );
    const tally: Record<string, number> = {};
    for (const a of burst) tally[`${a.status} ${String(a.body.code)}`] = (tally[`${a.status} ${String(a.body.code)}`] ?? 0) + 1;
    expect(tally['403 REAUTH_FAILED'] ?? 0, JSON.stringify(tally)).toBeLessThanOrEqual(3);
    expect((tally['403 REAUTH_FAILED'] ?? 0) + (tally['429 SIGN_IN_THROTTLED'] ?? 0), JSON.stringify(tally)).toBe(12);
    expect(s.gw.accounts.passwordWork.runs - runs).toBeLessThanOrEqual(3);
    expect((await accountsOf(sup)).filter((a) => a.username.startsWith('eve'))).toEqual([]);
  });

  it('does not let a session without the password replace a pending enrolment: the one its owner started still confirms', async () => {
    const sup = await signIn(SUPERVISOR);
    const mine = await send('POST', '/staff/totp/enrolment', { who: sup, body: { currentPassword: SUPERVISOR.password } });
    expect(mine.status).toBe(200);
    const thief = await signIn(SUPERVISOR);
    expect((await send('POST', '/staff/totp/enrolment', { who: thief, body: {} })).body).toEqual({ code: 'REAUTH_REQUIRED' });
    expect((await send('POST', '/staff/totp/enrolment', { who: thief, body: { currentPassword: WRONG } })).body).toEqual({
      code: 'REAUTH_FAILED',
    });
    const done = await send('POST', '/staff/totp/enrolment/confirm', { who: sup, body: { code: codeOf(String(mine.body.secret)) } });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
  });

  it('asks nothing more for what moves no lasting authority: creating, disabling and enabling a staff account', async () => {
    const sup = await signIn(SUPERVISOR);
    const made = await send('POST', '/staff/accounts', {
      who: sup,
      body: { username: 'yuki', displayName: 'Yuki', role: 'staff', password: 'the night porter keeps the keys' },
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const yukiId = await idOf(sup, 'yuki');
    expect((await send('POST', `/staff/accounts/${yukiId}/disable`, { who: sup })).status).toBe(200);
    expect((await send('POST', `/staff/accounts/${yukiId}/enable`, { who: sup })).status).toBe(200);
    expect((await signInAnswer({ username: 'yuki', password: 'the night porter keeps the keys' })).status).toBe(200);
  });
});
