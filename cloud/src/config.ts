import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import { DEFAULT_OFFLINE_MAX_SECONDS, OFFLINE_MAX_SECONDS_LIMIT } from '@tobira/shared';
import { z } from 'zod';
import { CRASH_POINTS, type CrashPoint } from './app/crash.js';
import type { NotificationWebhookSettings, SmtpSettings } from './adapters/notifications/channels.js';
import { NOTIFICATION_CHANNELS, type NotificationChannel } from './domain/notifications.js';

/**
 * Cloud configuration, parsed once from the environment with zod into a frozen
 * object that is passed down (never read from a global afterwards).
 */
const int = (def: number, min = 0) => z.coerce.number().int().min(min).default(def);

export const CloudConfigSchema = z.object({
  /** PostgreSQL URL. Unset: embedded PGlite in PGLITE_DATA_DIR. */
  DATABASE_URL: z.string().url().optional(),
  /** PGlite data directory (`memory://` keeps it in memory). */
  PGLITE_DATA_DIR: z.string().min(1).default('memory://'),
  MQTT_URL: z.string().url().default('mqtt://127.0.0.1:1883'),
  /**
   * Stable client id of the replica, the same across its restarts; its two connections use `<id>-in`
   * (the inbox, a persistent session) and `<id>-out` (publishes; a clean session).
   */
  MQTT_CLIENT_ID: z.string().min(1).max(128).default(`tobira-cloud-${hostname()}`.slice(0, 128)),
  /** Clean session (tests only): a restarted cloud would not get the uplinks it had not acknowledged. */
  MQTT_CLEAN_SESSION: z.enum(['true', 'false']).default('false'),
  MQTT_USERNAME: z.string().optional(),
  MQTT_PASSWORD: z.string().optional(),
  /**
   * Who makes the gateways' cloud-broker logins (docs/cloud.md "Broker accounts"):
   * `unmanaged` (the operator does; provisioning carries none) or
   * `mosquitto-dynsec` (the cloud creates one account per gateway through
   * Mosquitto's dynamic security plugin).
   */
  BROKER_ACCOUNTS: z.enum(['unmanaged', 'mosquitto-dynsec']).default('unmanaged'),
  /** The dynsec admin login (a client with the dynsec admin role). Unset: MQTT_USERNAME / MQTT_PASSWORD. */
  BROKER_ADMIN_USERNAME: z.string().optional(),
  BROKER_ADMIN_PASSWORD: z.string().optional(),
  /** The broker the admin login connects to. Unset: MQTT_URL. */
  BROKER_ADMIN_URL: z.string().url().optional(),
  /** How long a dynsec command may take before a registration is refused with BROKER_UNAVAILABLE. */
  BROKER_ADMIN_TIMEOUT_MS: int(5_000, 1),
  /** The cloud broker URL handed to gateways at provisioning (as they reach it; may differ from MQTT_URL). Unset: null. */
  GATEWAY_BROKER_URL: z.string().url().optional(),
  /** Issuer of every downlink message and audience of every uplink message. */
  CLOUD_ISSUER: z.string().min(1).max(128).default('tobira-cloud'),
  /**
   * The cloud's Ed25519 private JWK(s) as JSON: one JWK or an array (the first signs, all are published).
   * Required to start a cloud (SIGNING_KEY_REQUIRED): a key made up at start would differ per process and
   * per restart, and every gateway trusting the old one would fail closed. Checked here when set
   * (SIGNING_KEY_INVALID); tools that never sign (the admin CLI) may leave it unset.
   */
  CLOUD_SIGNING_JWK: z.string().optional(),
  /**
   * The key-encryption key that seals the secrets the cloud stores (credential peppers, webhook signing
   * secrets; docs/security.md "Secrets at rest"): 32 random bytes, base64 or base64url. Its key id is
   * derived from the key (`k` + 8 characters of its SHA-256). Required to start a cloud (KEK_REQUIRED):
   * there is no default, a made-up key would seal secrets nobody else can open.
   */
  TOBIRA_KEK: z.string().optional(),
  /**
   * Instead of TOBIRA_KEK, a key ring for a rotation: `kid:key,kid:key,...`, the first seals, all open.
   * Setting both is refused (KEK_INVALID).
   */
  TOBIRA_KEKS: z.string().optional(),
  HEARTBEAT_INTERVAL_MS: int(10_000, 1),
  /** QoS of heartbeats: 1 as every downlink (docs/protocol.md); 0 keeps them out of offline gateways' broker queues. */
  HEARTBEAT_QOS: z.enum(['0', '1']).default('1'),
  /**
   * MQTT shared-subscription group for the uplinks (`$share/<group>/tobira/v1/gw/+/up`): every replica
   * with the same group gets a share of the gateways' uplinks instead of all of them. Empty (the default)
   * subscribes plainly, as aedes (no `$share` support) needs; set it with Mosquitto ≥ 2, EMQX or VerneMQ.
   */
  MQTT_SHARED_GROUP: z
    .string()
    .max(64)
    .regex(/^[A-Za-z0-9_-]*$/)
    .default(''),
  DISPATCH_POLL_MS: int(5_000, 1),
  DISPATCH_BATCH: int(50, 1),
  DISPATCH_LEASE_MS: int(30_000, 1),
  DISPATCH_MAX_ATTEMPTS: int(10, 1),
  DISPATCH_BACKOFF_BASE_MS: int(1_000, 1),
  DISPATCH_BACKOFF_MAX_MS: int(300_000, 1),
  PUBLISH_TIMEOUT_MS: int(10_000, 1),
  /** A resync gap longer than this is answered with a snapshot instead of a replay. */
  RESYNC_REPLAY_MAX: int(1_000, 0),
  RESYNC_BURST: int(5, 1),
  RESYNC_PER_MINUTE: int(30, 1),
  RESYNC_MAX_CONCURRENT: int(4, 1),
  /**
   * Uplinks received and not yet handled, at most: handled concurrently across gateways (each gateway's
   * in order), each in its own transaction (a pool connection). At the bound the inbox stops reading
   * until one is done; the rest waits in the broker's queue.
   */
  UPLINK_MAX_IN_FLIGHT: int(8, 1),
  REJECTED_UPLINKS_MAX_ROWS: int(10_000, 1),
  /** Sent outbox rows and uplink dedupe rows older than this are purged by the sweeper. */
  RETENTION_MS: int(7 * 86_400_000, 1),
  /** Period of the sweeper (expireKeys, purge). */
  EXPIRE_SWEEP_MS: int(60_000, 1),
  /**
   * Cap of an offline-capable key's offline validity, in seconds: how long
   * after its gateway's last proven-fresh sync it may still open while the
   * gateway fails closed. A key may ask for less, never more.
   */
  OFFLINE_KEY_MAX_SECONDS: int(DEFAULT_OFFLINE_MAX_SECONDS, 1).pipe(z.int().max(OFFLINE_MAX_SECONDS_LIMIT)),
  /** Crash points to turn into a throw (tests only): comma-separated names. */
  /** Tests: comma-separated crash points that throw; a name that is not one is refused (a typo must not turn a crash test into a no-op). */
  CRASH_AT: z
    .string()
    .optional()
    .transform((v) =>
      (v ?? '')
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.enum(CRASH_POINTS))),
  // The admin HTTP API (docs/api.md), run by `npm run cloud` beside the core.
  ADMIN_API_HOST: z.string().default('127.0.0.1'),
  ADMIN_API_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  /** The first admin token (`tbr_` + 43 base64url chars), installed at start; there is no default. */
  TOBIRA_BOOTSTRAP_ADMIN_TOKEN: z.string().optional(),
  /** Let webhook URLs point at internal addresses (SSRF guard off); only for a closed network. */
  TOBIRA_WEBHOOK_ALLOW_PRIVATE: z.enum(['true', 'false']).default('false'),
  /** Lifetime in days of a new API token that names none; 0: no expiry unless asked. */
  TOBIRA_API_TOKEN_TTL_DAYS: z.coerce.number().int().min(0).max(3650).default(90),
  /** How long /readyz waits for the database before it reports DATABASE_UNREACHABLE. */
  TOBIRA_HEALTH_DB_TIMEOUT_MS: z.coerce.number().int().min(10).max(60_000).default(2000),
  /** Requests per client IP per minute, counted before authentication (docs/api.md "Rate limits"). */
  TOBIRA_RATE_LIMIT_IP_MAX: z.coerce.number().int().min(1).default(1_200),
  // Stays paid through Stripe (docs/payments.md). Without a secret key the stay verbs answer BILLING_NOT_CONFIGURED.
  STRIPE_SECRET_KEY: z.string().optional(),
  /** The `whsec_` secret that signs webhooks to POST /webhooks/stripe. */
  STRIPE_WEBHOOK_SECRET: z.string().optional(),
  /** Unset for Stripe itself; the local Stripe's host, port and `http` otherwise. */
  STRIPE_API_HOST: z.string().optional(),
  STRIPE_API_PORT: z.coerce.number().int().min(1).max(65535).optional(),
  STRIPE_API_PROTOCOL: z.enum(['http', 'https']).optional(),
  /** Tests: what a CRASH_AT point does: `throw` (SimulatedCrash) or `kill` (SIGKILL of this process, as a power cut). */
  CRASH_MODE: z.enum(['throw', 'kill']).default('throw'),
  /** The billing worker (docs/payments.md): its poll (a stored webhook also wakes it) and its claim lease. */
  BILLING_POLL_MS: int(2_000, 1),
  BILLING_LEASE_MS: int(60_000, 1),
  /**
   * How long an approved membership application's checkout stays open unpaid before the billing worker
   * ends it (`checkout_expired`, docs/memberships.md): 22 hours, under Stripe's own 23-hour expiry of an
   * incomplete subscription; at most that, at least a minute.
   */
  MEMBERSHIP_CHECKOUT_DEADLINE_MS: z.coerce
    .number()
    .int()
    .min(60_000)
    .max(23 * 3_600_000)
    .default(22 * 3_600_000),
  /**
   * How often the billing worker re-reads an open checkout's subscription from Stripe (docs/memberships.md): a
   * paid first invoice whose webhooks were all lost activates within this, not at the deadline. 2 minutes.
   */
  MEMBERSHIP_CHECKOUT_RECHECK_MS: int(2 * 60_000, 1_000),
  /**
   * How long a refund may stay pending at Stripe (or an ended stay's intent open) before the billing worker
   * re-reads it from Stripe, and how often after that (docs/payments.md): the bound on a lost webhook. 15 minutes.
   */
  BILLING_RECONCILE_MS: int(15 * 60_000, 1_000),
  /** Guest and member notifications (docs/notifications.md): the channel new messages are queued for. */
  NOTIFY_CHANNEL: z.enum(NOTIFICATION_CHANNELS).default('log'),
  /** SMTP server of the `smtp` channel (required with it), its port, the From address (required with it). */
  NOTIFY_SMTP_HOST: z.string().min(1).optional(),
  NOTIFY_SMTP_PORT: z.coerce.number().int().min(1).max(65535).default(587),
  NOTIFY_SMTP_FROM: z.string().min(3).optional(),
  /** `true`: TLS from the start (port 465); `false`: STARTTLS when the server offers it. */
  NOTIFY_SMTP_SECURE: z.enum(['true', 'false']).default('false'),
  NOTIFY_SMTP_USER: z.string().min(1).optional(),
  NOTIFY_SMTP_PASSWORD: z.string().optional(),
  /** Receiver of the `webhook` channel (required with it); public https unless TOBIRA_WEBHOOK_ALLOW_PRIVATE. */
  NOTIFY_WEBHOOK_URL: z.string().url().optional(),
  /** HMAC key of the `webhook` channel's Tobira-Signature header; unset: unsigned. */
  NOTIFY_WEBHOOK_SECRET: z.string().min(16).optional(),
  /** Attempts before a notification is dead (a permanent failure, such as no e-mail, is dead at once). */
  NOTIFY_MAX_ATTEMPTS: int(8, 1),
  NOTIFY_POLL_MS: int(1_000, 1),
  NOTIFY_LEASE_MS: int(60_000, 1),
  NOTIFY_BACKOFF_BASE_MS: int(5_000, 1),
  NOTIFY_BACKOFF_MAX_MS: int(1_800_000, 1),
  /** SMTP connection/greeting/socket and webhook request timeout. */
  NOTIFY_TIMEOUT_MS: int(10_000, 1),
});
export type CloudConfigInput = z.input<typeof CloudConfigSchema>;

