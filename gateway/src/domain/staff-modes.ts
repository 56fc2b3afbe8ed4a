import type { Schedule, SiteMode } from '@tobira/shared';

/**
 * Who may change the site's operating modes from the staff UI / API, and
 * what a passage schedule may be (docs/gateway.md "Passage mode", "Lockdown
 * from the cloud"). Pure: the use cases (app/modes.ts, app/staff-actions.ts)
 * read the inputs inside their transaction and audit the answer.
 *
 * Setting or clearing a door's passage schedule, checks in this order:
 *
 * | check                                                  | answer                          |
 * |--------------------------------------------------------|---------------------------------|
 * | the caller is not a supervisor (staff, the API token)  | refused NOT_SUPERVISOR (403)    |
 * | the gateway has no lock on that door                   | refused DOOR_NOT_FOUND (404)    |
 * | a schedule for a door configured as a guest room       | refused PASSAGE_GUEST_ROOM (409)|
 * | a schedule that holds the door open over 16 h in a row | refused PASSAGE_TOO_LONG (422)  |
 * | otherwise                                              | allowed                         |
 *
 * Clearing (schedule null) is always allowed to a supervisor, guest room or
 * not: relocking is never the dangerous direction.
 *
 * Changing the site mode:
 *
 * | check                                                                   | answer                          |
 * |-------------------------------------------------------------------------|---------------------------------|
 * | to `lockdown`, by anyone signed in or the API token                     | allowed (closing is safe)       |
 * | to `normal` while the lockdown was set by the cloud, by the API token   | refused CLOUD_LOCKDOWN (403)    |
 * | ... by a staff member                                                   | refused CLOUD_LOCKDOWN (403)    |
 * | ... by a supervisor without a reason                                    | refused REASON_REQUIRED (422)   |
 * | to `normal` otherwise (a lockdown set at the gateway, or no lockdown)   | allowed                         |
 *
 * A lockdown the cloud set (an operator, perhaps on a police request) is
 * lifted by the cloud, or here by a named supervisor who says why; never by
 * automation.
 */

/** The longest a passage schedule may hold a door open without a break. A lobby 06:00-22:00 fits; a door held round the clock does not. */
export const PASSAGE_MAX_HOLD_MINUTES = 16 * 60;

export type Role = 'staff' | 'supervisor';
export interface Caller {
  readonly role: Role;
  readonly via: 'session' | 'token';
}

const isSupervisor = (c: Caller) => c.role === 'supervisor' && c.via === 'session';

export type PassageSetCode = 'NOT_SUPERVISOR' | 'DOOR_NOT_FOUND' | 'PASSAGE_GUEST_ROOM' | 'PASSAGE_TOO_LONG';

/** Invariant: allowed only for a supervisor's session, on a door the gateway has, never a schedule for a guest room or over the hold bound. */
export function decidePassageSet(
  caller: Caller,
  door: { readonly known: boolean; readonly guestRoom: boolean },
  schedule: Schedule | null,
): { readonly allowed: true } | { readonly allowed: false; readonly code: PassageSetCode } {
  if (!isSupervisor(caller)) return { allowed: false, code: 'NOT_SUPERVISOR' };
  if (!door.known) return { allowed: false, code: 'DOOR_NOT_FOUND' };
  if (schedule === null) return { allowed: true };
  if (door.guestRoom) return { allowed: false, code: 'PASSAGE_GUEST_ROOM' };
  if (longestHoldMinutes(schedule) > PASSAGE_MAX_HOLD_MINUTES) return { allowed: false, code: 'PASSAGE_TOO_LONG' };
  return { allowed: true };
}

const MINUTES_PER_DAY = 24 * 60;
const WEEK = 7 * MINUTES_PER_DAY;
const toMinutes = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

/**
 * The longest stretch, in minutes of wall-clock time, that the schedule's
 * windows hold a door open without a break, on a week laid round (Saturday
 * night runs into Sunday). A window of calendar dates is counted as if it
 * were on every week day, the worst case of where its dates fall, so
 * windows cannot be chained into a longer hold through a date.
 */
export function longestHoldMinutes(schedule: Schedule): number {
  const open = new Uint8Array(WEEK);
  for (const w of schedule.windows) {
    const days = w.dates !== undefined && w.dates.length > 0 ? [0, 1, 2, 3, 4, 5, 6] : (w.days ?? []);
    const start = toMinutes(w.start);
    const end = toMinutes(w.end);
    const length = end > start ? end - start : MINUTES_PER_DAY - start + end;
    for (const d of days) for (let m = 0; m < length; m++) open[(d * MINUTES_PER_DAY + start + m) % WEEK] = 1;
  }
  if (open.every((x) => x === 1)) return WEEK;
  // Start counting just after a closed minute, so a stretch across the week's end is measured whole.
  const firstClosed = open.indexOf(0);
  let best = 0;
  let run = 0;
  for (let i = 1; i <= WEEK; i++) {
    if (open[(firstClosed + i) % WEEK] === 1) best = Math.max(best, ++run);
    else run = 0;
  }
  return best;
}

export type ModeChangeCode = 'CLOUD_LOCKDOWN' | 'REASON_REQUIRED';

/** Invariant: a lockdown the cloud set is lifted here only by a supervisor's session with a reason. */
export function decideModeChange(
  caller: Caller,
  current: { readonly mode: SiteMode; readonly origin: 'gateway' | 'cloud' },
  target: SiteMode,
  reason: string | undefined,
): { readonly allowed: true } | { readonly allowed: false; readonly code: ModeChangeCode } {
  if (target === 'lockdown' || current.mode !== 'lockdown' || current.origin !== 'cloud') return { allowed: true };
  if (!isSupervisor(caller)) return { allowed: false, code: 'CLOUD_LOCKDOWN' };
  if (reason === undefined || reason.trim() === '') return { allowed: false, code: 'REASON_REQUIRED' };
  return { allowed: true };
}
