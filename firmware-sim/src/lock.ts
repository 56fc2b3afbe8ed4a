import {
  DEFAULT_MAX_COMMAND_TTL_MS,
  checkLockCommand,
  type AlarmKind,
  type LockCommand,
  type LockCommandCode,
  type LockEvent,
  type LockId,
  type LockRequest,
  type LockState,
  type PresentedCredential,
} from '@tobira/shared';

/**
 * One simulated lock controller as a pure state machine:
 * `onMessage(lock, input, now, ids) -> { lock, outputs }`. Time and ids are
 * arguments; the outputs are the messages the MQTT adapter publishes.
 *
 * Invariant: the bolt is unlocked only within `holdMs` after an unlock
 * command that had a valid MAC, was addressed to this lock, was fresh and
 * whose id had never been accepted before. Every other command leaves the
 * bolt where it was and is answered with a refused `command_result`.
 *
 * Transition table (every input first applies elapsed time, see `tick`):
 *
 * | input            | when                                   | bolt / door after          | outputs                                |
 * |------------------|----------------------------------------|----------------------------|----------------------------------------|
 * | boot             | always                                 | locked (unless jammed) / unchanged | state                          |
 * | command          | check fails                            | unchanged                  | command_result refused {code}          |
 * | command          | check ok, jammed or battery empty      | unchanged (id consumed)    | command_result refused {BOLT_JAMMED / BATTERY_EMPTY} |
 * | command unlock   | check ok                               | unlocked until now+holdMs  | state, command_result executed         |
 * | command lock     | check ok                               | locked                     | state, command_result executed         |
 * | malformed_command| always                                 | unchanged                  | command_result refused MALFORMED_COMMAND |
 * | tick             | unlocked and now >= relockAt           | locked                     | state                                  |
 * | tick             | door open >= doorAjarMs (once per opening) | unchanged              | door_ajar alarm                        |
 * | present          | always                                 | unchanged                  | request                                |
 * | open_door        | bolt unlocked, door closed             | door open                  | state                                  |
 * | open_door        | bolt locked or jammed                  | unchanged (handle blocked) | —                                      |
 * | force_open       | door closed, bolt locked or jammed     | door open                  | state, forced_open alarm               |
 * | force_open       | door closed, bolt unlocked             | door open                  | state                                  |
 * | close_door       | door open                              | door closed                | state                                  |
 * | tamper           | always                                 | unchanged                  | tamper alarm                           |
 * | jam              | not jammed                             | jammed                     | state, jam alarm                       |
 * | clear_jam        | jammed                                 | locked                     | state                                  |
 * | battery_drain    | level changes                          | unchanged                  | state (+ low_battery alarm when it first drops below the threshold) |
 * | privacy_on       | privacy off (the guest turns the inside thumb-turn) | unchanged      | privacy event {active: true}, state (privacy: true) |
 * | privacy_off      | privacy on (thumb-turn turned back)    | unchanged                  | privacy event {active: false}, state (privacy: false) |
 * | exit             | door closed (inside handle: always opens, mechanical egress) | door open | (privacy event {active: false} if on), state |
 */

export type BoltState = LockState['bolt'];
export type DoorState = LockState['door'];

/** Refusal codes: the shared lock-command codes plus three the simulated hardware adds. */
export const SIM_REFUSAL_CODES = Object.freeze({
  BOLT_JAMMED: 'The command was authentic, but the bolt is jammed and cannot move; its id is consumed.',
  BATTERY_EMPTY: 'The command was authentic, but the battery is empty and the bolt cannot move; its id is consumed.',
  REPLAY_WINDOW_FULL: 'The seen-ids window is full of live command ids; the command was refused rather than forget one.',
});
export type RefusalCode = LockCommandCode | keyof typeof SIM_REFUSAL_CODES;