export interface CloudConfig {
  readonly databaseUrl: string | undefined;
  readonly pgliteDataDir: string;
  readonly mqttUrl: string;
  readonly mqttClientId: string;
  readonly mqttCleanSession: boolean;
  readonly mqttUsername: string | undefined;
  readonly mqttPassword: string | undefined;
  readonly brokerAccounts: {
    readonly kind: 'unmanaged' | 'mosquitto-dynsec';
    readonly adminUrl: string;
    readonly adminUsername: string | undefined;
    readonly adminPassword: string | undefined;
    readonly timeoutMs: number;
  };
  readonly gatewayBrokerUrl: string | null;
  readonly issuer: string;
  readonly signingJwk: string | undefined;
  /** TOBIRA_KEK / TOBIRA_KEKS (`variable`): the KEK ring, the sealing key first; keys base64url (32 bytes). Undefined: none (a cloud refuses to start). */
  readonly keks: Keks | undefined;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatQos: 0 | 1;
  /** MQTT_SHARED_GROUP: '' = plain subscriptions. */
  readonly mqttSharedGroup: string;
  readonly dispatch: {
    readonly pollMs: number;
    readonly batch: number;
    readonly leaseMs: number;
    readonly maxAttempts: number;
    readonly backoffBaseMs: number;
    readonly backoffMaxMs: number;
    readonly publishTimeoutMs: number;
  };
  readonly resyncReplayMax: number;
  /** Resync requests answered per gateway: a token bucket (a compromised gateway's storm builds no endless snapshots). */
  readonly resyncRate: { readonly burst: number; readonly perSecond: number };
  /** Resync answers (replays and snapshots) built at once, across all gateways. */
  readonly resyncMaxConcurrent: number;
  /** UPLINK_MAX_IN_FLIGHT. */
  readonly uplinkMaxInFlight: number;
  /** rejected_uplinks keeps at most this many rows (the newest); the purge also drops them by age. */
  readonly rejectedUplinksMaxRows: number;
  readonly expireSweepMs: number;
  readonly retentionMs: number;
  readonly offlineKeyMaxSeconds: number;
  readonly crashAt: readonly CrashPoint[];
  /** The admin HTTP API's listener and settings (the rest of ApiConfig keeps its defaults). */
  readonly api: {
    readonly host: string;
    readonly port: number;
    readonly bootstrapAdminToken: string | undefined;
    readonly webhookAllowPrivateNetworks: boolean;
    /** ms; null: new tokens do not expire unless asked (TOBIRA_API_TOKEN_TTL_DAYS=0). */
    readonly tokenDefaultTtlMs: number | null;
    readonly healthDbTimeoutMs: number;
    readonly rateLimitIpMax: number;
  };
  /** Stripe (docs/payments.md); secretKey undefined: stays are not available. */
  readonly stripe: {
    readonly secretKey: string | undefined;
    readonly webhookSecret: string | undefined;
    readonly host: string | undefined;
    readonly port: number | undefined;
    readonly protocol: 'http' | 'https' | undefined;
  };
  readonly crashMode: 'throw' | 'kill';
  readonly billing: {
    readonly pollMs: number;
    readonly leaseMs: number;
    readonly checkoutDeadlineMs: number;
    readonly checkoutRecheckMs: number;
    readonly reconcileMs: number;
  };
  /** Notifications (docs/notifications.md): the channel new messages use, its settings, the dispatcher's. */
  readonly notifications: {
    readonly channel: NotificationChannel;
    readonly smtp: SmtpSettings | null;
    readonly webhook: NotificationWebhookSettings | null;
    readonly maxAttempts: number;
    readonly pollMs: number;
    readonly leaseMs: number;
    readonly backoffBaseMs: number;
    readonly backoffMaxMs: number;
  };
}

