import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeSecret, generateSigningKeyPair, newPairingSecret } from '@tobira/shared';
import { loadConfig, parseConfig } from '../src/config.js';
import { crashHookFromEnv } from '../src/app/context.js';
import { buildApp } from '../src/http/app.js';
import { createMetrics } from '../src/metrics.js';

describe('config', () => {
  const dirs: string[] = [];
  afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

  async function minimal() {
    const cloud = await generateSigningKeyPair();
    return {
      gatewayId: 'gw-1',
      keyPairFile: 'key.json',
      cloud: { url: 'mqtts://cloud:8883', jwks: { keys: [cloud.publicJwk] } },
      site: { url: 'mqtt://127.0.0.1:1883' },
      sqlitePath: 'gw.sqlite',
      credentialPepper: encodeSecret(newPairingSecret()),
    };
  }

  it('reads a file, fills defaults, resolves paths next to the file, overlays env and freezes the result', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tobira-cfg-'));
    dirs.push(dir);
    const file = join(dir, 'gateway.json');
    writeFileSync(file, JSON.stringify(await minimal()));
    const c = loadConfig({ file, env: { TOBIRA_OFFLINE_GRACE_SECONDS: '60', TOBIRA_STAFF_TOKEN: 'a-long-enough-staff-token' } });
    expect(c).toMatchObject({
      offlineGraceSeconds: 60,
      staffToken: 'a-long-enough-staff-token',
      keyPairFile: join(dir, 'key.json'),
      sqlitePath: join(dir, 'gw.sqlite'),
    });
    expect(c.cloud.issuer).toBe('tobira-cloud');
    expect(c.lockout).toEqual({ limit: 5, cooldownSeconds: 60 });
    expect(c.siteLockout).toEqual({ limit: 20, windowSeconds: 600, cooldownSeconds: 300 });
    expect(c.requestRate).toEqual({ burst: 10, perSecond: 1 });
    expect(c.accessLog).toEqual({ maxAgeDays: 30, maxRows: 100_000 });
    expect(c.storage).toEqual({ minFreeBytes: 256 * 1024 * 1024, checkIntervalMs: 30_000 });
    expect(c.commandTtlMs).toBeLessThanOrEqual(30_000);
    expect(Object.isFrozen(c) && Object.isFrozen(c.cloud)).toBe(true);
  });

  it('has no default staff token and refuses bad values with the field named', async () => {
    const m = await minimal();
    expect(parseConfig(m).staffToken).toBeUndefined();
    expect(() => parseConfig({ ...m, gatewayId: 'bad/id' })).toThrow(/gatewayId/);
    expect(() => parseConfig({ ...m, commandTtlMs: 60_000 })).toThrow(/commandTtlMs/);
    expect(() => parseConfig({ ...m, credentialPepper: 'short' })).toThrow(/credentialPepper/);
    expect(() => parseConfig({ ...m, surprise: 1 })).toThrow();
    expect(() => parseConfig({ ...m, requestRate: { burst: 0 } })).toThrow(/requestRate\.burst/);
    expect(() => parseConfig({ ...m, requestRate: { perSecond: 0 } })).toThrow(/requestRate\.perSecond/);
    expect(() => parseConfig({ ...m, storage: { minFreeBytes: -1 } })).toThrow(/storage\.minFreeBytes/);
  });

  describe("the site's time zone", () => {
    it('is optional, and an IANA zone is kept as given', async () => {
      const m = await minimal();
      expect(parseConfig(m).timeZone).toBeUndefined();
      expect(parseConfig({ ...m, timeZone: 'Asia/Tokyo' }).timeZone).toBe('Asia/Tokyo');
      expect(parseConfig({ ...m, timeZone: 'America/New_York' }).timeZone).toBe('America/New_York');
    });

    it('refuses a zone the runtime does not know, naming the field and the value', async () => {
      const m = await minimal();
      expect(() => parseConfig({ ...m, timeZone: 'Mars/Olympus' })).toThrow(
        'invalid gateway config: timeZone: unknown time zone "Mars/Olympus": expected an IANA name such as Asia/Tokyo',
      );
      expect(() => parseConfig({ ...m, timeZone: '' })).toThrow(/timeZone: unknown time zone ""/);
      expect(() => parseConfig({ ...m, timeZone: 9 })).toThrow(/timeZone/);
    });

    it('is read from TOBIRA_SITE_TIME_ZONE over the file, and a bad one there is refused too', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tobira-cfg-'));
      dirs.push(dir);
      const file = join(dir, 'gateway.json');
      writeFileSync(file, JSON.stringify({ ...(await minimal()), timeZone: 'Europe/Lisbon' }));
      expect(loadConfig({ file, env: {} }).timeZone).toBe('Europe/Lisbon');
      expect(loadConfig({ file, env: { TOBIRA_SITE_TIME_ZONE: 'Asia/Tokyo' } }).timeZone).toBe('Asia/Tokyo');
      expect(() => loadConfig({ file, env: { TOBIRA_SITE_TIME_ZONE: 'Mars/Olympus' } })).toThrow(
        /timeZone: unknown time zone "Mars\/Olympus"/,
      );
    });
  });

  describe('HTTP guards', () => {
    it('default to the built-in Host names, 10 wrong tokens per 300 s and an open /metrics', async () => {
      const c = parseConfig(await minimal());
      expect(c.http).toEqual({ host: '127.0.0.1', port: 8080, authFailures: { max: 10, windowSeconds: 300 } });
      expect(c.metricsToken).toBeUndefined();
      // a partial http block gets the same defaults
      expect(parseConfig({ ...(await minimal()), http: { port: 0 } }).http?.authFailures).toEqual({ max: 10, windowSeconds: 300 });
    });

    it('read TOBIRA_METRICS_TOKEN and TOBIRA_HTTP_ALLOWED_HOSTS (comma-separated, lower-cased), and refuse a host that is not a host', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tobira-cfg-'));
      dirs.push(dir);
      const file = join(dir, 'gateway.json');
      writeFileSync(file, JSON.stringify(await minimal()));
      const c = loadConfig({
        file,
        env: {
          TOBIRA_METRICS_TOKEN: 'a-long-enough-metrics-token',
          TOBIRA_HTTP_ALLOWED_HOSTS: 'Gateway.Site.Example, 192.168.1.5:8080,[fe80::1]',
        },
      });
      expect(c.metricsToken).toBe('a-long-enough-metrics-token');
      expect(c.http?.allowedHosts).toEqual(['gateway.site.example', '192.168.1.5:8080', '[fe80::1]']);
      const m = await minimal();
      for (const bad of ['evil.example/x', 'http://gateway', '*', '', 'a b']) {
        expect(() => parseConfig({ ...m, http: { allowedHosts: [bad] } }), bad).toThrow(/allowedHosts/);
      }
      expect(() => parseConfig({ ...m, metricsToken: 'short' })).toThrow(/metricsToken/);
      expect(() => parseConfig({ ...m, http: { authFailures: { max: 0 } } })).toThrow(/authFailures/);
    });
  });

  it("supervisors' second factor: optional by default, TOBIRA_STAFF_TOTP over the file, anything but required / optional / off refused", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tobira-cfg-'));
    dirs.push(dir);
    const file = join(dir, 'gateway.json');
    writeFileSync(file, JSON.stringify(await minimal()));
    expect(loadConfig({ file, env: {} }).staffTotp).toEqual({ supervisors: 'optional' });
    writeFileSync(file, JSON.stringify({ ...(await minimal()), staffTotp: { supervisors: 'off', issuer: 'Hotel Kyoto' } }));
    expect(loadConfig({ file, env: {} }).staffTotp).toEqual({ supervisors: 'off', issuer: 'Hotel Kyoto' });
    expect(loadConfig({ file, env: { TOBIRA_STAFF_TOTP: 'required' } }).staffTotp.supervisors).toBe('required');
    expect(() => loadConfig({ file, env: { TOBIRA_STAFF_TOTP: 'sometimes' } })).toThrow(/staffTotp\.supervisors/);
  });

  it('refuses an unknown crash point', () => {
    expect(() => crashHookFromEnv('somewhere')).toThrow(/unknown crash point/);
  });

  it('refuses staff actions when no staff token is configured', async () => {
    const app = buildApp({
      registry: createMetrics().registry,
      staffToken: undefined,
      log: pino({ level: 'silent' }),
      staff: {} as never,
      setMode: () => ({ mode: 'lockdown', changed: true }),
      ackAlarm: () => ({ status: 'refused', code: 'ALARM_NOT_FOUND' }),
      health: () => ({}) as never,
    });
    const r = await app.inject({
      method: 'POST',
      url: '/staff/mode',
      payload: { mode: 'lockdown' },
      headers: { authorization: 'Bearer anything-at-all-here' },
    });
    expect(r.statusCode).toBe(503);
    expect(r.json()).toEqual({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
    await app.close();
  });
});
