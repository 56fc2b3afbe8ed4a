import { withCorrelation, type SiteMode } from '@tobira/shared';
import { ackAlarm } from '../adapters/sqlite/alarms.js';
import { readSiteMode, writeSiteMode } from '../adapters/sqlite/modes.js';
import { decideModeChange, type ModeChangeCode } from '../domain/staff-modes.js';
import { getAlarm, type StaffAlarm } from '../adapters/sqlite/staff-queries.js';
import { enqueueStatus } from './locks.js';
import { nowOf, type AppContext } from './context.js';
import type { StaffActor, StaffAudit } from './staff-accounts.js';

/**
 * What staff do locally at the gateway (the staff HTTP routes call these):
 * the site mode, closing an alarm. Each is audited (`audit`, in the same
 * transaction as the change) with the staff member who did it.
 */

export type AlarmAck =
  { readonly status: 'applied' | 'noop'; readonly alarm: StaffAlarm } | { readonly status: 'refused'; readonly code: 'ALARM_NOT_FOUND' };

/** Who is acting, and where their action is audited; null: an internal call (tests, the daemon itself), not audited. */
export interface Acting {
  readonly actor: StaffActor;
  readonly audit: StaffAudit;
}

/** Sets the site mode; a change is reported to the cloud at once (a gateway.status). `cid`: the staff request's. */
export function setSiteMode(
  ctx: AppContext,
  mode: SiteMode,
  by: string,
  cid: string,
  acting: Acting | null = null,
): { mode: SiteMode; changed: boolean } {
  const r = changeSiteMode(ctx, mode, by, cid, acting, null);
  if ('refused' in r) throw new Error('a mode change without a rule refused');
  return r;
}

/**
 * The same, asked by a staff caller: a lockdown the cloud set is lifted only
 * as domain/staff-modes.ts allows (a supervisor's session, with a reason); a
 * refusal is audited and changes nothing.
 */
export function setSiteModeAsStaff(
  ctx: AppContext,
  mode: SiteMode,
  reason: string | undefined,
  cid: string,
  acting: Acting,
): { mode: SiteMode; changed: boolean } | { refused: ModeChangeCode } {
  return changeSiteMode(ctx, mode, reason ?? 'staff', cid, acting, reason);
}

function changeSiteMode(
  ctx: AppContext,
  mode: SiteMode,
  by: string,
  cid: string,
  acting: Acting | null,
  reason: string | undefined | null,
): { mode: SiteMode; changed: boolean } | { refused: ModeChangeCode } {
  const db = ctx.store.db;
  const r = db
    .transaction((): boolean | ModeChangeCode => {
      if (acting !== null && reason !== null) {
        const verdict = decideModeChange(acting.actor, readSiteMode(db), mode, reason);
        if (!verdict.allowed) {
          acting.audit({ actor: acting.actor, action: 'set_mode', target: mode, detail: by, result: 'refused', code: verdict.code, cid });
          return verdict.code;
        }
      }
      // Where the mode came from is shown in the staff UI (origin gateway, who set it).
      const c = writeSiteMode(db, { mode, origin: 'gateway', by: acting?.actor.displayName ?? by, at: nowOf(ctx), requestId: null });
      acting?.audit({
        actor: acting.actor,
        action: 'set_mode',
        target: mode,
        detail: by,
        result: c ? 'applied' : 'noop',
        code: null,
        cid,
      });
      return c;
    })
    .immediate();
  const log = withCorrelation(ctx.log, cid);
  if (typeof r === 'string') {
    log.warn({ mode, code: r, staff: acting?.actor.username }, 'site mode change refused');
    return { refused: r };
  }
  log.warn({ mode, by, changed: r, staff: acting?.actor.username }, 'site mode set locally');
  if (r) enqueueStatus(ctx);
  return { mode, changed: r };
}

/** Closes an open alarm once (`by` is recorded as closed_by); a second ack is a noop. */
export function ackAlarmLocally(ctx: AppContext, alarmId: string, by: string, cid: string, acting: Acting | null = null): AlarmAck {
  const db = ctx.store.db;
  const result = db
    .transaction(() => {
      const r = ackAlarm(db, alarmId, by, nowOf(ctx));
      if (r !== 'not_found')
        acting?.audit({ actor: acting.actor, action: 'ack_alarm', target: alarmId, detail: by, result: r, code: null, cid });
      return r;
    })
    .immediate();
  const alarm = getAlarm(db, alarmId);
  withCorrelation(ctx.log, cid).info({ alarmId, by, result, staff: acting?.actor.username }, 'alarm acknowledged locally');
  if (result === 'not_found' || alarm === null) return { status: 'refused', code: 'ALARM_NOT_FOUND' };
  return { status: result, alarm };
}
