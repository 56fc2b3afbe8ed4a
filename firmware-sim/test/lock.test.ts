import { asLockId, LockEvent, LockRequest, LockState, newPairingSecret, type LockCommand } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { initialLock, lockConfig, nextDeadline, onMessage, type Lock, type LockInput, type LockOutput } from '../src/lock.js';
import { command, counterIds, T0 } from './helpers.js';

const secret = newPairingSecret();
const ids = counterIds();

function booted(over: Partial<Parameters<typeof lockConfig>[0]> = {}): Lock {
  return onMessage(initialLock(lockConfig({ lockId: asLockId('L1'), secret, ...over }), T0), { type: 'boot' }, T0, ids).lock;
}
function step(lock: Lock, input: LockInput, now = T0) {
  return onMessage(lock, input, now, ids);
}
const events = (outs: readonly LockOutput[]) => outs.flatMap((o) => (o.kind === 'event' ? [o.event] : []));
const states = (outs: readonly LockOutput[]) => outs.flatMap((o) => (o.kind === 'state' ? [o.state] : []));
const cmd = (input: LockCommand): LockInput => ({ type: 'command', command: input });

function unlocked(at = T0, holdMs = 5000): Lock {
  const s = step(booted(), cmd(command(secret, { now: at, holdMs })), at);
  expect(s.lock.bolt).toBe('unlocked');
  return s.lock;
}

describe('when it boots', () => {
  it('boots locked with the door closed and publishes its state', () => {
    const s = onMessage(initialLock(lockConfig({ lockId: asLockId('L1'), secret }), T0), { type: 'boot' }, T0, ids);
    expect(s.lock.bolt).toBe('locked');
    expect(states(s.outputs)).toEqual([
      { lockId: 'L1', bolt: 'locked', door: 'closed', battery: 100, at: T0, lastCommandId: null, privacy: false },
    ]);
  });

  it('an unlocked lock that reboots comes back locked', () => {
    const s = step(unlocked(), { type: 'boot' }, T0 + 1);
    expect(s.lock.bolt).toBe('locked');
    expect(s.lock.relockAt).toBeNull();
  });

  it('a reboot does not reopen the replay window: the same command id is still refused', () => {
    const c = command(secret);
    const open = step(booted(), cmd(c)).lock;
    const rebooted = step(open, { type: 'boot' }, T0 + 1).lock;
    const s = step(rebooted, cmd(c), T0 + 2);
    expect(s.lock.bolt).toBe('locked');
    expect(events(s.outputs)).toMatchObject([{ kind: 'command_result', result: 'refused', code: 'COMMAND_REPLAYED' }]);
  });
});

describe('when locked and a valid command arrives', () => {
  it('an unlock command unlocks, publishes the state and reports executed', () => {
    const c = command(secret);
    const s = step(booted(), cmd(c));
    expect(s.lock.bolt).toBe('unlocked');
    expect(states(s.outputs)).toEqual([expect.objectContaining({ bolt: 'unlocked', lastCommandId: c.commandId })]);
    expect(events(s.outputs)).toEqual([
      expect.objectContaining({ kind: 'command_result', commandId: c.commandId, result: 'executed', code: null }),
    ]);
  });

  it('it relocks by itself exactly when holdMs has passed, not before', () => {
    const l = unlocked(T0, 5000);
    const before = step(l, { type: 'tick' }, T0 + 4999);
    expect(before.lock.bolt).toBe('unlocked');
    expect(before.outputs).toEqual([]);
    const after = step(before.lock, { type: 'tick' }, T0 + 5000);
    expect(after.lock.bolt).toBe('locked');
    expect(states(after.outputs)).toEqual([expect.objectContaining({ bolt: 'locked', at: T0 + 5000 })]);
  });

  it('time passing is applied before any input: a late input sees the lock relocked', () => {
    const s = step(unlocked(T0, 1000), { type: 'open_door' }, T0 + 1000);
    expect(s.lock.bolt).toBe('locked');
    expect(s.lock.door).toBe('closed');
  });

  it('a lock command relocks early', () => {
    const s = step(unlocked(), cmd(command(secret, { action: 'lock', now: T0 + 10 })), T0 + 10);
    expect(s.lock.bolt).toBe('locked');
    expect(nextDeadline(s.lock)).toBeNull();
  });
});

