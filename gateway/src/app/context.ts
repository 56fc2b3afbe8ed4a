import type { Clock, Logger, MonotonicClock } from '@tobira/shared';
import { advanceFloor, trustedNow, type TimeAnchor, type TimeFloor } from '../domain/freshness.js';
import type { ReadableDb } from '../adapters/sqlite/db.js';
import { readSettings } from '../adapters/sqlite/settings.js';
import type { GatewayStore } from '../adapters/sqlite/store.js';
import type { Metrics } from '../metrics.js';
import type { LockWatch } from './lock-watch.js';

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
  /**
   * What this process heard from the locks on the current site connection
   * (privacy). Absent (tests of one part alone): the stored privacy counts as known.
   */
  readonly watch?: LockWatch;
}

/** A resync answer's round trip above this proves nothing after a restart (TrustedTime.answered). */
export const PROOF_MAX_ROUND_TRIP_MS = 10_000;

export type TimeProof =
  | { readonly kind: 'proven'; readonly floorMs: number; readonly roundTripMs: number }
  | { readonly kind: 'late'; readonly roundTripMs: number }
  | { readonly kind: 'foreign' };

/**
 * The gateway's one source of trusted time (domain/freshness.ts): the wall
 * clock, floored by the persisted time floor carried forward on the
 * monotonic clock. One instance per running gateway: the anchor is process state.
 */
export class TrustedTime {
  #anchor: TimeAnchor | null = null;
  /** Resync requests this process sent and not yet answered: requestId → monotonic reading when sent. */
  readonly #asked = new Map<string, number>();
  #proven = false;
  constructor(
    readonly wall: Clock,
    readonly mono: MonotonicClock,
  ) {}

  /**
   * Whether this process has proven the time since it started. Across a
   * restart the monotonic clock means nothing and the wall clock may be
   * wrong, so nothing says how long the gateway was off: until the cloud
   * answers a resync request this process sent (a signed round trip made
   * after the start), the persisted lease counts as expired (domain/freshness.ts).
   */
  get proven(): boolean {
    return this.#proven;
  }

  /** The lease this process may act on: none until the restart is proven, then the persisted one. */
  lease(settings: { readonly leaseExpiresAt: number | null }): number | null {
    return this.#proven ? settings.leaseExpiresAt : null;
  }

  /** Records a resync request as it is sent (its answer is the proof). Keeps the newest 32. */
  asked(requestId: string): void {
    this.#asked.set(requestId, this.mono.now());
    if (this.#asked.size > 32) this.#asked.delete(this.#asked.keys().next().value as string);
  }

  /**
   * A verified resync answer arrived. It proves the time when it answers a
   * request of this process within PROOF_MAX_ROUND_TRIP_MS: the cloud
   * signed it between our request and now, so the latest real time it can
   * be now is its `iat` plus the round trip, and that is the new floor. An
   * answer to another process's request (a replay, or one queued across the
   * restart) proves nothing; nor does a late one (its floor would put
   * trusted time ahead by the whole round trip, and leases would end early).
   */
  answered(requestId: string, iatMs: number): TimeProof {
    const sent = this.#asked.get(requestId);
    if (sent === undefined) return { kind: 'foreign' };
    this.#asked.delete(requestId);
    const roundTripMs = Math.floor(Math.max(0, this.mono.now() - sent));
    if (roundTripMs > PROOF_MAX_ROUND_TRIP_MS) return { kind: 'late', roundTripMs };
    this.#asked.clear();
    this.#proven = true;
    return { kind: 'proven', floorMs: iatMs + roundTripMs, roundTripMs };
  }

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
