import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { DEFAULT_MAX_COMMAND_TTL_MS, DoorId, GatewayId, LockId, decodeSecret, summarizeIssues } from '@tobira/shared';
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

const Broker = z.strictObject({
  url: z.string().regex(/^(mqtts?|wss?|tcp):\/\//, 'mqtt:// URL'),
  username: z.string().min(1).optional(),
  password: z.string().min(1).optional(),
  /** 4 (MQTT 3.1.1) works with every broker, the embedded aedes included. */
  protocolVersion: z.union([z.literal(4), z.literal(5)]).default(4),
});

/** An IANA zone the runtime knows: `Intl.DateTimeFormat` throws a RangeError on any other. */
const TimeZone = z
  .string()
  .max(64)
  .refine((tz) => {
    try {
      new Intl.DateTimeFormat(undefined, { timeZone: tz });
      return true;
    } catch {
      return false;
    }
  }, { error: (iss) => `unknown time zone ${JSON.stringify(iss.input)}: expected an IANA name such as Asia/Tokyo` });

const Jwk = z.looseObject({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: z.string(), kid: z.string() });

export const GatewayConfig = z.strictObject({
  gatewayId: GatewayId,
  /** JSON file with the gateway's Ed25519 key pair: `{ kid, privateJwk, publicJwk }` (shared generateSigningKeyPair). */
  keyPairFile: z.string().min(1),
  cloud: Broker.extend({
    issuer: z.string().min(1).max(128).default('tobira-cloud'),
    jwks: z.strictObject({ keys: z.array(Jwk).min(1) }),
  }),
  site: Broker,
  sqlitePath: z.string().min(1),
  offlineGraceSeconds: z.int().min(0).default(300),
  locks: z.array(z.strictObject({ lockId: LockId, doorId: DoorId, pairingSecret: Secret })).max(256).default([]),
  credentialPepper: Secret,
  lockout: z.strictObject({ limit: z.int().min(0).default(5), cooldownSeconds: z.int().min(1).default(60) }).default({ limit: 5, cooldownSeconds: 60 }),
  http: z
    .strictObject({ host: z.string().default('127.0.0.1'), port: z.int().min(0).max(65535).default(8080) })
    .nullable()
    .default({ host: '127.0.0.1', port: 8080 }),
  staffToken: z.string().min(16).optional(),
  /** The site's IANA time zone (`provisioning.timeZone`): the staff UI shows times in it. Absent: the browser's zone. */
  timeZone: TimeZone.optional(),
  holdMs: z.int().min(0).max(60_000).default(5000),
  commandTtlMs: z.int().min(1000).max(DEFAULT_MAX_COMMAND_TTL_MS).default(10_000),
  outboxMaxRows: z.int().min(1).default(100_000),
  inboxMaxAttempts: z.int().min(1).default(5),
  inboxClaimLeaseMs: z.int().min(1000).default(30_000),
  resyncIntervalMs: z.int().min(100).default(10_000),
  statusIntervalMs: z.int().min(1000).default(60_000),
  drainTimeoutMs: z.int().min(0).default(5000),
});
export type GatewayConfig = Readonly<z.infer<typeof GatewayConfig>>;
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
  str('TOBIRA_SITE_TIME_ZONE', ['timeZone']);
  num('TOBIRA_OFFLINE_GRACE_SECONDS', ['offlineGraceSeconds']);
  num('TOBIRA_HTTP_PORT', ['http', 'port']);
  str('TOBIRA_HTTP_HOST', ['http', 'host']);
  const jwks = env.TOBIRA_CLOUD_JWKS;
  if (jwks !== undefined && jwks !== '') set(['cloud', 'jwks'], JSON.parse(jwks) as unknown);
  return parseConfig(raw);
}
