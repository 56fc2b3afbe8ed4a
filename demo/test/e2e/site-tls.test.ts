import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  DEFAULT_MAX_PACKET_SIZE,
  connectMqtt,
  gatewaySiteClientId,
  lockClientId,
  siteBrokerPassword,
  startEmbeddedBroker,
  topics,
  waitConnected,
  type EmbeddedBroker,
} from '@tobira/shared';
import { SimLock } from '@tobira/firmware-sim';
import type { IClientOptions } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PKI_FILES, createGateway, ensureSitePki, parseConfig, siteBrokerHooks, type Gateway, type SitePki } from '@tobira/gateway';
import { startSiteBroker, type SiteBroker } from './site-broker.js';
import { FakeCloud, PIN, provision, siteFixture, silentLog, waitFor, type SiteFixture } from '../../../gateway/test/harness.js';

/**
 * No secret in clear on the site LAN, attacked from outside: the site broker speaks
 * TLS with a certificate of the site CA the gateway made, a client that does
 * not trust that CA (none, or another site's) gets no MQTT session, plaintext
 * is not answered on the TLS port and is refused off loopback, and a capture
 * of a whole door decision (tshark on the broker's port) holds no PIN, card
 * value or password, while the same capture on a loopback plaintext listener
 * does (so the test can fail).
 */

const GW_SITE_LOGIN = { username: 'gw.site', password: 'the-gateway-site-password-7Qx' };
const CARD = 'CARD-04A1B2C3D4E5F6';

/** CONNACK code, or 'refused' when the connection failed before any (TLS refused, closed). */
function connack(url: string, o: IClientOptions): Promise<number | 'refused'> {
  const c = connectMqtt(url, { ...o, reconnectPeriod: 0, connectTimeout: 3000 });
  return new Promise((resolve) => {
    const done = (v: number | 'refused') => {
      c.end(true);
      resolve(v);
    };
    c.once('connect', () => done(0));
    c.once('error', (e: Error & { code?: unknown }) => done(typeof e.code === 'number' ? e.code : 'refused'));
    c.once('close', () => done('refused'));
  });
}

