import { request } from 'node:http';
import { connect } from 'node:net';
import { startEmbeddedBroker, type EmbeddedBroker } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AuthFailureLimiter } from '../src/http/auth-limit.js';
import { defaultHostRules, hostAllowed } from '../src/http/hosts.js';
import { provision, runSite, STAFF_TOKEN, waitFor, type Running } from './harness.js';
import { capturingLog } from './staff-helpers.js';

type Json = Record<string, unknown>;
interface Answer {
  status: number;
  body: Json;
  headers: Record<string, string | string[] | undefined>;
}

/**
 * A GET over a plain socket: fetch may not set Host, and a second client
 * address (127.0.0.2, loopback on Linux) stands for another machine.
 */
function get(baseUrl: string, path: string, headers: Record<string, string> = {}, localAddress?: string): Promise<Answer> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, path, method: 'GET', headers, ...(localAddress ? { localAddress } : {}) },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          let body: Json;
          try {
            body = JSON.parse(text) as Json;
          } catch {
            body = { text };
          }
          resolve({ status: res.statusCode ?? 0, body, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** Bytes as written, answer as read until the server closes (HTTP/1.0). */
function rawRequest(baseUrl: string, text: string): Promise<string> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    let out = '';
    const sock = connect({ host: u.hostname, port: Number(u.port) }, () => sock.end(text));
    sock.setEncoding('utf8');
    sock.on('data', (c: string) => (out += c));
    sock.on('end', () => resolve(out));
    sock.on('error', reject);
  });
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const METRICS_TOKEN = 'metrics-token-0123456789';

