/**
 * Sign-in throttling (docs/gateway.md "Sign-in throttling"). Three counters,
 * none of which can lock the account's owner out:
 *
 * - per (address, username): the first `free` wrong passwords cost nothing,
 *   then each one doubles the wait before the next try from that address for
 *   that name (1 s, 2 s, 4 s ... capped at `maxDelayMs`). A right password
 *   resets it. Someone guessing from another address never slows the owner.
 * - per address (any username): more than `perAddressMax` wrong passwords in
 *   `windowMs` and that address waits for the window to end (spraying many
 *   names from one place). Only that address is affected.
 * - per username (any address): past `perAccountMax` wrong passwords in the
 *   window (a guesser using many addresses), addresses that have not signed
 *   in to that name successfully within `knownForMs` wait `perAccountDelayMs`
 *   between tries; an address the owner signed in from before is exempt.
 *
 * A try is counted when it starts (`attempt`, before the Argon2 await), not
 * when its answer is known: a burst sent at once would otherwise all pass
 * the check before the first failure counted. A try that turns out right
 * (`succeeded`), or was never evaluated (`refund`: the Argon2 queue shed it),
 * gives its count back. A refused try is answered before the password is
 * looked at (no Argon2 work is spent on it). In memory: a restart resets the
 * counters (the Argon2 cost per try is the floor). Bounded: at most
 * `maxEntries` per map, oldest first out.
 */
export interface ThrottleOptions {
  readonly free: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly windowMs: number;
  readonly perAddressMax: number;
  readonly perAccountMax: number;
  readonly perAccountDelayMs: number;
  readonly knownForMs: number;
  readonly maxEntries: number;
}

export const DEFAULT_THROTTLE: ThrottleOptions = Object.freeze({
  free: 3,
  baseDelayMs: 1000,
  maxDelayMs: 60_000,
  windowMs: 15 * 60_000,
  perAddressMax: 50,
  perAccountMax: 20,
  perAccountDelayMs: 10_000,
  knownForMs: 30 * 24 * 3600_000,
  maxEntries: 10_000,
});

interface Pair {
  failures: number;
  lastAt: number;
}
interface Window {
  start: number;
  failures: number;
  lastAt: number;
}

export class SignInThrottle {
  readonly #o: ThrottleOptions;
  readonly #now: () => number;
  readonly #pairs = new Map<string, Pair>();
  readonly #addresses = new Map<string, Window>();
  readonly #accounts = new Map<string, Window>();
  readonly #known = new Map<string, number>();

  constructor(now: () => number, o: Partial<ThrottleOptions> = {}) {
    this.#o = { ...DEFAULT_THROTTLE, ...o };
    this.#now = now;
  }

  /** Milliseconds this address must wait before trying `username` again; 0: it may try now. */
  waitFor(ip: string, username: string): number {
    const now = this.#now();
    const name = username.toLowerCase();
    let wait = 0;
    const p = this.#pair(`${ip}\n${name}`, now);
    if (p !== undefined && p.failures >= this.#o.free) {
      const delay = Math.min(this.#o.maxDelayMs, this.#o.baseDelayMs * 2 ** (p.failures - this.#o.free));
      wait = Math.max(wait, p.lastAt + delay - now);
    }
    const a = this.#live(this.#addresses, ip, now);
    if (a !== undefined && a.failures >= this.#o.perAddressMax) wait = Math.max(wait, a.start + this.#o.windowMs - now);
    const acc = this.#live(this.#accounts, name, now);
    if (acc !== undefined && acc.failures >= this.#o.perAccountMax && !this.#isKnown(ip, name, now))
      wait = Math.max(wait, acc.lastAt + this.#o.perAccountDelayMs - now);
    return Math.max(0, Math.ceil(wait));
  }

  /**
   * Counts a try that is about to be evaluated, as a failure until it is
   * known to be right (call right after `waitFor` said 0, before any await).
   */
  attempt(ip: string, username: string): void {
    this.failed(ip, username);
  }

  /** Gives back the count of a try that was never evaluated (shed before any Argon2 work). */
  refund(ip: string, username: string): void {
    const now = this.#now();
    const name = username.toLowerCase();
    const p = this.#pair(`${ip}\n${name}`, now);
    if (p !== undefined) p.failures = Math.max(0, p.failures - 1);
    for (const [m, k] of [
      [this.#addresses, ip],
      [this.#accounts, name],
    ] as const) {
      const w = this.#live(m, k, now);
      if (w !== undefined) w.failures = Math.max(0, w.failures - 1);
    }
  }

  failed(ip: string, username: string): void {
    const now = this.#now();
    const name = username.toLowerCase();
    const key = `${ip}\n${name}`;
    const p = this.#pair(key, now) ?? { failures: 0, lastAt: now };
    p.failures += 1;
    p.lastAt = now;
    this.#put(this.#pairs, key, p);
    for (const [m, k] of [
      [this.#addresses, ip],
      [this.#accounts, name],
    ] as const) {
      const w = this.#live(m, k, now) ?? { start: now, failures: 0, lastAt: now };
      w.failures += 1;
      w.lastAt = now;
      this.#put(m, k, w);
    }
  }

  /** A right password: the try's count is given back, the pair's count reset, and the address known for the name. */
  succeeded(ip: string, username: string): void {
    this.refund(ip, username);
    const name = username.toLowerCase();
    this.#pairs.delete(`${ip}\n${name}`);
    this.#put(this.#known, `${ip}\n${name}`, this.#now());
  }

  /** A pair's count is forgotten a window after its last failure. */
  #pair(key: string, now: number): Pair | undefined {
    const p = this.#pairs.get(key);
    if (p === undefined) return undefined;
    if (now - p.lastAt < this.#o.windowMs && now >= p.lastAt) return p;
    this.#pairs.delete(key);
    return undefined;
  }

  #isKnown(ip: string, name: string, now: number): boolean {
    const at = this.#known.get(`${ip}\n${name}`);
    return at !== undefined && now - at < this.#o.knownForMs && now >= at;
  }

  #live(m: Map<string, Window>, k: string, now: number): Window | undefined {
    const w = m.get(k);
    if (w === undefined) return undefined;
    if (now - w.start < this.#o.windowMs && now >= w.start) return w;
    m.delete(k);
    return undefined;
  }

  #put<V>(m: Map<string, V>, k: string, v: V): void {
    m.delete(k);
    if (m.size >= this.#o.maxEntries) {
      const oldest = m.keys().next();
      if (oldest.done !== true) m.delete(oldest.value);
    }
    m.set(k, v);
  }
}
