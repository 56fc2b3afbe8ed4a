import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  DEFAULT_MAX_COMMAND_TTL_MS,
  isLoopbackHost,
  parseBrokerUrl,
  DoorId,
  GatewayId,
  LockId,
  UPLINK_BATCH_MAX_ITEMS,
  decodeSecret,
  summarizeIssues,
} from '@tobira/shared';
import { z } from 'zod';

/**
 * Gateway configuration: parsed once with zod into a frozen object and passed
 * down; nothing reads the environment after this. Sources: a JSON file
 * (`--config <file>` or TOBIRA_GATEWAY_CONFIG) overlaid with TOBIRA_* env
 * variables (see docs/gateway.md). There is no default staff token: without
 * one, local staff actions are refused.
 */
const Secret = z.string().refine((s) => {
  try {
    decodeSecret(s);
    return true;
  } catch {
    return false;
  }
}, 'base64url secret of at least 16 bytes');

/** The URL's host as the MQTT client will read it, or null when parsers disagree on it (`parseBrokerUrl`). */
const brokerHost = (url: string): URL | null => {
  try {
    return parseBrokerUrl(url);
  } catch {
    return null;
  }
};
const secureOrLoopback = (url: string): boolean => {
  const u = brokerHost(url);
  return u !== null && (u.protocol === 'mqtts:' || u.protocol === 'wss:' || isLoopbackHost(u.hostname));
};