export interface LockConfig {
  readonly lockId: LockId;
  /** The pairing secret shared with the gateway (32 bytes). */
  readonly secret: Uint8Array;
  /** The door-ajar alarm fires when the door stays open this long. */
  readonly doorAjarMs: number;
  /** Commands expiring further ahead than this are refused; it bounds the replay window. */
  readonly maxTtlMs: number;
  /** At most this many live command ids are remembered. */
  readonly replayCapacity: number;
  /** The low-battery alarm fires when the level first drops below this. */
  readonly lowBatteryPercent: number;
}

export const DEFAULT_LOCK_CONFIG = Object.freeze({
  doorAjarMs: 30_000,
  maxTtlMs: DEFAULT_MAX_COMMAND_TTL_MS,
  replayCapacity: 4096,
  lowBatteryPercent: 20,
});

export function lockConfig(c: Pick<LockConfig, 'lockId' | 'secret'> & Partial<LockConfig>): LockConfig {
  return Object.freeze({ ...DEFAULT_LOCK_CONFIG, ...c });
}

export interface Lock {
  readonly config: LockConfig;
  readonly bolt: BoltState;
  readonly door: DoorState;
  readonly battery: number;
  /** Time of the last change of bolt, door or battery (the `at` of the published state). */
  readonly at: number;
  /** When the bolt relocks by itself; null unless unlocked. */
  readonly relockAt: number | null;
  /** When the door was last opened; null while closed. */
  readonly doorOpenedAt: number | null;
  /** The door-ajar alarm was raised for the current opening. */
  readonly ajarRaised: boolean;
  readonly lastCommandId: string | null;
  /** The guest inside turned privacy on (thumb-turn / do-not-disturb); cleared when turned back or on the way out. */
  readonly privacy: boolean;
  /**
   * Accepted command ids -> their expiry. The same window as shared
   * `ReplayWindow`, kept as an immutable value so the machine stays pure. It
   * models non-volatile memory: it survives a boot, so a reboot cannot reopen
   * the replay window.
   */
  readonly seen: ReadonlyMap<string, number>;
}

export type LockInput =
  | { readonly type: 'boot' }
  | { readonly type: 'command'; readonly command: LockCommand }
  /** A command payload that failed validation; `commandId` is whatever id could be read from it ('' if none). */
  | { readonly type: 'malformed_command'; readonly commandId: string }
  | { readonly type: 'tick' }
  | { readonly type: 'present'; readonly requestId: string; readonly credential: PresentedCredential }
  | { readonly type: 'open_door' }
  | { readonly type: 'close_door' }
  | { readonly type: 'force_open' }
  | { readonly type: 'tamper' }
  | { readonly type: 'jam' }
  | { readonly type: 'clear_jam' }
  | { readonly type: 'battery_drain'; readonly percent: number }
  | { readonly type: 'privacy_on' }
  | { readonly type: 'privacy_off' }
  | { readonly type: 'exit' };

export type LockOutput =
  | { readonly kind: 'state'; readonly state: LockState }
  | { readonly kind: 'event'; readonly event: LockEvent }
  | { readonly kind: 'request'; readonly request: LockRequest };

export interface Step {
  readonly lock: Lock;
  readonly outputs: readonly LockOutput[];
}

/** Where event ids come from (UUIDs); an argument so the machine stays pure. */
export interface IdSource {
  newId(): string;
}

/** A lock as it leaves the factory: bolt locked, door closed, full battery. Publish nothing until `boot`. */
export function initialLock(config: LockConfig, now: number, battery = 100): Lock {
  return {
    config,
    bolt: 'locked',
    door: 'closed',
    battery,
    at: now,
    relockAt: null,
    doorOpenedAt: null,
    ajarRaised: false,
    lastCommandId: null,
    privacy: false,
    seen: new Map(),
  };
}

/** The retained state message of a lock. */
export function stateOf(lock: Lock): LockState {
  return {
    lockId: lock.config.lockId,
    bolt: lock.bolt,
    door: lock.door,
    battery: lock.battery,
    at: lock.at,
    lastCommandId: lock.lastCommandId,
    privacy: lock.privacy,
  };
}

