import { execFile } from 'node:child_process';
import { pbkdf2Sync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  connectMqtt,
  encodeSecret,
  filters,
  generateSigningKeyPair,
  lockClientId,
  newPairingSecret,
  siteBrokerPassword,
  startEmbeddedBroker,
  topics,
  waitConnected,
} from '@tobira/shared';
import type { IClientOptions, MqttClient } from 'mqtt';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { resolveOwner } from '../src/adapters/mqtt/site-broker-files.js';
import { mosquittoSiteFiles, siteAcl, siteBrokerHooks, siteLogins, type SiteAccountsConfig } from '../src/adapters/mqtt/site-broker.js';
import { capturingLog } from './staff-helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);

/** Does `password` match a line of a Mosquitto password file (`user:$7$iterations$salt$hash`, PBKDF2-SHA512)? */
function mosquittoAccepts(passwd: string, username: string, password: string): boolean {
  const line = passwd.split('\n').find((l) => l.startsWith(`${username}:`));
  if (line === undefined) return false;
  const [, seven, iterations, salt, hash] = line.slice(username.length + 1).split('$');
  if (seven !== '7') return false;
  return pbkdf2Sync(password, Buffer.from(salt as string, 'base64'), Number(iterations), 64, 'sha512').toString('base64') === hash;
}

function site() {
  const secrets = { L1: newPairingSecret(), L2: newPairingSecret() };
  return {
    gatewayId: 'gw-1',
    locks: Object.entries(secrets).map(([lockId, s]) => ({ lockId, doorId: `door-${lockId}`, pairingSecret: encodeSecret(s) })),
    site: { url: 'mqtt://127.0.0.1:1885', username: 'gw.gw-1', password: 'the-gateway-site-password' },
    secrets,
  };
}

describe('site broker ACL (one rule set for aedes and Mosquitto)', () => {
  const acl = siteAcl('gw-1');
  const L1 = { kind: 'lock', lockId: 'L1' } as const;
  const gw = { kind: 'gateway' } as const;
  const t = (lock: string, c: Parameters<typeof topics.lock>[2], g = 'gw-1') => topics.lock(g, lock, c);

  it('lets a lock publish only its own request/state/event/presence and read only its own command/decision', () => {
    for (const c of ['request', 'state', 'event', 'presence'] as const) {
      expect(acl.mayPublish(L1, t('L1', c))).toBe(true);
      expect(acl.mayPublish(L1, t('L2', c))).toBe(false);
      expect(acl.mayPublish(L1, t('L1', c, 'gw-2'))).toBe(false);
    }
    for (const c of ['command', 'decision'] as const) {
      expect(acl.mayPublish(L1, t('L1', c))).toBe(false);
      expect(acl.maySubscribe(L1, t('L1', c))).toBe(true);
      expect(acl.mayReceive(L1, t('L1', c))).toBe(true);
      expect(acl.maySubscribe(L1, t('L2', c))).toBe(false);
      expect(acl.mayReceive(L1, t('L2', c))).toBe(false);
      expect(acl.maySubscribe(L1, filters.locksOf('gw-1', c))).toBe(false);
    }
    for (const f of ['#', 'tobira/#', 'tobira/v1/site/gw-1/lock/L1/#', 'tobira/v1/site/+/lock/L1/command'])
      expect(acl.maySubscribe(L1, f)).toBe(false);
  });

  it('lets the gateway read every lock of its own site and write only decisions and commands', () => {
    for (const c of ['request', 'state', 'event', 'presence'] as const) {
      expect(acl.maySubscribe(gw, filters.locksOf('gw-1', c))).toBe(true);
      expect(acl.mayReceive(gw, t('L2', c))).toBe(true);
      expect(acl.mayPublish(gw, t('L2', c))).toBe(false);
      expect(acl.maySubscribe(gw, filters.locksOf('gw-2', c))).toBe(false);
    }
    for (const c of ['command', 'decision'] as const) {
      expect(acl.mayPublish(gw, t('L2', c))).toBe(true);
      expect(acl.mayPublish(gw, t('L2', c, 'gw-2'))).toBe(false);
      expect(acl.mayReceive(gw, t('L2', c))).toBe(false);
    }
    expect(acl.maySubscribe(gw, '#')).toBe(false);
  });
});

