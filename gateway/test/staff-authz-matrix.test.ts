import { request } from 'node:http';
import { startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runSite, STAFF_TOKEN, type Running } from './harness.js';
import { MATRIX, PRINCIPALS, type Principal } from './staff-authz-matrix.js';
import { makeAccounts, STAFF, SUPERVISOR } from './ui-browser.js';

const METRICS_TOKEN = 'metrics-token-for-the-matrix-0123';
const REVOKED_TOKEN = 'the-staff-token-before-rotation-0123';

/** status and code of one request on its own connection; an event stream is judged by its head, then closed. */
function answer(base: string, method: string, path: string, headers: Record<string, string>, body: unknown): Promise<string> {
  const u = new URL(base);
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        method,
        agent: false,
        headers: { ...headers, ...(data === undefined ? {} : { 'content-type': 'application/json' }) },
      },
      (res) => {
        const status = String(res.statusCode ?? 0);
        if (String(res.headers['content-type']).startsWith('text/event-stream')) {
          req.destroy();
          resolve(status);
          return;
        }
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          let code: unknown;
          try {
            code = (JSON.parse(text) as { code?: unknown }).code;
          } catch {
            code = undefined;
          }
          resolve(typeof code === 'string' ? `${status} ${code}` : status);
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

describe('the authorization matrix of the gateway’s HTTP routes (staff-authz-matrix.ts)', () => {
  let broker: MqttTestBroker;
  let s: Running;

  beforeEach(async () => {
    broker = await startMqttBackend('aedes');
    s = await runSite(broker.url, broker.url, broker.unique, {
      overrides: {
        metricsToken: METRICS_TOKEN,
        // every wrong-token cell is a wrong token: the per-address limit has its own tests (http-guards)
        http: { host: '127.0.0.1', port: 0, authFailures: { max: 10_000, windowSeconds: 60 } },
      },
    });
    await makeAccounts(s);
  });
  afterEach(async () => {
    await s.close();
    await broker.stop();
  });

  const signIn = async (who: { username: string; password: string }) => {
    const r = await fetch(`${s.gw.httpUrl!}/staff/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: who.username, password: who.password }),
    });
    expect(r.status).toBe(200);
    const cookie = (r.headers.get('set-cookie') ?? '').split(';')[0]!;
    return { cookie, csrf: ((await r.json()) as { csrfToken: string }).csrfToken };
  };

  it('has an entry for every registered route and none for a route that does not exist', () => {
    const registered = s.gw.httpRoutes;
    expect(registered.length).toBeGreaterThan(20);
    const gets = new Set(registered.filter((r) => r.method === 'GET').map((r) => r.url));
    // HEAD routes are Fastify's twins of GET routes (same handler, same hooks): each must have its GET
    for (const r of registered.filter((x) => x.method === 'HEAD')) expect(gets.has(r.url), `HEAD ${r.url} without GET`).toBe(true);
    const keys = registered.filter((r) => r.method !== 'HEAD').map((r) => `${r.method} ${r.url}`);
    expect(
      keys.filter((k) => MATRIX[k] === undefined),
      'routes without an entry in staff-authz-matrix.ts',
    ).toEqual([]);
    expect(
      Object.keys(MATRIX).filter((k) => !keys.includes(k)),
      'entries for routes the server does not have',
    ).toEqual([]);
  });

  it('answers every route × every principal as the table says, over real HTTP', async () => {
    // the expired session first: its idle timeout passes before the live ones are made
    const expired = await signIn({ username: SUPERVISOR.username, password: SUPERVISOR.password });
    s.f.clock.advance(31 * 60_000);
    const staff = await signIn(STAFF);
    const supervisor = await signIn(SUPERVISOR);

    const credentials: Record<Principal, { headers: Record<string, string>; csrf?: string }> = {
      none: { headers: {} },
      staff: { headers: { cookie: staff.cookie }, csrf: staff.csrf },
      supervisor: { headers: { cookie: supervisor.cookie }, csrf: supervisor.csrf },
      token: { headers: { authorization: `Bearer ${STAFF_TOKEN}` } },
      expired: { headers: { cookie: expired.cookie }, csrf: expired.csrf },
      revoked: { headers: { authorization: `Bearer ${REVOKED_TOKEN}` } },
      metrics: { headers: { authorization: `Bearer ${METRICS_TOKEN}` } },
    };

    // sign-out last: it ends the session the other rows use
    const order = Object.keys(MATRIX).sort((a, b) => Number(a === 'DELETE /staff/session') - Number(b === 'DELETE /staff/session'));
    const got: Record<string, Record<string, string>> = {};
    const want: Record<string, Record<string, string>> = {};
    for (const key of order) {
      const entry = MATRIX[key]!;
      const method = key.slice(0, key.indexOf(' '));
      got[key] = {};
      want[key] = { ...entry.answers };
      for (const p of PRINCIPALS) {
        const c = credentials[p];
        const write = method !== 'GET' && c.csrf !== undefined ? { 'x-csrf-token': c.csrf } : {};
        // one name per principal: the sign-in throttle counts per address and name
        const body = key === 'POST /staff/session' ? { username: `nobody-${p}`, password: 'not a password at all' } : entry.body;
        got[key][p] = await answer(s.gw.httpUrl!, method, entry.path, { ...c.headers, ...write }, body);
      }
    }
    expect(got).toEqual(want);
  });
});
