/**
 * A token bucket, the one rate limit of both services: `burst` at once and
 * `perSecond` more each second after that. The gateway keeps one per lock
 * (a request over it is refused before anything is decided or written, so a
 * flooding or compromised lock cannot fill the disk, the uplink or the fsync
 * budget); the cloud keeps one per gateway for resync requests (a
 * compromised gateway cannot make it build snapshots without end).
 * Time is an argument; the bucket is plain data the caller keeps.
 */
export interface RatePolicy {
  readonly burst: number;
  readonly perSecond: number;
}

export interface Bucket {
  readonly tokens: number;
  /** Trusted time of the last refill. */
  readonly at: number;
  /** Requests refused since the last one that passed (0: not flooding now). */
  readonly refused: number;
}

export type Take =
  /** `refusedBefore`: how many were refused since the previous pass (the end of a flood, for its summary). */
  | { readonly ok: true; readonly bucket: Bucket; readonly refusedBefore: number }
  /** `first`: the first refusal of this flood (logged and recorded once; the rest are only counted). */
  | { readonly ok: false; readonly bucket: Bucket; readonly first: boolean };

/** A new lock starts with a full bucket. */
export const fullBucket = (policy: RatePolicy, now: number): Bucket => ({ tokens: policy.burst, at: now, refused: 0 });

/**
 * Invariant: over any interval of t ms at most `burst + perSecond * t / 1000`
 * requests pass, whatever the clock does (time going backwards refills nothing).
 */
export function takeToken(b: Bucket, now: number, policy: RatePolicy): Take {
  const elapsed = Math.max(0, now - b.at);
  const tokens = Math.min(policy.burst, b.tokens + (elapsed * policy.perSecond) / 1000);
  const at = Math.max(b.at, now);
  if (tokens >= 1) return { ok: true, bucket: { tokens: tokens - 1, at, refused: 0 }, refusedBefore: b.refused };
  return { ok: false, bucket: { tokens, at, refused: b.refused + 1 }, first: b.refused === 0 };
}
