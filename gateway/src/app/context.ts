import type { Clock, Logger, MonotonicClock } from '@tobira/shared';
import { advanceFloor, trustedNow, type TimeAnchor, type TimeFloor } from '../domain/freshness.js';
import type { ReadableDb } from '../adapters/sqlite/db.js';
import { readSettings } from '../adapters/sqlite/settings.js';
import type { GatewayStore } from '../adapters/sqlite/store.js';
import type { Metrics } from '../metrics.js';

/** Named crash points (DESIGN.md §9). `TOBIRA_CRASH_AT=<name>` turns one into a SIGKILL of the daemon. */
export const CRASH_POINTS = ['afterInboxInsertBeforeApply', 'afterApplyBeforeAck', 'afterDecisionBeforePublish'] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number];
export type CrashHook = (point: CrashPoint) => void;

export interface AppContext {
  readonly gatewayId: string;
  /** The opened store: its handle (`store.db`, for the table modules) and the bounds its tables keep. */
  readonly store: GatewayStore;
  readonly time: TrustedTime;
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly crash: CrashHook;
  /** Wakes the uplink sender after a commit that wrote outbox rows. */
  readonly outboxWritten: () => void;
}

/**
 * The gateway's one source of trusted time (domain/freshness.ts): the wall
 * clock, floored by the persisted time floor carried forward on the
 * monotonic clock. One instance per running gateway: the anchor is process state.
 */
export class TrustedTime {
  #anchor: TimeAnchor | null = null;
  constructor(
    readonly wall: Clock,
    readonly mono: MonotonicClock,
  ) {}

  /** `floor`: the settings row when the caller has just read it (a decision batch reads it once). */
  now(db: ReadableDb, floor: TimeFloor = readSettings(db)): number {
    const a = advanceFloor(this.#anchor, floor, this.mono.now());
    this.#anchor = { floorMs: a.floorMs, monoMs: a.monoMs };
    return trustedNow(this.wall.now(), a.nowFloorMs);
  }
}

/** Trusted time: never earlier than the newest verified iat or the time already acted on, and advancing with real elapsed time. */
export function nowOf(ctx: Pick<AppContext, 'store' | 'time'>): number {
  return ctx.time.now(ctx.store.db);
}

export const noCrash: CrashHook = () => {};

/** The crash hook of the daemon: kill -9 ourselves at the named point, as a power cut would. */
export function crashHookFromEnv(value: string | undefined): CrashHook {
  if (value === undefined || value === '') return noCrash;
  if (!CRASH_POINTS.some((p) => p === value)) throw new Error(`TOBIRA_CRASH_AT: unknown crash point ${value}`);
  return (point) => {
    if (point === value) process.kill(process.pid, 'SIGKILL');
  };
}
