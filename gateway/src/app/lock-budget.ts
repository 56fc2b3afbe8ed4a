import { fullBucket, takeToken, type Bucket, type RatePolicy } from '@tobira/shared';

/**
 * The per-lock event budget: one token bucket per lock over everything it
 * reports on its state, event and presence topics (door requests have their
 * own rate limit, app/access.ts). A lock with valid broker credentials can
 * publish as fast as the broker takes it; each message that passes may be an
 * fsync'd row, an uplink to the cloud and webhooks. Over the budget a message
 * is dropped before anything is written.
 *
 * An episode (the lock over its budget) starts with the first dropped
 * message and ends only once the bucket has refilled to its full burst: a
 * lock hovering around the limit stays in one episode instead of starting a
 * new one (an alarm, a log line) with every message that squeezes through.
 * In memory on purpose: a restart refills every bucket, which only lets one
 * burst through.
 */
export class LockEventBudget {
  readonly #state = new Map<string, { readonly bucket: Bucket; readonly dropped: number }>();

  constructor(readonly policy: RatePolicy) {}

  /**
   * One message of `key` (a lock id, or one shared key for ids that are not
   * paired, so made-up ids can neither grow the map nor dodge the budget).
   * `ended`: messages dropped in the episode this message ends (0: none ended).
   * `first`: this drop starts an episode.
   */
  take(key: string, now: number): { readonly ok: true; readonly ended: number } | { readonly ok: false; readonly first: boolean } {
    const s = this.#state.get(key) ?? { bucket: fullBucket(this.policy, now), dropped: 0 };
    const t = takeToken(s.bucket, now, this.policy);
    if (!t.ok) {
      this.#state.set(key, { bucket: t.bucket, dropped: s.dropped + 1 });
      return { ok: false, first: s.dropped === 0 };
    }
    // the bucket was full before this token was taken: the lock has been under budget long enough
    const ended = s.dropped > 0 && t.bucket.tokens >= this.policy.burst - 1 ? s.dropped : 0;
    this.#state.set(key, { bucket: t.bucket, dropped: ended > 0 ? 0 : s.dropped });
    return { ok: true, ended };
  }

  /**
   * Ends the episodes of keys that went quiet: a lock that stops flooding
   * sends nothing that would end its episode. Returns each ended key with the
   * messages dropped in its episode.
   */
  endQuiet(now: number): { readonly key: string; readonly dropped: number }[] {
    const ended: { key: string; dropped: number }[] = [];
    for (const [key, s] of this.#state) {
      if (s.dropped === 0) continue;
      const refilled = s.bucket.tokens + (Math.max(0, now - s.bucket.at) * this.policy.perSecond) / 1000;
      if (refilled < this.policy.burst) continue;
      this.#state.set(key, { bucket: s.bucket, dropped: 0 });
      ended.push({ key, dropped: s.dropped });
    }
    return ended;
  }
}
