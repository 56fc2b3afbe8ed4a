import type { Schedule } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { PasswordWork } from '../src/app/password-work.js';
import { decideModeChange, decidePassageSet, longestHoldMinutes } from '../src/domain/staff-modes.js';

const tz = 'Asia/Tokyo';
const sched = (windows: Schedule['windows']): Schedule => ({ timeZone: tz, windows });
const supervisor = { role: 'supervisor', via: 'session' } as const;
const staff = { role: 'staff', via: 'session' } as const;
const token = { role: 'staff', via: 'token' } as const;

describe('longestHoldMinutes (the 16 h passage bound)', () => {
  it('measures one window, an overnight one, and windows that touch as one stretch', () => {
    expect(longestHoldMinutes(sched([{ days: [1], start: '08:00', end: '20:00' }]))).toBe(12 * 60);
    expect(longestHoldMinutes(sched([{ days: [1], start: '22:00', end: '06:00' }]))).toBe(8 * 60);
    expect(
      longestHoldMinutes(
        sched([
          { days: [1], start: '00:00', end: '12:00' },
          { days: [1], start: '12:00', end: '24:00' },
        ]),
      ),
    ).toBe(24 * 60);
    // Sunday night into Monday morning: the week is laid round
    expect(
      longestHoldMinutes(
        sched([
          { days: [6], start: '20:00', end: '24:00' },
          { days: [0], start: '00:00', end: '10:00' },
        ]),
      ),
    ).toBe(14 * 60);
  });
  it('counts a dated window as if it fell on every week day (the worst case)', () => {
    const dated = sched([
      { dates: ['2026-12-24'], start: '10:00', end: '20:00' },
      { days: [3], start: '20:00', end: '23:59' },
    ]);
    expect(longestHoldMinutes(dated)).toBe(10 * 60 + 3 * 60 + 59);
    expect(longestHoldMinutes(sched([{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }]))).toBe(7 * 24 * 60);
  });
});

describe('decidePassageSet and decideModeChange (domain/staff-modes.ts)', () => {
  const lobby = sched([{ days: [1], start: '06:00', end: '22:00' }]);
  it('refuses in the table order: role, door, guest room, length; clearing needs only the role and the door', () => {
    expect(decidePassageSet(token, { known: false, guestRoom: true }, lobby)).toEqual({ allowed: false, code: 'NOT_SUPERVISOR' });
    expect(decidePassageSet(staff, { known: true, guestRoom: false }, null)).toEqual({ allowed: false, code: 'NOT_SUPERVISOR' });
    expect(decidePassageSet(supervisor, { known: false, guestRoom: true }, lobby)).toEqual({ allowed: false, code: 'DOOR_NOT_FOUND' });
    expect(decidePassageSet(supervisor, { known: true, guestRoom: true }, lobby)).toEqual({ allowed: false, code: 'PASSAGE_GUEST_ROOM' });
    expect(decidePassageSet(supervisor, { known: true, guestRoom: true }, null)).toEqual({ allowed: true });
    const long = sched([{ days: [1], start: '06:00', end: '22:01' }]);
    expect(decidePassageSet(supervisor, { known: true, guestRoom: false }, long)).toEqual({ allowed: false, code: 'PASSAGE_TOO_LONG' });
    expect(decidePassageSet(supervisor, { known: true, guestRoom: false }, lobby)).toEqual({ allowed: true });
  });
  it('lets anyone lock down, and only a supervisor with a reason lift a lockdown the cloud set', () => {
    const cloud = { mode: 'lockdown', origin: 'cloud' } as const;
    expect(decideModeChange(token, { mode: 'normal', origin: 'cloud' }, 'lockdown', undefined)).toEqual({ allowed: true });
    expect(decideModeChange(token, cloud, 'normal', 'script')).toEqual({ allowed: false, code: 'CLOUD_LOCKDOWN' });
    expect(decideModeChange(staff, cloud, 'normal', 'guest')).toEqual({ allowed: false, code: 'CLOUD_LOCKDOWN' });
    expect(decideModeChange(supervisor, cloud, 'normal', ' ')).toEqual({ allowed: false, code: 'REASON_REQUIRED' });
    expect(decideModeChange(supervisor, cloud, 'normal', 'all clear')).toEqual({ allowed: true });
    expect(decideModeChange(token, { mode: 'lockdown', origin: 'gateway' }, 'normal', undefined)).toEqual({ allowed: true });
  });
});

