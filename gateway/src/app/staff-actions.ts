import { withCorrelation, type SiteMode } from '@tobira/shared';
import { ackAlarm } from '../adapters/sqlite/alarms.js';
import { setMode } from '../adapters/sqlite/settings.js';
import { getAlarm, type StaffAlarm } from '../adapters/sqlite/staff-queries.js';
import { enqueueStatus } from './locks.js';
import { nowOf, type AppContext } from './context.js';

/** What staff do locally at the gateway (the staff HTTP routes call these): the site mode, closing an alarm. */

export type AlarmAck =
  { readonly status: 'applied' | 'noop'; readonly alarm: StaffAlarm } | { readonly status: 'refused'; readonly code: 'ALARM_NOT_FOUND' };

/** Sets the site mode; a change is reported to the cloud at once (a gateway.status). `cid`: the staff request's. */
export function setSiteMode(ctx: AppContext, mode: SiteMode, by: string, cid: string): { mode: SiteMode; changed: boolean } {
  const changed = setMode(ctx.store.db, mode);
  withCorrelation(ctx.log, cid).warn({ mode, by, changed }, 'site mode set locally');
  if (changed) enqueueStatus(ctx);
  return { mode, changed };
}

/** Closes an open alarm once (`by` is recorded as closed_by); a second ack is a noop. */
export function ackAlarmLocally(ctx: AppContext, alarmId: string, by: string, cid: string): AlarmAck {
  const result = ackAlarm(ctx.store.db, alarmId, by, nowOf(ctx));
  const alarm = getAlarm(ctx.store.db, alarmId);
  withCorrelation(ctx.log, cid).info({ alarmId, by, result }, 'alarm acknowledged locally');
  if (result === 'not_found' || alarm === null) return { status: 'refused', code: 'ALARM_NOT_FOUND' };
  return { status: result, alarm };
}
