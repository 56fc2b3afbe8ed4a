import type { DecisionCode } from '@tobira/shared';

/**
 * Wrong-credential lockout per lock: after `limit` wrong credentials in a
 * row, the lock refuses everything (`LOCKED_OUT`) for `cooldownSeconds`.
 * A right credential resets the count; so does the end of a cool-down.
 */
export interface LockoutPolicy {
  readonly limit: number;
  readonly cooldownSeconds: number;
}

export interface LockoutState {
  readonly failures: number;
  readonly lockedOutUntil: number | null;
}

export const noLockout: LockoutState = Object.freeze({ failures: 0, lockedOutUntil: null });

/** Invariant: a lock is locked out exactly while now < lockedOutUntil. */
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
