import { describe, expect, it } from 'vitest';
import { generateSigningKeyPair } from '@tobira/shared';
import { loadSigner } from '../src/adapters/signer.js';
import { CONFIG_CODES, ConfigError, parseConfig, requireSigningJwk } from '../src/config.js';
import { testLog } from './helpers.js';

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
    const c = parseConfig({
      HEARTBEAT_INTERVAL_MS: '250',
      MQTT_CLEAN_SESSION: 'true',
      CRASH_AT: 'afterCasBeforeOutboxInsert, afterCommitBeforePublish',
      DATABASE_URL: '',
    });
    expect(c.heartbeatIntervalMs).toBe(250);
    expect(c.mqttCleanSession).toBe(true);
    expect(c.crashAt).toEqual(['afterCasBeforeOutboxInsert', 'afterCommitBeforePublish']);
    expect(c.databaseUrl).toBeUndefined();
  });

  it('refuses a crash point that is not one (a typo would make a crash test pass without crashing)', () => {
    expect(() => parseConfig({ CRASH_AT: 'afterCas' })).toThrow(/CRASH_AT/);
    expect(parseConfig({}).crashAt).toEqual([]);
  });

  it('a crash point throws by default and kills the process with CRASH_MODE=kill; the billing worker poll and lease are settings', () => {
    expect(parseConfig({}).crashMode).toBe('throw');
    expect(parseConfig({ CRASH_MODE: 'kill' }).crashMode).toBe('kill');
    expect(() => parseConfig({ CRASH_MODE: 'abort' })).toThrow(/CRASH_MODE/);
    expect(parseConfig({}).billing).toEqual({
      pollMs: 2_000,
      leaseMs: 60_000,
      checkoutDeadlineMs: 22 * 3_600_000,
      checkoutRecheckMs: 120_000,
      reconcileMs: 15 * 60_000,
    });
    expect(parseConfig({ BILLING_POLL_MS: '500', BILLING_LEASE_MS: '1500' }).billing).toEqual({
      pollMs: 500,
      leaseMs: 1_500,
      checkoutDeadlineMs: 22 * 3_600_000,
      checkoutRecheckMs: 120_000,
      reconcileMs: 15 * 60_000,
    });
    // an unpaid membership checkout ends at its deadline: at most Stripe's own 23 hours, at least a minute
    expect(parseConfig({ MEMBERSHIP_CHECKOUT_DEADLINE_MS: '3600000' }).billing.checkoutDeadlineMs).toBe(3_600_000);
    expect(parseConfig({}).billing.checkoutRecheckMs).toBe(120_000);
    expect(parseConfig({ MEMBERSHIP_CHECKOUT_RECHECK_MS: '5000' }).billing.checkoutRecheckMs).toBe(5_000);
    expect(() => parseConfig({ MEMBERSHIP_CHECKOUT_RECHECK_MS: '10' })).toThrow(/MEMBERSHIP_CHECKOUT_RECHECK_MS/);
    // a refund pending at Stripe (or an ended stay's open intent) is re-read from Stripe after this
    expect(parseConfig({ BILLING_RECONCILE_MS: '60000' }).billing.reconcileMs).toBe(60_000);
    expect(() => parseConfig({ BILLING_RECONCILE_MS: '10' })).toThrow(/BILLING_RECONCILE_MS/);
    expect(() => parseConfig({ MEMBERSHIP_CHECKOUT_DEADLINE_MS: String(24 * 3_600_000) })).toThrow(/MEMBERSHIP_CHECKOUT_DEADLINE_MS/);
    expect(() => parseConfig({ MEMBERSHIP_CHECKOUT_DEADLINE_MS: '0' })).toThrow(/MEMBERSHIP_CHECKOUT_DEADLINE_MS/);
    expect(() => parseConfig({ BILLING_LEASE_MS: '0' })).toThrow(/BILLING_LEASE_MS/);
  });

  it('caps offline-capable keys at 7 days by default; the cap is 1 s to 365 days', () => {
    expect(parseConfig({}).offlineKeyMaxSeconds).toBe(604_800);
    expect(parseConfig({ OFFLINE_KEY_MAX_SECONDS: '3600' }).offlineKeyMaxSeconds).toBe(3600);
    expect(() => parseConfig({ OFFLINE_KEY_MAX_SECONDS: '0' })).toThrow(/OFFLINE_KEY_MAX_SECONDS/);
    expect(() => parseConfig({ OFFLINE_KEY_MAX_SECONDS: String(365 * 86_400 + 1) })).toThrow(/OFFLINE_KEY_MAX_SECONDS/);
  });

  describe("the admin API's section (api), parsed with the rest", () => {
    it('has the defaults main.ts always had, frozen with the rest', () => {
      const c = parseConfig({});
      expect(c.api).toEqual({
        host: '127.0.0.1',
        port: 8080,
        bootstrapAdminToken: undefined,
        webhookAllowPrivateNetworks: false,
        tokenDefaultTtlMs: 90 * 86_400_000,
        healthDbTimeoutMs: 2000,
        rateLimitIpMax: 1200,
      });
      expect(Object.isFrozen(c.api)).toBe(true);
    });

    it('reads every variable by its old name; a token lifetime of 0 days means no expiry', () => {
      const c = parseConfig({
        ADMIN_API_HOST: '0.0.0.0',
        ADMIN_API_PORT: '0',
        TOBIRA_BOOTSTRAP_ADMIN_TOKEN: 'tbr_x',
        TOBIRA_WEBHOOK_ALLOW_PRIVATE: 'true',
        TOBIRA_API_TOKEN_TTL_DAYS: '0',
        TOBIRA_HEALTH_DB_TIMEOUT_MS: '500',
        TOBIRA_RATE_LIMIT_IP_MAX: '10',
      });
      expect(c.api).toEqual({
        host: '0.0.0.0',
        port: 0,
        bootstrapAdminToken: 'tbr_x',
        webhookAllowPrivateNetworks: true,
        tokenDefaultTtlMs: null,
        healthDbTimeoutMs: 500,
        rateLimitIpMax: 10,
      });
      expect(parseConfig({ TOBIRA_API_TOKEN_TTL_DAYS: '2' }).api.tokenDefaultTtlMs).toBe(2 * 86_400_000);
    });

    it('refuses bad values, naming the variable', () => {
      expect(() => parseConfig({ ADMIN_API_PORT: '70000' })).toThrow(/ADMIN_API_PORT/);
      expect(() => parseConfig({ TOBIRA_WEBHOOK_ALLOW_PRIVATE: 'yes' })).toThrow(/TOBIRA_WEBHOOK_ALLOW_PRIVATE/);
      expect(() => parseConfig({ TOBIRA_HEALTH_DB_TIMEOUT_MS: '5' })).toThrow(/TOBIRA_HEALTH_DB_TIMEOUT_MS/);
    });
  });

  it('refuses bad values, naming the variable', () => {
    expect(() => parseConfig({ HEARTBEAT_INTERVAL_MS: 'soon' })).toThrow(/HEARTBEAT_INTERVAL_MS/);
    expect(() => parseConfig({ DATABASE_URL: 'not a url' })).toThrow(/DATABASE_URL/);
    expect(() => parseConfig({ MQTT_CLEAN_SESSION: 'yes' })).toThrow(/MQTT_CLEAN_SESSION/);
  });

  describe('the signing key (CLOUD_SIGNING_JWK)', () => {
    const refusal = (f: () => unknown): ConfigError => {
      try {
        f();
      } catch (e) {
        if (e instanceof ConfigError) return e;
        throw e;
      }
      throw new Error('not refused');
    };

    it('a cloud without one refuses to start with SIGNING_KEY_REQUIRED naming the variable, instead of making up a key of its own', async () => {
      const c = parseConfig({});
      expect(refusal(() => requireSigningJwk(c))).toMatchObject({ code: 'SIGNING_KEY_REQUIRED', variable: 'CLOUD_SIGNING_JWK' });
      await expect(loadSigner('tobira-cloud', c.signingJwk, testLog)).rejects.toMatchObject({
        name: 'ConfigError',
        code: 'SIGNING_KEY_REQUIRED',
        variable: 'CLOUD_SIGNING_JWK',
      });
      expect(Object.keys(CONFIG_CODES)).toEqual([
        'SIGNING_KEY_REQUIRED',
        'SIGNING_KEY_INVALID',
        'KEK_REQUIRED',
        'KEK_INVALID',
        'KEK_UNKNOWN',
        'KEK_WRONG',
      ]);
    });

    it('one that is not an Ed25519 private JWK with a kid is refused at parse with SIGNING_KEY_INVALID, and the message never quotes the key', async () => {
      const { privateJwk, publicJwk } = await generateSigningKeyPair();
      const { kid: _kid, ...noKid } = privateJwk;
      const bad = [
        'not json',
        '[]',
        '{}',
        JSON.stringify(publicJwk),
        JSON.stringify(noKid),
        JSON.stringify({ ...privateJwk, crv: 'P-256' }),
        JSON.stringify([privateJwk, noKid]),
      ];
      for (const v of bad) {
        const e = refusal(() => parseConfig({ CLOUD_SIGNING_JWK: v }));
        expect(e, v).toMatchObject({ code: 'SIGNING_KEY_INVALID', variable: 'CLOUD_SIGNING_JWK' });
        expect(e.message).not.toContain(String(privateJwk.d));
      }
    });

    it('one key, or several (the first signs, all are published): every kid is in the JWKS and the signing one is the first', async () => {
      const a = await generateSigningKeyPair();
      const b = await generateSigningKeyPair();
      const one = await loadSigner('tobira-cloud', parseConfig({ CLOUD_SIGNING_JWK: JSON.stringify(a.privateJwk) }).signingJwk, testLog);
      expect(one.key.kid).toBe(a.kid);
      const two = await loadSigner(
        'tobira-cloud',
        parseConfig({ CLOUD_SIGNING_JWK: JSON.stringify([b.privateJwk, a.privateJwk]) }).signingJwk,
        testLog,
      );
      expect(two.key.kid).toBe(b.kid);
      expect(two.jwks.keys.map((k) => k.kid)).toEqual([b.kid, a.kid]);
      expect(two.jwks.keys.every((k) => k.d === undefined)).toBe(true);
    });
  });
});

