import { withCorrelation, type Schedule } from '@tobira/shared';
import { lockModes, writePassage } from '../adapters/sqlite/modes.js';
import { decidePassageSet, type PassageSetCode } from '../domain/staff-modes.js';
import { nowOf, type AppContext } from './context.js';
import type { Acting } from './staff-actions.js';

/**
 * Passage schedules set at the gateway (staff UI / API). The cloud sets them
 * through a signed `site.mode` downlink (app/site-mode.ts); both write the
 * same `passage` row with their origin, and the same rules (app/passage.ts)
 * decide whether a door is held open. Who may set one here, and what a
 * schedule may be: domain/staff-modes.ts (supervisors only, never a guest
 * room, at most PASSAGE_MAX_HOLD_MINUTES in a row).
 */
export type PassageResult = { readonly status: 'applied' | 'noop' } | { readonly status: 'refused'; readonly code: PassageSetCode };

export function setPassageLocally(
  ctx: AppContext,
  doorId: string,
  schedule: Schedule | null,
  by: string,
  cid: string,
  acting: Acting,
  guestRooms: ReadonlySet<string>,
): PassageResult {
  const db = ctx.store.db;
  const r = db
    .transaction((): PassageResult => {
      const known = lockModes(db).some((l) => l.doorId === doorId);
      const verdict = decidePassageSet(acting.actor, { known, guestRoom: guestRooms.has(doorId) }, schedule);
      if (!verdict.allowed) {
        acting.audit({
          actor: acting.actor,
          action: 'set_passage',
          target: doorId,
          detail: by,
          result: 'refused',
          code: verdict.code,
          cid,
        });
        return { status: 'refused', code: verdict.code };
      }
      const changed = writePassage(db, doorId, {
        schedule,
        origin: 'gateway',
        by: acting.actor.displayName,
        at: nowOf(ctx),
        requestId: null,
      });
      const status = changed ? 'applied' : 'noop';
      acting.audit({
        actor: acting.actor,
        action: 'set_passage',
        target: doorId,
        detail: schedule === null ? `cleared: ${by}` : by,
        result: status,
        code: null,
        cid,
      });
      return { status };
    })
    .immediate();
  withCorrelation(ctx.log, cid).warn({ doorId, passage: schedule !== null, by, result: r.status }, 'passage schedule set locally');
  return r;
}