describe('when a command is not valid the bolt never moves', () => {
  const other = newPairingSecret();
  it.each<[string, (l: Lock) => { input: LockInput; now: number; lock: Lock }]>([
    ['BAD_MAC', (l) => ({ lock: l, now: T0, input: cmd(command(other)) })],
    ['WRONG_LOCK', (l) => ({ lock: l, now: T0, input: cmd(command(secret, { lockId: asLockId('L2') })) })],
    ['COMMAND_EXPIRED', (l) => ({ lock: l, now: T0 + 10_000, input: cmd(command(secret)) })],
    ['COMMAND_TOO_FAR_AHEAD', (l) => ({ lock: l, now: T0, input: cmd(command(secret, { expiresAt: T0 + 30_001 })) })],
    [
      'COMMAND_REPLAYED',
      (l) => {
        const c = command(secret, { holdMs: 0 });
        const used = step(step(l, cmd(c)).lock, { type: 'tick' }, T0 + 1).lock;
        expect(used.bolt).toBe('locked');
        return { lock: used, now: T0 + 2, input: cmd(c) };
      },
    ],
  ])('%s: refused command_result with the code, no state change', (code, make) => {
    const { lock, now, input } = make(booted());
    const s = step(lock, input, now);
    expect(s.lock.bolt).toBe('locked');
    expect(states(s.outputs)).toEqual([]);
    expect(events(s.outputs)).toEqual([expect.objectContaining({ kind: 'command_result', result: 'refused', code })]);
  });

  it('a command signed for a valid lock but with a longer hold than signed is BAD_MAC', () => {
    const s = step(booted(), cmd({ ...command(secret), holdMs: 60_000 }));
    expect(s.lock.bolt).toBe('locked');
    expect(events(s.outputs)[0]).toMatchObject({ code: 'BAD_MAC' });
  });

  it('a refused unlock does not extend a running hold', () => {
    const l = unlocked(T0, 1000);
    const s = step(l, cmd(command(other, { holdMs: 60_000 })), T0 + 500);
    expect(s.lock.relockAt).toBe(T0 + 1000);
  });

  it('a malformed command is refused with MALFORMED_COMMAND', () => {
    const s = step(booted(), { type: 'malformed_command', commandId: 'x'.repeat(100) });
    expect(s.lock.bolt).toBe('locked');
    expect(events(s.outputs)).toEqual([
      expect.objectContaining({ result: 'refused', code: 'MALFORMED_COMMAND', commandId: 'x'.repeat(64) }),
    ]);
  });

  it('an expired id is forgotten but still never accepted again (it is expired)', () => {
    const c = command(secret, { holdMs: 0 });
    const l = step(booted(), cmd(c)).lock;
    const later = step(l, cmd(command(secret, { now: T0 + 20_000 })), T0 + 20_000).lock;
    expect(later.seen.has(c.commandId)).toBe(false);
    const s = step(later, cmd(c), T0 + 20_001);
    expect(events(s.outputs)[0]).toMatchObject({ code: 'COMMAND_EXPIRED' });
  });

  it('a full replay window refuses new commands rather than forget a live id', () => {
    let l = booted({ replayCapacity: 2 });
    l = step(l, cmd(command(secret, { holdMs: 0 }))).lock;
    l = step(l, cmd(command(secret, { holdMs: 0 }))).lock;
    l = step(l, { type: 'tick' }, T0 + 1).lock;
    const s = step(l, cmd(command(secret, { now: T0 + 1 })), T0 + 1);
    expect(s.lock.bolt).toBe('locked');
    expect(events(s.outputs)[0]).toMatchObject({ result: 'refused', code: 'REPLAY_WINDOW_FULL' });
    // Once those ids expired there is room again.
    const later = step(s.lock, cmd(command(secret, { now: T0 + 10_000 })), T0 + 10_000);
    expect(later.lock.bolt).toBe('unlocked');
  });
});

describe('when jammed', () => {
  it('a jam publishes a jammed bolt and a jam alarm; an authentic command is refused and its id consumed', () => {
    const j = step(booted(), { type: 'jam' });
    expect(j.lock.bolt).toBe('jammed');
    expect(events(j.outputs)).toEqual([expect.objectContaining({ kind: 'jam' })]);
    const c = command(secret);
    const s = step(j.lock, cmd(c));
    expect(s.lock.bolt).toBe('jammed');
    expect(events(s.outputs)[0]).toMatchObject({ result: 'refused', code: 'BOLT_JAMMED' });
    const cleared = step(s.lock, { type: 'clear_jam' });
    expect(cleared.lock.bolt).toBe('locked');
    expect(events(step(cleared.lock, cmd(c)).outputs)[0]).toMatchObject({ code: 'COMMAND_REPLAYED' });
  });

  it('a jammed lock stays jammed across a boot', () => {
    expect(step(step(booted(), { type: 'jam' }).lock, { type: 'boot' }).lock.bolt).toBe('jammed');
  });

  it('jamming an unlocked lock cancels the relock timer', () => {
    const s = step(unlocked(), { type: 'jam' });
    expect(s.lock.relockAt).toBeNull();
  });
});

