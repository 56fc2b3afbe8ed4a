import type { Clock, Logger } from '@tobira/shared';
import type { Tx } from '../adapters/db/db.js';
import type { BrokerAccounts } from './broker-accounts.js';
import type { CrashHook } from './crash.js';

/** What every use case needs. Wired once in index.ts. */
export interface AppDeps {
  /** The database, or the caller's open transaction (a verb run with `{ db: tx }`). */
  readonly db: Tx;
  readonly clock: Clock;
  readonly log: Logger;
  readonly crash: CrashHook;
  /** Wakes the in-process dispatcher after a commit that wrote outbox rows. */
  readonly wake: () => void;
  /** The cloud broker's per-gateway accounts (created at registration). */
  readonly brokerAccounts: BrokerAccounts;
}
