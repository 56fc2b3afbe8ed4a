import { createLogger } from '@tobira/shared';
import { createCloud, parseConfig } from './index.js';

/** Runs the cloud core from the environment. SIGTERM/SIGINT drain; a second signal forces exit. */
const log = createLogger('cloud');
const cloud = createCloud(parseConfig(process.env), { log });
await cloud.start();
log.info({ issuer: cloud.issuer }, 'cloud started');

let stopping = false;
const onSignal = (signal: string) => {
  if (stopping) {
    log.warn({ signal }, 'second signal: exiting now');
    process.exit(1);
  }
  stopping = true;
  log.info({ signal }, 'stopping');
  cloud.stop().then(
    () => process.exit(0),
    (e: unknown) => {
      log.error({ err: String(e) }, 'stop failed');
      process.exit(1);
    },
  );
};
process.on('SIGTERM', () => onSignal('SIGTERM'));
process.on('SIGINT', () => onSignal('SIGINT'));
