import type { Clock, Logger } from '@tobira/shared';
import type { Tx } from '../adapters/db/db.js';
import type { SecretBox } from '../adapters/kek.js';
import type { BrokerAccounts } from './broker-accounts.js';
import type { CrashHook } from './crash.js';
import type { NotificationChannel } from '../domain/notifications.js';

/** What every use case needs. Wired once in index.ts. */
export interface AppDeps {
  /** The database, or the caller's open transaction (a verb run with `{ db: tx }`). */
  readonly db: Tx;
  /**
   * `db` is the caller's open transaction (`{ db: tx }`, the admin API's unit):
   * a key verb writes in it directly, without a savepoint of its own (two
   * round trips fewer; it throws only for bugs and broken infrastructure,
   * which roll the caller's unit back anyway).
   */
  readonly inCallerTransaction?: boolean;
  readonly clock: Clock;
  readonly log: Logger;
  readonly crash: CrashHook;
  /** Wakes the in-process dispatcher after a commit that wrote outbox rows. */
  readonly wake: () => void;
  /** The cloud broker's per-gateway accounts (created at registration). */
  readonly brokerAccounts: BrokerAccounts;
  /** Seals and opens the stored secrets (credential peppers) with the KEK ring (docs/security.md "Secrets at rest"). */
  readonly secrets: SecretBox;
  /** The cap of an offline-capable key's offline validity, and its value when the issue names none (config OFFLINE_KEY_MAX_SECONDS); default DEFAULT_OFFLINE_MAX_SECONDS. */
  readonly offlineKeyMaxSeconds?: number;
  /** The channel new notifications are queued for (config NOTIFY_CHANNEL); default `log`. */
  readonly notificationChannel?: NotificationChannel;
}