describe('the embedded site broker with siteBrokerHooks', () => {
  it("refuses and logs (JSON, with a cid) an anonymous login, another lock's client id, a foreign subscription and a forged publish", async () => {
    const s = site();
    const cap = capturingLog();
    const broker = await startEmbeddedBroker({ aedes: siteBrokerHooks(s, cap.log) });
    const l2 = { username: 'L2', password: siteBrokerPassword(s.secrets.L2, 'gw-1', 'L2') };
    const clients: MqttClient[] = [];
    const connack = async (o: IClientOptions) => {
      const c = connectMqtt(broker.url, { ...o, reconnectPeriod: 0 });
      clients.push(c);
      c.on('error', () => {});
      return waitConnected(c).then(
        () => 0,
        (e: { code?: number }) => e.code ?? -1,
      );
    };
    try {
      expect(await connack({})).toBe(5);
      expect(await connack({ ...l2, clientId: lockClientId('gw-1', 'L1') })).toBe(5);
      expect(await connack({ ...l2, clientId: lockClientId('gw-1', 'L2') })).toBe(0);
      const c = clients[clients.length - 1] as MqttClient;
      const granted = await c.subscribeAsync(topics.lock('gw-1', 'L1', 'command'), { qos: 1 }).then(
        (g) => g.map((x) => x.qos),
        (e: { packet?: { granted?: number[] } }) => e.packet?.granted ?? [],
      );
      expect(granted).toEqual([128]);
      const closed = new Promise<void>((r) => c.once('close', () => r()));
      c.publish(topics.lock('gw-1', 'L1', 'request'), '{}', { qos: 1 });
      await closed;
      const refusals = cap.lines().filter((l) => l.level === 40);
      expect(refusals.map((l) => l.msg)).toEqual([
        'broker login refused',
        'site broker login with another client id refused',
        'broker login refused',
        'broker subscribe refused',
        'broker publish refused',
      ]);
      for (const l of refusals) expect(l.cid).toEqual(expect.any(String));
      expect(new Set(refusals.map((l) => l.cid)).size).toBe(refusals.length);
    } finally {
      for (const c of clients) c.end(true);
      await broker.stop();
    }
  });
});

