import type { KnownAddresses } from '../app/staff-accounts.js';

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
 *   in to that name successfully (`KnownAddresses`: 30 days, kept in SQLite
 *   so a restart keeps them) wait `perAccountDelayMs` between tries; an
 *   address the owner signed in from before is exempt.
 *
 * A try is counted when it starts (`attempt`, before the Argon2 await), not
 * when its answer is known: a burst sent at once would otherwise all pass
 * the check before the first failure counted. Until its answer is known it
 * is in flight, and counts as a failure. Every counted try ends in exactly
 * one of: `failed` (a wrong guess: its count stays), `refund` (never
 * evaluated, the Argon2 queue shed it, or no guess: its count is given back)
 * or `succeeded` (right: its count is given back and the pair's settled
 * failures reset, but not the pair's other tries still in flight). So one
 * address and name never has more than `free` tries in flight at once, right
 * password or not: a flood of right passwords is held to the free tries like
 * a flood of wrong ones. A count back at zero is dropped (a shed try leaves
 * no entry behind). A refused try is answered before the password is looked
 * at (no Argon2 work is spent on it). The counters are in memory: a restart
 * resets them (the Argon2 cost per try is the floor).
 *
 * Bounded: at most `maxEntries` per counter. A new key that finds its table
 * full first clears the expired entries, then drops the live entry with the
 * fewest failures that is still below its limit (the least recently touched
 * of those). An entry at or over its limit is never dropped, so flooding the
 * table with fresh names or addresses cannot wipe a throttled name's count;
 * when every entry is over its limit, the new key's try is refused with the
 * throttle's answer until the first of them expires. Not `lru-cache`: its
 * eviction is by recency alone, and which entry may go is the point here.
 */
export interface ThrottleOptions {
  readonly free: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly windowMs: number;
  readonly perAddressMax: number;
  readonly perAccountMax: number;
  readonly perAccountDelayMs: number;
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
  maxEntries: 10_000,
});

/** Failures counted since `start` (tries in flight included), the last at `lastAt`. */
interface Count {
  failures: number;
  /** Of `failures`, the tries whose answer is not known yet (pairs only). */
  inFlight: number;
  readonly start: number;
  lastAt: number;
}

/** One counter's table: bounded, and never by dropping an entry at or over its limit. */
class Counts {
  readonly #m = new Map<string, Count>();
  /** While the table is full of entries over their limit: when the first of them expires (no scan before). */
  #fullUntil = 0;

  constructor(
    readonly max: number,
    /** When an entry is forgotten. */
    readonly expiresAt: (c: Count) => number,
    /** Failures at which an entry holds a penalty (it is never dropped to make room). */
    readonly limit: number,
  ) {}

  get(k: string, now: number): Count | undefined {
    const c = this.#m.get(k);
    if (c === undefined) return undefined;
    if (now >= c.start && now < this.expiresAt(c)) return c;
    this.#delete(k);
    return undefined;
  }