describe('site TLS on the embedded site broker', () => {
  let dir: string;
  let pki: SitePki;
  let other: SitePki;
  let broker: EmbeddedBroker;
  const gatewayId = 'gw-tls';
  const secret = new Uint8Array(32).fill(7);
  const lockLogin = { username: 'L1', password: siteBrokerPassword(secret, gatewayId, 'L1'), clientId: lockClientId(gatewayId, 'L1') };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-site-tls-'));
    pki = (await ensureSitePki({ dir: join(dir, 'a'), names: [], now: Date.now(), log: silentLog() })).pki;
    other = (await ensureSitePki({ dir: join(dir, 'b'), names: [], now: Date.now(), log: silentLog() })).pki;
    const hooks = siteBrokerHooks(
      { gatewayId, locks: [{ lockId: 'L1', pairingSecret: Buffer.from(secret).toString('base64url') }], site: GW_SITE_LOGIN },
      silentLog(),
    );
    broker = await startEmbeddedBroker({ tls: { key: pki.broker.keyPem, cert: pki.broker.certPem }, aedes: hooks });
  });
  afterAll(async () => {
    await broker?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('made the CA and both server certificates with keys readable by the owner only, in a folder only the owner opens', () => {
    expect(statSync(pki.dir).mode & 0o777).toBe(0o700);
    for (const f of Object.values(PKI_FILES)) expect(statSync(join(pki.dir, f)).mode & 0o777, f).toBe(0o600);
    expect(pki.broker.certPem).not.toBe(pki.https.certPem);
    expect(pki.ca.fingerprint).toMatch(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
  });

  it('lets in a lock that trusts the site CA, with its login', async () => {
    expect(broker.url).toMatch(/^mqtts:\/\/127\.0\.0\.1:/);
    expect(await connack(broker.url, { ...lockLogin, ca: pki.ca.certPem, rejectUnauthorized: true })).toBe(0);
  });

  it('refuses a client without the site CA, and one that pins another CA, before any login is sent', async () => {
    expect(await connack(broker.url, { ...lockLogin, rejectUnauthorized: true })).toBe('refused');
    expect(await connack(broker.url, { ...lockLogin, ca: other.ca.certPem, rejectUnauthorized: true })).toBe('refused');
  });

  it('does not answer plaintext MQTT on the TLS port', async () => {
    expect(await connack(`mqtt://127.0.0.1:${broker.port}`, lockLogin)).toBe('refused');
  });

  it('refuses a plaintext listener on any address but loopback, and takes a TLS one there', async () => {
    await expect(startEmbeddedBroker({ host: '0.0.0.0' })).rejects.toMatchObject({ code: 'PLAINTEXT_NOT_LOOPBACK' });
    await expect(startEmbeddedBroker({ host: '::' })).rejects.toMatchObject({ code: 'PLAINTEXT_NOT_LOOPBACK' });
    const lan = await startEmbeddedBroker({ host: '0.0.0.0', tls: { key: pki.broker.keyPem, cert: pki.broker.certPem } });
    try {
      expect(lan.url.startsWith('mqtts://')).toBe(true);
      expect(await connack(`mqtts://127.0.0.1:${lan.port}`, { ca: pki.ca.certPem, rejectUnauthorized: true })).toBe(0);
    } finally {
      await lan.stop();
    }
  });

  it('closes a connection whose packet is over the size limit before it is buffered', async () => {
    const c = connectMqtt(broker.url, { ...lockLogin, ca: pki.ca.certPem, rejectUnauthorized: true, reconnectPeriod: 0 });
    c.on('error', () => {});
    await waitConnected(c);
    const closed = new Promise<void>((r) => c.once('close', () => r()));
    c.publish(topics.lock(gatewayId, 'L1', 'event'), Buffer.alloc(DEFAULT_MAX_PACKET_SIZE + 1, 0x61), { qos: 0 });
    await closed;
    c.end(true);
  });

  it('a lock refuses a CA file that is not the one pinned at pairing, and plaintext to a LAN address, before connecting', async () => {
    const wrongPin = new SimLock({
      url: broker.url,
      gatewayId,
      lockId: 'L1',
      secret,
      siteLogin: true,
      siteCa: { caPem: other.ca.certPem, pin: pki.ca.fingerprint },
      timers: 'manual',
    });
    await expect(wrongPin.start()).rejects.toMatchObject({ code: 'SITE_CA_PIN_MISMATCH' });
    const plain = new SimLock({ url: 'mqtt://192.0.2.10:1883', gatewayId, lockId: 'L1', secret, siteLogin: true, timers: 'manual' });
    await expect(plain.start()).rejects.toMatchObject({ code: 'SITE_PLAINTEXT_NOT_LOOPBACK' });
  });

  it('a gateway config naming a plaintext site broker off loopback is refused', () => {
    const base = {
      gatewayId,
      keyPairFile: 'k.json',
      cloud: { url: 'mqtts://cloud:8883', jwks: { keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'x', kid: 'k' }] } },
      sqlitePath: 'gw.sqlite',
      credentialPepper: Buffer.alloc(32, 1).toString('base64url'),
    };
    expect(() => parseConfig({ ...base, site: { url: 'mqtt://192.168.1.5:1883' } })).toThrow(/SITE_PLAINTEXT_NOT_LOOPBACK/);
    expect(() => parseConfig({ ...base, site: { url: 'mqtts://192.168.1.5:8883' } })).not.toThrow();
    expect(() => parseConfig({ ...base, site: { url: 'mqtt://127.0.0.1:1883' } })).not.toThrow();
  });
});

// ---------------------------------------------------------------- the capture

