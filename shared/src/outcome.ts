import type { OutcomeCode } from './codes.js';

/**
 * What every verb returns. `throw` is reserved for bugs and
 * broken infrastructure; every expected result, including "no", is an Outcome.
 *
 * - applied: the transition happened; `state` is the new state and `emits`
 *   the messages written to the outbox in the same transaction.
 * - noop: nothing to do (already in the wanted state, duplicate, stale).
 * - conflict: the subject changed under the caller; `current` is what is there now.
 * - refused: the request is not allowed or not valid; nothing was written.
 */
export type Outcome<S, M = never, C extends string = OutcomeCode> =
  | { readonly status: 'applied'; readonly code: C; readonly state: S; readonly emits: readonly M[] }
  | { readonly status: 'noop'; readonly code: C; readonly state: S }
  | { readonly status: 'conflict'; readonly code: C; readonly current: S }
  | { readonly status: 'refused'; readonly code: C; readonly detail?: string };

export type OutcomeStatus = Outcome<unknown>['status'];
export const OUTCOME_STATUSES = Object.freeze(['applied', 'noop', 'conflict', 'refused'] as const);

export const applied = <S, M, C extends string = OutcomeCode>(code: C, state: S, emits: readonly M[] = []): Outcome<S, M, C> => ({
  status: 'applied',
  code,
  state,
  emits,
});
export const noop = <S, C extends string = OutcomeCode>(code: C, state: S): Outcome<S, never, C> => ({ status: 'noop', code, state });
export const conflict = <S, C extends string = OutcomeCode>(code: C, current: S): Outcome<S, never, C> => ({
  status: 'conflict',
  code,
  current,
});
export const refused = <C extends string = OutcomeCode>(code: C, detail?: string): Outcome<never, never, C> =>
  detail === undefined ? { status: 'refused', code } : { status: 'refused', code, detail };

/** Compile-time exhaustiveness check for `switch` statements over unions. */
export function assertNever(value: never, what = 'value'): never {
  throw new Error(`unhandled ${what}: ${JSON.stringify(value)}`);
}
