import type { Clock, Logger } from '@tobira/shared';
import type { Db } from '../adapters/db/db.js';
import type { CrashHook } from './crash.js';

/** What every use case needs. Wired once in index.ts. */
export interface AppDeps {
  readonly db: Db;
  readonly clock: Clock;
  readonly log: Logger;
  readonly crash: CrashHook;
  /** Wakes the in-process dispatcher after a commit that wrote outbox rows. */
  readonly wake: () => void;
}
