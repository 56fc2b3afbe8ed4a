#!/usr/bin/env node
import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
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
import { mosquittoSiteFiles } from './adapters/mqtt/site-broker.js';
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
  const config = loadConfig({ file: argValue('--config') });
  const gateway = createGateway(config, {
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
  // The setup code goes to the terminal (stderr: stdout is JSON lines), never into a log line.
  const setup = gateway.setupCode;
  if (setup !== null)
    process.stderr.write(
      `\nNo staff account yet. Open ${gateway.httpUrl ?? 'the staff UI'}/ui/ and create the first supervisor with this one-time setup code:\n\n    ${setup.code}\n\n(valid until ${new Date(setup.expiresAt).toISOString()}; a restart makes a new one)\n\n`,
    );
}

/** Writes `<out>/tobira-site.passwd` (mode 0600: hashes, but still only for the broker) and `<out>/tobira-site.acl`. */
function siteBrokerFiles(): void {
  const out = resolve(argValue('--out') ?? '.');
  const files = mosquittoSiteFiles(loadConfig({ file: argValue('--config') }));
  const passwd = join(out, 'tobira-site.passwd');
  // `mode` applies only when the file is created: tighten an existing one before the hashes go in
  if (existsSync(passwd)) chmodSync(passwd, 0o600);
  writeFileSync(passwd, files.passwd, { mode: 0o600 });
  writeFileSync(join(out, 'tobira-site.acl'), files.acl, { mode: 0o644 });
  log.info({ passwd, acl: join(out, 'tobira-site.acl') }, 'site broker files written; reload Mosquitto (SIGHUP) to use them');
}

if (process.argv[2] === 'site-broker-files') {
  try {
    siteBrokerFiles();
    process.exit(0);
  } catch (e) {
    log.fatal({ err: e }, 'site broker files not written');
    process.exit(1);
  }
} else {
  main().catch((e: unknown) => {
    // the SQLite file and this code disagree about its schema: nothing was applied (docs/operations.md "Migrations")
    if (e instanceof MigrationRefused) log.fatal({ code: e.code, file: e.file, detail: e.detail }, 'migrations refused; not starting');
    else log.fatal({ err: e }, 'gateway failed to start');
    process.exit(1);
  });
}
