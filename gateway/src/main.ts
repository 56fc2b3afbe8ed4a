#!/usr/bin/env node
import { resolve } from 'node:path';
import { readFileSync } from 'node:fs';
import {
  MigrationRefused,
  createLogger,
  exitWhenStopped,
  monotonicClock,
  newCorrelationId,
  onShutdownSignals,
  systemClock,
  withCorrelation,
  type Clock,
} from '@tobira/shared';
import { writeSiteBrokerFiles } from './adapters/mqtt/site-broker-files.js';
import { crashHookFromEnv } from './app/context.js';
import { loadConfig } from './config.js';
import { createGateway } from './gateway.js';

/**
 * `tobira-gateway [--config <file>]` (or `npm run gateway -w @tobira/gateway`).
 * `tobira-gateway site-broker-files --config <file> --out <dir>` writes the
 * site Mosquitto's password and ACL files for this gateway's locks and exits.
 * Config from the file and/or TOBIRA_* env (docs/gateway.md). SIGTERM/SIGINT
 * drain and stop; a second signal forces the stop.
 */
// The CLI's own lines carry the cid of this process run.
const baseLog = createLogger('gateway');
const log = withCorrelation(baseLog, newCorrelationId());

/**
 * Test tooling only (`npm run chaos`, docs/reliability.md): `TOBIRA_CLOCK_OFFSET_FILE` names a file
 * holding a number of ms added to the wall clock (or `@<ms>`: a clock stopped at that reading), re-read at most every 50 ms of real time, so a
 * chaos run can step this process's wall clock (back to 1970, a day ahead) while it runs. The
 * gateway sees only a wrong `Date.now()`: elapsed time (the monotonic clock) is untouched, as
 * when an operator or a dead RTC sets a real box's clock. Unset (production): the system clock.
 */
function clockFromEnv(file: string | undefined): Clock {
  if (file === undefined || file === '') return systemClock;
  let offset = 0;
  let stoppedAt: number | null = null;
  let readAt = -Infinity;
  return {
    now() {
      const mono = performance.now();
      if (mono - readAt >= 50) {
        readAt = mono;
        try {
          const text = readFileSync(file, 'utf8').trim();
          // `@<ms>`: a stopped clock reading <ms>; otherwise an offset in ms
          stoppedAt = text.startsWith('@') ? Number(text.slice(1)) : null;
          const v = Number(text);
          if (Number.isFinite(v)) offset = v;
        } catch {
          // no file (yet): keep the last offset
        }
      }
      return stoppedAt !== null && Number.isFinite(stoppedAt) ? stoppedAt : Date.now() + offset;
    },
  };
}

function argValue(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function main(): Promise<void> {
  // every file this process creates (database, -wal/-shm, keys) starts readable by its owner only
  process.umask(0o077);
  const configFile = argValue('--config') ?? process.env.TOBIRA_GATEWAY_CONFIG;
  const config = loadConfig({ file: configFile });
  const gateway = createGateway(config, {
    configFile: configFile === undefined || configFile === '' ? undefined : resolve(configFile),
    log: baseLog,
    crash: crashHookFromEnv(process.env.TOBIRA_CRASH_AT),
    clock: clockFromEnv(process.env.TOBIRA_CLOCK_OFFSET_FILE),
    // explicit: with only `clock` given, trusted time would measure elapsed time on it (GatewayDeps.monotonic)
    monotonic: monotonicClock,
  });
  // One Ctrl-C can arrive several times (npm and tsx forward it): onShutdownSignals
  // takes those as one request; only a later, separate signal forces.
  onShutdownSignals({
    graceful: (sig) => {
      log.info({ sig }, 'draining and stopping');
      exitWhenStopped(gateway.stop(), (e) => log.error({ err: e }, 'stop failed'));
    },
    forced: (sig) => {
      // Everything that matters is already committed in SQLite (inbox, outbox, access log): exiting now loses nothing durable.
      log.warn({ sig }, 'second signal: forcing exit');
      process.exit(1);
    },
  });
  await gateway.start();
  // Tests wait for this line on stdout (pino JSON): it says the daemon took its config and opened its database.
  log.info({ gatewayId: config.gatewayId, http: gateway.httpUrl }, 'tobira-gateway ready');
  // The box's console shows what staff and installers compare: the UI certificate and the CA a lock pins.
  const pki = gateway.sitePki;
  if (pki !== null)
    process.stderr.write(
      `\nSite TLS\n  staff UI certificate SHA-256: ${pki.https.fingerprint}\n  site CA SHA-256 (pair locks with it): ${pki.ca.fingerprint}\n  site CA file: ${pki.ca.certFile}\n\n`,
    );
  // The setup code goes to the terminal (stderr: stdout is JSON lines), never into a log line.
  const setup = gateway.setupCode;
  if (setup !== null)
    process.stderr.write(
      `\nNo staff account yet. Open ${gateway.httpUrl ?? 'the staff UI'}/ui/ and create the first supervisor with this one-time setup code:\n\n    ${setup.code}\n\n(valid until ${new Date(setup.expiresAt).toISOString()}; a restart makes a new one)\n\n`,
    );
}

/**
 * Writes the site Mosquitto's password file and TLS key (0600), its ACL and
 * certificates (0644), owned by `--owner` (default as root: the `mosquitto`
 * user), the site PKI made first if this runs before the gateway's first start.
 */
async function siteBrokerFiles(): Promise<void> {
  process.umask(0o077);
  const out = resolve(argValue('--out') ?? '.');
  const r = await writeSiteBrokerFiles(loadConfig({ file: argValue('--config') }), out, argValue('--owner'), log);
  log.info({ files: r.files, owner: r.owner }, 'site broker files written; reload Mosquitto (SIGHUP) to use them');
}

if (process.argv[2] === 'site-broker-files') {
  siteBrokerFiles().then(
    () => process.exit(0),
    (e: unknown) => {
      log.fatal({ err: e }, 'site broker files not written');
      process.exit(1);
    },
  );
} else {
  main().catch((e: unknown) => {
    // the SQLite file and this code disagree about its schema: nothing was applied (docs/operations.md "Migrations")
    if (e instanceof MigrationRefused) log.fatal({ code: e.code, file: e.file, detail: e.detail }, 'migrations refused; not starting');
    else log.fatal({ err: e }, 'gateway failed to start');
    process.exit(1);
  });
}
