import type { Clock, Logger } from '@tobira/shared';
import { trustedNow } from '../domain/freshness.js';
import type { GatewayStore } from '../adapters/sqlite/store.js';
import type { Metrics } from '../metrics.js';

/** Named crash points (DESIGN.md §9). `TOBIRA_CRASH_AT=<name>` turns one into a SIGKILL of the daemon. */
export const CRASH_POINTS = ['afterInboxInsertBeforeApply', 'afterApplyBeforeAck', 'afterDecisionBeforePublish'] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number];
export type CrashHook = (point: CrashPoint) => void;

export interface AppContext {
  readonly gatewayId: string;
  readonly store: GatewayStore;
  readonly clock: Clock;
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly crash: CrashHook;
  /** Wakes the uplink sender after a commit that wrote outbox rows. */
  readonly outboxWritten: () => void;
}

/** Trusted time: never earlier than the newest verified iat or the time already acted on. */
export function nowOf(ctx: Pick<AppContext, 'store' | 'clock'>): number {
  return trustedNow(ctx.clock.now(), ctx.store.settings());
}

export const noCrash: CrashHook = () => {};

/** The crash hook of the daemon: kill -9 ourselves at the named point, as a power cut would. */
export function crashHookFromEnv(value: string | undefined): CrashHook {
  if (value === undefined || value === '') return noCrash;
  if (!(CRASH_POINTS as readonly string[]).includes(value)) throw new Error(`TOBIRA_CRASH_AT: unknown crash point ${value}`);
  return (point) => {
    if (point === value) process.kill(process.pid, 'SIGKILL');
  };
}