function tsharkOnPath(): boolean {
  return spawnSync('sh', ['-c', 'command -v tshark'], { stdio: 'ignore' }).status === 0;
}

/**
 * tshark on loopback for one TCP port, writing `file`. "Capturing on" is
 * printed before packets are taken, so it resolves only once tshark has shown
 * (-P, line-buffered) a probe connection to that port: nothing after is lost.
 */
async function startCapture(port: number, file: string): Promise<{ stop(): Promise<Buffer> }> {
  const child: ChildProcess = spawn('tshark', ['-i', 'lo', '-f', `tcp port ${port}`, '-w', file, '-P', '-l', '-q'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  let seen = 0;
  child.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
  child.stdout?.on('data', (b: Buffer) => (seen += b.toString().split('\n').length - 1));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`tshark exited (${child.exitCode}): ${stderr}`);
      const probe = netConnect(port, '127.0.0.1');
      probe.on('error', () => {});
      await new Promise((r) => setTimeout(r, 100));
      probe.destroy();
      return seen > 0 ? true : undefined;
    },
    'tshark capturing',
    30_000,
  );
  return {
    async stop() {
      // tshark prints a line per packet it took (-P): on a busy machine it lags behind the traffic, so it is
      // stopped only once that count has stood still for a moment, and nothing the session sent is cut off
      const deadline = Date.now() + 10_000;
      let last = -1;
      let since = Date.now();
      while (Date.now() < deadline && child.exitCode === null) {
        if (seen !== last) [last, since] = [seen, Date.now()];
        else if (Date.now() - since >= 500) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      child.kill('SIGINT');
      const code = await exited;
      if (code !== 0) throw new Error(`tshark exited ${code}: ${stderr}`);
      return readFileSync(file);
    },
  };
}

