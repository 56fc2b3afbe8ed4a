import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger, decodeSecret, encodeSecret, isSlug, newPairingSecret } from '@tobira/shared';
import { SimLock, type SimActivity, type SimLockOptions } from './adapter.js';
import type { Faults } from './faults.js';

/**
 * A fleet of simulated locks behind one gateway: one SimLock (and one MQTT
 * connection) per lock. Lock ids are L1..LN unless given; pairing secrets are
 * given (raw or base64url) or generated, and `secrets()` hands them to
 * whoever provisions the gateway.
 */
/** The per-lock options apply to every lock of the fleet. */
export interface FleetOptions extends Pick<
  SimLockOptions,
  'url' | 'gatewayId' | 'clock' | 'timers' | 'lock' | 'log' | 'mqtt' | 'siteCa' | 'ids' | 'random' | 'publishTimeoutMs'
> {
  /** A number N (locks L1..LN) or the lock ids. */
  readonly locks: number | readonly string[];
  /** Pairing secrets by lock id (Uint8Array or base64url); missing ones are generated. */
  readonly secrets?: Readonly<Record<string, Uint8Array | string>>;
  /** Every lock logs in to the site broker as itself (SimLockOptions.siteLogin). */
  readonly siteLogin?: boolean;
  /** Faults for every lock at start (change later with `setFaults`). */
  readonly faults?: Faults;
  /** How many locks connect at once when the fleet starts. */
  readonly connectConcurrency?: number;
  readonly onActivity?: (lockId: string, a: SimActivity) => void;
  /**
   * A folder (made 0700) where each lock keeps its replay window (`<lockId>.replay.json`, SimLockOptions
   * `replayWindowFile`), as a real lock keeps it in non-volatile memory: a fleet process restarted within a
   * command's lifetime then refuses a command it executed before (COMMAND_REPLAYED). Absent: in memory only.
   */
  readonly replayWindowDir?: string;
}

export function lockIds(locks: number | readonly string[]): string[] {
  const ids = typeof locks === 'number' ? Array.from({ length: locks }, (_, i) => `L${i + 1}`) : [...locks];
  if (typeof locks === 'number' && (!Number.isInteger(locks) || locks < 1)) throw new RangeError('locks must be a positive integer');
  const bad = ids.find((id) => !isSlug(id));
  if (bad !== undefined) throw new TypeError(`invalid lock id: ${JSON.stringify(bad)}`);
  if (new Set(ids).size !== ids.length) throw new TypeError('duplicate lock ids');
  return ids;
}

export class Fleet {
  readonly gatewayId: string;
  readonly #o: FleetOptions;
  readonly #locks = new Map<string, SimLock>();
  readonly #secrets = new Map<string, Uint8Array>();
  #started = false;

  constructor(o: FleetOptions) {
    this.#o = o;
    this.gatewayId = o.gatewayId;
  }

  /** Creates and connects every lock. If any lock fails to connect, the ones started are stopped and it throws. */
  async start(): Promise<void> {
    if (this.#started) throw new Error('fleet already started');
    this.#started = true;
    const log = this.#o.log ?? createLogger('firmware-sim');
    const dir = this.#o.replayWindowDir;
    if (dir !== undefined) mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const id of lockIds(this.#o.locks)) {
      const given = this.#o.secrets?.[id];
      const secret = given === undefined ? newPairingSecret() : typeof given === 'string' ? decodeSecret(given) : given;
      this.#secrets.set(id, secret);
      const opts: SimLockOptions = {
        url: this.#o.url,
        gatewayId: this.#o.gatewayId,
        lockId: id,
        secret,
        log,
        ...(this.#o.clock && { clock: this.#o.clock }),
        ...(this.#o.timers && { timers: this.#o.timers }),
        ...(this.#o.lock && { lock: this.#o.lock }),
        ...(this.#o.mqtt && { mqtt: this.#o.mqtt }),
        ...(this.#o.siteCa && { siteCa: this.#o.siteCa }),
        ...(this.#o.siteLogin !== undefined && { siteLogin: this.#o.siteLogin }),
        ...(this.#o.ids && { ids: this.#o.ids }),
        ...(this.#o.random && { random: this.#o.random }),
        ...(this.#o.faults && { faults: this.#o.faults }),
        ...(this.#o.publishTimeoutMs !== undefined && { publishTimeoutMs: this.#o.publishTimeoutMs }),
        ...(this.#o.onActivity && { onActivity: (a: SimActivity) => this.#o.onActivity?.(id, a) }),
        ...(dir !== undefined && { replayWindowFile: join(dir, `${id}.replay.json`) }),
      };
      this.#locks.set(id, new SimLock(opts));
    }
    try {
      await inBatches([...this.#locks.values()], this.#o.connectConcurrency ?? 16, (l) => l.start());
    } catch (e) {
      await this.stop();
      throw e;
    }
  }

  /** Every lock says offline and disconnects. */
  async stop(): Promise<void> {
    await Promise.allSettled([...this.#locks.values()].map((l) => l.stop()));
  }

  lock(id: string): SimLock {
    const l = this.#locks.get(id);
    if (!l) throw new Error(`no lock ${JSON.stringify(id)} in fleet ${this.gatewayId}`);
    return l;
  }
  get locks(): SimLock[] {
    return [...this.#locks.values()];
  }
  get lockIds(): string[] {
    return [...this.#locks.keys()];
  }
  /** The pairing secrets, base64url by lock id: what the gateway must be provisioned with. Handle as a secret. */
  secrets(): Record<string, string> {
    return Object.fromEntries([...this.#secrets].map(([id, s]) => [id, encodeSecret(s)]));
  }
  /** The `locks` entries of the gateway's config file for this fleet (docs/gateway.md, "Configuration"). Handle as a secret. */
  gatewayLocks(doorOf: (lockId: string) => string = (id) => `door-${id}`): { lockId: string; doorId: string; pairingSecret: string }[] {
    return [...this.#secrets].map(([lockId, s]) => ({ lockId, doorId: doorOf(lockId), pairingSecret: encodeSecret(s) }));
  }
  secretOf(id: string): Uint8Array {
    const s = this.#secrets.get(id);
    if (!s) throw new Error(`no lock ${JSON.stringify(id)} in fleet ${this.gatewayId}`);
    return s;
  }

  /** Sets the faults of the named locks (default: all). */
  setFaults(f: Faults, ids: readonly string[] = this.lockIds): void {
    for (const id of ids) this.lock(id).setFaults(f);
  }
  /** Abrupt disconnect of the named locks (default: all): their last wills fire. */
  async disconnect(ids: readonly string[] = this.lockIds): Promise<void> {
    await Promise.all(ids.map((id) => this.lock(id).disconnect()));
  }
  async reconnect(ids: readonly string[] = this.lockIds): Promise<void> {
    await Promise.all(ids.map((id) => this.lock(id).reconnect()));
  }
  /** Ticks every lock (with `timers: 'manual'`, after moving the clock). */
  async tick(): Promise<void> {
    await Promise.all(this.locks.map((l) => l.tick()));
  }
}

export async function startFleet(o: FleetOptions): Promise<Fleet> {
  const f = new Fleet(o);
  await f.start();
  return f;
}

async function inBatches<T>(items: readonly T[], size: number, fn: (t: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}
