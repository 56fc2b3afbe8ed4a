import { z } from 'zod';

/**
 * Key schedules: the ONE definition of what a schedule is (validation) and
 * when it opens (evaluation), for the cloud (which refuses what is not a
 * schedule when a key is issued) and the gateway (which evaluates it at the
 * door). Both import this file; a property test checks that they agree.
 *
 * A schedule is a time zone and windows. A window opens on its week days
 * (`days`, 0 = Sunday) and/or its calendar dates (`dates`, YYYY-MM-DD, local
 * to the zone) from `start` to `end`, wall-clock time in the schedule's time
 * zone. `end` after `start`: the same day (`24:00` is the end of the day).
 * `end` before `start`: an overnight window (22:00-06:00) that starts on one
 * of its days or dates and ends the next morning. Wall-clock time follows
 * the zone's daylight-saving rules: on the night the clocks go forward, a
 * 22:00-06:00 window is an hour shorter; a wall time that does not exist that
 * night (02:30 in Europe/Berlin on the last Sunday of March) is never inside
 * a window, and one that happens twice (the autumn change) is inside at both.
 *
 * Refused: a window with neither days nor dates, `start` 24:00, `start` equal
 * to `end` (an empty window, or a whole day that should be written
 * 00:00-24:00), a date that is not on the calendar, an unknown time zone.
 * An unknown zone at evaluation (a runtime with other tz data) matches
 * nothing: fail closed.
 */

/** True for an IANA time zone this runtime knows (Asia/Tokyo, UTC, ...). */
export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}
/** An IANA time zone name; an unknown one is refused where it enters (a schedule or a site), never found out at a door. */
export const TimeZone = z.string().min(1).max(64).refine(isTimeZone, { message: 'an IANA time zone such as Asia/Tokyo' });

export const HHMM_PATTERN = /^([01]\d|2[0-3]):[0-5]\d$|^24:00$/;
export const DATE_PATTERN = /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/;
const HHMM = z.string().regex(HHMM_PATTERN, 'HH:MM');
const LocalDate = z.string().regex(DATE_PATTERN, 'YYYY-MM-DD');

export interface ScheduleWindowShape {
  readonly days?: readonly number[] | undefined;
  readonly dates?: readonly string[] | undefined;
  readonly start: string;
  readonly end: string;
}

const toMinutes = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

/** True for a YYYY-MM-DD that is on the calendar (2026-02-29 is not). */
export function isCalendarDate(date: string): boolean {
  if (!DATE_PATTERN.test(date)) return false;
  const [y = 0, m = 0, d = 0] = date.split('-').map(Number);
  const t = new Date(Date.UTC(y, m - 1, d));
  return t.getUTCFullYear() === y && t.getUTCMonth() === m - 1 && t.getUTCDate() === d;
}

/**
 * The schedule rules beyond the field formats, one message per broken rule
 * (empty: a schedule). The zod schema below runs it, so the cloud's issue
 * and the gateway's grant parse refuse the same schedules.
 */
export function scheduleProblems(windows: readonly ScheduleWindowShape[]): string[] {
  const out: string[] = [];
  windows.forEach((w, i) => {
    if ((w.days === undefined || w.days.length === 0) && (w.dates === undefined || w.dates.length === 0))
      out.push(`windows[${i}]: give days, dates or both`);
    if (w.start === '24:00') out.push(`windows[${i}]: start 24:00 (a window starts before the end of its day)`);
    else if (toMinutes(w.start) === toMinutes(w.end)) out.push(`windows[${i}]: start equals end (write a whole day as 00:00-24:00)`);
    for (const d of w.dates ?? []) if (!isCalendarDate(d)) out.push(`windows[${i}]: ${d} is not a calendar date`);
  });
  return out;
}

export const ScheduleWindow = z.strictObject({
  /** 0 = Sunday ... 6 = Saturday */
  days: z.array(z.int().min(0).max(6)).min(1).max(7).optional(),
  /** Calendar dates in the schedule's time zone (a holiday, an event day). */
  dates: z.array(LocalDate).min(1).max(366).optional(),
  start: HHMM,
  end: HHMM,
});

/** A schedule in the site's time zone: the key opens only inside one of the windows. */
export const Schedule = z
  .strictObject({
    timeZone: TimeZone,
    windows: z.array(ScheduleWindow).min(1).max(32),
  })
  .superRefine((s, ctx) => {
    for (const message of scheduleProblems(s.windows)) ctx.addIssue({ code: 'custom', message, path: ['windows'] });
  });
export type Schedule = z.infer<typeof Schedule>;

// ---------------------------------------------------------------- evaluation

