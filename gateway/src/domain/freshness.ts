/**
 * Freshness lease and trusted time.
 *
 * The gateway may open doors for ordinary keys only while its lease runs. A
 * heartbeat extends the lease to `iat + offlineGraceSeconds` when everything
 * up to the heartbeat's `lastSeq` has been applied; otherwise the gateway is
 * behind and must resync first. The lease never moves backwards.
 *
 * Trusted time is the latest of: the wall clock; the newest verified `iat`
 * and the highest time already acted on (both persisted); and that persisted
 * floor carried forward by the real time elapsed since it was taken, measured
 * on a monotonic clock. So trusted time never goes backwards, and it advances
 * at least as fast as real time whatever the wall clock does: with the wall
 * clock stopped, set back to 1970 or a day behind, the lease (`iat + grace`,
 * with trusted time >= iat when the heartbeat arrives) still runs out after
 * at most `offlineGraceSeconds` of real elapsed time, and key validity
 * windows keep expiring. Once the cloud has proven the time to this process,
 * trusted time is bounded above too, by the last proven cloud time carried
 * forward on the monotonic clock plus CLOCK_SKEW_TOLERANCE_MS: a wall clock
 * ahead of real time opens nothing more than that tolerance early (the
 * tolerance is the price of the cloud's clock against ours and a message's
 * time on the way).
 *
 * Across a restart the monotonic reading means nothing; the persisted floor
 * (raised every second while running, and at stop) is where trusted time
 * resumes, so a restart never hands back lease time that had elapsed.
 */
export interface TimeFloor {
  /** Newest verified `iat`, in ms. */
  readonly maxIatMs: number;
  /** Highest trusted time already used for a decision or an apply, in ms. */
  readonly highWaterMs: number;
}

/** A floor value and the monotonic reading taken when trusted time was last at it. */
export interface TimeAnchor {
  readonly floorMs: number;
  readonly monoMs: number;
}

/**
 * Carries the floor forward by elapsed real time. A persisted floor at or
 * above the carried one (a newer iat, a restart) becomes the new anchor.
 * Invariant: the floor never decreases while the monotonic clock does not,
 * and is a whole number of ms.
 */
export function advanceFloor(
  anchor: TimeAnchor | null,
  persisted: TimeFloor,
  monoNow: number,
): TimeAnchor & { readonly nowFloorMs: number } {
  const stored = Math.max(persisted.maxIatMs, persisted.highWaterMs);
  if (anchor !== null) {
    // whole ms: a monotonic clock reads fractions (performance.now()), and trusted time is stored in INTEGER columns
    const carried = anchor.floorMs + Math.floor(Math.max(0, monoNow - anchor.monoMs));
    if (carried > stored) return { floorMs: anchor.floorMs, monoMs: anchor.monoMs, nowFloorMs: carried };
  }
  return { floorMs: stored, monoMs: monoNow, nowFloorMs: stored };
}

/**
 * How far the wall clock may run ahead of the last proven cloud time carried
 * forward on the monotonic clock before it stops counting: the cloud's clock
 * against ours, and the time a heartbeat spends on its way.
 */
export const CLOCK_SKEW_TOLERANCE_MS = 30_000;

/** The last time the cloud proved (a verified iat, a resync answer's upper bound) and the monotonic reading when it did. */
export interface CloudAnchor {
  readonly cloudMs: number;
  readonly monoMs: number;
}

/** Invariant: the anchor's carried time never decreases; a newer verified iat above it becomes the anchor. */
export function advanceCloudAnchor(anchor: CloudAnchor, newestIatMs: number, monoNow: number): CloudAnchor {
  const carried = anchor.cloudMs + Math.floor(Math.max(0, monoNow - anchor.monoMs));
  return newestIatMs > carried ? { cloudMs: newestIatMs, monoMs: monoNow } : anchor;
}

/** The latest real time it can be: the proven cloud time carried forward by elapsed time, plus the tolerance. */
export function timeCeiling(anchor: CloudAnchor, monoNow: number): number {
  return anchor.cloudMs + Math.floor(Math.max(0, monoNow - anchor.monoMs)) + CLOCK_SKEW_TOLERANCE_MS;
}

/**
 * Invariant: the result is >= the (carried) floor, so trusted time never goes
 * backwards, and, when a ceiling is known, the wall clock counts only up to
 * it: a clock ahead of real time neither opens keys early (validFrom,
 * schedules, offline caps) nor leaves the high-water mark ahead.
 */
export function trustedNow(clockNow: number, floorMs: number, ceilingMs: number | null = null): number {
  return Math.max(ceilingMs === null ? clockNow : Math.min(clockNow, ceilingMs), floorMs);
}

/** Invariant: a skew is reported exactly when the wall clock is more than the tolerance off trusted time. */
export function clockSkewMs(clockNow: number, trusted: number): number | null {
  const skew = clockNow - trusted;
  return Math.abs(skew) > CLOCK_SKEW_TOLERANCE_MS ? skew : null;
}

export type HeartbeatVerdict =
  | { readonly kind: 'extend'; readonly leaseExpiresAt: number }
  | { readonly kind: 'behind'; readonly appliedSeq: number; readonly lastSeq: number };

/** Invariant: the lease is extended only when appliedSeq >= lastSeq, and never shortened. */
export function onHeartbeat(
  hb: { readonly lastSeq: number; readonly iatMs: number },
  appliedSeq: number,
  currentLease: number | null,
  offlineGraceSeconds: number,
): HeartbeatVerdict {
  if (appliedSeq < hb.lastSeq) return { kind: 'behind', appliedSeq, lastSeq: hb.lastSeq };
  const candidate = hb.iatMs + offlineGraceSeconds * 1000;
  return { kind: 'extend', leaseExpiresAt: currentLease === null ? candidate : Math.max(currentLease, candidate) };
}

/** Invariant: with no lease, or at/after its end, the site is stale. */
export function isStale(leaseExpiresAt: number | null, now: number): boolean {
  return leaseExpiresAt === null || now >= leaseExpiresAt;
}

/** Seconds of lease left (0 when stale), for metrics and the UI. */
export function leaseRemainingSeconds(leaseExpiresAt: number | null, now: number): number {
  return leaseExpiresAt === null ? 0 : Math.max(0, (leaseExpiresAt - now) / 1000);
}
