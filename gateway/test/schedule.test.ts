import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Schedule } from '@tobira/shared';
import { decide, type KeySetView } from '../src/domain/decide.js';
import { previousDate } from '@tobira/shared';
import { inSchedule, localTime } from '../src/domain/schedule.js';
import { DOOR, LOCK, grant } from './fixtures.js';

/**
 * Dated and overnight schedules at the door, evaluated in
 * wall-clock time of the schedule's zone: a zone without daylight saving
 * (Asia/Tokyo) and one with it (Europe/Berlin), at both of its changes.
 */
const at = (iso: string) => Date.parse(iso);
const schedule = (timeZone: string, ...windows: Record<string, unknown>[]) => Schedule.parse({ timeZone, windows });

describe('in Asia/Tokyo (UTC+9, no daylight saving)', () => {
  it('an overnight window 22:00-06:00 on Fridays opens Friday night and closes Saturday 06:00', () => {
    const s = schedule('Asia/Tokyo', { days: [5], start: '22:00', end: '06:00' });
    expect(inSchedule(s, at('2026-12-04T12:59:00Z'))).toBe(false); // Fri 21:59
    expect(inSchedule(s, at('2026-12-04T13:00:00Z'))).toBe(true); // Fri 22:00
    expect(inSchedule(s, at('2026-12-04T15:00:00Z'))).toBe(true); // Sat 00:00
    expect(inSchedule(s, at('2026-12-04T20:59:00Z'))).toBe(true); // Sat 05:59
    expect(inSchedule(s, at('2026-12-04T21:00:00Z'))).toBe(false); // Sat 06:00
    expect(inSchedule(s, at('2026-12-05T13:00:00Z'))).toBe(false); // Sat 22:00: Saturday is not a day of it
    expect(inSchedule(s, at('2026-12-03T15:30:00Z'))).toBe(false); // Fri 00:30: the morning after Thursday, not in it
  });
  it('a dated window opens on its dates only, whatever the week day', () => {
    const s = schedule('Asia/Tokyo', { dates: ['2026-12-24'], start: '18:00', end: '24:00' });
    expect(inSchedule(s, at('2026-12-24T09:00:00Z'))).toBe(true); // Thu 24th 18:00
    expect(inSchedule(s, at('2026-12-24T14:59:00Z'))).toBe(true); // 23:59
    expect(inSchedule(s, at('2026-12-24T15:00:00Z'))).toBe(false); // 25th 00:00
    expect(inSchedule(s, at('2026-12-17T09:00:00Z'))).toBe(false); // the Thursday before
  });
  it('a dated overnight window runs into the next year', () => {
    const s = schedule('Asia/Tokyo', { dates: ['2026-12-31'], start: '20:00', end: '02:00' });
    expect(inSchedule(s, at('2026-12-31T11:00:00Z'))).toBe(true); // 31st 20:00
    expect(inSchedule(s, at('2026-12-31T16:59:00Z'))).toBe(true); // 1 Jan 01:59
    expect(inSchedule(s, at('2026-12-31T17:00:00Z'))).toBe(false); // 1 Jan 02:00
    expect(inSchedule(s, at('2026-12-30T16:30:00Z'))).toBe(false); // 31st 01:30: the morning before
  });
  it('days and dates together: the window opens on either', () => {
    const s = schedule('Asia/Tokyo', { days: [1], dates: ['2026-12-05'], start: '09:00', end: '10:00' });
    expect(inSchedule(s, at('2026-11-30T00:30:00Z'))).toBe(true); // Mon 09:30
    expect(inSchedule(s, at('2026-12-05T00:30:00Z'))).toBe(true); // Sat 5th 09:30
    expect(inSchedule(s, at('2026-12-06T00:30:00Z'))).toBe(false); // Sun 09:30
  });
});

