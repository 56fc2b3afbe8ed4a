import { newId } from '@tobira/shared';
import type { WritableDb } from '../adapters/sqlite/db.js';
import { enqueue, type OutboxLimits } from '../adapters/sqlite/outbox.js';
import { insertStaffAction } from '../adapters/sqlite/staff-actions.js';
import type { StaffActionRecord, StaffAudit } from './staff-accounts.js';

/**
 * The staff audit writer: one `staff_actions` row per action and its
 * `staff.action` uplink (essential: never refused for a full outbox), both
 * in the transaction of the action (callers run it inside theirs), so the
 * cloud hears of every staff action exactly once in effect.
 */
export function staffAudit(db: WritableDb, now: () => number, limits: OutboxLimits, outboxWritten: () => void = () => {}): StaffAudit {
  return (r: StaffActionRecord) => {
    const at = now();
    const row = {
      actionId: newId(),
      at,
      actorId: r.actor.accountId,
      actorName: r.actor.displayName.slice(0, 100),
      action: r.action,
      target: r.target === null ? null : r.target.slice(0, 128),
      detail: r.detail === null ? null : r.detail.slice(0, 200),
      result: r.result,
      code: r.code,
      cid: r.cid,
    };
    if (!insertStaffAction(db, row)) return;
    enqueue(
      db,
      limits,
      'staff.action',
      {
        actionId: row.actionId,
        at,
        actor: { accountId: row.actorId, name: row.actorName },
        action: row.action,
        target: row.target,
        detail: row.detail,
        result: row.result,
        code: row.code,
      },
      r.cid,
      true,
      at,
    );
    // the sender is woken after the caller's commit has a chance to land (it reads committed rows only)
    setImmediate(outboxWritten);
  };
}
