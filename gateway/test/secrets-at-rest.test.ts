import { X509Certificate } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import Database from 'better-sqlite3';
import { generateSync } from 'otplib';
import { BrokerUrlError, connectMqtt, siteTlsOptions, startEmbeddedBroker, type EmbeddedBroker } from '@tobira/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileModeError, enforceModes } from '../src/adapters/file-modes.js';
import { PKI_FILES, RENEW_BEFORE_DAYS, SERVER_VALIDITY_DAYS, ensureSitePki } from '../src/adapters/tls/site-pki.js';
import { parseConfig } from '../src/config.js';
import { createGateway, type Gateway } from '../src/gateway.js';
import { siteFixture, silentLog, waitFor } from './harness.js';
import { capturingLog } from './staff-helpers.js';

const mode = (p: string) => statSync(p).mode & 0o777;
const DAY = 86_400_000;

/**
 * No secret readable on disk: a gateway started on a data folder left readable by
 * everyone (a 0644 database with its -wal/-shm, a 0644 key pair file and
 * config, a 0755 folder) tightens every one of them, says which, and keeps
 * its site PKI keys 0600.
 */
describe('secrets at rest', () => {
  let broker: EmbeddedBroker;
  beforeAll(async () => {
    broker = await startEmbeddedBroker();
  });
  afterAll(async () => {
    await broker?.stop();
  });

  it('tightens a pre-existing 0644 database, its -wal/-shm, the key and the config to 0600 and the folder to 0700, naming each in a warning', async () => {
    const f = await siteFixture(broker.url, broker.url, 'modes');
    // a database made by an older release with the default umask, still open in WAL mode elsewhere (so -wal and -shm exist)
    const old = new Database(f.config.sqlitePath);
    old.pragma('journal_mode = WAL');
    old.exec('CREATE TABLE IF NOT EXISTS t (x INTEGER) STRICT; INSERT INTO t VALUES (1)');
    const files = ['', '-wal', '-shm'].map((x) => f.config.sqlitePath + x);
    for (const p of [...files, f.config.keyPairFile, f.configFile]) chmodSync(p, 0o644);
    chmodSync(f.dir, 0o755);
    const cap = capturingLog();
    const gw = createGateway(f.config, { clock: f.clock, log: cap.log, configFile: f.configFile, tickMs: 50 });
    try {
      await gw.start();
      expect(mode(f.dir)).toBe(0o700);
      for (const p of [...files, f.config.keyPairFile, f.configFile]) expect(mode(p), p).toBe(0o600);
      for (const k of Object.values(PKI_FILES)) expect(mode(`${f.dir}/tls/${k}`), k).toBe(0o600);
      expect(mode(`${f.dir}/tls`)).toBe(0o700);
      const warned = cap
        .lines()
        .filter((l) => l.code === 'GATEWAY_FILE_MODE')
        .map((l) => l.file);
      expect(warned).toEqual(expect.arrayContaining([f.dir, ...files, f.config.keyPairFile, f.configFile]));
    } finally {
      old.close();
      await gw.stop({ force: true });
      rmSync(f.dir, { recursive: true, force: true });
    }
  });

  it("keeps a supervisor's TOTP secret and recovery codes out of the database file: sealed under the config's pepper, hashed", async () => {
    const f = await siteFixture(broker.url, broker.url, 'totp-at-rest');
    const gw = createGateway(f.config, { clock: f.clock, log: silentLog(), configFile: f.configFile, tickMs: 50 });
    try {
      await gw.start();
      const post = async (path: string, body: unknown, session?: { cookie: string; csrf: string }) => {
        const r = await fetch(`${gw.httpUrl!}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(session ? { cookie: session.cookie, 'x-csrf-token': session.csrf } : {}) },
          body: JSON.stringify(body),
        });
        return {
          status: r.status,
          json: (await r.json()) as Record<string, unknown>,
          cookie: (r.headers.get('set-cookie') ?? '').split(';')[0]!,
        };
      };
      const setup = await post('/staff/setup', {
        code: gw.setupCode!.code,
        username: 'aiko',
        displayName: 'Aiko',
        password: 'a long enough password 1',
      });
      expect(setup.status).toBe(200);
      const session = { cookie: setup.cookie, csrf: String(setup.json.csrfToken) };
      const start = await post('/staff/totp/enrolment', { currentPassword: 'a long enough password 1' }, session);
      expect(start.status).toBe(200);
      const secret = String(start.json.secret);
      const code = generateSync({ secret, epoch: Math.floor(f.clock.now() / 1000) });
      const done = await post('/staff/totp/enrolment/confirm', { code }, session);
      expect(done.status).toBe(200);
      const recoveryCodes = done.json.recoveryCodes as string[];
      expect(recoveryCodes).toHaveLength(10);
      await gw.stop({ force: true });

      const files = ['', '-wal'].map((x) => f.config.sqlitePath + x).filter((p) => existsSync(p));
      const bytes = files.map((p) => readFileSync(p).toString('latin1')).join('');
      expect(bytes).toContain('v1.'); // the sealed box is there
      expect(bytes).not.toContain(secret);
      for (const c of recoveryCodes) {
        expect(bytes).not.toContain(c);
        expect(bytes).not.toContain(c.replace('-', ''));
      }
      expect(readFileSync(f.configFile, 'utf8')).toContain(f.config.credentialPepper);
      expect(bytes).not.toContain(f.config.credentialPepper);
    } finally {
      await gw.stop({ force: true });
      rmSync(f.dir, { recursive: true, force: true });
    }
  });

  it('refuses with GATEWAY_FILE_MODE, naming the file, when a mode cannot be tightened', async () => {
    const f = await siteFixture(broker.url, broker.url, 'modes-refused');
    try {
      chmodSync(f.config.keyPairFile, 0o644);
      const notOwner = () => {
        throw Object.assign(new Error('EPERM: operation not permitted'), { code: 'EPERM' });
      };
      let err: unknown;
      try {
        enforceModes([{ path: f.config.keyPairFile, mode: 0o600 }], silentLog(), notOwner);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(FileModeError);
      expect(err).toMatchObject({ code: 'GATEWAY_FILE_MODE', file: f.config.keyPairFile });
      expect(mode(f.config.keyPairFile)).toBe(0o644);
    } finally {
      rmSync(f.dir, { recursive: true, force: true });
    }
  });
});

describe('site certificates', () => {
  it('renews a server certificate close to expiry, keeps the CA (the locks pin it), and leaves a fresh one alone', async () => {
    const f = await siteFixture('mqtt://127.0.0.1:1', 'mqtt://127.0.0.1:1', 'renew');
    try {
      const dir = `${f.dir}/tls`;
      const t0 = Date.now();
      const first = await ensureSitePki({ dir, names: [], now: t0, log: silentLog() });
      expect(first.made).toEqual(['ca', 'broker', 'https']);
      const same = await ensureSitePki({ dir, names: [], now: t0 + DAY, log: silentLog() });
      expect(same.made).toEqual([]);
      const later = t0 + (SERVER_VALIDITY_DAYS - RENEW_BEFORE_DAYS + 1) * DAY;
      const renewed = await ensureSitePki({ dir, names: [], now: later, log: silentLog() });
      expect(renewed.made).toEqual(['broker', 'https']);
      expect(renewed.pki.ca.fingerprint).toBe(first.pki.ca.fingerprint);
      expect(new X509Certificate(renewed.pki.broker.certPem).checkIssued(new X509Certificate(first.pki.ca.certPem))).toBe(true);
      expect(renewed.pki.broker.notAfter).toBeGreaterThan(first.pki.broker.notAfter);
      // a new LAN name is a new certificate at once
      const named = await ensureSitePki({ dir, names: ['gw.site.example'], now: later, log: silentLog() });
      expect(named.made).toEqual(['broker', 'https']);
      expect(new X509Certificate(named.pki.https.certPem).subjectAltName).toContain('DNS:gw.site.example');
    } finally {
      rmSync(f.dir, { recursive: true, force: true });
    }
  });
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  fingerprint: string | null;
}

function getHttps(port: number, path: string, ca: string, body?: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        path,
        method: body === undefined ? 'GET' : 'POST',
        ca,
        headers: { host: `127.0.0.1:${port}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      },
      (res) => {
        const fp = (res.socket as TLSSocket).getPeerCertificate().fingerprint256 ?? null;
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, fingerprint: fp }));
      },
    );
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** A plain-HTTP request: the status, or 'refused' when the server answered no HTTP at all. */
function getHttp(port: number, path: string): Promise<number | 'refused'> {
  return new Promise((resolve) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { host: `127.0.0.1:${port}` } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve('refused'));
    req.end();
  });
}

