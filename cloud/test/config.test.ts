import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config.js';

describe('parseConfig', () => {
  it('fills defaults and freezes the result', () => {
    const c = parseConfig({});
    expect(c).toMatchObject({
      databaseUrl: undefined,
      pgliteDataDir: 'memory://',
      mqttUrl: 'mqtt://127.0.0.1:1883',
      mqttCleanSession: false,
      issuer: 'tobira-cloud',
      heartbeatIntervalMs: 10_000,
      dispatch: { pollMs: 5000, batch: 50, leaseMs: 30_000, maxAttempts: 10 },
      crashAt: [],
    });
    expect(c.mqttClientId).toMatch(/^tobira-cloud-/);
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.dispatch)).toBe(true);
  });

  it('reads numbers, flags and lists from strings, and treats empty strings as unset', () => {
    const c = parseConfig({ HEARTBEAT_INTERVAL_MS: '250', MQTT_CLEAN_SESSION: 'true', CRASH_AT: 'afterCas, afterCommit', DATABASE_URL: '' });
    expect(c.heartbeatIntervalMs).toBe(250);
    expect(c.mqttCleanSession).toBe(true);
    expect(c.crashAt).toEqual(['afterCas', 'afterCommit']);
    expect(c.databaseUrl).toBeUndefined();
  });

  it('caps offline-capable keys at 7 days by default; the cap is 1 s to 365 days', () => {
    expect(parseConfig({}).offlineKeyMaxSeconds).toBe(604_800);
    expect(parseConfig({ OFFLINE_KEY_MAX_SECONDS: '3600' }).offlineKeyMaxSeconds).toBe(3600);
    expect(() => parseConfig({ OFFLINE_KEY_MAX_SECONDS: '0' })).toThrow(/OFFLINE_KEY_MAX_SECONDS/);
    expect(() => parseConfig({ OFFLINE_KEY_MAX_SECONDS: String(365 * 86_400 + 1) })).toThrow(/OFFLINE_KEY_MAX_SECONDS/);
  });

  it('refuses bad values, naming the variable', () => {
    expect(() => parseConfig({ HEARTBEAT_INTERVAL_MS: 'soon' })).toThrow(/HEARTBEAT_INTERVAL_MS/);
    expect(() => parseConfig({ DATABASE_URL: 'not a url' })).toThrow(/DATABASE_URL/);
    expect(() => parseConfig({ MQTT_CLEAN_SESSION: 'yes' })).toThrow(/MQTT_CLEAN_SESSION/);
  });
});