describe('notifications config (docs/notifications.md)', () => {
  it('defaults to the log channel with no SMTP or webhook, 8 attempts', () => {
    expect(parseConfig({}).notifications).toMatchObject({ channel: 'log', smtp: null, webhook: null, maxAttempts: 8 });
  });

  it('reads the SMTP and webhook settings', () => {
    const c = parseConfig({
      NOTIFY_CHANNEL: 'smtp',
      NOTIFY_SMTP_HOST: 'mail.example.com',
      NOTIFY_SMTP_PORT: '465',
      NOTIFY_SMTP_SECURE: 'true',
      NOTIFY_SMTP_FROM: 'stay@example.com',
      NOTIFY_WEBHOOK_URL: 'https://hooks.example.com/notify',
      NOTIFY_MAX_ATTEMPTS: '3',
    }).notifications;
    expect(c).toMatchObject({
      channel: 'smtp',
      smtp: { host: 'mail.example.com', port: 465, secure: true, from: 'stay@example.com' },
      webhook: { url: 'https://hooks.example.com/notify', allowPrivateNetworks: false },
      maxAttempts: 3,
    });
  });

  it('refuses a channel without its settings, and an unknown channel', () => {
    expect(() => parseConfig({ NOTIFY_CHANNEL: 'smtp' })).toThrow(/NOTIFY_SMTP_HOST/);
    expect(() => parseConfig({ NOTIFY_SMTP_HOST: 'mail.example.com' })).toThrow(/NOTIFY_SMTP_FROM/);
    expect(() => parseConfig({ NOTIFY_CHANNEL: 'webhook' })).toThrow(/NOTIFY_WEBHOOK_URL/);
    expect(() => parseConfig({ NOTIFY_CHANNEL: 'sms' })).toThrow();
  });
});
