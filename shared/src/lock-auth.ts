import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { LockCommandCode } from './codes.js';
import type { LockCommand } from './messages.js';

/**
 * Gateway -> lock command authentication. Lock controllers are small MCUs, so
 * commands carry an HMAC-SHA256 with the lock's pairing secret (32 bytes)
 * rather than a signature. The MAC covers every field, so a command cannot be
 * moved to another lock, turned into another action or given a longer life.
 */
export const COMMAND_MAC_VERSION = 'tobira.v1.cmd';
/** A lock refuses a command whose expiry is further ahead than this: it bounds the replay window it must keep. */
export const DEFAULT_MAX_COMMAND_TTL_MS = 30_000;

export type UnsignedLockCommand = Omit<LockCommand, 'mac'>;

export function newPairingSecret(): Uint8Array {
  return new Uint8Array(randomBytes(32));
}
export const encodeSecret = (s: Uint8Array): string => Buffer.from(s).toString('base64url');
export function decodeSecret(s: string): Uint8Array {
  const b = Buffer.from(s, 'base64url');
  if (b.length < 16) throw new TypeError('pairing secret must be at least 16 bytes (base64url)');
  return new Uint8Array(b);
}

/** Domain of the site broker password derivation; a new version gives every lock a new password. */
export const SITE_LOGIN_VERSION = 'tobira.v1.site-login';

/**
 * A lock's password on its site broker, derived from its pairing secret:
 * base64url(HMAC-SHA256(secret, "tobira.v1.site-login|{gatewayId}|{lockId}")).
 * The lock and the gateway both hold the secret, so nothing new is
 * provisioned, and the secret itself never crosses the wire: a broker or a
 * sniffer that learns the password learns no command key (HMAC is one-way)
 * and no other lock's password. Its username is the lock id.
 */
export function siteBrokerPassword(secret: Uint8Array, gatewayId: string, lockId: string): string {
  return createHmac('sha256', secret).update([SITE_LOGIN_VERSION, gatewayId, lockId].join('|')).digest('base64url');
}

/** The MQTT client id of a lock on its site broker. The embedded site broker refuses a lock login under any other id, so one lock cannot take over another's session. */
export const lockClientId = (gatewayId: string, lockId: string): string => `tobira-lock-${gatewayId}-${lockId}`;
/** The MQTT client id of the gateway on its site broker. */
export const gatewaySiteClientId = (gatewayId: string): string => `tobira-gw-${gatewayId}-site`;

function canonical(c: UnsignedLockCommand): string {
  return [COMMAND_MAC_VERSION, c.lockId, c.commandId, c.action, String(c.holdMs), String(c.expiresAt)].join('|');
}

function mac(secret: Uint8Array, c: UnsignedLockCommand): Buffer {
  return createHmac('sha256', secret).update(canonical(c)).digest();
}

export function signLockCommand(secret: Uint8Array, c: UnsignedLockCommand): LockCommand {
  return { ...c, mac: mac(secret, c).toString('base64url') };
}

export type LockCommandCheck = { readonly ok: true } | { readonly ok: false; readonly code: LockCommandCode };

export interface LockCommandContext {
  readonly lockId: string;
  readonly now: number;
  /** Command ids this lock has already executed and that have not expired yet. */
  readonly seen: { has(commandId: string): boolean };
  readonly maxTtlMs?: number;
}

/**
 * Checks a command. The caller keeps the seen-ids window and records the id
 * only when this returns ok (see ReplayWindow). Order: MAC first, so nothing
 * is learned about a forged command; then addressee, expiry, replay.
 */
export function checkLockCommand(secret: Uint8Array, c: LockCommand, ctx: LockCommandContext): LockCommandCheck {
  const expected = mac(secret, c);
  const given = Buffer.from(c.mac, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, code: 'BAD_MAC' };
  if (c.lockId !== ctx.lockId) return { ok: false, code: 'WRONG_LOCK' };
  if (c.expiresAt <= ctx.now) return { ok: false, code: 'COMMAND_EXPIRED' };
  if (c.expiresAt > ctx.now + (ctx.maxTtlMs ?? DEFAULT_MAX_COMMAND_TTL_MS)) return { ok: false, code: 'COMMAND_TOO_FAR_AHEAD' };
  if (ctx.seen.has(c.commandId)) return { ok: false, code: 'COMMAND_REPLAYED' };
  return { ok: true };
}

/**
 * The seen-ids window a lock keeps. An id can be forgotten once its command
 * has expired (an expired command is refused anyway), so the window holds at
 * most the commands of the last `maxTtlMs`. When full, it refuses to forget
 * live ids: `remember` returns false and the caller must refuse the command.
 */
export class ReplayWindow {
  readonly #ids = new Map<string, number>();
  constructor(private readonly capacity = 4096) {}
  has(commandId: string): boolean {
    return this.#ids.has(commandId);
  }
  remember(commandId: string, expiresAt: number, now: number): boolean {
    if (this.#ids.size >= this.capacity) this.prune(now);
    if (this.#ids.size >= this.capacity) return false;
    this.#ids.set(commandId, expiresAt);
    return true;
  }
  prune(now: number): void {
    for (const [id, exp] of this.#ids) if (exp <= now) this.#ids.delete(id);
  }
  get size(): number {
    return this.#ids.size;
  }
}
