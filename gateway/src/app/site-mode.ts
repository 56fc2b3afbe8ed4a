import { withCorrelation, type DownlinkMessage } from '@tobira/shared';
import { claimLockdownForCloud, lockModes, readSiteMode, writePassage, writeSiteMode } from '../adapters/sqlite/modes.js';
import type { AppContext } from './context.js';

type SiteModeMessage = Extract<DownlinkMessage, { type: 'site.mode' }>;

/**
 * A `site.mode` downlink (modes set from the cloud), inside the inbox
 * writer's transaction: the site mode and the passage schedules are written
 * with origin `cloud`, who (`by`) and the request id, exactly as a mode set
 * at the gateway is (app/staff-actions.ts, app/modes.ts); the same rules
 * then decide (domain/decide.ts, domain/passage.ts). In particular a cloud
 * passage schedule never holds a door open while the gateway fails closed.
 * Doors this gateway does not have are skipped (the cloud sends only its own).
 */
export function applySiteMode(
  ctx: Pick<AppContext, 'store' | 'log'>,
  m: { readonly cid: string; readonly body: SiteModeMessage['body'] },
  now: number,
): { result: 'applied' | 'noop' | 'refused'; code: 'MODE_APPLIED' | 'MODE_UNCHANGED' | 'MODE_SUPERSEDED' } {
  const { db } = ctx.store;
  const b = m.body;
  let changed = false;
  // a lift asked before staff locked the site down here (it waited out a link down) does not undo that lockdown
  const local = readSiteMode(db);
  const superseded =
    b.mode === 'normal' &&
    b.requestedAt !== undefined &&
    local.mode === 'lockdown' &&
    local.origin === 'gateway' &&
    local.at !== null &&
    local.at > b.requestedAt;
  if (superseded)
    withCorrelation(ctx.log, m.cid, { requestId: b.requestId }).warn(
      { code: 'MODE_SUPERSEDED', requestedAt: b.requestedAt, lockdownAt: local.at, lockdownBy: local.by, by: b.by },
      'a cloud request to lift the lockdown, older than the staff lockdown set here since: the lockdown stands',
    );
  else if (b.mode !== null) changed = writeSiteMode(db, { mode: b.mode, origin: 'cloud', by: b.by, at: now, requestId: b.requestId });
  // A cloud lockdown over one staff set here must not stay liftable by any staff member (domain/staff-modes.ts).
  if (b.mode === 'lockdown' && !changed) claimLockdownForCloud(db, b.by, now, b.requestId);
  const doors = new Set(lockModes(db).flatMap((l) => (l.doorId === null ? [] : [l.doorId])));
  const skipped: string[] = [];
  for (const p of b.passage) {
    if (!doors.has(p.doorId)) {
      skipped.push(p.doorId);
      continue;
    }
    if (writePassage(db, p.doorId, { schedule: p.schedule, origin: 'cloud', by: b.by, at: now, requestId: b.requestId })) changed = true;
  }
  withCorrelation(ctx.log, m.cid, { requestId: b.requestId }).warn(
    { mode: b.mode, passage: b.passage.map((p) => ({ doorId: p.doorId, on: p.schedule !== null })), by: b.by, changed, skipped },
    'site mode set from the cloud',
  );
  if (changed) return { result: 'applied', code: 'MODE_APPLIED' };
  return superseded ? { result: 'refused', code: 'MODE_SUPERSEDED' } : { result: 'noop', code: 'MODE_UNCHANGED' };
}