/** Why the cloud refuses to start with its configuration (docs/cloud.md "Configuration"). */
export const CONFIG_CODES = Object.freeze({
  SIGNING_KEY_REQUIRED:
    'CLOUD_SIGNING_JWK is unset: the cloud does not make up a signing key (each process and each restart would sign with another one, and every site would fail closed).',
  SIGNING_KEY_INVALID: 'CLOUD_SIGNING_JWK is not JSON holding one Ed25519 private JWK with a kid, or a non-empty array of them.',
  KEK_REQUIRED:
    'TOBIRA_KEK (or TOBIRA_KEKS) is unset: the cloud has no default key-encryption key (secrets sealed with a made-up one could not be opened by any other process or restart).',
  KEK_INVALID:
    'TOBIRA_KEK is not 32 bytes in base64, or TOBIRA_KEKS is not kid:key,... with unique kids ([A-Za-z0-9_-], 1-32) and 32-byte keys, or both are set.',
  KEK_UNKNOWN:
    'The database holds secrets sealed under a key id the configured KEK ring lacks: add the old KEK to TOBIRA_KEKS until `secrets rotate` has re-encrypted them.',
  KEK_WRONG: 'A configured KEK does not open the secrets sealed under its key id: it is not the key that sealed them.',
});
export type ConfigCode = keyof typeof CONFIG_CODES;