describe('a capture of the site LAN during door decisions', () => {
  let f: SiteFixture;
  let cloudBroker: EmbeddedBroker;
  let cloud: FakeCloud;
  let gw: Gateway;
  let pki: SitePki;
  let tlsBroker: EmbeddedBroker;
  let plainBroker: EmbeddedBroker;
  const lockPassword = () => siteBrokerPassword(f.lockSecret, f.gatewayId, 'lock-1');

  beforeAll(async () => {
    // no silent skip: a machine without tshark fails here and says how to get it
    if (!tsharkOnPath()) throw new Error('tshark is missing: run `npm run pretest` (it installs Debian tshark) or apt-get install tshark');
    cloudBroker = await startEmbeddedBroker();
    f = await siteFixture(cloudBroker.url, 'mqtts://127.0.0.1:1', 'tls', { site: { url: 'mqtts://127.0.0.1:1', ...GW_SITE_LOGIN } });
    // the PKI the gateway will load: made first, so the site broker can serve its certificate
    pki = (await ensureSitePki({ dir: join(f.dir, 'tls'), names: [], now: Date.now(), log: silentLog() })).pki;
    const hooks = () => siteBrokerHooks({ ...f.config, site: GW_SITE_LOGIN }, silentLog());
    tlsBroker = await startEmbeddedBroker({ tls: { key: pki.broker.keyPem, cert: pki.broker.certPem }, aedes: hooks() });
    plainBroker = await startEmbeddedBroker({ aedes: hooks() });
    const config = parseConfig({ ...f.configInput, site: { url: tlsBroker.url, ...GW_SITE_LOGIN } });
    cloud = new FakeCloud(f);
    await cloud.connect(cloudBroker.url);
    gw = createGateway(config, { clock: f.clock, log: silentLog(), tickMs: 50 });
    await gw.start();
    await waitFor(() => gw.cloudConnected && gw.siteConnected, 'gateway connected');
    await provision({ f, gw, cloud, lock: null as never, close: async () => {} });
  });
  afterAll(async () => {
    await gw?.stop({ force: true });
    await cloud?.close();
    await tlsBroker?.stop();
    await plainBroker?.stop();
    await cloudBroker?.stop();
    if (f !== undefined) rmSync(f.dir, { recursive: true, force: true });
  });

  /** A real lock (firmware-sim) logs in, presents the PIN and a card, and disconnects, all inside one capture of `port`. */
  async function captured(url: string, port: number, siteCa: { caPem: string; pin: string } | undefined): Promise<Buffer> {
    const cap = await startCapture(port, join(f.dir, `site-${port}.pcapng`));
    const lock = new SimLock({
      url,
      gatewayId: f.gatewayId,
      lockId: 'lock-1',
      secret: f.lockSecret,
      siteLogin: true,
      ...(siteCa && { siteCa }),
      // the gateway runs on the fixture's clock: a lock on real time would be days ahead of it (LOCK_CLOCK_AHEAD)
      clock: f.clock,
    });
    try {
      await lock.start();
      const allowed = await lock.present({ type: 'pin', value: PIN }, { timeoutMs: 10_000 });
      expect(allowed).toMatchObject({ status: 'decided', decision: { allowed: true } });
      const card = await lock.present({ type: 'card', value: CARD }, { timeoutMs: 10_000 });
      expect(card).toMatchObject({ status: 'decided', decision: { allowed: false } });
    } finally {
      await lock.stop();
    }
    return cap.stop();
  }

  it('holds none of the PIN, the card value, the lock password or the gateway password on the TLS port', async () => {
    const bytes = await captured(tlsBroker.url, tlsBroker.port, { caPem: pki.ca.certPem, pin: pki.ca.fingerprint });
    // the session went through this port (the decisions above came back over it): the capture is not empty
    expect(bytes.length).toBeGreaterThan(4096);
    for (const secret of [PIN, CARD, lockPassword(), GW_SITE_LOGIN.password]) expect(bytes.includes(secret), secret).toBe(false);
  });

  it('holds them on a loopback plaintext listener (the control: the search finds what is there)', async () => {
    // the gateway is on the TLS broker: the lock's request reaches nobody here, so only what the lock sends is in clear
    const lock = new SimLock({ url: plainBroker.url, gatewayId: f.gatewayId, lockId: 'lock-1', secret: f.lockSecret, siteLogin: true });
    const cap = await startCapture(plainBroker.port, join(f.dir, 'plain.pcapng'));
    try {
      await lock.start();
      const c = connectMqtt(plainBroker.url, { ...GW_SITE_LOGIN, clientId: gatewaySiteClientId(f.gatewayId), reconnectPeriod: 0 });
      await waitConnected(c);
      await c.endAsync(true);
      await lock.present({ type: 'pin', value: PIN }, { timeoutMs: 300 }).catch(() => null);
      await lock.present({ type: 'card', value: CARD }, { timeoutMs: 300 }).catch(() => null);
    } finally {
      await lock.stop();
    }
    const bytes = await cap.stop();
    for (const secret of [PIN, CARD, lockPassword(), GW_SITE_LOGIN.password]) expect(bytes.includes(secret), secret).toBe(true);
  });
});

/** Every `listener` of a Mosquitto config with what follows it up to the next one. */
function listeners(conf: string): { line: string; tls: boolean; usernameIsClientId: boolean }[] {
  const out: { line: string; tls: boolean; usernameIsClientId: boolean }[] = [];
  for (const l of conf.split('\n').map((x) => x.trim())) {
    const last = out[out.length - 1];
    if (l.startsWith('listener ')) out.push({ line: l, tls: false, usernameIsClientId: false });
    else if (/^(certfile|keyfile) /.test(l) && last !== undefined) last.tls = true;
    else if (l === 'use_username_as_clientid true' && last !== undefined) last.usernameIsClientId = true;
  }
  return out;
}

