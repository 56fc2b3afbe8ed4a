/**
 * Wrong tokens per client IP in a fixed window (a small bounded
 * counter: one map entry per client that failed recently). Once an IP has
 * `max` failures in its window, every token check from it is refused until
 * the window ends, the right token included: answering a right token while
 * blocked would tell a guesser which guess was right. A success does not
 * reset the count, so a guesser gets `max` tries per window whatever else
 * happens from its address; other addresses are never affected.
 */
export interface AuthLimitOptions {
  readonly max: number;
  readonly windowMs: number;
  /** Entries kept at most; beyond, expired ones go first, then the oldest (a flood of addresses cannot grow memory). */
  readonly maxClients?: number;
}

export class AuthFailureLimiter {
  readonly #o: Required<AuthLimitOptions>;
  readonly #now: () => number;
  readonly #clients = new Map<string, { start: number; failures: number }>();

  constructor(o: AuthLimitOptions, now: () => number) {
    this.#o = { maxClients: 10_000, ...o };
    this.#now = now;
  }

  /** Milliseconds until `ip` may try again; 0: not blocked. */
  blockedFor(ip: string): number {
    const e = this.#live(ip);
    if (e === undefined || e.failures < this.#o.max) return 0;
    return Math.max(1, e.start + this.#o.windowMs - this.#now());
  }

  failed(ip: string): void {
    const e = this.#live(ip);
    if (e !== undefined) {
      e.failures += 1;
      return;
    }
    if (this.#clients.size >= this.#o.maxClients) this.#evict();
    this.#clients.set(ip, { start: this.#now(), failures: 1 });
  }

  /** The entry of `ip` if its window is still running (a wall clock set back also ends it). */
  #live(ip: string): { start: number; failures: number } | undefined {
    const e = this.#clients.get(ip);
    if (e === undefined) return undefined;
    const now = this.#now();
    if (now - e.start < this.#o.windowMs && now >= e.start) return e;
    this.#clients.delete(ip);
    return undefined;
  }

  /** Entries sit in the order their windows started, so the expired ones are at the front. */
  #evict(): void {
    for (const ip of this.#clients.keys()) {
      if (this.#live(ip) !== undefined) break;
    }
    if (this.#clients.size < this.#o.maxClients) return;
    const oldest = this.#clients.keys().next();
    if (oldest.done !== true) this.#clients.delete(oldest.value);
  }

  get size(): number {
    return this.#clients.size;
  }
}
