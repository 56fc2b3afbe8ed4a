/**
 * Freshness lease and trusted time (DESIGN.md §2 I1, §5).
 *
 * The gateway may open doors for ordinary keys only while its lease runs. A
 * heartbeat extends the lease to `iat + offlineGraceSeconds` when everything
 * up to the heartbeat's `lastSeq` has been applied; otherwise the gateway is
 * behind and must resync first. The lease never moves backwards.
 *
 * Trusted time is never earlier than the newest verified `iat` nor than the
 * highest time the gateway has already acted on, so a clock set backwards
 * cannot make an expired key or an expired lease valid again.
 */
export interface TimeFloor {
  /** Newest verified `iat`, in ms. */
  readonly maxIatMs: number;
  /** Highest trusted time already used for a decision or an apply, in ms. */
  readonly highWaterMs: number;
}

/** Invariant: the result is >= every input, so trusted time never goes backwards. */
export function trustedNow(clockNow: number, floor: TimeFloor): number {
  return Math.max(clockNow, floor.maxIatMs, floor.highWaterMs);
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