describe('the shipped site Mosquitto configs', () => {
  const ROOT = new URL('../../../', import.meta.url);
  const shipped = ['gateway/deploy/mosquitto-site.conf', 'deploy/mosquitto/site.conf'];

  it.each(shipped)('%s: plaintext only on loopback, TLS on the LAN listener, a packet size limit', (file) => {
    const conf = readFileSync(new URL(file, ROOT), 'utf8');
    const ls = listeners(conf);
    expect(ls.filter((l) => l.tls)).toHaveLength(1);
    for (const l of ls.filter((x) => !x.tls)) expect(l.line, l.line).toMatch(/^listener \d+ (127\.0\.0\.1|::1)$/);
    // a listener's own setting in Mosquitto 2: without it on a listener, a lock could take another's session there
    for (const l of ls) expect(l.usernameIsClientId, l.line).toBe(true);
    const withTuning = file.startsWith('deploy/')
      ? conf + readFileSync(new URL('deploy/mosquitto/conf.d/tuning.conf', ROOT), 'utf8')
      : conf;
    expect(withTuning).toMatch(/^max_packet_size 131072$/m);
    expect(conf).not.toMatch(/^user root$/m);
  });
});

describe('a Mosquitto started from the shipped site config, as its own user', () => {
  let broker: SiteBroker;
  let other: SitePki;
  let dir: string;
  const gatewayId = 'gw-mtls';
  const secret = new Uint8Array(32).fill(9);
  const login = { username: 'L1', password: siteBrokerPassword(secret, gatewayId, 'L1'), clientId: lockClientId(gatewayId, 'L1') };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-mosq-tls-'));
    other = (await ensureSitePki({ dir: join(dir, 'other'), names: [], now: Date.now(), log: silentLog() })).pki;
    broker = await startSiteBroker(
      'mosquitto',
      { gatewayId, locks: [{ lockId: 'L1', pairingSecret: Buffer.from(secret).toString('base64url') }], site: GW_SITE_LOGIN },
      silentLog(),
    );
  });
  afterAll(async () => {
    await broker?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads the password file and the TLS key it was given (owned by its user, 0600) and lets a lock pinning the site CA in', async () => {
    const tls = broker.tls!;
    expect(await connack(tls.url, { ...login, ca: tls.caPem, rejectUnauthorized: true })).toBe(0);
    expect(await connack(tls.url, { ...login, password: 'wrong', ca: tls.caPem, rejectUnauthorized: true })).toBe(5);
  });

  it('refuses a client without the CA, one pinning another CA, and plaintext on the TLS port', async () => {
    const tls = broker.tls!;
    expect(await connack(tls.url, { ...login, rejectUnauthorized: true })).toBe('refused');
    expect(await connack(tls.url, { ...login, ca: other.ca.certPem, rejectUnauthorized: true })).toBe('refused');
    expect(await connack(tls.url.replace('mqtts:', 'mqtt:'), login)).toBe('refused');
  });

  it('cannot start on files left root-owned 0600 (what site-broker-files wrote before it chowned them)', async () => {
    // only meaningful as root, where Mosquitto drops to its user; the suite runs as root (CI, pretest)
    expect(process.getuid?.()).toBe(0);
    const config = { gatewayId, locks: [{ lockId: 'L1', pairingSecret: Buffer.from(secret).toString('base64url') }], site: GW_SITE_LOGIN };
    await expect(startSiteBroker('mosquitto', config, silentLog(), '0:0')).rejects.toThrow(/mosquitto exited|did not listen/);
  });

  it('firmware-sim connects over it with the pinned CA', async () => {
    const tls = broker.tls!;
    const lock = new SimLock({
      url: tls.url,
      gatewayId,
      lockId: 'L1',
      secret,
      siteLogin: true,
      siteCa: { caPem: tls.caPem, pin: tls.fingerprint },
      timers: 'manual',
    });
    await lock.start();
    expect(lock.connected).toBe(true);
    await lock.stop();
  });
});
