/** When a failed delivery is tried again, and when it stops being tried. */
export interface BackoffPolicy {
  readonly baseMs: number;
  readonly maxMs: number;
  readonly maxAttempts: number;
}

/**
 * Capped exponential backoff with jitter ("equal jitter": half fixed, half
 * random), so many rows failing together do not retry in lockstep. One
 * function for both outboxes (gateway downlinks and webhooks).
 * `random` is in [0, 1].
 */
export function backoffMs(attempts: number, p: Pick<BackoffPolicy, 'baseMs' | 'maxMs'>, random: number): number {
  const exp = Math.min(p.maxMs, p.baseMs * 2 ** Math.max(0, attempts - 1));
  return Math.floor(exp / 2 + (exp / 2) * random);
}