describe('the door', () => {
  it('a person cannot open a locked door: nothing happens', () => {
    const s = step(booted(), { type: 'open_door' });
    expect(s.lock.door).toBe('closed');
    expect(s.outputs).toEqual([]);
  });

  it('a person opens an unlocked door and closes it; both publish the state', () => {
    const o = step(unlocked(), { type: 'open_door' }, T0 + 1);
    expect(states(o.outputs)).toEqual([expect.objectContaining({ door: 'open', bolt: 'unlocked' })]);
    const c = step(o.lock, { type: 'close_door' }, T0 + 2);
    expect(states(c.outputs)).toEqual([expect.objectContaining({ door: 'closed' })]);
  });

  it('forcing a locked door open raises forced_open', () => {
    const s = step(booted(), { type: 'force_open' });
    expect(s.lock.door).toBe('open');
    expect(events(s.outputs)).toEqual([expect.objectContaining({ kind: 'forced_open' })]);
  });

  it('pushing an unlocked door open is no alarm', () => {
    const s = step(unlocked(), { type: 'force_open' }, T0 + 1);
    expect(events(s.outputs)).toEqual([]);
  });

  it('a door left open raises door_ajar once, after doorAjarMs, and again on the next opening', () => {
    let l = step(booted({ doorAjarMs: 1000 }), { type: 'force_open' }).lock;
    expect(nextDeadline(l)).toBe(T0 + 1000);
    expect(step(l, { type: 'tick' }, T0 + 999).outputs).toEqual([]);
    const ajar = step(l, { type: 'tick' }, T0 + 1000);
    expect(events(ajar.outputs)).toEqual([expect.objectContaining({ kind: 'door_ajar', at: T0 + 1000 })]);
    expect(step(ajar.lock, { type: 'tick' }, T0 + 5000).outputs).toEqual([]);
    expect(nextDeadline(ajar.lock)).toBeNull();
    l = step(ajar.lock, { type: 'close_door' }, T0 + 6000).lock;
    l = step(l, { type: 'force_open' }, T0 + 7000).lock;
    expect(events(step(l, { type: 'tick' }, T0 + 8000).outputs)).toEqual([expect.objectContaining({ kind: 'door_ajar' })]);
  });
});

describe('alarms and battery', () => {
  it('tamper raises a tamper alarm and changes nothing else', () => {
    const l = booted();
    const s = step(l, { type: 'tamper' });
    expect(s.lock).toEqual(l);
    expect(events(s.outputs)).toEqual([expect.objectContaining({ kind: 'tamper' })]);
  });

  it('draining the battery publishes the level and raises low_battery once when it drops below the threshold', () => {
    const a = step(booted(), { type: 'battery_drain', percent: 70 });
    expect(states(a.outputs)).toEqual([expect.objectContaining({ battery: 30 })]);
    expect(events(a.outputs)).toEqual([]);
    const b = step(a.lock, { type: 'battery_drain', percent: 15 });
    expect(events(b.outputs)).toEqual([expect.objectContaining({ kind: 'low_battery' })]);
    const c = step(b.lock, { type: 'battery_drain', percent: 5 });
    expect(events(c.outputs)).toEqual([]);
    const d = step(c.lock, { type: 'battery_drain', percent: 500 });
    expect(d.lock.battery).toBe(0);
    expect(step(d.lock, { type: 'battery_drain', percent: 1 }).outputs).toEqual([]);
  });

  it('with an empty battery an authentic command cannot move the bolt', () => {
    const dead = step(booted(), { type: 'battery_drain', percent: 100 }).lock;
    const s = step(dead, cmd(command(secret)));
    expect(s.lock.bolt).toBe('locked');
    expect(events(s.outputs)[0]).toMatchObject({ result: 'refused', code: 'BATTERY_EMPTY' });
  });
});

describe('presenting a credential', () => {
  it('emits an access request with the time and changes nothing', () => {
    const l = booted();
    const s = step(l, { type: 'present', requestId: 'r-1', credential: { type: 'pin', value: '1234' } }, T0 + 5);
    expect(s.lock).toEqual(l);
    expect(s.outputs).toEqual([{ kind: 'request', request: { requestId: 'r-1', credential: { type: 'pin', value: '1234' }, at: T0 + 5 } }]);
  });
});

describe('purity and wire shape', () => {
  it('never mutates the lock it is given', () => {
    const l = unlocked();
    const snapshot = { ...l, seen: new Map(l.seen) };
    step(l, cmd(command(secret, { action: 'lock' })));
    step(l, { type: 'tick' }, T0 + 100_000);
    step(l, { type: 'jam' });
    expect({ ...l, seen: new Map(l.seen) }).toEqual(snapshot);
  });

  it('every output matches the shared wire schema', () => {
    const outs: LockOutput[] = [];
    let l = booted({ doorAjarMs: 10 });
    for (const input of [
      cmd(command(secret)),
      { type: 'open_door' },
      { type: 'tick' },
      { type: 'present', requestId: 'r', credential: { type: 'card', value: 'ABCD' } },
      { type: 'tamper' },
      { type: 'jam' },
      { type: 'battery_drain', percent: 90 },
      { type: 'malformed_command', commandId: '' },
    ] satisfies LockInput[]) {
      const s = step(l, input, T0 + 20);
      outs.push(...s.outputs);
      l = s.lock;
    }
    expect(outs.length).toBeGreaterThan(8);
    for (const o of outs) {
      const schema = o.kind === 'state' ? LockState : o.kind === 'event' ? LockEvent : LockRequest;
      expect(schema.safeParse(o.kind === 'state' ? o.state : o.kind === 'event' ? o.event : o.request).success).toBe(true);
    }
  });
});