/** The next time at which a `tick` would change something, or null. The adapter arms its timer for it. */
export function nextDeadline(lock: Lock): number | null {
  const ds: number[] = [];
  if (lock.relockAt !== null) ds.push(lock.relockAt);
  if (lock.doorOpenedAt !== null && !lock.ajarRaised) ds.push(lock.doorOpenedAt + lock.config.doorAjarMs);
  return ds.length === 0 ? null : Math.min(...ds);
}

/** Steps the lock by one input at time `now`. Pure: never mutates `lock`. */
export function onMessage(lock: Lock, input: LockInput, now: number, ids: IdSource): Step {
  const out: LockOutput[] = [];
  const timed = elapse(lock, now, ids, out);
  const next = handle(timed, input, now, ids, out);
  return { lock: next, outputs: out };
}

function alarm(lock: Lock, kind: AlarmKind, now: number, ids: IdSource): LockOutput {
  return { kind: 'event', event: { eventId: ids.newId(), lockId: lock.config.lockId, at: now, kind } };
}

function commandResult(lock: Lock, commandId: string, now: number, ids: IdSource, code: RefusalCode | null): LockOutput {
  return {
    kind: 'event',
    event: {
      eventId: ids.newId(),
      lockId: lock.config.lockId,
      at: now,
      kind: 'command_result',
      commandId: commandId.slice(0, 64),
      result: code === null ? 'executed' : 'refused',
      code,
    },
  };
}

/** Applies the passage of time: relock when the hold ran out, door-ajar alarm once per opening. */
function elapse(lock: Lock, now: number, ids: IdSource, out: LockOutput[]): Lock {
  let l = lock;
  if (l.bolt === 'unlocked' && l.relockAt !== null && now >= l.relockAt) {
    l = { ...l, bolt: 'locked', relockAt: null, at: now };
    out.push({ kind: 'state', state: stateOf(l) });
  }
  if (l.doorOpenedAt !== null && !l.ajarRaised && now - l.doorOpenedAt >= l.config.doorAjarMs) {
    l = { ...l, ajarRaised: true };
    out.push(alarm(l, 'door_ajar', now, ids));
  }
  return l;
}

function handle(lock: Lock, input: LockInput, now: number, ids: IdSource, out: LockOutput[]): Lock {
  const publish = (l: Lock): Lock => {
    out.push({ kind: 'state', state: stateOf(l) });
    return l;
  };
  switch (input.type) {
    case 'tick':
      return lock;
    case 'boot':
      // Fail closed: whatever the bolt was, it boots locked (a jammed bolt stays jammed).
      return publish({ ...lock, bolt: lock.bolt === 'jammed' ? 'jammed' : 'locked', relockAt: null, at: now });
    case 'command':
      return command(lock, input.command, now, ids, out);
    case 'malformed_command':
      out.push(commandResult(lock, input.commandId, now, ids, 'MALFORMED_COMMAND'));
      return lock;
    case 'present':
      out.push({ kind: 'request', request: { requestId: input.requestId, credential: input.credential, at: now } });
      return lock;
    case 'open_door':
      if (lock.door === 'open' || lock.bolt !== 'unlocked') return lock;
      return publish({ ...lock, door: 'open', doorOpenedAt: now, ajarRaised: false, at: now });
    case 'force_open': {
      if (lock.door === 'open') return lock;
      const opened = publish({ ...lock, door: 'open', doorOpenedAt: now, ajarRaised: false, at: now });
      if (lock.bolt !== 'unlocked') out.push(alarm(lock, 'forced_open', now, ids));
      return opened;
    }
    case 'close_door':
      if (lock.door === 'closed') return lock;
      return publish({ ...lock, door: 'closed', doorOpenedAt: null, ajarRaised: false, at: now });
    case 'tamper':
      out.push(alarm(lock, 'tamper', now, ids));
      return lock;
    case 'jam': {
      if (lock.bolt === 'jammed') return lock;
      const jammed = publish({ ...lock, bolt: 'jammed', relockAt: null, at: now });
      out.push(alarm(lock, 'jam', now, ids));
      return jammed;
    }
    case 'clear_jam':
      if (lock.bolt !== 'jammed') return lock;
      return publish({ ...lock, bolt: 'locked', at: now });
    case 'battery_drain': {
      const battery = clampBattery(lock.battery - input.percent);
      if (battery === lock.battery) return lock;
      const drained = publish({ ...lock, battery, at: now });
      const threshold = lock.config.lowBatteryPercent;
      if (lock.battery >= threshold && battery < threshold) out.push(alarm(lock, 'low_battery', now, ids));
      return drained;
    }
    case 'privacy_on':
      if (lock.privacy) return lock;
      out.push(privacyEvent(lock, true, now, ids));
      // the state carries privacy too (retained): a gateway away for the event learns it from the state
      return publish({ ...lock, privacy: true, at: now });
    case 'privacy_off':
      if (!lock.privacy) return lock;
      out.push(privacyEvent(lock, false, now, ids));
      return publish({ ...lock, privacy: false, at: now });
    case 'exit': {
      if (lock.door === 'open') return lock;
      if (lock.privacy) out.push(privacyEvent(lock, false, now, ids));
      return publish({ ...lock, privacy: false, door: 'open', doorOpenedAt: now, ajarRaised: false, at: now });
    }
  }
}