  /** Room for `k`: 0 when it is there or a slot is free (made by dropping the least harmful entry); else the ms to wait. */
  room(k: string, now: number): number {
    if (this.#m.size < this.max || this.#m.has(k)) return 0;
    if (now < this.#fullUntil) return this.#fullUntil - now;
    let victim: string | undefined;
    let fewest = Infinity;
    let soonest = Infinity;
    for (const [key, c] of this.#m) {
      const end = this.expiresAt(c);
      if (now < c.start || now >= end) this.#m.delete(key);
      else if (c.failures < this.limit) {
        if (c.failures < fewest) [victim, fewest] = [key, c.failures];
      } else soonest = Math.min(soonest, end);
    }
    if (this.#m.size < this.max) return 0;
    if (victim !== undefined) {
      this.#m.delete(victim);
      return 0;
    }
    this.#fullUntil = soonest;
    return Math.max(1, soonest - now);
  }

  /** Stores `c` under `k` (after `room` said 0), as the most recently touched. */
  put(k: string, c: Count): void {
    this.#m.delete(k);
    this.#m.set(k, c);
  }

  /** One failure given back; a count back at zero is dropped. */
  giveBack(k: string, now: number): void {
    const c = this.get(k, now);
    if (c === undefined) return;
    c.failures -= 1;
    c.inFlight = Math.min(c.inFlight, c.failures);
    this.#fullUntil = 0;
    if (c.failures <= 0) this.#delete(k);
  }

  /** A try's answer is known: it is no longer in flight (its failure stays counted). */
  land(k: string, now: number): Count | undefined {
    const c = this.get(k, now);
    if (c !== undefined) c.inFlight = Math.max(0, c.inFlight - 1);
    return c;
  }

  /** The settled failures forgotten, the tries still in flight kept; a count back at zero is dropped. */
  settle(k: string, now: number): void {
    const c = this.get(k, now);
    if (c === undefined) return;
    c.failures = c.inFlight;
    this.#fullUntil = 0;
    if (c.failures <= 0) this.#delete(k);
  }

  #delete(k: string): void {
    if (this.#m.delete(k)) this.#fullUntil = 0;
  }
}

export class SignInThrottle {
  readonly #o: ThrottleOptions;
  readonly #now: () => number;
  readonly #known: KnownAddresses | undefined;
  readonly #pairs: Counts;
  readonly #addresses: Counts;
  readonly #accounts: Counts;

  /** `known`: the addresses exempt from the per-name limit (undefined: none is). */
  constructor(now: () => number, o: Partial<ThrottleOptions> = {}, known?: KnownAddresses) {
    this.#o = { ...DEFAULT_THROTTLE, ...o };
    this.#now = now;
    this.#known = known;
    const w = this.#o.windowMs;
    this.#pairs = new Counts(this.#o.maxEntries, (c) => c.lastAt + w, this.#o.free);
    this.#addresses = new Counts(this.#o.maxEntries, (c) => c.start + w, this.#o.perAddressMax);
    this.#accounts = new Counts(this.#o.maxEntries, (c) => c.start + w, this.#o.perAccountMax);
  }

  /** Milliseconds this address must wait before trying `username` again; 0: it may try now. */
  waitFor(ip: string, username: string): number {
    const now = this.#now();
    const name = username.toLowerCase();
    let wait = 0;
    const p = this.#pairs.get(pairKey(ip, name), now);
    if (p !== undefined && p.failures >= this.#o.free) {
      const delay = Math.min(this.#o.maxDelayMs, this.#o.baseDelayMs * 2 ** (p.failures - this.#o.free));
      wait = Math.max(wait, p.lastAt + delay - now);
    }
    const a = this.#addresses.get(ip, now);
    if (a !== undefined && a.failures >= this.#o.perAddressMax) wait = Math.max(wait, a.start + this.#o.windowMs - now);
    const acc = this.#accounts.get(name, now);
    if (acc !== undefined && acc.failures >= this.#o.perAccountMax && this.#known?.isKnown(ip, username) !== true)
      wait = Math.max(wait, acc.lastAt + this.#o.perAccountDelayMs - now);
    return Math.max(0, Math.ceil(wait));
  }

  /**
   * Counts a try that is about to be evaluated, as a failure until it is
   * known to be right (call right after `waitFor` said 0, before any await).
   * Returns 0 when counted; otherwise the try is refused (a table is full of
   * entries over their limit and has no room for this one: nothing counted),
   * and the milliseconds to wait.
   */
  attempt(ip: string, username: string): number {
    const now = this.#now();
    const name = username.toLowerCase();
    const pk = pairKey(ip, name);
    const full = Math.max(this.#pairs.room(pk, now), this.#addresses.room(ip, now), this.#accounts.room(name, now));
    if (full > 0) return Math.ceil(full);
    const p = this.#pairs.get(pk, now) ?? { failures: 0, inFlight: 0, start: now, lastAt: now };
    p.failures += 1;
    p.inFlight += 1;
    p.lastAt = now;
    this.#pairs.put(pk, p);
    for (const [t, k] of [
      [this.#addresses, ip],
      [this.#accounts, name],
    ] as const) {
      const w = t.get(k, now) ?? { failures: 0, inFlight: 0, start: now, lastAt: now };
      w.failures += 1;
      w.lastAt = now;
      t.put(k, w);
    }
    return 0;
  }

  /** A counted try was a wrong guess: it is no longer in flight, and its count stays. */
  failed(ip: string, username: string): void {
    this.#pairs.land(pairKey(ip, username.toLowerCase()), this.#now());
  }

  /** Gives back the count of a try that was never evaluated (shed before any Argon2 work), or that was no guess. */
  refund(ip: string, username: string): void {
    const now = this.#now();
    const name = username.toLowerCase();
    const pk = pairKey(ip, name);
    this.#pairs.land(pk, now);
    this.#pairs.giveBack(pk, now);
    this.#addresses.giveBack(ip, now);
    this.#accounts.giveBack(name, now);
  }

  /**
   * A right password: the try's count is given back, the pair's settled
   * failures reset (its other tries still in flight stay counted), and the
   * address known for the name.
   */
  succeeded(ip: string, username: string): void {
    this.refund(ip, username);
    this.#pairs.settle(pairKey(ip, username.toLowerCase()), this.#now());
    this.remember(ip, username);
  }

  /** `ip` signed in as `username` (a session was started): from now on it is exempt from that name's per-name limit. */
  remember(ip: string, username: string): void {
    this.#known?.remember(ip, username);
  }
}

const pairKey = (ip: string, name: string) => `${ip}\n${name}`;
