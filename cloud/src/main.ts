import { MigrationRefused, createLogger, exitWhenStopped, newCorrelationId, onShutdownSignals, withCorrelation } from '@tobira/shared';
import { buildCloud } from './cloud.js';
import { ConfigError, parseConfig, requireKeks, requireSigningJwk, type CloudConfig } from './config.js';

/**
 * Runs the cloud from the environment: the core (docs/cloud.md) and the admin
 * HTTP API (docs/api.md) on ADMIN_API_HOST:ADMIN_API_PORT, wired by cloud.ts.
 * The first admin token is TOBIRA_BOOTSTRAP_ADMIN_TOKEN (or `npm run admin --
 * tokens bootstrap`); there is no default. SIGTERM/SIGINT drain; a later,
 * separate signal forces exit (one Ctrl-C forwarded by npm/tsx counts once).
 */
const baseLog = createLogger('cloud');
// The process's own lines carry the cid of this run.
const log = withCorrelation(baseLog, newCorrelationId());
let config: CloudConfig;
try {
  config = parseConfig(process.env);
  // before anything starts: a cloud without its signing key or its KEK must not come up (docs/cloud.md "Configuration")
  requireSigningJwk(config);
  requireKeks(config);
} catch (e) {
  if (!(e instanceof ConfigError)) throw e;
  log.fatal({ code: e.code, variable: e.variable, err: e.message }, 'configuration refused; not starting');
  log.flush();
  process.exit(1);
}
const tobira = buildCloud(config, { log: baseLog });
try {
  await tobira.start();
} catch (e) {
  if (e instanceof ConfigError) {
    // found at start: the database holds secrets the configured KEKs do not open (KEK_UNKNOWN, KEK_WRONG)
    log.fatal({ code: e.code, variable: e.variable, err: e.message }, 'configuration refused; not starting');
    log.flush();
    process.exit(1);
  }
  if (!(e instanceof MigrationRefused)) throw e;
  // the database and this code disagree about its schema: nothing was applied (docs/operations.md "Migrations")
  log.fatal({ code: e.code, file: e.file, detail: e.detail }, 'migrations refused; not starting');
  log.flush();
  process.exit(1);
}
log.info({ issuer: tobira.cloud.issuer, api: tobira.apiUrl, brokerAccounts: tobira.brokerAccounts.kind }, 'cloud started');

onShutdownSignals({
  graceful: (signal) => {
    log.info({ signal }, 'stopping');
    exitWhenStopped(tobira.stop(), (e) => log.error({ err: String(e) }, 'stop failed'));
  },
  forced: (signal) => {
    log.warn({ signal }, 'second signal: exiting now');
    process.exit(1);
  },
});
