import { request, type IncomingMessage } from 'node:http';
import { encodeSecret, newId, newPairingSecret, type Schedule } from '@tobira/shared';
import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGateway } from '../src/gateway.js';
import { runSite, silentLog, STAFF_TOKEN, waitFor, type Running } from './harness.js';
import { makeAccounts, STAFF, SUPERVISOR } from './ui-browser.js';

/**
 * The staff web UI / API trust boundaries, attacked from outside: a running
 * gateway (real HTTP on a port, real SQLite file, embedded broker, fake cloud
 * and lock), requests sent at once from more than one client address
 * (127.0.0.x are all loopback on Linux).
 */

interface Answer {
  status: number;
  body: Record<string, unknown>;
  headers: IncomingMessage['headers'];
}

/** One request on its own connection from `localAddress`; an event stream answers as soon as its head arrives (then it is closed). */
function send(
  base: string,
  method: string,
  path: string,
  opts: { body?: unknown; headers?: Record<string, string>; from?: string } = {},
): Promise<Answer> {
  const u = new URL(base);
  const data = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method,
        agent: false,
        headers: { ...(data === undefined ? {} : { 'content-type': 'application/json' }), ...opts.headers },
        ...(opts.from === undefined ? {} : { localAddress: opts.from }),
      },
      (res) => {
        if (String(res.headers['content-type']).startsWith('text/event-stream')) {
          resolve({ status: res.statusCode ?? 0, body: {}, headers: res.headers });
          req.destroy();
          return;
        }
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          let body: Record<string, unknown>;
          try {
            body = JSON.parse(text) as Record<string, unknown>;
          } catch {
            body = { text };
          }
          resolve({ status: res.statusCode ?? 0, body, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

const tally = (rs: Answer[]) => {
  const t: Record<string, number> = {};
  for (const r of rs) {
    const k = `${r.status} ${String(r.body.code ?? '')}`.trim();
    t[k] = (t[k] ?? 0) + 1;
  }
  return t;
};

interface Signed {
  readonly cookie: string;
  readonly csrf: string;
  /** Headers of a state-changing request of this session. */
  readonly write: Record<string, string>;
}

describe('staff trust boundaries of a running gateway', () => {
  let broker: MqttTestBroker;
  let s: Running | undefined;
  const lobbySecret = encodeSecret(newPairingSecret());

  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
  });
  afterEach(async () => {
    await s?.close();
    s = undefined;
    await broker.stop();
  });

  const start = async (opts: Parameters<typeof runSite>[3] = {}, accounts = true) => {
    s = await runSite(broker.url, broker.url, broker.unique, opts);
    if (accounts) await makeAccounts(s);
    return s;
  };
  const url = () => s!.gw.httpUrl!;
  const signIn = async (who: { username: string; password: string }, from = '127.0.0.1'): Promise<Signed> => {
    const r = await send(url(), 'POST', '/staff/session', { body: { username: who.username, password: who.password }, from });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const cookie = String(r.headers['set-cookie']?.[0] ?? '').split(';')[0]!;
    const csrf = String(r.body.csrfToken);
    return { cookie, csrf, write: { cookie, 'x-csrf-token': csrf } };
  };
  const token = { authorization: `Bearer ${STAFF_TOKEN}` };

  describe('sign-in under a burst sent at once', () => {
    it('evaluates at most the free tries of 300 wrong passwords sent at once against a supervisor (the rest 429), and of 300 more from another address, while she still signs in from hers', async () => {
      await start();
      const wrong = (i: number, from: string) =>
        send(url(), 'POST', '/staff/session', { body: { username: SUPERVISOR.username, password: `not her password ${i}` }, from });
      const first = tally(await Promise.all(Array.from({ length: 300 }, (_, i) => wrong(i, '127.0.0.2'))));
      expect(first['401 BAD_CREDENTIALS']).toBeLessThanOrEqual(3);
      expect(first['429 SIGN_IN_THROTTLED']).toBeGreaterThanOrEqual(297);
      const second = tally(await Promise.all(Array.from({ length: 300 }, (_, i) => wrong(i, '127.0.0.3'))));
      expect(second['401 BAD_CREDENTIALS']).toBeLessThanOrEqual(3);
      expect(second['429 SIGN_IN_THROTTLED']).toBeGreaterThanOrEqual(297);
      // the owner, at her own address, is not locked out by either
      await signIn(SUPERVISOR, '127.0.0.1');
      expect(s!.gw.accounts.passwordWork.highWater).toBeLessThanOrEqual(2);
    });

    it('bounds the Argon2 work of the whole process: a flood of unknown names is shed with 503 SIGN_IN_BUSY beyond the queue, and an unknown name costs one verify like a known one', async () => {
      await start({ overrides: { http: { host: '127.0.0.1', port: 0, passwordWork: { concurrency: 1, queue: 2 } } } });
      const before = s!.gw.accounts.passwordWork.runs;
      const known = await send(url(), 'POST', '/staff/session', { body: { username: SUPERVISOR.username, password: 'a wrong password' } });
      const afterKnown = s!.gw.accounts.passwordWork.runs;
      const unknown = await send(url(), 'POST', '/staff/session', { body: { username: 'nobody-here', password: 'a wrong password' } });
      // the same answer, and the same Argon2 work (one verify each): no user-existence oracle by code or cost
      expect([known.status, known.body]).toEqual([401, { code: 'BAD_CREDENTIALS' }]);
      expect([unknown.status, unknown.body]).toEqual([401, { code: 'BAD_CREDENTIALS' }]);
      expect(afterKnown - before).toBe(1);
      expect(s!.gw.accounts.passwordWork.runs - afterKnown).toBe(1);

      const flood = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          send(url(), 'POST', '/staff/session', { body: { username: `ghost-${i}`, password: 'whatever it is' }, from: '127.0.0.4' }),
        ),
      );
      const t = tally(flood);
      expect(Object.keys(t).sort()).toEqual(['401 BAD_CREDENTIALS', '503 SIGN_IN_BUSY']);
      expect(flood.filter((r) => r.status === 503).every((r) => r.headers['retry-after'] === '1')).toBe(true);
      expect(s!.gw.accounts.passwordWork.highWater).toBe(1);
      expect(s!.gw.accounts.passwordWork.shed).toBe(t['503 SIGN_IN_BUSY']);
    });

    it('a flood from one address fills only its share of the Argon2 queue: the supervisor from her known address and a new address still get their sign-in evaluated', async () => {
      await start({ overrides: { http: { host: '127.0.0.1', port: 0, passwordWork: { concurrency: 1, queue: 4, perSource: 2 } } } });
      await signIn(SUPERVISOR, '127.0.0.1');
      const flood = Array.from({ length: 40 }, (_, i) =>
        send(url(), 'POST', '/staff/session', { body: { username: `ghost-${i}`, password: 'whatever it is' }, from: '127.0.0.4' }),
      );
      // Wait until the flood is being shed: the queue is as full as that address can make it.
      for (let i = 0; i < 400 && s!.gw.accounts.passwordWork.shed === 0; i++) await new Promise((r) => setTimeout(r, 5));
      expect(s!.gw.accounts.passwordWork.shed).toBeGreaterThan(0);
      const [supervisor, newcomer] = await Promise.all([
        send(url(), 'POST', '/staff/session', {
          body: { username: SUPERVISOR.username, password: SUPERVISOR.password },
          from: '127.0.0.1',
        }),
        send(url(), 'POST', '/staff/session', { body: { username: 'someone-new', password: 'a first try' }, from: '127.0.0.9' }),
      ]);
      expect(supervisor.status, JSON.stringify(supervisor.body)).toBe(200);
      expect([newcomer.status, newcomer.body]).toEqual([401, { code: 'BAD_CREDENTIALS' }]);
      const t = tally(await Promise.all(flood));
      expect(t['503 SIGN_IN_BUSY']).toBeGreaterThanOrEqual(30);
      expect(s!.gw.accounts.passwordWork.highWater).toBe(1);
    });

    it('a staff member flooding her own right password from her known address cannot keep a supervisor on hers out, and keeps no more than 10 sessions', async () => {
      // one Argon2 at a time and four trusted places: twenty loops fill them all unless each requester is bounded
      await start({ overrides: { http: { host: '127.0.0.1', port: 0, passwordWork: { concurrency: 1, queue: 4, priorityQueue: 4 } } } });
      const CLERK_AT = '127.0.0.20';
      const BOSS_AT = '127.0.0.21';
      // both addresses known for their accounts: both sign-ins go in the priority lane
      const first = await signIn(STAFF, CLERK_AT);
      await signIn(SUPERVISOR, BOSS_AT);
      let flooding = true;
      const answers: Answer[] = [];
      const loop = async () => {
        while (flooding)
          answers.push(
            await send(url(), 'POST', '/staff/session', { body: { username: STAFF.username, password: STAFF.password }, from: CLERK_AT }),
          );
      };
      const loops = Array.from({ length: 20 }, () => loop());
      // the flood is at its bound once some of it is refused (shed or throttled)
      for (let i = 0; i < 2000 && !answers.some((a) => a.status !== 200); i++) await new Promise((r) => setTimeout(r, 5));
      expect(answers.some((a) => a.status !== 200)).toBe(true);
      const boss: Answer[] = [];
      for (let i = 0; i < 10; i++)
        boss.push(
          await send(url(), 'POST', '/staff/session', {
            body: { username: SUPERVISOR.username, password: SUPERVISOR.password },
            from: BOSS_AT,
          }),
        );
      flooding = false;
      await Promise.all(loops);
      expect(tally(boss)).toEqual({ '200': 10 });
      const t = tally(answers);
      // right passwords are held to the free tries in flight like wrong ones, and to her share of the trusted places
      expect(t['429 SIGN_IN_THROTTLED']).toBeGreaterThan(0);
      expect(t['503 SIGN_IN_BUSY']).toBe(s!.gw.accounts.passwordWork.shed);
      expect(s!.gw.accounts.passwordWork.highWater).toBe(1);
      // her sign-ins made far more than 10 sessions; only the newest 10 live, so her first is ended
      expect(t['200']).toBeGreaterThan(10);
      const old = await send(url(), 'GET', '/staff/session', { headers: { cookie: first.cookie }, from: CLERK_AT });
      expect([old.status, old.body.code]).toEqual([401, 'UNAUTHORIZED']);
    });

    it('counts no shed try in the throttle: after 40 wrong passwords at once against her name, mostly shed 503, the supervisor still signs in from that address', async () => {
      // the free tries are more than the queue can evaluate, fewer than the flood: a shed try that counted would hold her name back
      await start({
        overrides: { http: { host: '127.0.0.1', port: 0, passwordWork: { concurrency: 1, queue: 1, perSource: 1, priorityQueue: 1 } } },
        deps: { signInThrottle: { free: 10 } },
      });
      const flood = await Promise.all(
        Array.from({ length: 40 }, () =>
          send(url(), 'POST', '/staff/session', {
            body: { username: SUPERVISOR.username, password: 'not her password' },
            from: '127.0.0.4',
          }),
        ),
      );
      const t = tally(flood);
      expect(Object.keys(t).sort()).toEqual(['401 BAD_CREDENTIALS', '503 SIGN_IN_BUSY']);
      expect(t['401 BAD_CREDENTIALS']).toBeLessThan(10);
      expect(s!.gw.accounts.passwordWork.shed).toBe(t['503 SIGN_IN_BUSY']);
      // neither her name (every address) nor this address and name together is held back by the shed ones
      await signIn(SUPERVISOR, '127.0.0.4');
      await signIn(SUPERVISOR, '127.0.0.5');
    });

    it('a shed try starts no wait: past her free tries and her wait, a try shed while another address floods leaves the right password taken at once', async () => {
      await start({
        overrides: { http: { host: '127.0.0.1', port: 0, passwordWork: { concurrency: 1, queue: 1, perSource: 1, priorityQueue: 1 } } },
      });
      const A = '127.0.0.6';
      const wrong = () => send(url(), 'POST', '/staff/session', { body: { username: SUPERVISOR.username, password: 'not hers' }, from: A });
      // her free tries from A used up (3), so the next one from A waits; then that wait passes
      for (let i = 0; i < 3; i++) expect((await wrong()).status).toBe(401);
      // another address keeps the one running verify and the one queued place busy until stopped
      let pumping = true;
      const pump = async () => {
        for (let i = 0; pumping; i++)
          await send(url(), 'POST', '/staff/session', { body: { username: `ghost-${i}`, password: 'x' }, from: '127.0.0.4' });
      };
      const pumps = [pump(), pump(), pump(), pump()];
      // a try from A until one is shed; one that got evaluated counts (a wrong password), so each waits out the delay first
      let shed = false;
      for (let i = 0; i < 50 && !shed; i++) {
        s!.f.clock.advance(60_000);
        const r = await wrong();
        expect([401, 503]).toContain(r.status);
        shed = r.status === 503;
      }
      pumping = false;
      await Promise.all(pumps);
      expect(shed).toBe(true);
      // no time has passed since the shed try: had it been counted (its time at least), her right password would wait
      await signIn(SUPERVISOR, A);
    });

    it('checks the setup code before hashing: 300 wrong codes at once cost no Argon2 work, at most the free tries are evaluated, the rest 429', async () => {
      await start({}, false);
      const code = s!.gw.setupCode!.code;
      const guesses = await Promise.all(
        Array.from({ length: 300 }, (_, i) =>
          send(url(), 'POST', '/staff/setup', {
            body: { code: `WRONG-${i}`, username: 'mallory', displayName: 'Mallory', password: 'a long enough password' },
            from: '127.0.0.2',
          }),
        ),
      );
      const t = tally(guesses);
      expect(t['403 SETUP_CODE_INVALID']).toBeLessThanOrEqual(3);
      expect(t['429 SIGN_IN_THROTTLED']).toBeGreaterThanOrEqual(297);
      expect(s!.gw.accounts.passwordWork.runs).toBe(0);
      // the right code from the right place still works
      const ok = await send(url(), 'POST', '/staff/setup', { body: { code, ...SUPERVISOR } });
      expect(ok.status).toBe(200);
      expect(s!.gw.accounts.passwordWork.runs).toBe(1);
    });
  });

  describe('the sign-in throttle against a guesser on many addresses', () => {
    const wrong = (username: string, from: string, i = 0) =>
      send(url(), 'POST', '/staff/session', { body: { username, password: `not the password ${i}` }, from });
    /** `n` wrong passwords against `username`, three from each of the addresses 127.0.0.{first}, {first+1}, ... */
    const spray = async (username: string, first: number, n: number) => {
      const rs: Answer[] = [];
      for (let i = 0; i < n; i++) rs.push(await wrong(username, `127.0.0.${first + Math.floor(i / 3)}`, i));
      return tally(rs);
    };
    const right = (who: { username: string; password: string }, from: string) =>
      send(url(), 'POST', '/staff/session', { body: { username: who.username, password: who.password }, from });
    /** Stops the gateway and starts it again on the same data folder (the same SQLite file, nothing in memory kept). */
    const restart = async () => {
      const old = s!;
      await old.gw.stop({ force: true });
      const gw = createGateway(old.f.config, { clock: old.f.clock, log: silentLog(), tickMs: 50 });
      await gw.start();
      s = {
        ...old,
        gw,
        async close() {
          await gw.stop({ force: true });
          await old.close();
        },
      };
    };
    const knownRows = () => s!.gw.store.db.prepare('SELECT ip FROM staff_known_addresses ORDER BY ip').all();

    it('keeps the supervisor’s own address exempt from the per-name limit across a restart: guessers on many addresses hold her name back for every other address, not for the one she signed in from', async () => {
      await start();
      await signIn(SUPERVISOR, '127.0.0.1');
      await restart();
      const t = await spray(SUPERVISOR.username, 2, 24);
      expect(t['401 BAD_CREDENTIALS']).toBe(20);
      expect(t['429 SIGN_IN_THROTTLED']).toBe(4);
      // her right password from an address she never used: held back like the guessers (the limit is real)
      const elsewhere = await right(SUPERVISOR, '127.0.0.50');
      expect([elsewhere.status, elsewhere.body.code]).toEqual([429, 'SIGN_IN_THROTTLED']);
      // from her own address, after the restart: signed in at 3 a.m. all the same
      await signIn(SUPERVISOR, '127.0.0.1');
    });

    it('forgets a known address 30 days after its last sign-in and keeps only the newest 10 per account', async () => {
      await start();
      for (let i = 1; i <= 11; i++) {
        await signIn(SUPERVISOR, `127.0.0.${i}`);
        s!.f.clock.advance(1000);
      }
      // the oldest of 11 (127.0.0.1) is gone; 10 are kept
      expect(knownRows()).toHaveLength(10);
      const t = await spray(SUPERVISOR.username, 20, 21);
      expect(t['401 BAD_CREDENTIALS']).toBe(20);
      expect((await right(SUPERVISOR, '127.0.0.1')).status).toBe(429);
      expect((await right(SUPERVISOR, '127.0.0.11')).status).toBe(200);
      // 30 days after its last sign-in an address is a stranger again (and the periodic purge deletes its row)
      s!.f.clock.advance(30 * 24 * 3600_000);
      await spray(SUPERVISOR.username, 30, 21);
      expect((await right(SUPERVISOR, '127.0.0.11')).status).toBe(429);
      s!.gw.accounts.purge();
      expect(knownRows()).toEqual([]);
    });

    it('counts setup code guesses before any await per address and across addresses: of 300 wrong codes from 10 addresses at once at most 20 are evaluated, none hashes a password, and the right code is taken after the wait', async () => {
      await start({}, false);
      const code = s!.gw.setupCode!.code;
      const guesses = await Promise.all(
        Array.from({ length: 300 }, (_, i) =>
          send(url(), 'POST', '/staff/setup', {
            body: { code: `WRONG-${i}`, username: 'mallory', displayName: 'Mallory', password: 'a long enough password' },
            from: `127.0.0.${2 + (i % 10)}`,
          }),
        ),
      );
      const t = tally(guesses);
      expect(t['403 SETUP_CODE_INVALID']).toBeLessThanOrEqual(20);
      expect(t['429 SIGN_IN_THROTTLED']).toBeGreaterThanOrEqual(280);
      expect(s!.gw.accounts.passwordWork.runs).toBe(0);
      // across addresses: a fresh address waits too, and the code is not looked at
      const fresh = await send(url(), 'POST', '/staff/setup', { body: { code, ...SUPERVISOR }, from: '127.0.0.50' });
      expect([fresh.status, fresh.body.code]).toEqual([429, 'SIGN_IN_THROTTLED']);
      expect(s!.gw.accounts.setupRequired()).toBe(true);
      s!.f.clock.advance(10_000);
      const ok = await send(url(), 'POST', '/staff/setup', { body: { code, ...SUPERVISOR }, from: '127.0.0.50' });
      expect(ok.status).toBe(200);
      expect(s!.gw.accounts.passwordWork.runs).toBe(1);
      // the address that made the first supervisor is known for her name
      expect(knownRows()).toEqual([{ ip: '127.0.0.50' }]);
    });

    it('cannot be reset by flooding its tables with fresh names: the guessed supervisor’s name stays held back while the tables stay at their bound', async () => {
      await start({ deps: { signInThrottle: { maxEntries: 8 } } });
      await signIn(SUPERVISOR, '127.0.0.1');
      expect((await spray(SUPERVISOR.username, 2, 21))['401 BAD_CREDENTIALS']).toBe(20);
      // 40 fresh names, each evaluated (a wrong password for a name nobody has), from yet more addresses
      for (let i = 0; i < 40; i++) expect((await wrong(`ghost-${i}`, `127.0.0.${10 + (i % 20)}`, i)).status).toBe(401);
      // the supervisor's count was not the one dropped to make room
      const elsewhere = await right(SUPERVISOR, '127.0.0.50');
      expect([elsewhere.status, elsewhere.body.code]).toEqual([429, 'SIGN_IN_THROTTLED']);
      await signIn(SUPERVISOR, '127.0.0.1');
    });

    it('refuses a new name with 429 SIGN_IN_THROTTLED, without looking at the password, while a full table holds only live penalties, and takes it again once they expire', async () => {
      await start({ deps: { signInThrottle: { maxEntries: 4 } } });
      // four (address, name) pairs, each past its free tries: the pairs table is full of penalties
      for (let n = 0; n < 4; n++) for (let i = 0; i < 3; i++) expect((await wrong(`ghost-${n}`, '127.0.0.2', i)).status).toBe(401);
      const runs = s!.gw.accounts.passwordWork.runs;
      const refused = await right(STAFF, '127.0.0.3');
      expect([refused.status, refused.body.code]).toEqual([429, 'SIGN_IN_THROTTLED']);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
      expect(s!.gw.accounts.passwordWork.runs).toBe(runs);
      s!.f.clock.advance(15 * 60_000);
      await signIn(STAFF, '127.0.0.3');
    });
  });

  describe('passwords', () => {
    it('refuses commonly breached passwords (also with digits added), welcomes a long passphrase, and lets a signed-in person change their own with the current one', async () => {
      await start();
      const sup = await signIn(SUPERVISOR);
      const create = (username: string, password: string) =>
        send(url(), 'POST', '/staff/accounts', {
          body: { username, displayName: username, role: 'staff', password },
          headers: sup.write,
        });
      for (const pw of ['qwerty123456', '1q2w3e4r5t6y', 'Password123456!', 'sunshine 2026 !!'])
        expect((await create('yuki', pw)).body, pw).toMatchObject({ code: 'BREACHED_PASSWORD' });
      expect((await create('yuki', 'aaaaaaaaaaaaaaaa')).body).toMatchObject({ code: 'WEAK_PASSWORD' });
      const passphrase = 'the night porter keeps the spare keys in a drawer that squeaks '.repeat(4);
      expect((await create('yuki', passphrase)).status).toBe(201);
      await signIn({ username: 'yuki', password: passphrase });

      const ken = await signIn(STAFF);
      const kenElsewhere = await signIn(STAFF, '127.0.0.5');
      const change = (who: Signed | null, currentPassword: string, newPassword: string) =>
        send(url(), 'POST', '/staff/session/password', {
          body: { currentPassword, newPassword },
          headers: who === null ? token : who.write,
        });
      expect((await change(ken, 'not my password at all', 'a new evening shift phrase')).body).toEqual({ code: 'CURRENT_PASSWORD_WRONG' });
      expect((await change(null, STAFF.password, 'a new evening shift phrase')).body).toEqual({ code: 'SESSION_REQUIRED' });
      expect((await change(ken, STAFF.password, 'password1234')).body).toMatchObject({ code: 'BREACHED_PASSWORD' });
      expect((await change(ken, STAFF.password, 'a new evening shift phrase')).body).toEqual({ status: 'applied' });
      // this session goes on, the account's other one ended, the new password signs in, the old one does not
      expect((await send(url(), 'GET', '/staff/session', { headers: { cookie: ken.cookie } })).status).toBe(200);
      expect((await send(url(), 'GET', '/staff/session', { headers: { cookie: kenElsewhere.cookie } })).status).toBe(401);
      await signIn({ username: STAFF.username, password: 'a new evening shift phrase' });
      expect(
        (await send(url(), 'POST', '/staff/session', { body: { username: STAFF.username, password: STAFF.password }, from: '127.0.0.6' }))
          .status,
      ).toBe(401);
    });
  });

  describe('passage mode', () => {
    const LOBBY_HOURS: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '08:00', end: '20:00' }] };
    const ALL_DAY: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }] };
    const CHAINED: Schedule = {
      timeZone: 'Asia/Tokyo',
      windows: [
        { days: [1], start: '00:00', end: '12:00' },
        { days: [1], start: '12:00', end: '24:00' },
      ],
    };

    it('is a supervisor’s only: staff and the API token get 403 NOT_SUPERVISOR; a guest room refuses it (409 PASSAGE_GUEST_ROOM); a schedule over 16 h in a row is 422 PASSAGE_TOO_LONG', async () => {
      await start({
        overrides: {
          locks: [
            { lockId: 'lock-1', doorId: 'door-1', pairingSecret: lobbySecret, guestRoom: true },
            { lockId: 'lock-2', doorId: 'door-lobby', pairingSecret: lobbySecret },
          ],
        },
      });
      const sup = await signIn(SUPERVISOR);
      const ken = await signIn(STAFF);
      const passage = (headers: Record<string, string>, doorId: string, schedule: Schedule | null) =>
        send(url(), 'POST', '/staff/passage', { body: { doorId, schedule, reason: 'test' }, headers });
      // the attack as reported: the automation token and a staff session holding guest rooms open round the clock
      expect(await passage(token, 'door-1', ALL_DAY)).toMatchObject({ status: 403, body: { code: 'NOT_SUPERVISOR' } });
      expect(await passage(ken.write, 'door-1', ALL_DAY)).toMatchObject({ status: 403, body: { code: 'NOT_SUPERVISOR' } });
      expect(await passage(token, 'door-lobby', LOBBY_HOURS)).toMatchObject({ status: 403, body: { code: 'NOT_SUPERVISOR' } });
      expect(await passage(sup.write, 'door-1', LOBBY_HOURS)).toMatchObject({ status: 409, body: { code: 'PASSAGE_GUEST_ROOM' } });
      expect(await passage(sup.write, 'door-lobby', ALL_DAY)).toMatchObject({ status: 422, body: { code: 'PASSAGE_TOO_LONG' } });
      expect(await passage(sup.write, 'door-lobby', CHAINED)).toMatchObject({ status: 422, body: { code: 'PASSAGE_TOO_LONG' } });
      expect(s!.gw.store.db.prepare('SELECT count(*) AS n FROM passage').get()).toEqual({ n: 0 });
      expect(await passage(sup.write, 'door-lobby', LOBBY_HOURS)).toMatchObject({ status: 200, body: { status: 'applied' } });
      // clearing is a supervisor's too (a staff member cannot end what a supervisor decided), and always allowed to one
      expect(await passage(ken.write, 'door-lobby', null)).toMatchObject({ status: 403, body: { code: 'NOT_SUPERVISOR' } });
      expect(await passage(sup.write, 'door-1', null)).toMatchObject({ status: 200 });
      expect(await passage(sup.write, 'door-lobby', null)).toMatchObject({ status: 200, body: { status: 'applied' } });
    });
  });

  describe('a lockdown the cloud set', () => {
    it('is lifted by neither the API token nor a staff member (403 CLOUD_LOCKDOWN), by a supervisor only with a reason; one the gateway set stays liftable by staff', async () => {
      await start();
      const sup = await signIn(SUPERVISOR);
      const ken = await signIn(STAFF);
      const mode = (headers: Record<string, string>, m: 'normal' | 'lockdown', reason?: string) =>
        send(url(), 'POST', '/staff/mode', { body: reason === undefined ? { mode: m } : { mode: m, reason }, headers });

      // staff lock down first, then the cloud (police request): the lockdown becomes the cloud's
      expect((await mode(ken.write, 'lockdown', 'suspicious person')).body).toEqual({ status: 'applied', mode: 'lockdown' });
      await s!.cloud.send({
        type: 'site.mode',
        seq: ++s!.cloud.seq,
        body: { requestId: newId(), mode: 'lockdown', passage: [], by: 'ops-token', reason: 'police request' },
      });
      await waitFor(
        () => (s!.gw.store.db.prepare('SELECT mode_origin AS o FROM settings').get() as { o: string }).o === 'cloud',
        'cloud lockdown applied',
      );

      expect(await mode(token, 'normal', 'nightly script')).toMatchObject({ status: 403, body: { code: 'CLOUD_LOCKDOWN' } });
      expect(await mode(ken.write, 'normal', 'guest wants out')).toMatchObject({ status: 403, body: { code: 'CLOUD_LOCKDOWN' } });
      expect(await mode(sup.write, 'normal')).toMatchObject({ status: 422, body: { code: 'REASON_REQUIRED' } });
      expect(await mode(sup.write, 'normal', '   ')).toMatchObject({ status: 422, body: { code: 'REASON_REQUIRED' } });
      expect(s!.gw.store.settings().mode).toBe('lockdown');
      const refusals = s!.gw.store.db
        .prepare("SELECT code FROM staff_actions WHERE action = 'set_mode' AND result = 'refused' ORDER BY id")
        .all();
      expect(refusals).toEqual([
        { code: 'CLOUD_LOCKDOWN' },
        { code: 'CLOUD_LOCKDOWN' },
        { code: 'REASON_REQUIRED' },
        { code: 'REASON_REQUIRED' },
      ]);
      expect(await mode(sup.write, 'normal', 'police confirmed all clear by phone')).toMatchObject({
        status: 200,
        body: { status: 'applied', mode: 'normal' },
      });

      // a lockdown set at the gateway: lifted by staff and by the token as before
      expect((await mode(token, 'lockdown', 'monitoring')).body).toEqual({ status: 'applied', mode: 'lockdown' });
      expect((await mode(ken.write, 'normal', 'false alarm')).body).toEqual({ status: 'applied', mode: 'normal' });
    });
  });

  describe('the live feed', () => {
    it('caps open streams per account, however many sessions it has (429 TOO_MANY_STREAMS), while another account still gets one', async () => {
      await start();
      const sessions = [await signIn(SUPERVISOR), await signIn(SUPERVISOR, '127.0.0.2'), await signIn(SUPERVISOR, '127.0.0.3')];
      const open: { close(): void }[] = [];
      const stream = (cookie: string) =>
        new Promise<number>((resolve, reject) => {
          const u = new URL(url());
          const req = request({ host: u.hostname, port: u.port, path: '/staff/events', agent: false, headers: { cookie } }, (res) => {
            resolve(res.statusCode ?? 0);
            if (res.statusCode !== 200) res.resume();
          });
          open.push({ close: () => req.destroy() });
          req.on('error', reject);
          req.end();
        });
      try {
        const codes: number[] = [];
        for (const sess of sessions) for (let i = 0; i < 4; i++) codes.push(await stream(sess.cookie));
        expect(codes.filter((c) => c === 200)).toHaveLength(8);
        expect(codes.slice(8)).toEqual([429, 429, 429, 429]);
        const ken = await signIn(STAFF);
        expect(await stream(ken.cookie)).toBe(200);
      } finally {
        for (const o of open) o.close();
      }
    });
  });

  describe('answers and requests a browser handles', () => {
    it('sends Cache-Control: no-store and nosniff with every answer that carries a session secret', async () => {
      await start();
      const r = await send(url(), 'POST', '/staff/session', { body: { username: SUPERVISOR.username, password: SUPERVISOR.password } });
      expect(r.status).toBe(200);
      expect(r.body.csrfToken).toEqual(expect.any(String));
      for (const a of [
        r,
        await send(url(), 'GET', '/staff/session', { headers: { cookie: String(r.headers['set-cookie']?.[0]).split(';')[0]! } }),
      ]) {
        expect(a.headers['cache-control']).toBe('no-store');
        expect(a.headers['x-content-type-options']).toBe('nosniff');
      }
      const viaToken = await send(url(), 'GET', '/staff/status', { headers: token });
      expect(viaToken.headers['cache-control']).toBe('no-store');
    });

    it('refuses a state-changing staff request another site made (Origin, Sec-Fetch-Site) with 403 CROSS_SITE_REQUEST, sign-in included, and changes nothing', async () => {
      await start();
      const sup = await signIn(SUPERVISOR);
      const host = new URL(url()).host;
      const cross = [
        { origin: 'http://evil.example' },
        { origin: 'null' },
        { origin: `http://${host}`, 'sec-fetch-site': 'cross-site' },
        { 'sec-fetch-site': 'same-site' },
      ];
      for (const h of cross) {
        const signInTry = await send(url(), 'POST', '/staff/session', {
          body: { username: STAFF.username, password: STAFF.password },
          headers: h,
        });
        expect(signInTry, JSON.stringify(h)).toMatchObject({ status: 403, body: { code: 'CROSS_SITE_REQUEST' } });
        const lockdown = await send(url(), 'POST', '/staff/mode', { body: { mode: 'lockdown' }, headers: { ...sup.write, ...h } });
        expect(lockdown, JSON.stringify(h)).toMatchObject({ status: 403, body: { code: 'CROSS_SITE_REQUEST' } });
      }
      expect(s!.gw.store.settings().mode).toBe('normal');
      // the page's own requests (same origin) and clients that are not browsers go through
      const same = { origin: `http://${host}`, 'sec-fetch-site': 'same-origin' };
      expect((await send(url(), 'POST', '/staff/mode', { body: { mode: 'lockdown' }, headers: { ...sup.write, ...same } })).status).toBe(
        200,
      );
      expect((await send(url(), 'POST', '/staff/mode', { body: { mode: 'normal' }, headers: token })).status).toBe(200);
    });

    it('gives every spelling of a staff path the router accepts (percent-encoded, %2F, trailing or double slash) the same cross-site refusal and no-store', async () => {
      await start();
      const sup = await signIn(SUPERVISOR);
      const spellings = (path: string) => {
        const rest = path.slice('/staff'.length);
        return [
          path,
          `/%73taff${rest}`,
          `/%73%74%61%66%66${rest}`,
          `/staff${rest.replace(/^\/(.)/, (_m, c: string) => `/%${c.charCodeAt(0).toString(16)}`)}`,
          `/staff%2F${rest.slice(1)}`,
          `/%2Fstaff${rest}`,
          `//staff${rest}`,
          `/staff/${rest}`,
          `${path}/`,
          `${path}?x=1`,
        ];
      };
      const evil = { origin: 'https://evil.example' };
      let reached = 0;
      for (const p of spellings('/staff/mode')) {
        const r = await send(url(), 'POST', p, { body: { mode: 'lockdown' }, headers: { ...sup.write, ...evil } });
        // a spelling the router does not take reaches no handler; every other is refused like the plain one
        if (r.status !== 404) {
          reached++;
          expect(r, p).toMatchObject({ status: 403, body: { code: 'CROSS_SITE_REQUEST' } });
        }
        expect(r.headers['cache-control'], p).toBe('no-store');
      }
      expect(reached).toBeGreaterThanOrEqual(3);
      for (const p of spellings('/staff/session')) {
        const r = await send(url(), 'POST', p, {
          body: { username: STAFF.username, password: STAFF.password },
          headers: { 'sec-fetch-site': 'cross-site' },
        });
        if (r.status !== 404) expect(r, p).toMatchObject({ status: 403, body: { code: 'CROSS_SITE_REQUEST' } });
        expect(r.headers['set-cookie'], p).toBeUndefined();
      }
      expect(s!.gw.store.settings().mode).toBe('normal');
      for (const p of [...spellings('/staff/session'), ...spellings('/staff/keys')]) {
        const r = await send(url(), 'GET', p, { headers: { cookie: sup.cookie } });
        expect(r.headers['cache-control'], `${p} ${r.status}`).toBe('no-store');
      }
      for (const p of ['/%6detrics', '/m%65trics', '/metrics/']) {
        const r = await send(url(), 'GET', p, { headers: token });
        expect(r.headers['cache-control'], `${p} ${r.status}`).toBe('no-store');
      }
    });

    it('never serves /metrics without its token: 503 METRICS_TOKEN_NOT_CONFIGURED when none is configured, whatever is sent', async () => {
      await start({}, false);
      for (const headers of [{}, token]) {
        const r = await send(url(), 'GET', '/metrics', { headers });
        expect(r).toMatchObject({ status: 503, body: { code: 'METRICS_TOKEN_NOT_CONFIGURED' } });
      }
    });
  });
});