describe('the staff UI on a LAN address', () => {
  let broker: EmbeddedBroker;
  let gw: Gateway;
  let dir: string;
  let caPem: string;
  let port: number;
  const cap = capturingLog();

  beforeAll(async () => {
    broker = await startEmbeddedBroker();
    const f = await siteFixture(broker.url, broker.url, 'https', { http: { host: '0.0.0.0', port: 0, allowedHosts: ['127.0.0.1'] } });
    dir = f.dir;
    gw = createGateway(f.config, { clock: f.clock, log: cap.log, tickMs: 50 });
    await gw.start();
    await waitFor(() => gw.siteConnected, 'site link');
    caPem = readFileSync(`${f.dir}/tls/${PKI_FILES.caCert}`, 'utf8');
    port = Number(new URL(gw.httpUrl as string).port);
  });
  afterAll(async () => {
    await gw?.stop({ force: true });
    await broker?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('speaks HTTPS with the certificate whose fingerprint the start logged, with HSTS', async () => {
    expect(gw.httpUrl).toMatch(/^https:\/\//);
    const r = await getHttps(port, '/ui/', caPem);
    expect(r.status).toBe(200);
    expect(r.headers['strict-transport-security']).toBe('max-age=31536000');
    const logged = cap.lines().find((l) => l.msg?.toString().startsWith('site TLS'));
    expect(r.fingerprint).toBe(logged?.httpsFingerprint);
    expect(r.fingerprint).toBe(gw.sitePki?.https.fingerprint);
  });

  it('gives plain HTTP on that port no answer', async () => {
    expect(await getHttp(port, '/healthz')).toBe('refused');
  });

  it('sets the session cookie Secure (and __Host-)', async () => {
    const code = gw.setupCode?.code as string;
    const r = await getHttps(port, '/staff/setup', caPem, {
      code,
      username: 'sup',
      displayName: 'Sup',
      password: 'a long enough password 1',
    });
    expect(r.status).toBe(200);
    const cookies = ([] as string[]).concat(r.headers['set-cookie'] ?? []);
    expect(cookies.length).toBeGreaterThan(0);
    for (const c of cookies) expect(c).toMatch(/; Secure/i);
    expect(cookies.some((c) => c.startsWith('__Host-tobira_staff='))).toBe(true);
  });

  it('a config that turns TLS off on a LAN address is refused', () => {
    const input = { http: { host: '0.0.0.0', port: 8443, tls: false } };
    expect(() => parseConfig({ ...baseInput(), ...input })).toThrow(/HTTP_PLAINTEXT_NOT_LOOPBACK/);
    expect(() => parseConfig({ ...baseInput(), http: { host: '127.0.0.1', port: 8080, tls: false } })).not.toThrow();
  });

  it('a broker URL is read as the MQTT client reads it: plain MQTT off loopback is refused for the site and the cloud, and a URL parsers disagree on is refused outright', () => {
    const site = (url: string) => () => parseConfig({ ...baseInput(), site: { url } });
    const cloud = (url: string) => () => parseConfig({ ...baseInput(), cloud: { ...baseInput().cloud, url } });
    expect(site('mqtt://127.0.0.1:1885')).not.toThrow();
    expect(site('mqtt://10.0.0.2:1883')).toThrow(/SITE_PLAINTEXT_NOT_LOOPBACK/);
    // `new URL` reads 127.0.0.1 (loopback), mqtt.js's url.parse a LAN host: the login would cross the LAN in clear
    expect(site('mqtt://192.0.2.2:18830\\@127.0.0.1:1885')).toThrow(/BROKER_URL_AMBIGUOUS/);
    expect(site('mqtts://user:secret@10.0.0.2:8883')).toThrow(/BROKER_URL_AMBIGUOUS/);
    expect(cloud('mqtt://127.0.0.1:1884')).not.toThrow();
    expect(cloud('mqtt://cloud.example.com:1883')).toThrow(/CLOUD_PLAINTEXT_NOT_LOOPBACK/);
    expect(cloud('mqtt://cloud.example.com:1883\\@localhost:1884')).toThrow(/BROKER_URL_AMBIGUOUS/);
  });

  it('connectMqtt refuses a URL its client would read as another host than the checks did, before any connection', () => {
    expect(() => connectMqtt('mqtt://192.0.2.2:18830\\@127.0.0.1:1885')).toThrow(BrokerUrlError);
    expect(() => siteTlsOptions('mqtt://192.0.2.2:18830\\@127.0.0.1:1885', {})).toThrow(/no userinfo/);
  });
});

function baseInput() {
  return {
    gatewayId: 'gw-x',
    keyPairFile: 'k.json',
    cloud: { url: 'mqtts://cloud:8883', jwks: { keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'x', kid: 'k' }] } },
    site: { url: 'mqtts://10.0.0.2:8883' },
    sqlitePath: 'gw.sqlite',
    credentialPepper: Buffer.alloc(32, 1).toString('base64url'),
  };
}