const Broker = z.strictObject({
  url: z
    .string()
    .regex(/^(mqtts?|wss?|tcp):\/\//, 'mqtt:// URL')
    .refine((u) => brokerHost(u) !== null, {
      message: 'BROKER_URL_AMBIGUOUS: a broker URL carries no userinfo, backslash or whitespace (the login goes in username/password)',
    }),
  username: z.string().min(1).optional(),
  password: z.string().min(1).optional(),
  /** 4 (MQTT 3.1.1) works with every broker, the embedded aedes included. */
  protocolVersion: z.union([z.literal(4), z.literal(5)]).default(4),
});

/** An IANA zone the runtime knows: `Intl.DateTimeFormat` throws a RangeError on any other. */
const TimeZone = z
  .string()
  .max(64)
  .refine(
    (tz) => {
      try {
        new Intl.DateTimeFormat(undefined, { timeZone: tz });
        return true;
      } catch {
        return false;
      }
    },
    { error: (iss) => `unknown time zone ${JSON.stringify(iss.input)}: expected an IANA name such as Asia/Tokyo` },
  );

/** A Host header value to accept: a DNS name, an IPv4 address or a bracketed IPv6 address, optionally with `:port`. */
const HostName = z
  .string()
  .regex(
    /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/,
    'a host name, IPv4 address or [IPv6] address, optionally with :port',
  )
  .transform((h) => h.toLowerCase());

const Jwk = z.looseObject({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: z.string(), kid: z.string() });

export const GatewayConfig = z.strictObject({
  gatewayId: GatewayId,
  /** JSON file with the gateway's Ed25519 key pair: `{ kid, privateJwk, publicJwk }` (shared generateSigningKeyPair). */
  keyPairFile: z.string().min(1),
  /**
   * The cloud's broker: its login and every downlink cross the internet, so mqtts:// (or wss://) unless the
   * broker is on this box (the demo, tests).
   */
  cloud: Broker.extend({
    issuer: z.string().min(1).max(128).default('tobira-cloud'),
    jwks: z.strictObject({ keys: z.array(Jwk).min(1) }),
  }).refine((b) => secureOrLoopback(b.url), {
    message: 'CLOUD_PLAINTEXT_NOT_LOOPBACK: the cloud broker is reached over mqtts:// (plain mqtt:// on loopback only)',
  }),
  /**
   * The locks' broker. mqtts:// (the default of a real install): the gateway
   * trusts only the site CA it made (`tls`). mqtt:// is refused unless the
   * host is a loopback address (the demo, tests, a broker on the same box).
   */
  site: Broker.refine((b) => secureOrLoopback(b.url), {
    message: 'SITE_PLAINTEXT_NOT_LOOPBACK: the site broker on a LAN address is reached over mqtts:// (plain mqtt:// on loopback only)',
  }),
  /**
   * The site PKI (docs/gateway.md "Site TLS"): the site CA the locks pin and
   * the certificates of the site broker and the staff UI, made at the first
   * start and renewed at every start and daily. `dir` defaults to `tls/` in
   * the database's folder; `names` are the DNS names and addresses the locks
   * and staff reach the box by (loopback names are always in).
   */
  tls: z
    .strictObject({
      dir: z.string().min(1).optional(),
      names: z.array(z.string().min(1).max(253)).max(32).default([]),
    })
    .default({ names: [] }),
  sqlitePath: z.string().min(1),
  offlineGraceSeconds: z.int().min(0).default(300),
  locks: z
    .array(
      z.strictObject({
        lockId: LockId,
        doorId: DoorId,
        pairingSecret: Secret,
        /** A guest's room: staff may never put its door in passage mode (PASSAGE_GUEST_ROOM). A door is one if any of its locks says so. */
        guestRoom: z.boolean().optional(),
      }),
    )
    .max(256)
    .default([]),
  credentialPepper: Secret,
  lockout: z
    .strictObject({ limit: z.int().min(0).default(5), cooldownSeconds: z.int().min(1).default(60) })
    .default({ limit: 5, cooldownSeconds: 60 }),
  /** Wrong credentials of one type across all locks (guessing spread over doors); limit 0 = off. */
  siteLockout: z
    .strictObject({
      limit: z.int().min(0).default(20),
      windowSeconds: z.int().min(1).default(600),
      cooldownSeconds: z.int().min(1).default(300),
    })
    .default({ limit: 20, windowSeconds: 600, cooldownSeconds: 300 }),
  /** Per-lock token bucket, applied before anything is written; a person at a keypad never comes near it. */
  requestRate: z
    .strictObject({ burst: z.int().min(1).default(10), perSecond: z.number().positive().max(1000).default(1) })
    .default({ burst: 10, perSecond: 1 }),
  /**
   * Per-lock token bucket over what a lock reports (state, event, presence; not door requests):
   * over it a message is dropped before anything is written, and LOCK_EVENTS_THROTTLED raised.
   * A busy door sends a few states per passage; the burst covers a reconnect's re-announcements.
   */
  lockEventRate: z
    .strictObject({ burst: z.int().min(1).max(10_000).default(100), perSecond: z.number().positive().max(1000).default(5) })
    .default({ burst: 100, perSecond: 5 }),
  /** access_log retention (hourly purge); rows the cloud does not have yet are never pruned. */
  accessLog: z
    .strictObject({ maxAgeDays: z.int().min(1).default(30), maxRows: z.int().min(1).default(100_000) })
    .default({ maxAgeDays: 30, maxRows: 100_000 }),
  /** Free space the data folder's file system must keep; below it only offline-capable keys open (STORAGE_FULL). */
  storage: z
    .strictObject({
      minFreeBytes: z
        .int()
        .min(0)
        .default(256 * 1024 * 1024),
      checkIntervalMs: z.int().min(1000).default(30_000),
    })
    .default({ minFreeBytes: 256 * 1024 * 1024, checkIntervalMs: 30_000 }),
  http: z
    .strictObject({
      host: z.string().default('127.0.0.1'),
      port: z.int().min(0).max(65535).default(8080),
      /**
       * Host header values answered (DNS rebinding): `name` (any port) or `name:port`, matched without case.
       * Absent: the listen address, localhost, 127.0.0.1 and [::1], each with the bound port.
       */
      allowedHosts: z.array(HostName).min(1).max(64).optional(),
      /** Wrong tokens (staff or metrics) per client IP per window, then 429 AUTH_RATE_LIMITED until the window ends. */
      authFailures: z
        .strictObject({ max: z.int().min(1).max(10_000).default(10), windowSeconds: z.int().min(1).max(86_400).default(300) })
        .default({ max: 10, windowSeconds: 300 }),
      /**
       * HTTPS with the site CA's staff-UI certificate. Default: on, except on a
       * loopback `host` (the demo, tests, a local proxy in front). Off on any
       * other address is refused (HTTP_PLAINTEXT_NOT_LOOPBACK): a LAN never
       * carries a staff session in clear.
       */
      tls: z.boolean().optional(),
      /** The staff UI is reached over HTTPS (TLS here or at a proxy): the session cookie is `__Host-tobira_staff`, Secure. Default: on when `tls` is. */
      secureCookies: z.boolean().optional(),
      /** Argon2 hashes/verifies the whole process runs at once, and how many may wait; beyond, 503 SIGN_IN_BUSY (app/password-work.ts). */
      passwordWork: z
        .strictObject({
          concurrency: z.int().min(1).max(16),
          queue: z.int().min(0).max(1000),
          perSource: z.int().min(1).max(1000).optional(),
          priorityQueue: z.int().min(0).max(1000).optional(),
          priorityPerSource: z.int().min(1).max(1000).optional(),
        })
        .optional(),
      /**
       * TCP connections of the HTTP server (http/connections.ts): open at once
       * per client address (64) and in all (1024), the rest destroyed at
       * accept; seconds to send a request head (10) and a whole request (10),
       * and a kept-alive connection's idle time (10), then it is closed.
       */
      connections: z
        .strictObject({
          perAddress: z.int().min(1).max(10_000).optional(),
          max: z.int().min(1).max(100_000).optional(),
          headersTimeoutSeconds: z.int().min(1).max(300).optional(),
          requestTimeoutSeconds: z.int().min(1).max(300).optional(),
          keepAliveSeconds: z.int().min(1).max(300).optional(),
        })
        .optional(),
      /** A staff session ends after this long without a request (default 1800 s) ... */
      sessionIdleSeconds: z.int().min(60).max(86_400).optional(),
      /** ... and this long after sign-in, whatever happens (default 43200 s = 12 h). */
      sessionMaxSeconds: z
        .int()
        .min(300)
        .max(7 * 86_400)
        .optional(),
    })
    .refine((h) => h.tls !== false || isLoopbackHost(h.host), {
      message: 'HTTP_PLAINTEXT_NOT_LOOPBACK: http.tls false is allowed on a loopback host only',
    })
    .nullable()
    .default({ host: '127.0.0.1', port: 8080, authFailures: { max: 10, windowSeconds: 300 } }),
  staffToken: z.string().min(16).optional(),
  /**
   * Supervisors' TOTP second factor (docs/gateway.md "Second factor (TOTP)"):
   * `required` (a supervisor without one enrols at the next sign-in, before
   * any session), `optional` (the default: asked of those who enrolled) or
   * `off` (never asked; enrolments are kept). `issuer` is the name the
   * authenticator app shows (default `Tobira <gatewayId>`).
   */
  staffTotp: z
    .strictObject({
      supervisors: z.enum(['required', 'optional', 'off']).default('optional'),
      issuer: z.string().trim().min(1).max(64).optional(),
    })
    .default({ supervisors: 'optional' }),
  /** Bearer token `/metrics` asks for; absent: `/metrics` is open (it holds counts, no keys or names). */
  metricsToken: z.string().min(16).optional(),
  /** The site's IANA time zone (`provisioning.timeZone`): the staff UI shows times in it. Absent: the browser's zone. */
  timeZone: TimeZone.optional(),
  holdMs: z.int().min(0).max(60_000).default(5000),
  commandTtlMs: z.int().min(1000).max(DEFAULT_MAX_COMMAND_TTL_MS).default(10_000),
  /** How old a lock's request may be when decided, and how far ahead a lock's clock may run (REQUEST_STALE, LOCK_CLOCK_AHEAD). */
  requestMaxAgeMs: z.int().min(1000).max(60_000).default(10_000),
  /**
   * Passage mode (docs/gateway.md "Passage mode"): each unlock holds the bolt
   * for `holdMs` and is renewed after `renewAfterMs`, so a gateway that stops
   * renewing leaves a door that relocks by itself within `holdMs`.
   */
  passage: z
    .strictObject({ holdMs: z.int().min(1000).max(60_000).default(30_000), renewAfterMs: z.int().min(100).max(60_000).default(10_000) })
    .refine((p) => p.renewAfterMs < p.holdMs, { message: 'renewAfterMs must be below holdMs' })
    .default({ holdMs: 30_000, renewAfterMs: 10_000 }),
  outboxMaxRows: z.int().min(1).default(100_000),
  inboxMaxAttempts: z.int().min(1).default(5),
  inboxClaimLeaseMs: z.int().min(1000).default(30_000),
  resyncIntervalMs: z.int().min(100).default(10_000),
  uplinkAckTimeoutMs: z.int().min(1000).default(60_000),
  /**
   * Outbox rows sent under one signature (`uplink.batch`). The
   * cloud must accept uplink.batch (this release or later: upgrade the cloud
   * first); 1 sends every row alone, as older gateways do.
   */
  uplinkBatchMax: z.int().min(1).max(UPLINK_BATCH_MAX_ITEMS).default(50),
  statusIntervalMs: z.int().min(1000).default(60_000),
  drainTimeoutMs: z.int().min(0).default(5000),
});
export type GatewayConfig = Readonly<z.infer<typeof GatewayConfig>>;

/** Whether the staff UI listens with TLS: `http.tls`, else on unless the bind is loopback. */
export function httpUsesTls(http: NonNullable<GatewayConfig['http']>): boolean {
  return http.tls ?? !isLoopbackHost(http.host);
}
export type GatewayConfigInput = z.input<typeof GatewayConfig>;

function deepFreeze<T>(o: T): T {
  if (o !== null && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

export function parseConfig(input: unknown): GatewayConfig {
  const r = GatewayConfig.safeParse(input);
  if (!r.success) throw new Error(`invalid gateway config: ${summarizeIssues(r.error)}`);
  return deepFreeze(r.data);
}

type Env = Readonly<Record<string, string | undefined>>;

/** Reads the config file (if any), overlays env, parses once. Relative paths in the file are relative to the file. */
export function loadConfig(opts: { file?: string | undefined; env?: Env } = {}): GatewayConfig {
  const env = opts.env ?? process.env;
  const file = opts.file ?? env.TOBIRA_GATEWAY_CONFIG;
  let raw: Record<string, unknown> = {};
  if (file !== undefined && file !== '') {
    raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    const base = dirname(resolve(file));
    for (const k of ['keyPairFile', 'sqlitePath'] as const) {
      const v = raw[k];
      if (typeof v === 'string' && !v.startsWith('/') && v !== ':memory:') raw[k] = resolve(base, v);
    }
    const tls: unknown = raw.tls;
    if (typeof tls === 'object' && tls !== null && 'dir' in tls && typeof tls.dir === 'string' && !tls.dir.startsWith('/'))
      raw.tls = { ...tls, dir: resolve(base, tls.dir) };
  }
  const set = (path: string[], value: unknown) => {
    let o = raw;
    for (const p of path.slice(0, -1)) o = (o[p] ??= {}) as Record<string, unknown>;
    o[path[path.length - 1]!] = value;
  };
  const str = (name: string, path: string[]) => {
    const v = env[name];
    if (v !== undefined && v !== '') set(path, v);
  };
  const num = (name: string, path: string[]) => {
    const v = env[name];
    if (v !== undefined && v !== '') set(path, Number(v));
  };
  str('TOBIRA_GATEWAY_ID', ['gatewayId']);
  str('TOBIRA_GATEWAY_KEY_FILE', ['keyPairFile']);
  str('TOBIRA_CLOUD_MQTT_URL', ['cloud', 'url']);
  str('TOBIRA_CLOUD_MQTT_USERNAME', ['cloud', 'username']);
  str('TOBIRA_CLOUD_MQTT_PASSWORD', ['cloud', 'password']);
  str('TOBIRA_CLOUD_ISSUER', ['cloud', 'issuer']);
  str('TOBIRA_SITE_MQTT_URL', ['site', 'url']);
  str('TOBIRA_SITE_MQTT_USERNAME', ['site', 'username']);
  str('TOBIRA_SITE_MQTT_PASSWORD', ['site', 'password']);
  str('TOBIRA_SQLITE_PATH', ['sqlitePath']);
  str('TOBIRA_CREDENTIAL_PEPPER', ['credentialPepper']);
  str('TOBIRA_STAFF_TOKEN', ['staffToken']);
  str('TOBIRA_METRICS_TOKEN', ['metricsToken']);
  str('TOBIRA_SITE_TIME_ZONE', ['timeZone']);
  str('TOBIRA_STAFF_TOTP', ['staffTotp', 'supervisors']);
  num('TOBIRA_OFFLINE_GRACE_SECONDS', ['offlineGraceSeconds']);
  num('TOBIRA_HTTP_PORT', ['http', 'port']);
  num('TOBIRA_UPLINK_BATCH_MAX', ['uplinkBatchMax']);
  str('TOBIRA_HTTP_HOST', ['http', 'host']);
  if (env.TOBIRA_HTTP_TLS !== undefined && env.TOBIRA_HTTP_TLS !== '') set(['http', 'tls'], env.TOBIRA_HTTP_TLS === 'true');
  str('TOBIRA_TLS_DIR', ['tls', 'dir']);
  const names = env.TOBIRA_TLS_NAMES;
  if (names !== undefined && names !== '')
    set(
      ['tls', 'names'],
      names.split(',').map((n) => n.trim()),
    );
  if (env.TOBIRA_HTTP_SECURE_COOKIES !== undefined && env.TOBIRA_HTTP_SECURE_COOKIES !== '')
    set(['http', 'secureCookies'], env.TOBIRA_HTTP_SECURE_COOKIES === 'true');
  const hosts = env.TOBIRA_HTTP_ALLOWED_HOSTS;
  if (hosts !== undefined && hosts !== '')
    set(
      ['http', 'allowedHosts'],
      hosts.split(',').map((h) => h.trim()),
    );
  const jwks = env.TOBIRA_CLOUD_JWKS;
  if (jwks !== undefined && jwks !== '') set(['cloud', 'jwks'], JSON.parse(jwks) as unknown);
  return parseConfig(raw);
}