describe('site broker logins', () => {
  const dirs: string[] = [];
  afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

  it('needs a site login for the gateway that no lock has', () => {
    const s = site();
    expect(() => siteLogins({ ...s, site: { url: s.site.url } } as SiteAccountsConfig)).toThrow(/site\.username and site\.password/);
    expect(() => siteLogins({ ...s, site: { ...s.site, username: 'L2' } })).toThrow(/also a lock id/);
  });

  it("gives each lock its id as username and a password derived from its pairing secret, and Mosquitto's password file holds only hashes of them", () => {
    const s = site();
    const logins = siteLogins(s);
    const l1 = siteBrokerPassword(s.secrets.L1, 'gw-1', 'L1');
    expect(logins.get('L1')?.password).toBe(l1);
    expect(l1).not.toBe(encodeSecret(s.secrets.L1));
    // a lock's password is bound to its gateway and lock id: another lock with the same secret gets another one
    expect(siteBrokerPassword(s.secrets.L1, 'gw-1', 'L2')).not.toBe(l1);
    expect(siteBrokerPassword(s.secrets.L1, 'gw-2', 'L1')).not.toBe(l1);
    const { passwd, acl } = mosquittoSiteFiles(s);
    expect(passwd).not.toContain(l1);
    expect(passwd).not.toContain('the-gateway-site-password');
    expect(mosquittoAccepts(passwd, 'L1', l1)).toBe(true);
    expect(mosquittoAccepts(passwd, 'L1', encodeSecret(s.secrets.L1))).toBe(false);
    expect(mosquittoAccepts(passwd, 'L2', l1)).toBe(false);
    expect(mosquittoAccepts(passwd, 'gw.gw-1', 'the-gateway-site-password')).toBe(true);
    expect(acl.split('\n').filter((l) => l.startsWith('pattern '))).toEqual([
      'pattern write tobira/v1/site/gw-1/lock/%u/request',
      'pattern write tobira/v1/site/gw-1/lock/%u/state',
      'pattern write tobira/v1/site/gw-1/lock/%u/event',
      'pattern write tobira/v1/site/gw-1/lock/%u/presence',
      'pattern read tobira/v1/site/gw-1/lock/%u/decision',
      'pattern read tobira/v1/site/gw-1/lock/%u/command',
    ]);
    expect(acl).toContain('user gw.gw-1\n');
  });

  it('`tobira-gateway site-broker-files` writes the login and TLS files from the config (secrets 0600, owned by the Mosquitto user), and the site login can come from env', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tobira-site-files-'));
    dirs.push(dir);
    const s = site();
    const file = join(dir, 'gateway.json');
    const cloud = await generateSigningKeyPair();
    writeFileSync(
      file,
      JSON.stringify({
        gatewayId: s.gatewayId,
        keyPairFile: 'key.json',
        cloud: { url: 'mqtts://cloud:8883', jwks: { keys: [cloud.publicJwk] } },
        site: { url: s.site.url },
        sqlitePath: 'gw.sqlite',
        locks: s.locks,
        credentialPepper: encodeSecret(newPairingSecret()),
      }),
    );
    const env = { TOBIRA_SITE_MQTT_USERNAME: 'gw.gw-1', TOBIRA_SITE_MQTT_PASSWORD: 'from-the-environment' };
    expect(loadConfig({ file, env }).site).toMatchObject({ username: 'gw.gw-1', password: 'from-the-environment' });
    await run(process.execPath, ['--import', 'tsx', 'gateway/src/main.ts', 'site-broker-files', '--config', file, '--out', dir], {
      cwd: ROOT,
      env: { ...process.env, ...env },
    });
    const passwd = readFileSync(join(dir, 'tobira-site.passwd'), 'utf8');
    expect(statSync(join(dir, 'tobira-site.passwd')).mode & 0o777).toBe(0o600);
    expect(mosquittoAccepts(passwd, 'L2', siteBrokerPassword(s.secrets.L2, 'gw-1', 'L2'))).toBe(true);
    expect(mosquittoAccepts(passwd, 'gw.gw-1', 'from-the-environment')).toBe(true);
    expect(readFileSync(join(dir, 'tobira-site.acl'), 'utf8')).toContain('pattern read tobira/v1/site/gw-1/lock/%u/command');
    // the TLS files too, and everything owned by the user Mosquitto drops to (as root: the mosquitto user), secrets 0600
    expect(statSync(join(dir, 'site-broker.key')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, 'site-broker.crt'), 'utf8')).toContain('BEGIN CERTIFICATE');
    expect(readFileSync(join(dir, 'site-ca.crt'), 'utf8')).toContain('BEGIN CERTIFICATE');
    if (process.getuid?.() === 0) {
      const mosquitto = resolveOwner('mosquitto');
      for (const f of ['tobira-site.passwd', 'tobira-site.acl', 'site-ca.crt', 'site-broker.crt', 'site-broker.key'])
        expect(statSync(join(dir, f)).uid, f).toBe(mosquitto.uid);
    }
    // without a gateway site login there is nothing to write: it fails and says why
    const failed = await run(
      process.execPath,
      ['--import', 'tsx', 'gateway/src/main.ts', 'site-broker-files', '--config', file, '--out', dir],
      { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info' } },
    ).then(
      () => null,
      (e: { code?: number; stdout?: string }) => e,
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stdout).toContain('site.username and site.password');
  });
});
