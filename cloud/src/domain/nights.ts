import type { OutcomeCode } from '@tobira/shared';

/** A check's answer: the value, or the refusal an Outcome would carry (same shape, same code table). */
export type Checked<T> =
  { readonly status: 'ok'; readonly value: T } | { readonly status: 'refused'; readonly code: OutcomeCode; readonly detail: string };
export const ok = <T>(value: T): Checked<T> => ({ status: 'ok', value });
export const no = (code: OutcomeCode, detail: string): Checked<never> => ({ status: 'refused', code, detail });

/** A calendar date in the site's time zone, `YYYY-MM-DD`. */
export type IsoDate = string;

export const DEFAULT_MAX_NIGHTS = 30;
const DAY_MS = 86_400_000;

// Civil-date arithmetic without Date (the domain takes time as arguments):
// days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's algorithms).
function daysFromCivil(y: number, m: number, d: number): number {
  const yy = m <= 2 ? y - 1 : y;
  const era = Math.floor(yy / 400);
  const yoe = yy - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

function civilFromDays(z0: number): [number, number, number] {
  const z = z0 + 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const d = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const m = mp < 10 ? mp + 3 : mp - 9;
  return [yoe + era * 400 + (m <= 2 ? 1 : 0), m, d];
}

const pad = (n: number, w: number) => String(n).padStart(w, '0');
const isoOf = (day: number): IsoDate => {
  const [y, m, d] = civilFromDays(day);
  return `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}`;
};

function dayNumber(date: IsoDate): number | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!m) return null;
  const day = daysFromCivil(Number(m[1]), Number(m[2]), Number(m[3]));
  // 2026-02-30 would count as March 2nd: a date that does not round-trip does not exist
  return isoOf(day) === date ? day : null;
}

/**
 * The nights of a stay: every date from check-in (inclusive) to check-out
 * (exclusive). Invariant: at least one night and at most `maxNights`; the
 * dates are real calendar dates.
 */
export function nightsOf(checkIn: IsoDate, checkOut: IsoDate, maxNights = DEFAULT_MAX_NIGHTS): Checked<readonly IsoDate[]> {
  const a = dayNumber(checkIn);
  const b = dayNumber(checkOut);
  if (a === null || b === null) return no('STAY_DATES_INVALID', 'check-in and check-out must be real dates YYYY-MM-DD');
  if (b <= a) return no('STAY_EMPTY', 'check-out must be after check-in');
  if (b - a > maxNights) return no('STAY_TOO_LONG', `at most ${maxNights} nights`);
  const nights: IsoDate[] = [];
  for (let d = a; d < b; d++) nights.push(isoOf(d));
  return ok(nights);
}

/** Offset of `tz` from UTC at the instant `utcMs`, in ms (positive east of Greenwich). */
function offsetAt(utcMs: number, tz: string): number {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone: tz,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  }).formatToParts(utcMs);
  const n = (t: Intl.DateTimeFormatPartTypes) => Number(parts.find((p) => p.type === t)?.value ?? NaN);
  const asUtc = daysFromCivil(n('year'), n('month'), n('day')) * DAY_MS + ((n('hour') * 60 + n('minute')) * 60 + n('second')) * 1000;
  return asUtc - Math.floor(utcMs / 1000) * 1000;
}

/**
 * The instant a wall-clock time on a date happens in `tz` (check-in 15:00
 * in Asia/Tokyo). In a DST gap the later offset is used, so the instant
 * exists; in an overlap the first occurrence.
 */
export function zonedInstant(date: IsoDate, hhmm: string, tz: string): number {
  const day = dayNumber(date);
  const m = /^(\d{2}):(\d{2})$/.exec(hhmm);
  if (day === null || !m) throw new Error(`bad local time ${date} ${hhmm}`);
  const wall = day * DAY_MS + (Number(m[1]) * 60 + Number(m[2])) * 60_000;
  const first = wall - offsetAt(wall, tz);
  const second = wall - offsetAt(first, tz);
  return Math.min(first, second);
}

/**
 * The latest check-out date whose check-out instant (`hhmm` in `tz`) is not
 * after `now`: every stay at the site checking out on or before it is over.
 * Invariant: judged on the site's own calendar, the same instant `zonedInstant` gives a stay's end.
 */
export function lastCheckOutDue(now: number, hhmm: string, tz: string): IsoDate {
  const today = Math.floor((now + offsetAt(now, tz)) / DAY_MS);
  return isoOf(zonedInstant(isoOf(today), hhmm, tz) <= now ? today : today - 1);
}

/** Whole days from `now` until `instant` (negative once it has passed): the input of a cancellation policy. */
export const daysUntilCheckIn = (instant: number, now: number): number => Math.floor((instant - now) / DAY_MS);

/** The site-local calendar date of an instant (`tz` an IANA zone). */
export function localDateOf(now: number, tz: string): IsoDate {
  return isoOf(Math.floor((now + offsetAt(now, tz)) / DAY_MS));
}

/** `date` plus `n` calendar days. */
export function addDays(date: IsoDate, n: number): IsoDate {
  const day = dayNumber(date);
  if (day === null) throw new Error(`bad date ${date}`);
  return isoOf(day + n);
}
