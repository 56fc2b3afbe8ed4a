import { createLogger, newCorrelationId, onShutdownSignals, systemClock, withCorrelation } from '@tobira/shared';
import { z } from 'zod';
import { ConfigError, requireSigningJwk, type CloudConfig } from './config.js';
import { brokerAccountsFromConfig, createCloud, parseConfig, startAdminApi } from './index.js';

/**
 * Runs the cloud from the environment: the core (docs/cloud.md) and the admin
 * HTTP API (docs/api.md) on ADMIN_API_HOST:ADMIN_API_PORT. The first admin
 * token is TOBIRA_BOOTSTRAP_ADMIN_TOKEN (or `npm run admin -- tokens
 * bootstrap`); there is no default. SIGTERM/SIGINT drain; a later, separate
 * signal forces exit (one Ctrl-C forwarded by npm/tsx counts once).
 */
const ApiEnv = z.object({
  ADMIN_API_HOST: z.string().default('127.0.0.1'),
  ADMIN_API_PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  TOBIRA_BOOTSTRAP_ADMIN_TOKEN: z.string().optional(),
  /** Let webhook URLs point at internal addresses (SSRF guard off); only for a closed network. */
  TOBIRA_WEBHOOK_ALLOW_PRIVATE: z.enum(['true', 'false']).default('false'),
  /** Lifetime in days of a new API token that names none; 0: no expiry unless asked. */
  TOBIRA_API_TOKEN_TTL_DAYS: z.coerce.number().int().min(0).max(3650).default(90),
  /** How long /healthz waits for the database before it reports DATABASE_UNREACHABLE. */
  TOBIRA_HEALTH_DB_TIMEOUT_MS: z.coerce.number().int().min(10).max(60_000).default(2000),
  /** Requests per client IP per minute, counted before authentication (docs/api.md "Rate limits"). */
  TOBIRA_RATE_LIMIT_IP_MAX: z.coerce.number().int().min(1).default(1_200),
});

const baseLog = createLogger('cloud');
// The process's own lines carry the cid of this run.
const log = withCorrelation(baseLog, newCorrelationId());
const apiEnv = ApiEnv.parse(process.env);
let config: CloudConfig;
try {
  config = parseConfig(process.env);
  // before anything starts: a cloud without its signing key must not come up (docs/cloud.md "Configuration")
  requireSigningJwk(config);
} catch (e) {
  if (!(e instanceof ConfigError)) throw e;
  log.fatal({ code: e.code, variable: e.variable, err: e.message }, 'configuration refused; not starting');
  log.flush();
  process.exit(1);
}
// The broker accounts' admin link (BROKER_ACCOUNTS) starts before the cloud and stops after it.
const brokerAccounts = brokerAccountsFromConfig(config, baseLog);
await brokerAccounts.start();
const cloud = createCloud(config, { log: baseLog, brokerAccounts });
await cloud.start();
const api = await startAdminApi({
  cloud,
  db: cloud.db,
  log: baseLog,
  clock: systemClock,
  host: apiEnv.ADMIN_API_HOST,
  port: apiEnv.ADMIN_API_PORT,
  config: {
    gatewayBrokerUrl: config.gatewayBrokerUrl,
    webhookAllowPrivateNetworks: apiEnv.TOBIRA_WEBHOOK_ALLOW_PRIVATE === 'true',
    tokenDefaultTtlMs: apiEnv.TOBIRA_API_TOKEN_TTL_DAYS === 0 ? null : apiEnv.TOBIRA_API_TOKEN_TTL_DAYS * 86_400_000,
    healthDbTimeoutMs: apiEnv.TOBIRA_HEALTH_DB_TIMEOUT_MS,
    rateLimitIpMax: apiEnv.TOBIRA_RATE_LIMIT_IP_MAX,
  },
  ...(apiEnv.TOBIRA_BOOTSTRAP_ADMIN_TOKEN ? { bootstrapAdminToken: apiEnv.TOBIRA_BOOTSTRAP_ADMIN_TOKEN } : {}),
});
log.info({ issuer: cloud.issuer, api: api.url, brokerAccounts: brokerAccounts.kind }, 'cloud started');

onShutdownSignals({
  graceful: (signal) => {
    log.info({ signal }, 'stopping');
    api
      .close()
      .then(() => cloud.stop())
      .then(() => brokerAccounts.stop())
      .then(
        () => process.exit(0),
        (e: unknown) => {
          log.error({ err: String(e) }, 'stop failed');
          process.exit(1);
        },
      );
  },
  forced: (signal) => {
    log.warn({ signal }, 'second signal: exiting now');
    process.exit(1);
  },
});