/** A configuration the cloud refuses, with its stable code and the variable to fix. */
export class ConfigError extends Error {
  constructor(
    readonly code: ConfigCode,
    readonly variable: string,
    detail?: string,
  ) {
    super(`${code}: ${CONFIG_CODES[code]}${detail ? ` (${detail})` : ''}`);
    this.name = 'ConfigError';
  }
}

const SigningJwk = z
  .object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), kid: z.string().min(1), x: z.string().min(1), d: z.string().min(1) })
  .passthrough();
const SigningJwks = z.union([SigningJwk.transform((k) => [k]), z.array(SigningJwk).min(1)]);

/** The private JWKs of CLOUD_SIGNING_JWK, first (the signing one) first. Throws ConfigError SIGNING_KEY_INVALID. */
export function parseSigningJwks(json: string): [z.infer<typeof SigningJwk>, ...z.infer<typeof SigningJwk>[]] {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    throw new ConfigError('SIGNING_KEY_INVALID', 'CLOUD_SIGNING_JWK', 'not JSON');
  }
  const r = SigningJwks.safeParse(raw);
  // the issue paths only, never the values: the input is a private key
  if (!r.success)
    throw new ConfigError('SIGNING_KEY_INVALID', 'CLOUD_SIGNING_JWK', r.error.issues.map((i) => i.path.join('.') || '(root)').join(', '));
  return r.data as [z.infer<typeof SigningJwk>, ...z.infer<typeof SigningJwk>[]];
}

