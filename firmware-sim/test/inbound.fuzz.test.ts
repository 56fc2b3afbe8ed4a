import { asLockId, LockEvent, newPairingSecret, signLockCommand } from '@tobira/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { commandInput } from '../src/adapter.js';
import { initialLock, lockConfig, onMessage } from '../src/lock.js';
import { counterIds, T0 } from './helpers.js';

const secret = newPairingSecret();
const valid = signLockCommand(secret, {
  commandId: '01900000-0000-7000-8000-000000000301',
  lockId: asLockId('L1'),
  action: 'unlock',
  holdMs: 5000,
  expiresAt: T0 + 10_000,
});

/** Payloads: raw bytes, strings, any JSON, and the valid command with one field replaced or added. */
const payload: fc.Arbitrary<unknown> = fc.oneof(
  fc.uint8Array({ maxLength: 300 }),
  fc.string({ maxLength: 300 }),
  fc.json().map((j) => j),
  fc.anything().map((a) => {
    try {
      return JSON.stringify(a) ?? 'undefined';
    } catch {
      return '{}';
    }
  }),
  fc
    .tuple(fc.constantFrom('commandId', 'lockId', 'action', 'holdMs', 'expiresAt', 'mac', 'extra', '__proto__'), fc.jsonValue())
    .map(([k, v]) => JSON.stringify({ ...valid, [k]: v })),
  fc.constant(undefined),
  fc.constant(null),
  fc.integer(),
);

describe('the inbound command parser (fuzz)', () => {
  it('never throws, and whatever it yields the machine handles without throwing or unlocking on a bad MAC', () => {
    fc.assert(
      fc.property(payload, (p) => {
        const { input, rejected } = commandInput(p);
        const lock = onMessage(initialLock(lockConfig({ lockId: asLockId('L1'), secret }), T0), { type: 'boot' }, T0, counterIds()).lock;
        const step = onMessage(lock, input, T0, counterIds());
        const events = step.outputs.flatMap((o) => (o.kind === 'event' ? [o.event] : []));
        expect(events).toHaveLength(1);
        expect(LockEvent.safeParse(events[0]).success).toBe(true);
        if (rejected) {
          expect(input.type).toBe('malformed_command');
          expect(events[0]).toMatchObject({ result: 'refused', code: 'MALFORMED_COMMAND' });
        }
        if (step.lock.bolt === 'unlocked') {
          // Only a command that carries the right MAC over every field can unlock.
          expect(input.type === 'command' && signLockCommand(secret, input.command).mac === input.command.mac).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('the untouched valid command is accepted, so the fuzz above is not vacuous', () => {
    const { input, rejected } = commandInput(Buffer.from(JSON.stringify(valid)));
    expect(rejected).toBeNull();
    const lock = onMessage(initialLock(lockConfig({ lockId: asLockId('L1'), secret }), T0), input, T0, counterIds()).lock;
    expect(lock.bolt).toBe('unlocked');
  });
});
