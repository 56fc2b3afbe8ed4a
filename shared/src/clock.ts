/**
 * The one source of time. Code takes a Clock (never calls Date.now() in the
 * domain) so leases, expiry and backoff are tested deterministically.
 * Times are milliseconds since the Unix epoch, UTC.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = Object.freeze({ now: () => Date.now() });

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