describe('in Europe/Berlin (daylight saving)', () => {
  it('on the night the clocks go forward (29 March 2026, 02:00 -> 03:00) a 22:00-06:00 window is an hour shorter and ends at 06:00 CEST', () => {
    const s = schedule('Europe/Berlin', { days: [6], start: '22:00', end: '06:00' }); // Saturday night
    expect(inSchedule(s, at('2026-03-28T20:59:00Z'))).toBe(false); // Sat 21:59 CET
    expect(inSchedule(s, at('2026-03-28T21:00:00Z'))).toBe(true); // Sat 22:00 CET
    expect(inSchedule(s, at('2026-03-29T00:59:00Z'))).toBe(true); // 01:59 CET
    expect(inSchedule(s, at('2026-03-29T01:00:00Z'))).toBe(true); // 03:00 CEST (02:00 never happens)
    expect(inSchedule(s, at('2026-03-29T03:59:00Z'))).toBe(true); // 05:59 CEST
    expect(inSchedule(s, at('2026-03-29T04:00:00Z'))).toBe(false); // 06:00 CEST: 7 hours after it opened
  });
  it('a window inside the hour that does not exist that night never opens', () => {
    const s = schedule('Europe/Berlin', { dates: ['2026-03-29'], start: '02:00', end: '03:00' });
    for (let t = at('2026-03-28T22:00:00Z'); t < at('2026-03-29T06:00:00Z'); t += 60_000) expect(inSchedule(s, t)).toBe(false);
  });
  it('on the night the clocks go back (25 October 2026, 03:00 -> 02:00) an hour that happens twice is inside both times', () => {
    const s = schedule('Europe/Berlin', { dates: ['2026-10-25'], start: '02:00', end: '03:00' });
    expect(inSchedule(s, at('2026-10-24T23:59:00Z'))).toBe(false); // 01:59 CEST
    expect(inSchedule(s, at('2026-10-25T00:00:00Z'))).toBe(true); // 02:00 CEST
    expect(inSchedule(s, at('2026-10-25T01:00:00Z'))).toBe(true); // 02:00 CET, again
    expect(inSchedule(s, at('2026-10-25T01:59:00Z'))).toBe(true); // 02:59 CET
    expect(inSchedule(s, at('2026-10-25T02:00:00Z'))).toBe(false); // 03:00 CET
    const night = schedule('Europe/Berlin', { days: [6], start: '22:00', end: '06:00' });
    expect(inSchedule(night, at('2026-10-24T20:00:00Z'))).toBe(true); // Sat 22:00 CEST
    expect(inSchedule(night, at('2026-10-25T04:59:00Z'))).toBe(true); // Sun 05:59 CET
    expect(inSchedule(night, at('2026-10-25T05:00:00Z'))).toBe(false); // Sun 06:00 CET: 9 hours after it opened
  });
});

describe('at the door', () => {
  const req = { lockId: LOCK, credentialType: 'pin' as const, digest: 'A'.repeat(43) };
  const lock = { doorId: DOOR, failures: 0, lockedOutUntil: null };
  it('a key with an overnight schedule opens past midnight and answers OUTSIDE_SCHEDULE after it', () => {
    const s = schedule('Asia/Tokyo', { days: [5], start: '22:00', end: '06:00' });
    const k = {
      grant: grant({ schedule: s, validFrom: 0, validUntil: at('2027-01-01T00:00:00Z') }),
      version: 1,
      status: 'active' as const,
    };
    const keys: KeySetView = { byCredential: () => [k] };
    const site = (now: number) => ({ mode: 'normal' as const, leaseExpiresAt: now + 60_000 });
    const t1 = at('2026-12-04T17:00:00Z'); // Sat 02:00 JST
    expect(decide(req, keys, lock, site(t1), t1).code).toBe('ALLOWED');
    const t2 = at('2026-12-04T21:00:00Z'); // Sat 06:00 JST
    expect(decide(req, keys, lock, site(t2), t2).code).toBe('OUTSIDE_SCHEDULE');
  });
});

describe('local time, remembered per zone for one UTC second', () => {
  /** A fresh formatter every call: what localTime must answer. */
  function reference(now: number, timeZone: string) {
    const parts = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      weekday: 'short',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
    }).formatToParts(now);
    const v = (t: string) => parts.find((p) => p.type === t)?.value ?? '';
    const day = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'].indexOf(v('weekday'));
    return { date: `${v('year')}-${v('month')}-${v('day')}`, day, minute: (Number(v('hour')) % 24) * 60 + Number(v('minute')) };
  }
  const zones = ['Europe/Berlin', 'Asia/Tokyo', 'America/St_Johns', 'Asia/Kathmandu', 'Australia/Lord_Howe', 'UTC'];
  // around both 2026 changes in Berlin and a plain day, at the millisecond
  const instants = fc.oneof(
    fc.integer({ min: at('2026-03-29T00:58:00Z'), max: at('2026-03-29T01:02:00Z') }),
    fc.integer({ min: at('2026-10-25T00:58:00Z'), max: at('2026-10-25T01:02:00Z') }),
    fc.integer({ min: at('2026-12-01T14:59:58Z'), max: at('2026-12-01T15:00:02Z') }),
  );

  it('answers what a fresh formatting answers, for any sequence of instants and zones (repeats within a second included)', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(instants, fc.constantFrom(...zones)), { minLength: 1, maxLength: 40 }), (calls) => {
        for (const [now, zone] of calls) expect(localTime(now, zone)).toEqual(reference(now, zone));
      }),
    );
  });
});

describe('the day before', () => {
  it('is the calendar day before, for any dates asked in any order (repeats, month and year ends, 29 February)', () => {
    const day = fc.integer({ min: Date.UTC(2023, 11, 25), max: Date.UTC(2028, 2, 5) }).map((ms) => new Date(ms).toISOString().slice(0, 10));
    fc.assert(
      fc.property(fc.array(day, { minLength: 1, maxLength: 30 }), (dates) => {
        for (const d of dates) expect(previousDate(d)).toBe(new Date(Date.parse(`${d}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10));
      }),
    );
  });
});
