import {
  asLockId,
  DEFAULT_MAX_COMMAND_TTL_MS,
  LockEvent,
  LockRequest,
  LockState,
  newPairingSecret,
  signLockCommand,
  type LockCommand,
} from '@tobira/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { initialLock, lockConfig, onMessage, type Lock, type LockInput } from '../src/lock.js';
import { counterIds, T0 } from './helpers.js';

const secret = newPairingSecret();
const wrongSecret = newPairingSecret();
/** A small pool of command ids, so that different commands share ids and replays by id happen often. */
const idPool = Array.from({ length: 6 }, (_, i) => `0190a000-0000-7000-8000-${String(i).padStart(12, '0')}`);

type Action =
  | { readonly t: 'advance'; readonly ms: number }
  | {
      readonly t: 'cmd';
      readonly id: number;
      readonly rightSecret: boolean;
      readonly rightLock: boolean;
      /** expiresAt - now at delivery */
      readonly ttl: number;
      readonly holdMs: number;
      readonly action: 'unlock' | 'lock';
    }
  | { readonly t: 'replay'; readonly k: number }
  | { readonly t: 'other'; readonly input: LockInput };

const action: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant('advance' as const),
      ms: fc.oneof(fc.integer({ min: 0, max: 3000 }), fc.integer({ min: 0, max: 40_000 })),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('cmd' as const),
      id: fc.integer({ min: 0, max: idPool.length - 1 }),
      rightSecret: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
      rightLock: fc.oneof({ weight: 5, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
      ttl: fc.integer({ min: -3000, max: DEFAULT_MAX_COMMAND_TTL_MS + 3000 }),
      holdMs: fc.integer({ min: 0, max: 10_000 }),
      action: fc.constantFrom('unlock' as const, 'lock' as const),
    }),
  },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('replay' as const), k: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('other' as const),
      input: fc.oneof(
        fc.constantFrom<LockInput>(
          { type: 'boot' },
          { type: 'tick' },
          { type: 'open_door' },
          { type: 'close_door' },
          { type: 'force_open' },
          { type: 'tamper' },
          { type: 'jam' },
          { type: 'clear_jam' },
          { type: 'malformed_command', commandId: 'junk' },
          { type: 'present', requestId: 'r-1', credential: { type: 'pin', value: '1234' } },
        ),
        fc.integer({ min: 0, max: 60 }).map((percent): LockInput => ({ type: 'battery_drain', percent })),
      ),
    }),
  },
);

interface Delivery {
  readonly command: LockCommand;
  readonly at: number;
  /** Valid by an oracle independent of the machine: right MAC and lock, fresh, id not accepted before while still live. */
  readonly valid: boolean;
}

function run(actions: readonly Action[]): void {
  const ids = counterIds();
  let now = T0;
  let lock: Lock = onMessage(initialLock(lockConfig({ lockId: asLockId('L1'), secret }), now), { type: 'boot' }, now, ids).lock;
  const deliveries: Delivery[] = [];

  for (const a of actions) {
    let input: LockInput;
    let delivered: LockCommand | null = null;
    switch (a.t) {
      case 'advance':
        now += a.ms;
        input = { type: 'tick' };
        break;
      case 'cmd':
        delivered = signLockCommand(a.rightSecret ? secret : wrongSecret, {
          commandId: idPool[a.id] ?? '',
          lockId: asLockId(a.rightLock ? 'L1' : 'L2'),
          action: a.action,
          holdMs: a.holdMs,
          expiresAt: Math.max(0, now + a.ttl),
        });
        input = { type: 'command', command: delivered };
        break;
      case 'replay': {
        const earlier = deliveries[a.k % Math.max(1, deliveries.length)];
        if (!earlier) continue;
        delivered = earlier.command;
        input = { type: 'command', command: delivered };
        break;
      }
      case 'other':
        input = a.input;
        break;
    }

    const before = lock;
    const step = onMessage(lock, input, now, ids);
    lock = step.lock;

    for (const o of step.outputs) {
      const [schema, value] =
        o.kind === 'state' ? [LockState, o.state] : o.kind === 'event' ? [LockEvent, o.event] : [LockRequest, o.request];
      expect(schema.safeParse(value).success).toBe(true);
    }

    if (delivered) {
      const c = delivered;
      const valid =
        c.mac === signLockCommand(secret, c).mac &&
        c.lockId === 'L1' &&
        c.expiresAt > now &&
        c.expiresAt <= now + DEFAULT_MAX_COMMAND_TTL_MS &&
        !deliveries.some((d) => d.valid && d.command.commandId === c.commandId && d.command.expiresAt > now);
      deliveries.push({ command: c, at: now, valid });
      const results = step.outputs.flatMap((o) => (o.kind === 'event' && o.event.kind === 'command_result' ? [o.event] : []));
      expect(results).toHaveLength(1);
      if (!valid) {
        // An invalid command never moves the bolt (time may relock it, never unlock it).
        expect(results[0]).toMatchObject({ result: 'refused' });
        expect(lock.bolt === 'unlocked' ? before.bolt === 'unlocked' && lock.relockAt === before.relockAt : true).toBe(true);
      } else if (before.bolt !== 'jammed' && before.battery > 0) {
        // Liveness, so the safety check below is not vacuous: a valid command is executed.
        expect(results[0]).toMatchObject({ result: 'executed' });
        expect(lock.bolt).toBe(c.action === 'unlock' ? 'unlocked' : 'locked');
      }
    }

    // Safety: unlocked only within holdMs after a valid, fresh, unseen unlock command.
    if (lock.bolt === 'unlocked') {
      const cause = deliveries.some((d) => d.valid && d.command.action === 'unlock' && d.at <= now && now <= d.at + d.command.holdMs);
      expect(cause).toBe(true);
      expect(lock.relockAt).not.toBeNull();
    }
  }
}

describe('lock state machine properties', () => {
  it('for any sequence of inputs, the bolt is unlocked only within holdMs after a valid, fresh, unseen command', () => {
    fc.assert(
      fc.property(fc.array(action, { maxLength: 80 }), (actions) => run(actions)),
      { numRuns: 400 },
    );
  });

  it('an exact replay of an accepted command is never executed, however the time moves', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 40_000 }), { minLength: 1, maxLength: 10 }),
        fc.integer({ min: 1, max: 30_000 }),
        (gaps, ttl) => {
          const ids = counterIds();
          let now = T0;
          let lock = onMessage(initialLock(lockConfig({ lockId: asLockId('L1'), secret }), now), { type: 'boot' }, now, ids).lock;
          const c = signLockCommand(secret, {
            commandId: idPool[0] ?? '',
            lockId: asLockId('L1'),
            action: 'unlock',
            holdMs: 0,
            expiresAt: now + ttl,
          });
          lock = onMessage(lock, { type: 'command', command: c }, now, ids).lock;
          for (const gap of gaps) {
            now += gap;
            const s = onMessage(lock, { type: 'command', command: c }, now, ids);
            expect(s.outputs.find((o) => o.kind === 'event')).toMatchObject({ event: { result: 'refused' } });
            lock = s.lock;
            expect(lock.bolt).not.toBe('unlocked');
          }
        },
      ),
    );
  });
});
