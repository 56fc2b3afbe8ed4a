import { purgeAccessLog } from '../adapters/sqlite/access-log.js';
import { purgeLockRefusals, purgeRejected } from '../adapters/sqlite/diagnostics.js';
import { purgeProcessed } from '../adapters/sqlite/inbox.js';
import { purgeIncompleteSnapshots, purgeMobileTokenUses } from '../adapters/sqlite/keyset.js';
import { purgeSentOutbox } from '../adapters/sqlite/outbox.js';
import { purgeStaffActions } from '../adapters/sqlite/staff-actions.js';
import { nowOf, type AppContext } from './context.js';

const DAY = 24 * 3600 * 1000;

/**
 * The hourly purge. Retention: processed inbox 30 days (failed rows stay),
 * acknowledged outbox 7 days, incomplete snapshots 1 day, lock refusals and
 * rejected downlinks by the store's retention, the access log by `accessLog`
 * and the staff audit (staff_actions) by the store's retention (both: only
 * rows the cloud already has), mobile token uses once their token expired. Returns the rows deleted.
 */
export function purgeOld(ctx: Pick<AppContext, 'store' | 'time'>): number {
  const { db, retention } = ctx.store;
  const now = nowOf(ctx);
  return (
    purgeProcessed(db, now - 30 * DAY) +
    purgeSentOutbox(db, now - 7 * DAY) +
    purgeIncompleteSnapshots(db, now - DAY) +
    purgeMobileTokenUses(db, now) +
    purgeLockRefusals(db, now, retention.lockRefusalsMaxAgeMs) +
    purgeRejected(db, now, retention.rejectedMaxAgeMs) +
    purgeAccessLog(db, now, { maxRows: retention.accessLogMaxRows, maxAgeMs: retention.accessLogMaxAgeMs }) +
    purgeStaffActions(db, now, { maxRows: retention.staffActionsMaxRows, maxAgeMs: retention.staffActionsMaxAgeMs })
  );
}