describe.each(mqttBackends())('gateway health, metrics and HTTP guards against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  const start = async (opts: Parameters<typeof runSite>[3] = {}) => {
    site = await runSite(broker.url, broker.url, broker.unique, opts);
    return site;
  };
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  describe('/healthz', () => {
    it('is 503 failing_closed NO_LEASE before the first heartbeat, 200 ok while fresh, 503 LEASE_EXPIRED when the lease runs out, as /staff/status says', async () => {
      const s = await start();
      const url = s.gw.httpUrl!;
      let h = await get(url, '/healthz');
      expect(h.status).toBe(503);
      expect(h.body).toMatchObject({
        status: 'failing_closed',
        reasons: ['NO_LEASE'],
        ok: false,
        failClosedReason: 'NO_LEASE',
        cloudConnected: true,
        siteConnected: true,
      });

      await provision(s);
      h = await get(url, '/healthz');
      expect(h.status).toBe(200);
      expect(h.body).toMatchObject({ status: 'ok', reasons: [], ok: true, failClosedReason: null, appliedSeq: 1 });

      s.f.clock.advance(300_000);
      h = await get(url, '/healthz');
      expect(h.status).toBe(503);
      expect(h.body).toMatchObject({
        status: 'failing_closed',
        reasons: ['LEASE_EXPIRED'],
        failClosedReason: 'LEASE_EXPIRED',
        leaseRemainingSeconds: 0,
      });
      const st = await get(url, '/staff/status', bearer(STAFF_TOKEN));
      expect(st.body).toMatchObject({ failClosed: true, failClosedReason: 'LEASE_EXPIRED' });

      // a new heartbeat renews the lease: healthy again
      await s.cloud.heartbeat();
      await waitFor(async () => (await get(url, '/healthz')).status === 200, 'healthy after a new heartbeat');
    });

    it('is 503 SEQ_CONFLICT when the cloud reuses an applied seq, even though the lease had time left', async () => {
      const s = await start();
      await provision(s);
      await s.cloud.revoke('key-1', 1, 1);
      await waitFor(() => s.gw.store.settings().seqConflictAt !== null, 'conflict detected');
      const h = await get(s.gw.httpUrl!, '/healthz');
      expect(h.status).toBe(503);
      expect(h.body).toMatchObject({ status: 'failing_closed', reasons: ['SEQ_CONFLICT'], failClosedReason: 'SEQ_CONFLICT' });
    });
  });

  describe('/metrics', () => {
    it('with a metrics token: 401 UNAUTHORIZED without it or with another one (the staff token included), 200 with it', async () => {
      const s = await start({ overrides: { metricsToken: METRICS_TOKEN } });
      const url = s.gw.httpUrl!;
      for (const headers of [{}, bearer('not-the-metrics-token-0'), bearer(STAFF_TOKEN), { authorization: METRICS_TOKEN }]) {
        const r = await get(url, '/metrics', headers);
        expect(r.status, JSON.stringify(headers)).toBe(401);
        expect(r.body).toEqual({ code: 'UNAUTHORIZED' });
        expect(r.headers['www-authenticate']).toBe('Bearer');
      }
      const ok = await get(url, '/metrics', bearer(METRICS_TOKEN));
      expect(ok.status).toBe(200);
      expect(ok.body.text).toContain('tobira_gateway_lease_remaining_seconds');
    });

    it('without a metrics token is never open: 503 METRICS_TOKEN_NOT_CONFIGURED, whatever token is sent', async () => {
      const s = await start();
      for (const headers of [{}, bearer(STAFF_TOKEN)]) {
        const r = await get(s.gw.httpUrl!, '/metrics', headers);
        expect(r.status).toBe(503);
        expect(r.body).toEqual({ code: 'METRICS_TOKEN_NOT_CONFIGURED' });
      }
    });
  });

  describe('the Host header (DNS rebinding)', () => {
    it('refuses a foreign name with 421 HOST_NOT_ALLOWED before auth, the right staff token notwithstanding; serves the listen address and localhost on the bound port', async () => {
      const cap = capturingLog();
      const s = await start({ deps: { log: cap.log } });
      const url = s.gw.httpUrl!;
      const port = new URL(url).port;
      for (const host of [
        'attacker.example',
        `attacker.example:${port}`,
        `127.0.0.1:${Number(port) + 1}`,
        `localhost.attacker.example:${port}`,
        `[::1]:${port}.attacker.example`,
      ]) {
        for (const path of ['/staff/status', '/healthz', '/metrics', '/ui/']) {
          const r = await get(url, path, { host, ...bearer(STAFF_TOKEN), 'x-correlation-id': 'cid-host-1' });
          expect(r.status, `${host} ${path}`).toBe(421);
          expect(r.body).toEqual({ code: 'HOST_NOT_ALLOWED' });
        }
      }
      // HTTP/1.0 may leave Host out: no name is no allowed name
      const raw = await rawRequest(url, `GET /staff/status HTTP/1.0\r\nAuthorization: Bearer ${STAFF_TOKEN}\r\n\r\n`);
      expect(raw).toMatch(/^HTTP\/1\.[01] 421 /);
      expect(raw).toContain('"code":"HOST_NOT_ALLOWED"');
      const line = cap.lines().find((l) => l.code === 'HOST_NOT_ALLOWED');
      expect(line).toMatchObject({ cid: 'cid-host-1', level: 40 });
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`]) {
        expect((await get(url, '/staff/status', { host, ...bearer(STAFF_TOKEN) })).status, host).toBe(200);
      }
    });

    it('with http.allowedHosts serves only those names (a bare name on any port), and no longer the defaults', async () => {
      const s = await start({
        overrides: { http: { host: '127.0.0.1', port: 0, allowedHosts: ['gateway.site.example', 'Door-Box:8443'] } },
      });
      const url = s.gw.httpUrl!;
      const port = new URL(url).port;
      expect((await get(url, '/staff/status', { host: `gateway.site.example:${port}`, ...bearer(STAFF_TOKEN) })).status).toBe(200);
      expect((await get(url, '/staff/status', { host: 'gateway.site.example', ...bearer(STAFF_TOKEN) })).status).toBe(200);
      expect((await get(url, '/staff/status', { host: 'door-box:8443', ...bearer(STAFF_TOKEN) })).status).toBe(200);
      expect((await get(url, '/staff/status', { host: `door-box:${port}`, ...bearer(STAFF_TOKEN) })).status).toBe(421);
      expect((await get(url, '/staff/status', { host: `localhost:${port}`, ...bearer(STAFF_TOKEN) })).status).toBe(421);
    });
  });

  describe('a flood of wrong staff tokens', () => {
    it('gets 429 AUTH_RATE_LIMITED from that address after http.authFailures.max failures, the right token included, until the window ends; another address is unaffected', async () => {
      const cap = capturingLog();
      const s = await start({
        overrides: { http: { host: '127.0.0.1', port: 0, authFailures: { max: 5, windowSeconds: 60 } } },
        deps: { log: cap.log },
      });
      const url = s.gw.httpUrl!;
      // no token at all guesses nothing: answered 401, not counted (the staff UI probes like this on every page load)
      for (let i = 0; i < 8; i++) expect((await get(url, '/staff/status')).status).toBe(401);
      const codes: number[] = [];
      for (let i = 0; i < 8; i++) codes.push((await get(url, '/staff/status', bearer(`wrong-token-${i}-0123456789`))).status);
      expect(codes).toEqual([401, 401, 401, 401, 401, 429, 429, 429]);

      // blocked means blocked: the right token from this address would otherwise tell the guesser it was right
      const right = await get(url, '/staff/status', { ...bearer(STAFF_TOKEN), 'x-correlation-id': 'cid-flood-1' });
      expect(right.status).toBe(429);
      expect(right.body).toEqual({ code: 'AUTH_RATE_LIMITED' });
      expect(Number(right.headers['retry-after'])).toBeGreaterThan(0);
      expect(cap.lines().find((l) => l.cid === 'cid-flood-1' && l.code === 'AUTH_RATE_LIMITED')).toMatchObject({ level: 40 });
      // the limit counts token checks only: health needs none
      expect((await get(url, '/healthz')).status).toBe(503);

      // staff at another address sign in as usual
      expect((await get(url, '/staff/status', bearer(STAFF_TOKEN), '127.0.0.2')).status).toBe(200);
      expect((await get(url, '/staff/status', bearer('wrong-token-x-0123456789'), '127.0.0.2')).status).toBe(401);

      // the window ends: the address may try again
      s.f.clock.advance(60_000);
      expect((await get(url, '/staff/status', bearer(STAFF_TOKEN))).status).toBe(200);
      expect((await get(url, '/staff/status', bearer('wrong-token-y-0123456789'))).status).toBe(401);
    });

    it('wrong metrics tokens count against the same limit', async () => {
      const s = await start({
        overrides: { metricsToken: METRICS_TOKEN, http: { host: '127.0.0.1', port: 0, authFailures: { max: 3, windowSeconds: 60 } } },
      });
      const url = s.gw.httpUrl!;
      for (let i = 0; i < 3; i++) expect((await get(url, '/metrics', bearer(`guess-${i}-0123456789012`))).status).toBe(401);
      expect((await get(url, '/metrics', bearer(METRICS_TOKEN))).status).toBe(429);
      expect((await get(url, '/staff/status', bearer(STAFF_TOKEN))).status).toBe(429);
    });
  });
});

/** The cloud broker goes away (an embedded one, since stopping it is the point); the site broker is each backend in turn. */
describe.each(mqttBackends())('/healthz when a broker link is down (site broker: %s)', (backend) => {
  let siteBroker: MqttTestBroker;
  let cloudBroker: EmbeddedBroker | null = null;
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    await cloudBroker?.stop().catch(() => {});
    await siteBroker.stop();
  });

  it('is 503 degraded CLOUD_LINK_DOWN while the lease is still fresh, then failing_closed with both reasons once it runs out', async () => {
    siteBroker = await startMqttBackend(backend);
    cloudBroker = await startEmbeddedBroker();
    const s = await runSite(cloudBroker.url, siteBroker.url, siteBroker.unique);
    cleanups.push(() => s.close());
    await provision(s);
    const { f, cloud, gw } = s;
    expect((await get(gw.httpUrl!, '/healthz')).status).toBe(200);

    await cloud.close();
    await cloudBroker.stop();
    cloudBroker = null;
    await waitFor(() => !gw.cloudConnected, 'cloud link down');
    let h = await get(gw.httpUrl!, '/healthz');
    expect(h.status).toBe(503);
    expect(h.body).toMatchObject({
      status: 'degraded',
      reasons: ['CLOUD_LINK_DOWN'],
      cloudConnected: false,
      siteConnected: true,
      failClosedReason: null,
    });

    f.clock.advance(300_000);
    h = await get(gw.httpUrl!, '/healthz');
    expect(h.status).toBe(503);
    expect(h.body).toMatchObject({ status: 'failing_closed', reasons: ['LEASE_EXPIRED', 'CLOUD_LINK_DOWN'] });
  });

  it('is 503 SITE_LINK_DOWN when the site broker is gone', async () => {
    // here the site broker is the embedded one that is stopped; the cloud broker is the backend
    siteBroker = await startMqttBackend(backend);
    cloudBroker = await startEmbeddedBroker();
    const s = await runSite(siteBroker.url, cloudBroker.url, siteBroker.unique);
    cleanups.push(() => s.close());
    await provision(s);
    const { gw } = s;

    await cloudBroker.stop();
    cloudBroker = null;
    await waitFor(() => !gw.siteConnected, 'site link down');
    const h = await get(gw.httpUrl!, '/healthz');
    expect(h.status).toBe(503);
    expect(h.body).toMatchObject({ status: 'degraded', reasons: ['SITE_LINK_DOWN'], cloudConnected: true, siteConnected: false });
  });
});

describe('the Host rules', () => {
  const rules = defaultHostRules('127.0.0.1', 8080);
  it.each([
    ['127.0.0.1:8080', true],
    ['localhost:8080', true],
    ['LocalHost:8080', true],
    ['[::1]:8080', true],
    ['localhost', false], // port 80 by default, not the bound one
    ['localhost:8081', false],
    ['localhost:99999', false],
    ['localhost:8080:8080', false],
    ['localhost.:8080', false],
    ['user@localhost:8080', false],
    ['[::1]x:8080', false],
    ['', false],
  ])('%s → %s', (host, ok) => {
    expect(hostAllowed(rules, host)).toBe(ok);
  });

  it('refuse a request with no Host at all', () => {
    expect(hostAllowed(rules, undefined)).toBe(false);
  });
});

describe('the wrong-token counter', () => {
  it('holds at most maxClients addresses, dropping expired windows first, then the oldest', () => {
    let now = 0;
    const l = new AuthFailureLimiter({ max: 2, windowMs: 1000, maxClients: 3 }, () => now);
    l.failed('a');
    now = 10;
    l.failed('b');
    l.failed('b');
    l.failed('c');
    l.failed('c');
    expect([l.blockedFor('b'), l.blockedFor('c')]).toEqual([1000, 1000]);
    // a's window is over: a new address takes its place, b and c stay blocked
    now = 1005;
    l.failed('d');
    expect(l.size).toBe(3);
    expect([l.blockedFor('b'), l.blockedFor('c')]).toEqual([5, 5]);
    // a flood of new addresses: the counter never grows past 3, the oldest windows go
    for (let i = 0; i < 1000; i++) l.failed(`x${i}`);
    expect(l.size).toBe(3);
    expect([l.blockedFor('b'), l.blockedFor('c')]).toEqual([0, 0]);
  });

  it('ends a window after windowMs, and when the clock is set back before it began', () => {
    let now = 5000;
    const l = new AuthFailureLimiter({ max: 1, windowMs: 1000 }, () => now);
    l.failed('a');
    expect(l.blockedFor('a')).toBe(1000);
    now = 5999;
    expect(l.blockedFor('a')).toBe(1);
    now = 6000;
    expect(l.blockedFor('a')).toBe(0);
    l.failed('a');
    now = 100;
    expect(l.blockedFor('a')).toBe(0);
  });
});
