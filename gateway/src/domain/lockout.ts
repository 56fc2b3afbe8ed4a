import type { DecisionCode } from '@tobira/shared';

/**
 * Wrong-credential lockout, at two levels:
 * - per lock: after `limit` wrong credentials in a row, the lock refuses
 *   everything (`LOCKED_OUT`) for `cooldownSeconds`. A right credential
 *   resets the count; so does the end of a cool-down.
 * - per credential type across the site: `limit` wrong credentials of one
 *   type within `windowSeconds`, at any locks, refuse that type at every
 *   lock (`LOCKED_OUT`) for `cooldownSeconds`, so guessing cannot be spread
 *   over doors to stay under the per-lock limit. A right credential does NOT
 *   reset this count: one valid card must not wipe a guesser's tally.
 */
export interface LockoutPolicy {
  readonly limit: number;
  readonly cooldownSeconds: number;
}

export interface SiteLockoutPolicy extends LockoutPolicy {
  readonly windowSeconds: number;
}

export interface LockoutState {
  readonly failures: number;
  readonly lockedOutUntil: number | null;
}

export interface SiteLockoutState extends LockoutState {
  /** When the current counting window began; null: no window open. */
  readonly windowStart: number | null;
}

export const noLockout: LockoutState = Object.freeze({ failures: 0, lockedOutUntil: null });
export const noSiteLockout: SiteLockoutState = Object.freeze({ failures: 0, lockedOutUntil: null, windowStart: null });

/** Invariant: a lock (or a credential type) is locked out exactly while now < lockedOutUntil. */
export const isLockedOut = (s: LockoutState, now: number): boolean => s.lockedOutUntil !== null && now < s.lockedOutUntil;

/** Codes that count as a wrong credential. Refusals of a real key (schedule, door, ...) do not. */
const WRONG: ReadonlySet<DecisionCode> = new Set<DecisionCode>(['UNKNOWN_CREDENTIAL']);

/** Invariant: the count only grows on wrong credentials and the cool-down starts when it reaches the limit. */
export function recordAttempt(s: LockoutState, code: DecisionCode, now: number, policy: LockoutPolicy): LockoutState {
  if (isLockedOut(s, now)) return s;
  const base = s.lockedOutUntil !== null ? noLockout : s; // a finished cool-down starts a fresh count
  if (code === 'ALLOWED') return noLockout;
  if (!WRONG.has(code)) return base;
  const failures = base.failures + 1;
  if (policy.limit > 0 && failures >= policy.limit) return { failures: 0, lockedOutUntil: now + policy.cooldownSeconds * 1000 };
  return { failures, lockedOutUntil: null };
}

/**
 * Invariant: `limit` wrong credentials of one type within one window, from
 * any locks, start the site-wide cool-down of that type; nothing but time
 * (the window ending) lowers the count. A fixed window: a guesser gets at
 * most 2 × (limit − 1) tries across a window boundary before the cool-down.
 */
export function recordSiteAttempt(s: SiteLockoutState, code: DecisionCode, now: number, policy: SiteLockoutPolicy): SiteLockoutState {
  if (policy.limit <= 0 || !WRONG.has(code) || isLockedOut(s, now)) return s;
  const windowOpen =
    s.lockedOutUntil === null && s.windowStart !== null && now >= s.windowStart && now - s.windowStart < policy.windowSeconds * 1000;
  const failures = windowOpen ? s.failures + 1 : 1;
  if (failures >= policy.limit) return { failures: 0, windowStart: null, lockedOutUntil: now + policy.cooldownSeconds * 1000 };
  return { failures, windowStart: windowOpen ? s.windowStart : now, lockedOutUntil: null };
}
