import type { OutcomeCode } from '@tobira/shared';
import type { Tx } from '../adapters/db/db.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { rowStanding, type RowKind } from '../adapters/db/visibility.js';
import { problem, type Answer } from './context.js';

/** The answer a route gives for a referenced row the caller cannot see: the same as for one that does not exist. */
const NOT_FOUND: Record<RowKind, OutcomeCode> = {
  key: 'KEY_NOT_FOUND',
  room: 'ROOM_NOT_FOUND',
  plan: 'PLAN_NOT_FOUND',
  membership: 'MEMBERSHIP_NOT_FOUND',
  walkIn: 'WALK_IN_NOT_FOUND',
  door: 'DOOR_NOT_FOUND',
  gateway: 'GATEWAY_NOT_FOUND',
  person: 'PERSON_NOT_FOUND',
  stay: 'STAY_NOT_FOUND',
  site: 'SITE_NOT_FOUND',
};

/**
 * The not-found code of the first row the request names that the caller's
 * scope cannot see (absent or another site's), null when it sees them all.
 * Checked at the boundary for every reference, so a verb that reads a row
 * unscoped (a stay's guest, a walk-in's plan) never acts on another site's.
 */
export async function hiddenReference(
  db: Tx,
  scope: SiteScope,
  refs: readonly (readonly [RowKind, string | readonly string[] | undefined])[],
): Promise<OutcomeCode | null> {
  if (scope === null) return null;
  for (const [kind, ids] of refs) {
    for (const id of ids === undefined ? [] : typeof ids === 'string' ? [ids] : ids) {
      if ((await rowStanding(db, scope, kind, id)) !== 'visible') return NOT_FOUND[kind];
    }
  }
  return null;
}

/**
 * True when a caller-chosen id for a new row is taken by a row the caller
 * cannot see. Ids are one namespace across sites, so the create cannot use
 * it; the answer (`idUnavailable`) says only that, never what holds it.
 */
export async function heldElsewhere(db: Tx, scope: SiteScope, kind: RowKind, id: string | undefined): Promise<boolean> {
  if (scope === null || id === undefined) return false;
  return (await rowStanding(db, scope, kind, id)) === 'foreign';
}

interface ProblemBody {
  readonly status: 'refused' | 'conflict';
  readonly code: string;
  readonly detail?: string;
  readonly cid?: string;
}

/** 409 ID_UNAVAILABLE's body: the id cannot be used; nothing about the row that holds it (its kind, site or fields). */
export const idUnavailableBody = (cid?: string): ProblemBody => ({
  ...problem('ID_UNAVAILABLE', 'this id cannot be used; choose another, or leave it out and the server makes one', 'conflict'),
  ...(cid === undefined ? {} : { cid }),
});
export const idUnavailable = (cid?: string): Answer => ({ statusCode: 409, body: { ...idUnavailableBody(cid) } });

/** 404's body for a reference the caller cannot see: the row kind's not-found code, as for a row that does not exist. */
export const notFoundBody = (code: OutcomeCode, cid?: string): ProblemBody => ({
  ...problem(code),
  ...(cid === undefined ? {} : { cid }),
});
export const notFound = (code: OutcomeCode, cid?: string): Answer => ({ statusCode: 404, body: { ...notFoundBody(code, cid) } });