/** The signing key a starting cloud needs. Throws ConfigError SIGNING_KEY_REQUIRED when there is none. */
export function requireSigningJwk(config: Pick<CloudConfig, 'signingJwk'>): string {
  if (config.signingJwk === undefined) throw new ConfigError('SIGNING_KEY_REQUIRED', 'CLOUD_SIGNING_JWK');
  return config.signingJwk;
}

const KID = /^[A-Za-z0-9_-]{1,32}$/;

function kekBytes(v: string, variable: string): Buffer {
  // node's base64 decoder takes both alphabets; it skips what it does not know, hence the shape check first
  const b = /^[A-Za-z0-9+/_-]+={0,2}$/.test(v) ? Buffer.from(v, 'base64') : null;
  if (b === null || b.length !== 32) throw new ConfigError('KEK_INVALID', variable, 'not 32 bytes of base64');
  return b;
}

/** The key id TOBIRA_KEK's key goes by: derived from the key, so every replica given it agrees without naming one. */
export const derivedKid = (key: Buffer): string => `k${createHash('sha256').update(key).digest('base64url').slice(0, 8)}`;

export interface Keks {
  readonly variable: 'TOBIRA_KEK' | 'TOBIRA_KEKS';
  readonly ring: readonly { readonly kid: string; readonly key: string }[];
}

/** The KEK ring of TOBIRA_KEK or TOBIRA_KEKS, the sealing key first; undefined when neither is set. Throws ConfigError KEK_INVALID, never with a key in its message. */
export function parseKeks(single: string | undefined, ring: string | undefined): Keks | undefined {
  if (single !== undefined && ring !== undefined)
    throw new ConfigError('KEK_INVALID', 'TOBIRA_KEKS', 'TOBIRA_KEK and TOBIRA_KEKS are both set');
  if (single !== undefined) {
    const key = kekBytes(single.trim(), 'TOBIRA_KEK');
    return { variable: 'TOBIRA_KEK', ring: [{ kid: derivedKid(key), key: key.toString('base64url') }] };
  }
  if (ring === undefined) return undefined;
  const out: { kid: string; key: string }[] = [];
  for (const [i, part] of ring.split(',').entries()) {
    const at = part.indexOf(':');
    const kid = part.slice(0, Math.max(at, 0)).trim();
    if (at < 0 || !KID.test(kid)) throw new ConfigError('KEK_INVALID', 'TOBIRA_KEKS', `entry ${i + 1}: expected kid:key`);
    if (out.some((k) => k.kid === kid)) throw new ConfigError('KEK_INVALID', 'TOBIRA_KEKS', `kid ${kid} given twice`);
    out.push({ kid, key: kekBytes(part.slice(at + 1).trim(), 'TOBIRA_KEKS').toString('base64url') });
  }
  return { variable: 'TOBIRA_KEKS', ring: out };
}