describe('PasswordWork (the process Argon2 budget)', () => {
  it('runs at most `concurrency` at once, queues at most `queue`, and sheds the rest at once', async () => {
    const work = new PasswordWork({ concurrency: 2, queue: 3, perSource: 3 });
    const all = await Promise.all(Array.from({ length: 10 }, () => work.verify(null, 'anything at all')));
    expect(all.filter((x) => x === false)).toHaveLength(5);
    expect(all.filter((x) => typeof x === 'object')).toHaveLength(5);
    expect(work.stats).toMatchObject({ runs: 5, shed: 5, highWater: 2, running: 0, waiting: 0 });
  });

  const flood = (work: PasswordWork, source: string, n: number) =>
    Array.from({ length: n }, () => work.verify(null, 'wrong guess', { source, priority: false }));

  it('one address flooding fills only its own share: a new address and a trusted sign-in still get a turn', async () => {
    const work = new PasswordWork({ concurrency: 1, queue: 4, perSource: 2, priorityQueue: 1 });
    const attacker = flood(work, '10.0.0.66', 20);
    // The attacker holds the one slot and two places; the other seventeen are shed at once.
    expect(work.stats).toMatchObject({ running: 1, waiting: 2, shed: 17 });
    expect(work.admits({ source: '10.0.0.66', priority: false })).toBe(false);
    expect(work.admits({ source: '10.0.0.7', priority: false })).toBe(true);
    expect(work.admits({ source: '10.0.0.66', priority: true })).toBe(true);
    const newcomer = work.verify(null, 'first try', { source: '10.0.0.7', priority: false });
    const supervisor = work.verify(null, 'her password', { source: '10.0.0.5', priority: true });
    expect(typeof (await newcomer)).toBe('boolean');
    expect(typeof (await supervisor)).toBe('boolean');
    const shed = (await Promise.all(attacker)).filter((x) => typeof x === 'object');
    expect(shed).toHaveLength(17);
    // The priority lane has its own bound: one place here, so a second trusted try while it is taken is shed.
    const busy = flood(work, '10.0.0.66', 1);
    const first = work.verify(null, 'a', { source: 'session', priority: true });
    expect(work.admits({ source: 'session', priority: true })).toBe(false);
    await Promise.all([...busy, first]);
  });

  it('bounds each requester in the priority lane and serves it round robin: a trusted flood of one account keeps no other trusted try out', async () => {
    const work = new PasswordWork({ concurrency: 1, queue: 4, priorityQueue: 4, priorityPerSource: 2 });
    const clerk = { source: 'account:ken', priority: true };
    const boss = { source: 'account:aiko', priority: true };
    const order: string[] = [];
    const ask = (label: string, who: { source: string; priority: boolean }) =>
      work.verify(null, label, who).then((x) => {
        if (typeof x === 'boolean') order.push(label);
        return x;
      });
    const flood = Array.from({ length: 20 }, (_, i) => ask(`k${i}`, clerk));
    // one runs, two wait: her share; the other seventeen are shed at once
    expect(work.stats).toMatchObject({ running: 1, waiting: 2, shed: 17 });
    expect(work.admits(clerk)).toBe(false);
    expect(work.admits(boss)).toBe(true);
    const b1 = ask('a1', boss);
    const b2 = ask('a2', boss);
    expect(work.admits(boss)).toBe(false);
    await Promise.all([...flood, b1, b2]);
    // round robin: the supervisor is served after one more of the clerk's, not after all of them
    expect(order).toEqual(['k0', 'k1', 'a1', 'k2', 'a2']);
  });

  it('serves the priority lane first, then the shared lane round robin over addresses', async () => {
    const work = new PasswordWork({ concurrency: 1, queue: 16, perSource: 4 });
    const order: string[] = [];
    const ask = (label: string, source: string, priority = false) =>
      work.verify(null, label, { source, priority }).then(() => order.push(label));
    const jobs = [ask('a0', 'A'), ask('a1', 'A'), ask('a2', 'A'), ask('a3', 'A'), ask('b1', 'B'), ask('c1', 'C'), ask('p1', 'S', true)];
    await Promise.all(jobs);
    expect(order).toEqual(['a0', 'p1', 'a1', 'b1', 'c1', 'a2', 'a3']);
  });
});