const formatters = new Map<string, Intl.DateTimeFormat | null>();
const WEEKDAYS: Readonly<Record<string, number>> = { Sun: 0, Mon: 1, Tue: 2, Wed: 3, Thu: 4, Fri: 5, Sat: 6 };

function formatter(timeZone: string): Intl.DateTimeFormat | null {
  let f = formatters.get(timeZone);
  if (f === undefined) {
    try {
      f = new Intl.DateTimeFormat('en-US', {
        timeZone,
        weekday: 'short',
        year: 'numeric',
        month: '2-digit',
        day: '2-digit',
        hour: '2-digit',
        minute: '2-digit',
        hourCycle: 'h23',
      });
    } catch {
      f = null;
    }
    formatters.set(timeZone, f);
  }
  return f;
}

/**
 * True for a time zone this runtime knows, answered from the same cache as
 * the schedule's formatters: `isTimeZone` builds an Intl object per call,
 * which the decision path cannot afford per request.
 */
export const knownTimeZone = (timeZone: string): boolean => formatter(timeZone) !== null;

export interface LocalTime {
  /** YYYY-MM-DD */
  readonly date: string;
  /** 0 = Sunday */
  readonly day: number;
  /** Minute of the day, 0..1439. */
  readonly minute: number;
}

/**
 * The last answer per time zone, by UTC second: every zone's offset is a
 * whole number of seconds, so one UTC second is one local second, and the
 * door decisions of one second (hundreds at a busy site) share one Intl
 * formatting (`formatToParts` was the largest cost left in the
 * schedule check).
 */
const lastLocal = new Map<string, { second: number; local: LocalTime | null }>();
const LAST_LOCAL_ZONES = 64;

/** The local date, week day and minute of day of `now` in `timeZone`, or null for an unknown zone. */
export function localTime(now: number, timeZone: string): LocalTime | null {
  const second = Math.floor(now / 1000);
  const last = lastLocal.get(timeZone);
  if (last?.second === second) return last.local;
  const local = formatLocalTime(now, timeZone);
  if (last === undefined && lastLocal.size >= LAST_LOCAL_ZONES) lastLocal.clear();
  lastLocal.set(timeZone, { second, local });
  return local;
}

function formatLocalTime(now: number, timeZone: string): LocalTime | null {
  const f = formatter(timeZone);
  if (f === null) return null;
  let day = -1;
  let hour = -1;
  let minute = -1;
  let year = '';
  let month = '';
  let dom = '';
  for (const p of f.formatToParts(now)) {
    if (p.type === 'weekday') day = WEEKDAYS[p.value] ?? -1;
    else if (p.type === 'hour') hour = Number(p.value) % 24;
    else if (p.type === 'minute') minute = Number(p.value);
    else if (p.type === 'year') year = p.value;
    else if (p.type === 'month') month = p.value;
    else if (p.type === 'day') dom = p.value;
  }
  if (day < 0 || hour < 0 || minute < 0 || year.length !== 4) return null;
  return { date: `${year}-${month}-${dom}`, day, minute: hour * 60 + minute };
}

/** The calendar day before a YYYY-MM-DD (calendar arithmetic: no time zone, no DST). */
export function previousDate(date: string): string {
  // every decision of a day asks for the same one: the last answer is kept
  if (date === lastPrevious.date) return lastPrevious.previous;
  const [y = 0, m = 0, d = 0] = date.split('-').map(Number);
  const previous = new Date(Date.UTC(y, m - 1, d - 1)).toISOString().slice(0, 10);
  lastPrevious = { date, previous };
  return previous;
}
let lastPrevious = { date: '', previous: '' };

const opensOn = (w: ScheduleWindowShape, date: string, day: number): boolean =>
  (w.days?.includes(day) ?? false) || (w.dates?.includes(date) ?? false);

/** Invariant: true only if `now` falls inside one window of the schedule, in its time zone's wall-clock time. */
export function inSchedule(
  schedule: { readonly timeZone: string; readonly windows: readonly ScheduleWindowShape[] },
  now: number,
): boolean {
  const local = localTime(now, schedule.timeZone);
  if (local === null) return false;
  const { date, day, minute } = local;
  const yesterday = previousDate(date);
  const yesterdayDay = (day + 6) % 7;
  return schedule.windows.some((w) => {
    const start = toMinutes(w.start);
    const end = toMinutes(w.end);
    if (start < end) return opensOn(w, date, day) && minute >= start && minute < end;
    // Overnight: the evening part on one of its days, or the morning part of a window that began yesterday.
    return (opensOn(w, date, day) && minute >= start) || (opensOn(w, yesterday, yesterdayDay) && minute < end);
  });
}
