import type { Schedule } from '@tobira/shared';

/**
 * Week-day schedules, evaluated in the schedule's own IANA time zone with
 * Intl (so daylight-saving changes follow the zone's rules).
 *
 * A window `start..end` matches when start <= local time < end on one of its
 * days. A window whose end is not after its start wraps past midnight: it
 * starts on one of its days and ends the next morning. `24:00` is the end of
 * the day. An unknown time zone matches nothing (fail closed).
 */
const formatters = new Map<string, Intl.DateTimeFormat | null>();
const WEEKDAYS: Readonly<Record<string, number>> = { Sun: 0, Mon: 1, Tue: 2, Wed: 3, Thu: 4, Fri: 5, Sat: 6 };

function formatter(timeZone: string): Intl.DateTimeFormat | null {
  let f = formatters.get(timeZone);
  if (f === undefined) {
    try {
      f = new Intl.DateTimeFormat('en-US', { timeZone, weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
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

/** Local week day (0 = Sunday) and minute of day of `now` in `timeZone`, or null for an unknown zone. */
export function localWeekMinute(now: number, timeZone: string): { day: number; minute: number } | null {
  const f = formatter(timeZone);
  if (f === null) return null;
  let day = -1;
  let hour = -1;
  let minute = -1;
  for (const p of f.formatToParts(now)) {
    if (p.type === 'weekday') day = WEEKDAYS[p.value] ?? -1;
    else if (p.type === 'hour') hour = Number(p.value) % 24;
    else if (p.type === 'minute') minute = Number(p.value);
  }
  if (day < 0 || hour < 0 || minute < 0) return null;
  return { day, minute: hour * 60 + minute };
}

const toMinutes = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

/** Invariant: true only if `now` falls inside one window of the schedule in its time zone. */
export function inSchedule(schedule: Schedule, now: number): boolean {
  const local = localWeekMinute(now, schedule.timeZone);
  if (local === null) return false;
  const { day, minute } = local;
  const yesterday = (day + 6) % 7;
  return schedule.windows.some((w) => {
    const start = toMinutes(w.start);
    const end = toMinutes(w.end);
    if (start < end) return w.days.includes(day) && minute >= start && minute < end;
    // Wraps past midnight: the evening part today, or the morning part of a window that began yesterday.
    return (w.days.includes(day) && minute >= start) || (w.days.includes(yesterday) && minute < end);
  });
}
