import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeSecret, newPairingSecret, systemClock } from '@tobira/shared';
import { mqttBackends, startMqttBackend } from '@tobira/shared/testing';
import { describe, expect, it } from 'vitest';
import { CliError, parseCli, parseSecretsFile } from '../src/cli-args.js';
import { FakeGateway, retainedOf } from './fake-gateway.js';

const root = resolve(fileURLToPath(import.meta.url), '../../..');
const cli = join(root, 'firmware-sim/src/cli.ts');

describe('CLI arguments', () => {
  it('defaults: 3 locks, local broker, no secrets file, nothing printed that is secret', () => {
    expect(parseCli(['--gateway', 'gw-1'], {})).toMatchObject({
      gatewayId: 'gw-1',
      lockIds: ['L1', 'L2', 'L3'],
      mqttUrl: 'mqtt://127.0.0.1:1883',
      secretsFile: null,
      printSecrets: false,
      present: [],
    });
  });

  it('reads --locks, --mqtt, MQTT_URL and credentials from the environment', () => {
    expect(
      parseCli(['-g', 'gw-1', '--locks', '20'], { MQTT_URL: 'mqtt://127.0.0.2:1', MQTT_USERNAME: 'u', MQTT_PASSWORD: 'p' }),
    ).toMatchObject({
      lockIds: Array.from({ length: 20 }, (_, i) => `L${i + 1}`),
      mqttUrl: 'mqtt://127.0.0.2:1',
      mqttUsername: 'u',
      mqttPassword: 'p',
    });
    expect(parseCli(['-g', 'gw-1', '--mqtt', 'mqtt://localhost:2'], { MQTT_URL: 'mqtt://127.0.0.2:1' })).toMatchObject({
      mqttUrl: 'mqtt://localhost:2',
    });
  });

  it('takes the site CA and its pinned fingerprint for mqtts, and refuses plain MQTT off loopback or mqtts without a pin', () => {
    const fp = 'AB:'.repeat(31) + 'AB';
    expect(
      parseCli(['-g', 'gw-1', '--mqtt', 'mqtts://192.0.2.10:8883', '--site-ca', 'ca.crt', '--site-ca-fingerprint', fp], {}),
    ).toMatchObject({ mqttUrl: 'mqtts://192.0.2.10:8883', siteCaFile: 'ca.crt', siteCaFingerprint: fp });
    expect(() => parseCli(['-g', 'gw-1', '--mqtt', 'mqtt://192.0.2.10:1883'], {})).toThrow(/plain MQTT only on loopback/);
    // loopback to `new URL`, a LAN host to the MQTT client: the lock's login would cross the LAN in clear
    expect(() => parseCli(['-g', 'gw-1', '--mqtt', 'mqtt://192.0.2.10:1883\\@127.0.0.1:1885'], {})).toThrow(/no userinfo, backslash/);
    expect(() => parseCli(['-g', 'gw-1', '--mqtt', 'mqtts://192.0.2.10:8883', '--site-ca', 'ca.crt'], {})).toThrow(/--site-ca-fingerprint/);
    expect(() =>
      parseCli(['-g', 'gw-1', '--mqtt', 'mqtts://192.0.2.10:8883', '--site-ca', 'ca.crt', '--site-ca-fingerprint', 'abc'], {}),
    ).toThrow(/SHA-256/);
  });

  it('reads --lock-ids, --present and --faults', () => {
    const c = parseCli(
      [
        '-g',
        'gw-1',
        '--lock-ids',
        'front,back',
        '--present',
        'front:pin:1234',
        '--present',
        'back:card:A1B2C3',
        '--faults',
        '{"incoming":{"drop":0.5}}',
      ],
      {},
    );
    expect(c).toMatchObject({
      lockIds: ['front', 'back'],
      present: [
        { lockId: 'front', credential: { type: 'pin', value: '1234' } },
        { lockId: 'back', credential: { type: 'card', value: 'A1B2C3' } },
      ],
      faults: { incoming: { drop: 0.5 } },
    });
  });

  it('relays a mobile token as the phone gave it (--present <lock>:mobile_token:<jws>)', () => {
    const token = 'eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJrZXktMSJ9.c2lnbmF0dXJl';
    const c = parseCli(['-g', 'gw-1', '--lock-ids', 'front', '--present', `front:mobile_token:${token}`], {});
    expect(c).toMatchObject({ present: [{ lockId: 'front', credential: { type: 'mobile_token', value: token } }] });
    expect(() => parseCli(['-g', 'gw-1', '--lock-ids', 'front', '--present', 'front:mobile_token:not-a-jws'], {})).toThrow();
  });

  it.each([
    [[]],
    [['--gateway', 'gw/1']],
    [['-g', 'gw-1', '--locks', '0']],
    [['-g', 'gw-1', '--locks', 'x']],
    [['-g', 'gw-1', '--locks', '2', '--lock-ids', 'a']],
    [['-g', 'gw-1', '--lock-ids', 'a,a']],
    [['-g', 'gw-1', '--present', 'L9:pin:1234']],
    [['-g', 'gw-1', '--present', 'L1:pin:12']],
    [['-g', 'gw-1', '--faults', '{"outgoing":{"drop":5}}']],
    [['-g', 'gw-1', '--faults', 'nope']],
    [['-g', 'gw-1', '--bogus']],
  ])('refuses %j with a CliError', (argv) => {
    expect(() => parseCli(argv, {})).toThrow(CliError);
  });

  it('--site-login: each lock logs in as itself, so a fleet-wide MQTT_USERNAME is refused with it', () => {
    expect(parseCli(['-g', 'gw-1', '--site-login'], {})).toMatchObject({ siteLogin: true, mqttUsername: null });
    expect(parseCli(['-g', 'gw-1'], {})).toMatchObject({ siteLogin: false });
    expect(() => parseCli(['-g', 'gw-1', '--site-login'], { MQTT_USERNAME: 'u', MQTT_PASSWORD: 'p' })).toThrow(CliError);
  });

  it('--help', () => {
    expect(parseCli(['--help'], {})).toBe('help');
  });

  it('secrets files must be an object of lock id -> base64url', () => {
    const s = encodeSecret(newPairingSecret());
    expect(parseSecretsFile(JSON.stringify({ L1: s }))).toEqual({ L1: s });
    for (const bad of ['[]', 'null', '{"L1":5}', '{"a/b":"' + s + '"}', '{"L1":"short"}', 'not json'])
      expect(() => parseSecretsFile(bad)).toThrow(CliError);
  });
});

