import type { Clock, Logger, MonotonicClock } from '@tobira/shared';
import {
  CLOCK_SKEW_TOLERANCE_MS,
  advanceCloudAnchor,
  advanceFloor,
  clockSkewMs,
  timeCeiling,
  trustedNow,
  type CloudAnchor,
  type TimeAnchor,
  type TimeFloor,
} from '../domain/freshness.js';
import type { ReadableDb } from '../adapters/sqlite/db.js';
import { readSettings } from '../adapters/sqlite/settings.js';
import type { GatewayStore } from '../adapters/sqlite/store.js';
import type { Metrics } from '../metrics.js';
import type { LockEventBudget } from './lock-budget.js';
import type { LockWatch } from './lock-watch.js';

/** Named crash points. `TOBIRA_CRASH_AT=<name>` turns one into a SIGKILL of the daemon. */
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
  /** The per-lock budget on state, event and presence messages. Absent (tests of one part alone): no budget. */
  readonly eventBudget?: LockEventBudget;
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
 * monotonic clock, and, once the cloud has proven the time to this process,
 * capped by the last proven cloud time carried forward the same way plus
 * CLOCK_SKEW_TOLERANCE_MS. One instance per running gateway: the anchors are process state.
 */
/** The wall clock is off trusted time by more than the tolerance: since when (trusted ms) and by how much now. */
export interface ClockSkew {
  readonly skewMs: number;
  readonly since: number;
}

export class TrustedTime {
  #anchor: TimeAnchor | null = null;
  /** The last cloud-proven time of this process (null until the first proof): the ceiling counts from it. */
  #cloud: CloudAnchor | null = null;
  #skew: ClockSkew | null = null;
  /** Resync requests this process sent and not yet answered: requestId → monotonic reading when sent. */
  readonly #asked = new Map<string, number>();
  #proven = false;
  /** A proof's answer said the cloud had handed out seqs up to this one: no lease counts until they are applied. */
  #catchUpTo: number | null = null;
  /** The monotonic reading when this process's time began (its store is opened after it). */
  readonly #bornMono: number;
  /** The latest cloud time this process can have started at, from its first proof (null until then). */
  #startedAt: number | null = null;
  constructor(
    readonly wall: Clock,
    readonly mono: MonotonicClock,
  ) {
    this.#bornMono = mono.now();
  }

  /**
   * The latest time on the cloud's clock this process can have started at: its first proof's floor less
   * the monotonic time elapsed since the start; null until that proof. Unlike the wall clock (which may be
   * behind, or reset to 1970) or a restored store's floor, it cannot put the start before it was, so a
   * mobile token issued (on the cloud's clock) before it was issued before this start.
   */
  startedAt(): number | null {
    return this.#startedAt;
  }

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

  /**
   * The lease this process may act on: none until the restart is proven, then the persisted one, once the
   * store has applied every seq the proving answer named. A store restored from a backup holds the backup's
   * lease: counted while the cloud's later messages (a one-time key used, a revoke, a lockdown) are still on
   * their way, it would open on the backup's authority.
   */
  lease(settings: { readonly leaseExpiresAt: number | null; readonly appliedSeq: number }): number | null {
    if (!this.#proven) return null;
    if (this.#catchUpTo !== null) {
      if (settings.appliedSeq < this.#catchUpTo) return null;
      this.#catchUpTo = null;
    }
    return settings.leaseExpiresAt;
  }

  /** The proving answer's `toSeq` is past the store's applied seq: the lease waits until the gap is applied. */
  catchUp(toSeq: number, appliedSeq: number): void {
    this.#catchUpTo = toSeq > appliedSeq ? toSeq : null;
  }

  /** Records a resync request as it is sent (its answer is the proof). Keeps the newest 32. */
  asked(requestId: string): void {
    this.#asked.set(requestId, this.mono.now());
    if (this.#asked.size > 32) this.#asked.delete(this.#asked.keys().next().value as string);
  }

  /**
   * Whether `requestId` is a resync request of this process, sent within
   * PROOF_MAX_ROUND_TRIP_MS and not yet answered: an answer to it was signed
   * after that send, so it is fresh whatever its `exp` says against a
   * trusted time that a clock ahead pushed forward (downlink.ts).
   */
  awaits(requestId: string): boolean {
    const sent = this.#asked.get(requestId);
    return sent !== undefined && this.mono.now() - sent <= PROOF_MAX_ROUND_TRIP_MS;
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
    const floorMs = iatMs + roundTripMs;
    this.#cloud = { cloudMs: floorMs, monoMs: this.mono.now() };
    this.#startedAt ??= floorMs - Math.max(0, this.mono.now() - this.#bornMono);
    // the floor carried so far may hold a wall clock that ran ahead before the proof: start again from the store
    this.#anchor = null;
    return { kind: 'proven', floorMs, roundTripMs };
  }

  /** The latest real time it can be now (null until the cloud has proven the time to this process). */
  ceiling(): number | null {
    return this.#cloud === null ? null : timeCeiling(this.#cloud, this.mono.now());
  }

  /** The wall clock's skew as of the last reading (null: within the tolerance). In memory: a restart forgets it until the next reading. */
  get skew(): ClockSkew | null {
    return this.#skew;
  }

  /** `floor`: the settings row when the caller has just read it (a decision batch reads it once). */
  now(db: ReadableDb, floor: TimeFloor = readSettings(db)): number {
    const mono = this.mono.now();
    if (this.#cloud !== null) this.#cloud = advanceCloudAnchor(this.#cloud, floor.maxIatMs, mono);
    const ceiling = this.#cloud === null ? null : timeCeiling(this.#cloud, mono);
    // A high-water mark above the proven cloud time came from a wall clock that ran ahead: it counts only up to
    // that time, not up to the ceiling (the proven time plus the tolerance). While the wall clock runs ahead,
    // trusted time is the ceiling and the mark follows it; kept there, it would hold trusted time the tolerance
    // ahead for good once the clock is fixed, and cut every lease by as much (a grace below it: failing closed).
    const proven = ceiling === null ? null : ceiling - CLOCK_SKEW_TOLERANCE_MS;
    const a = advanceFloor(this.#anchor, proven === null ? floor : { ...floor, highWaterMs: Math.min(floor.highWaterMs, proven) }, mono);
    this.#anchor = { floorMs: a.floorMs, monoMs: a.monoMs };
    const wall = this.wall.now();
    const t = trustedNow(wall, a.nowFloorMs, ceiling);
    const skewMs = clockSkewMs(wall, t);
    this.#skew = skewMs === null ? null : { skewMs, since: this.#skew?.since ?? t };
    return t;
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
