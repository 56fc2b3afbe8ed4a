import { newId } from '@tobira/shared';
import type { WritableDb } from '../adapters/sqlite/db.js';
import { insertStaffAction } from '../adapters/sqlite/staff-actions.js';
import type { StaffActionRecord, StaffAudit } from './staff-accounts.js';

/**
 * The staff audit writer: one `staff_actions` row per action, in the
 * transaction of the action (callers run it inside theirs).
 */
export function staffAudit(db: WritableDb, now: () => number): StaffAudit {
  return (r: StaffActionRecord) => {
    insertStaffAction(db, {
      actionId: newId(),
      at: now(),
      actorId: r.actor.accountId,
      actorName: r.actor.displayName.slice(0, 100),
      action: r.action,
      target: r.target,
      detail: r.detail === null ? null : r.detail.slice(0, 200),
      result: r.result,
      code: r.code,
      cid: r.cid,
    });
  };
}
