import { asLockId, newId, signLockCommand, type LockCommand, type UnsignedLockCommand } from '@tobira/shared';
import type { IdSource } from '../src/lock.js';

export const T0 = Date.UTC(2026, 10, 29, 9);

/** Deterministic UUID-shaped ids for the pure machine. */
export function counterIds(): IdSource & { readonly count: number } {
  let n = 0;
  return {
    newId() {
      n += 1;
      return `00000000-0000-7000-8000-${n.toString(16).padStart(12, '0')}`;
    },
    get count() {
      return n;
    },
  };
}

export function command(secret: Uint8Array, over: Partial<UnsignedLockCommand> & { now?: number } = {}): LockCommand {
  const { now = T0, ...rest } = over;
  return signLockCommand(secret, {
    commandId: newId(),
    lockId: asLockId('L1'),
    action: 'unlock',
    holdMs: 5000,
    expiresAt: now + 10_000,
    ...rest,
  });
}