function privacyEvent(lock: Lock, active: boolean, now: number, ids: IdSource): LockOutput {
  return { kind: 'event', event: { eventId: ids.newId(), lockId: lock.config.lockId, at: now, kind: 'privacy', active } };
}

function clampBattery(n: number): number {
  return Math.max(0, Math.min(100, Math.round(n)));
}

function command(lock: Lock, c: LockCommand, now: number, ids: IdSource, out: LockOutput[]): Lock {
  const { config } = lock;
  // An id is remembered until its command expires; an expired entry no longer counts (its command is refused as expired anyway).
  const seenLive = { has: (id: string) => (lock.seen.get(id) ?? -Infinity) > now };
  const check = checkLockCommand(config.secret, c, { lockId: config.lockId, now, seen: seenLive, maxTtlMs: config.maxTtlMs });
  if (!check.ok) {
    out.push(commandResult(lock, c.commandId, now, ids, check.code));
    return lock;
  }
  const seen = remember(lock.seen, c.commandId, c.expiresAt, now, config.replayCapacity);
  if (seen === null) {
    out.push(commandResult(lock, c.commandId, now, ids, 'REPLAY_WINDOW_FULL'));
    return lock;
  }
  // From here the id is consumed, whether or not the bolt can move: an authentic command is never executed later.
  const consumed: Lock = { ...lock, seen };
  if (lock.bolt === 'jammed' || lock.battery === 0) {
    out.push(commandResult(lock, c.commandId, now, ids, lock.bolt === 'jammed' ? 'BOLT_JAMMED' : 'BATTERY_EMPTY'));
    return consumed;
  }
  const moved: Lock =
    c.action === 'unlock'
      ? { ...consumed, bolt: 'unlocked', relockAt: now + c.holdMs, lastCommandId: c.commandId, at: now }
      : { ...consumed, bolt: 'locked', relockAt: null, lastCommandId: c.commandId, at: now };
  out.push({ kind: 'state', state: stateOf(moved) });
  out.push(commandResult(moved, c.commandId, now, ids, null));
  return moved;
}

/** Adds an id to the window, first forgetting expired ids; null when it is full of live ids. */
function remember(
  seen: ReadonlyMap<string, number>,
  id: string,
  expiresAt: number,
  now: number,
  capacity: number,
): ReadonlyMap<string, number> | null {
  const next = new Map<string, number>();
  for (const [k, exp] of seen) if (exp > now) next.set(k, exp);
  if (next.size >= capacity) return null;
  next.set(id, expiresAt);
  return next;
}
