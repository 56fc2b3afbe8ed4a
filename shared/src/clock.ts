/**
 * The one source of time. Code takes a Clock (never calls Date.now() in the
 * domain) so leases, expiry and backoff are tested deterministically.
 * Times are milliseconds since the Unix epoch, UTC.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = Object.freeze({ now: () => Date.now() });

/**
 * Real elapsed time, in ms from an arbitrary origin (process start). Never
 * steps when the wall clock is set (NTP, an RTC reset after a power cut, an
 * operator), so it is what leases and rate limits measure elapsed time with.
 * Its origin changes with every process: never persist a reading.
 */
export interface MonotonicClock {
  now(): number;
}

export const monotonicClock: MonotonicClock = Object.freeze({ now: () => performance.now() });

/** A clock a test moves by hand. */
export class ManualClock implements Clock {
  #t: number;
  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#t = start;
  }
  now(): number {
    return this.#t;
  }
  set(ms: number): void {
    this.#t = ms;
  }
  advance(ms: number): void {
    this.#t += ms;
  }
}
