import { createLogger, newCorrelationId, onShutdownSignals, withCorrelation } from '@tobira/shared';
import { createCloud, parseConfig } from './index.js';

/**
 * Runs the cloud core from the environment. SIGTERM/SIGINT drain; a later,
 * separate signal forces exit (one Ctrl-C forwarded by npm/tsx counts once).
 */
const baseLog = createLogger('cloud');
// The process's own lines carry the cid of this run.
const log = withCorrelation(baseLog, newCorrelationId());
const cloud = createCloud(parseConfig(process.env), { log: baseLog });
await cloud.start();
log.info({ issuer: cloud.issuer }, 'cloud started');

onShutdownSignals({
  graceful: (signal) => {
    log.info({ signal }, 'stopping');
    cloud.stop().then(
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