describe.each(mqttBackends())('the CLI as a process (%s)', (backend) => {
  it('starts the locks, writes generated secrets (0600) without printing them, and on SIGTERM they go offline and it exits 0', async () => {
    const broker = await startMqttBackend(backend);
    const gatewayId = `gw-${broker.unique}-cli`;
    const dir = mkdtempSync(join(tmpdir(), 'tobira-sim-'));
    const secretsFile = join(dir, 'secrets.json');
    const known = encodeSecret(newPairingSecret());
    writeFileSync(secretsFile, JSON.stringify({ L1: known }));
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', cli, '--gateway', gatewayId, '--locks', '2', '--mqtt', broker.url, '--secrets', secretsFile],
      {
        cwd: root,
        env: { ...process.env, LOG_LEVEL: 'silent' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    try {
      await new Promise<void>((resolveReady, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          stdout += d.toString();
          if (stdout.includes('ready:')) resolveReady();
        });
        void exited.then(() => reject(new Error(`cli exited early: ${stdout}\n${stderr}`)));
      });
      expect(stdout).toContain('ready: L1 L2');
      expect(await retainedOf(broker.url, gatewayId, 'L2')).toMatchObject({ presence: { online: true }, state: { bolt: 'locked' } });

      const written = JSON.parse(readFileSync(secretsFile, 'utf8')) as Record<string, string>;
      expect(written.L1).toBe(known);
      expect(written.L2).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(statSync(secretsFile).mode & 0o777).toBe(0o600);
      expect(stdout).not.toContain(known);
      expect(stdout).not.toContain(written.L2);

      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(stdout).toContain('stopped');
      for (const id of ['L1', 'L2']) expect((await retainedOf(broker.url, gatewayId, id)).presence).toEqual({ online: false });
    } finally {
      child.kill('SIGKILL');
      await broker.stop();
    }
  });
});

describe.each(mqttBackends())('the CLI, interactive (%s)', (backend) => {
  it('--present prints the outcome; stdin commands drive the locks; end of input stops cleanly', async () => {
    const broker = await startMqttBackend(backend);
    const gatewayId = `gw-${broker.unique}-repl`;
    const dir = mkdtempSync(join(tmpdir(), 'tobira-sim-'));
    const secretsFile = join(dir, 'secrets.json');
    const secret = newPairingSecret();
    writeFileSync(secretsFile, JSON.stringify({ L1: encodeSecret(secret) }));
    const gw = new FakeGateway(broker.url, gatewayId, () => secret, systemClock);
    await gw.start();
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        cli,
        '-g',
        gatewayId,
        '--lock-ids',
        'L1',
        '--mqtt',
        broker.url,
        '--secrets',
        secretsFile,
        '--present',
        'L1:pin:1234',
        '-i',
      ],
      { cwd: root, env: { ...process.env, LOG_LEVEL: 'silent' }, stdio: ['pipe', 'pipe', 'pipe'] },
    );
    let stdout = '';
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const printed = (s: string) =>
      new Promise<void>((resolveSeen, reject) => {
        const check = () => {
          if (stdout.includes(s)) resolveSeen();
        };
        child.stdout.on('data', check);
        check();
        void exited.then(() => (stdout.includes(s) ? resolveSeen() : reject(new Error(`exited before printing ${s}: ${stdout}`))));
      });
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    try {
      await printed('result L1');
      expect(stdout).toMatch(/result L1 .*"status":"decided".*"result":"executed"/);
      expect(stdout).not.toContain('1234');
      child.stdin.write('tamper L1\nforce L1\nstatus\n');
      await gw.waitFor((s) => s.channel === 'event' && s.value.kind === 'tamper');
      await printed('ALARM     tamper');
      await printed('door open');
      child.stdin.end();
      expect(await exited).toBe(0);
      await gw.waitFor((s) => s.channel === 'presence' && !s.value.online);
    } finally {
      child.kill('SIGKILL');
      await gw.stop();
      await broker.stop();
    }
  });
});