/** The KEK ring a starting cloud needs. Throws ConfigError KEK_REQUIRED when there is none. */
export function requireKeks(config: Pick<CloudConfig, 'keks'>): Keks {
  if (config.keks === undefined || config.keks.ring.length === 0) throw new ConfigError('KEK_REQUIRED', 'TOBIRA_KEK');
  return config.keks;
}

/** Parses env-style input (strings) into the frozen config. Throws with every problem listed. */
export function parseConfig(env: Record<string, string | undefined> = process.env): CloudConfig {
  const picked: Record<string, string> = {};
  for (const k of Object.keys(CloudConfigSchema.shape)) {
    const v = env[k];
    if (v !== undefined && v !== '') picked[k] = v;
  }
  const c = CloudConfigSchema.parse(picked);
  if (c.CLOUD_SIGNING_JWK !== undefined) parseSigningJwks(c.CLOUD_SIGNING_JWK);
  const keks = parseKeks(c.TOBIRA_KEK, c.TOBIRA_KEKS);
  if (
    c.BROKER_ACCOUNTS === 'mosquitto-dynsec' &&
    !((c.BROKER_ADMIN_USERNAME ?? c.MQTT_USERNAME) && (c.BROKER_ADMIN_PASSWORD ?? c.MQTT_PASSWORD))
  ) {
    throw new Error(
      'BROKER_ACCOUNTS=mosquitto-dynsec needs the dynsec admin login: BROKER_ADMIN_USERNAME and BROKER_ADMIN_PASSWORD (or MQTT_USERNAME and MQTT_PASSWORD)',
    );
  }
  if (c.NOTIFY_SMTP_HOST !== undefined && c.NOTIFY_SMTP_FROM === undefined) throw new Error('NOTIFY_SMTP_HOST needs NOTIFY_SMTP_FROM');
  if (c.NOTIFY_CHANNEL === 'smtp' && c.NOTIFY_SMTP_HOST === undefined)
    throw new Error('NOTIFY_CHANNEL=smtp needs NOTIFY_SMTP_HOST and NOTIFY_SMTP_FROM');
  if (c.NOTIFY_CHANNEL === 'webhook' && c.NOTIFY_WEBHOOK_URL === undefined)
    throw new Error('NOTIFY_CHANNEL=webhook needs NOTIFY_WEBHOOK_URL');
  return deepFreeze({
    databaseUrl: c.DATABASE_URL,
    pgliteDataDir: c.PGLITE_DATA_DIR,
    mqttUrl: c.MQTT_URL,
    mqttClientId: c.MQTT_CLIENT_ID,
    mqttCleanSession: c.MQTT_CLEAN_SESSION === 'true',
    mqttUsername: c.MQTT_USERNAME,
    mqttPassword: c.MQTT_PASSWORD,
    brokerAccounts: {
      kind: c.BROKER_ACCOUNTS,
      adminUrl: c.BROKER_ADMIN_URL ?? c.MQTT_URL,
      adminUsername: c.BROKER_ADMIN_USERNAME ?? c.MQTT_USERNAME,
      adminPassword: c.BROKER_ADMIN_PASSWORD ?? c.MQTT_PASSWORD,
      timeoutMs: c.BROKER_ADMIN_TIMEOUT_MS,
    },
    gatewayBrokerUrl: c.GATEWAY_BROKER_URL ?? null,
    issuer: c.CLOUD_ISSUER,
    signingJwk: c.CLOUD_SIGNING_JWK,
    keks,
    heartbeatIntervalMs: c.HEARTBEAT_INTERVAL_MS,
    heartbeatQos: c.HEARTBEAT_QOS === '0' ? 0 : 1,
    mqttSharedGroup: c.MQTT_SHARED_GROUP,
    dispatch: {
      pollMs: c.DISPATCH_POLL_MS,
      batch: c.DISPATCH_BATCH,
      leaseMs: c.DISPATCH_LEASE_MS,
      maxAttempts: c.DISPATCH_MAX_ATTEMPTS,
      backoffBaseMs: c.DISPATCH_BACKOFF_BASE_MS,
      backoffMaxMs: c.DISPATCH_BACKOFF_MAX_MS,
      publishTimeoutMs: c.PUBLISH_TIMEOUT_MS,
    },
    resyncReplayMax: c.RESYNC_REPLAY_MAX,
    resyncRate: { burst: c.RESYNC_BURST, perSecond: c.RESYNC_PER_MINUTE / 60 },
    resyncMaxConcurrent: c.RESYNC_MAX_CONCURRENT,
    uplinkMaxInFlight: c.UPLINK_MAX_IN_FLIGHT,
    rejectedUplinksMaxRows: c.REJECTED_UPLINKS_MAX_ROWS,
    expireSweepMs: c.EXPIRE_SWEEP_MS,
    retentionMs: c.RETENTION_MS,
    offlineKeyMaxSeconds: c.OFFLINE_KEY_MAX_SECONDS,
    crashAt: c.CRASH_AT,
    api: {
      host: c.ADMIN_API_HOST,
      port: c.ADMIN_API_PORT,
      bootstrapAdminToken: c.TOBIRA_BOOTSTRAP_ADMIN_TOKEN,
      webhookAllowPrivateNetworks: c.TOBIRA_WEBHOOK_ALLOW_PRIVATE === 'true',
      tokenDefaultTtlMs: c.TOBIRA_API_TOKEN_TTL_DAYS === 0 ? null : c.TOBIRA_API_TOKEN_TTL_DAYS * 86_400_000,
      healthDbTimeoutMs: c.TOBIRA_HEALTH_DB_TIMEOUT_MS,
      rateLimitIpMax: c.TOBIRA_RATE_LIMIT_IP_MAX,
    },
    stripe: {
      secretKey: c.STRIPE_SECRET_KEY,
      webhookSecret: c.STRIPE_WEBHOOK_SECRET,
      host: c.STRIPE_API_HOST,
      port: c.STRIPE_API_PORT,
      protocol: c.STRIPE_API_PROTOCOL,
    },
    crashMode: c.CRASH_MODE,
    billing: {
      pollMs: c.BILLING_POLL_MS,
      leaseMs: c.BILLING_LEASE_MS,
      checkoutDeadlineMs: c.MEMBERSHIP_CHECKOUT_DEADLINE_MS,
      checkoutRecheckMs: c.MEMBERSHIP_CHECKOUT_RECHECK_MS,
      reconcileMs: c.BILLING_RECONCILE_MS,
    },
    notifications: {
      channel: c.NOTIFY_CHANNEL,
      smtp:
        c.NOTIFY_SMTP_HOST === undefined
          ? null
          : {
              host: c.NOTIFY_SMTP_HOST,
              port: c.NOTIFY_SMTP_PORT,
              from: c.NOTIFY_SMTP_FROM ?? '',
              secure: c.NOTIFY_SMTP_SECURE === 'true',
              user: c.NOTIFY_SMTP_USER,
              password: c.NOTIFY_SMTP_PASSWORD,
              timeoutMs: c.NOTIFY_TIMEOUT_MS,
            },
      webhook:
        c.NOTIFY_WEBHOOK_URL === undefined
          ? null
          : {
              url: c.NOTIFY_WEBHOOK_URL,
              secret: c.NOTIFY_WEBHOOK_SECRET,
              timeoutMs: c.NOTIFY_TIMEOUT_MS,
              allowPrivateNetworks: c.TOBIRA_WEBHOOK_ALLOW_PRIVATE === 'true',
            },
      maxAttempts: c.NOTIFY_MAX_ATTEMPTS,
      pollMs: c.NOTIFY_POLL_MS,
      leaseMs: c.NOTIFY_LEASE_MS,
      backoffBaseMs: c.NOTIFY_BACKOFF_BASE_MS,
      backoffMaxMs: c.NOTIFY_BACKOFF_MAX_MS,
    },
  });
}

function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null) {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}
