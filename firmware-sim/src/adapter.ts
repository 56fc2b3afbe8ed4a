import {
  LockCommand,
  LockDecision,
  asLockId,
  connectMqtt,
  siteTlsOptions,
  createLogger,
  decodeText,
  lockClientId,
  siteBrokerPassword,
  newId,
  parseJson,
  parsePayload,
  systemClock,
  topics,
  waitConnected,
  type Clock,
  type LockChannel,
  type Logger,
  type PresentedCredential,
} from '@tobira/shared';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { IClientOptions, MqttClient } from 'mqtt';
import { NO_FAULTS, rollFault, validateFaults, type Faults } from './faults.js';
import {
  initialLock,
  lockConfig,
  nextDeadline,
  onMessage,
  stateOf,
  type BoltState,
  type IdSource,
  type Lock,
  type LockConfig,
  type LockInput,
  type LockOutput,
} from './lock.js';

/**
 * The MQTT adapter of one simulated lock. It owns one MQTT connection (the
 * lock's own, with its own last will), feeds what arrives into the pure state
 * machine (lock.ts) and publishes what the machine outputs.
 *
 * | topic (topics.lock(gw, lock, ...)) | direction | QoS | retain |
 * |------------------------------------|-----------|-----|--------|
 * | presence  `{online:true}` on every (re)connect; last will `{online:false}` | out | 1 | yes |
 * | state     after every change and on every (re)connect | out | 1 | yes |
 * | event     alarms and command results | out | 1 | no |
 * | request   credentials presented      | out | 1 | no |
 * | command   HMAC commands              | in  | 1 | — |
 * | decision  the gateway's decisions    | in  | 1 | — |
 *
 * Bad input (oversize, not UTF-8, not JSON, wrong schema) is logged, counted
 * in `stats` and never applied; a bad command is also answered with a refused
 * `command_result` (MALFORMED_COMMAND). Nothing that arrives can throw out of
 * the message handler.
 */

export interface SimLockOptions {
  readonly url: string;
  readonly gatewayId: string;
  readonly lockId: string;
  readonly secret: Uint8Array;
  readonly clock?: Clock;
  /**
   * `auto`: real timers fire the relock and door-ajar deadlines (CLI, demo).
   * `manual`: nothing happens by itself; call `tick()` after moving a ManualClock (tests).
   */
  readonly timers?: 'auto' | 'manual';
  readonly lock?: Partial<Omit<LockConfig, 'lockId' | 'secret'>>;
  readonly battery?: number;
  readonly log?: Logger;
  /** Extra mqtt.js options (credentials). The will, client id, clean flag and TLS trust are the adapter's. */
  readonly mqtt?: IClientOptions;
  /**
   * The site CA this lock was paired with (docs/gateway.md "Site TLS"): its
   * PEM and the SHA-256 fingerprint handed over at pairing. An mqtts:// `url`
   * trusts this CA and nothing else, and a CA whose fingerprint is not the
   * pin is refused before connecting (SITE_CA_PIN_MISMATCH). Plain mqtt:// is
   * accepted to a loopback address only (SITE_PLAINTEXT_NOT_LOOPBACK).
   */
  readonly siteCa?: { readonly caPem: string; readonly pin: string };
  /**
   * Log in to the site broker as this lock: username = lock id, password =
   * `siteBrokerPassword(secret, gatewayId, lockId)` (derived from the pairing
   * secret, which itself never goes on the wire). Overrides `mqtt.username` / `mqtt.password`.
   */
  readonly siteLogin?: boolean;
  readonly ids?: IdSource;
  /** Random source of fault injection. */
  readonly random?: () => number;
  readonly faults?: Faults;
  /** How long `input()` and the door helpers wait for the broker to take their messages. */
  readonly publishTimeoutMs?: number;
  readonly onActivity?: (a: SimActivity) => void;
  /**
   * A file that holds the replay window (the command ids seen, until their
   * commands expire), as a real lock holds it in non-volatile memory: read at
   * start, written (synchronously) before a step's outputs leave, so a lock
   * restarted within the command lifetime refuses a command it executed
   * before its restart (COMMAND_REPLAYED). Absent: the window lives in this
   * process only, and a restart of the process forgets it.
   */
  readonly replayWindowFile?: string;
}

/** The persisted replay window: command id → expiry (ms). Unreadable or missing: empty (a fresh lock). */
function loadReplayWindow(file: string | undefined): ReadonlyMap<string, number> {
  if (file === undefined || !existsSync(file)) return new Map();
  const v: unknown = JSON.parse(readFileSync(file, 'utf8'));
  if (typeof v !== 'object' || v === null) return new Map();
  return new Map(Object.entries(v).filter((e): e is [string, number] => typeof e[1] === 'number'));
}

export type SimActivity =
  | { readonly type: 'connected' }
  | { readonly type: 'disconnected' }
  | { readonly type: 'output'; readonly output: LockOutput }
  | { readonly type: 'decision'; readonly decision: LockDecision }
  | { readonly type: 'rejected'; readonly channel: LockChannel; readonly code: string; readonly detail: string };

export interface SimLockStats {
  /** Messages received on command and decision topics (before fault injection). */
  received: number;
  /** Messages refused by validation, by code (TOO_LARGE, MALFORMED, SCHEMA_INVALID). */
  rejected: number;
  rejectedByCode: Record<string, number>;
  /** Messages handed to the broker. */
  published: number;
  /** Outputs not published because the lock was disconnected or the publish failed. */
  unsent: number;
  droppedIn: number;
  droppedOut: number;
  duplicatedIn: number;
  duplicatedOut: number;
  delayedIn: number;
  delayedOut: number;
}

export interface CommandOutcome {
  readonly commandId: string;
  readonly result: 'executed' | 'refused';
  readonly code: string | null;
  /** The bolt right after the lock handled the command. */
  readonly bolt: BoltState;
}

/**
 * The outcome of presenting a credential:
 * - `decided`: the gateway answered; if it allowed and named a command, `command` is what the lock did with it
 *   (null if the command did not arrive in time: see `waitedFor`).
 * - `timeout`: no decision in time.
 * - `offline`: the lock is not connected; no request was sent.
 */
export interface PresentResult {
  readonly status: 'decided' | 'timeout' | 'offline';
  readonly requestId: string;
  readonly decision: LockDecision | null;
  readonly command: CommandOutcome | null;
  /** What did not arrive in time, if anything. */
  readonly waitedFor: 'decision' | 'command' | null;
  /** The bolt when the call returned. */
  readonly bolt: BoltState;
}

const RECENT_RESULTS = 256;

export class SimLock {
  readonly gatewayId: string;
  readonly lockId: string;
  readonly stats: SimLockStats = {
    received: 0,
    rejected: 0,
    rejectedByCode: {},
    published: 0,
    unsent: 0,
    droppedIn: 0,
    droppedOut: 0,
    duplicatedIn: 0,
    duplicatedOut: 0,
    delayedIn: 0,
    delayedOut: 0,
  };

  readonly #o: SimLockOptions;
  readonly #clock: Clock;
  readonly #ids: IdSource;
  readonly #random: () => number;
  readonly #log: Logger;
  readonly #topic: (c: LockChannel) => string;
  #faults: Faults;
  #lock: Lock | null = null;
  #client: MqttClient | null = null;
  #deadlineTimer: NodeJS.Timeout | null = null;
  readonly #delayed = new Set<NodeJS.Timeout>();
  readonly #decisionWaiters = new Map<string, (d: LockDecision) => void>();
  readonly #resultListeners = new Set<(r: CommandOutcome) => void>();
  readonly #recentResults = new Map<string, CommandOutcome>();
  #stopping = false;

  constructor(o: SimLockOptions) {
    this.#o = o;
    this.gatewayId = o.gatewayId;
    this.lockId = o.lockId;
    this.#clock = o.clock ?? systemClock;
    this.#ids = o.ids ?? { newId };
    this.#random = o.random ?? Math.random;
    this.#faults = validateFaults(o.faults ?? NO_FAULTS);
    this.#log = (o.log ?? createLogger('firmware-sim')).child({ gatewayId: o.gatewayId, lockId: o.lockId });
    // Validates both ids once; throws on a non-slug id.
    topics.lock(o.gatewayId, o.lockId, 'state');
    this.#topic = (c) => topics.lock(o.gatewayId, o.lockId, c);
  }

  /** The machine state (null before start). */
  get lock(): Lock | null {
    return this.#lock;
  }
  get bolt(): BoltState {
    return this.#lock?.bolt ?? 'locked';
  }
  get connected(): boolean {
    return this.#client?.connected ?? false;
  }
  get faults(): Faults {
    return this.#faults;
  }
  setFaults(f: Faults): void {
    this.#faults = validateFaults(f);
  }

  /** Connects, subscribes, boots the lock (locked) and publishes presence and state. */
  async start(): Promise<void> {
    if (this.#lock) throw new Error(`lock ${this.lockId} already started`);
    const cfg = lockConfig({ lockId: asLockId(this.lockId), secret: this.#o.secret, ...this.#o.lock });
    this.#lock = { ...initialLock(cfg, this.#clock.now(), this.#o.battery), seen: loadReplayWindow(this.#o.replayWindowFile) };
    this.#stopping = false;
    // Booting before connecting: the connect handler publishes the booted state.
    void this.#step({ type: 'boot' }, false);
    await this.#connect();
  }

  /** Clean shutdown: publishes `{online:false}` itself, then disconnects (so the broker does not need the will). */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#clearTimers();
    const c = this.#client;
    this.#client = null;
    if (!c) return;
    if (c.connected) {
      try {
        await withTimeout(
          c.publishAsync(this.#topic('presence'), json({ online: false }), { qos: 1, retain: true }),
          this.#publishTimeoutMs,
        );
      } catch (e) {
        this.#log.warn({ err: e }, 'could not publish offline presence');
      }
      await withTimeout(c.endAsync(false), this.#publishTimeoutMs).catch(() => c.end(true));
    } else {
      await c.endAsync(true);
    }
    this.#o.onActivity?.({ type: 'disconnected' });
  }

  /**
   * Fault: the connection dies without a DISCONNECT (power or network cut), so the
   * broker publishes the last will `{online:false}`. The lock keeps its state and
   * stays disconnected until `reconnect()`.
   */
  async disconnect(): Promise<void> {
    const c = this.#client;
    this.#client = null;
    if (!c) return;
    // end(true) destroys the socket without sending DISCONNECT (mqtt.js _cleanUp(forced)).
    await c.endAsync(true);
    this.#o.onActivity?.({ type: 'disconnected' });
  }

  /** Fault: reconnects after `disconnect()`; publishes presence and the current state again. */
  async reconnect(): Promise<void> {
    if (this.#client) return;
    if (!this.#lock || this.#stopping) throw new Error(`lock ${this.lockId} is not running (start() it; a stopped lock stays stopped)`);
    await this.#connect();
  }

  /** Feeds one input to the state machine and publishes its outputs; resolves once the broker took them (bounded). */
  async input(i: LockInput): Promise<readonly LockOutput[]> {
    return this.#step(i, true);
  }

  /** Applies the passage of time (relock, door ajar). With `timers: 'manual'`, call it after moving the clock. */
  tick(): Promise<readonly LockOutput[]> {
    return this.input({ type: 'tick' });
  }

  openDoor = () => this.input({ type: 'open_door' });
  closeDoor = () => this.input({ type: 'close_door' });
  forceOpen = () => this.input({ type: 'force_open' });
  tamper = () => this.input({ type: 'tamper' });
  jam = () => this.input({ type: 'jam' });
  clearJam = () => this.input({ type: 'clear_jam' });
  drainBattery = (percent: number) => this.input({ type: 'battery_drain', percent });
  /** The guest inside turns the privacy thumb-turn on / back off. */
  privacyOn = () => this.input({ type: 'privacy_on' });
  privacyOff = () => this.input({ type: 'privacy_off' });
  /** The guest leaves by the inside handle (always opens; clears privacy). */
  exit = () => this.input({ type: 'exit' });
  /** Power cycle: the lock boots again (locked), keeping its replay window. */
  reboot = () => this.input({ type: 'boot' });

  /**
   * Presents a credential: publishes an access request, waits for the gateway's
   * decision and, if it allowed with a command, for the lock to handle that
   * command. Never hangs: after `timeoutMs` (real time) it returns what it has.
   */
  async present(credential: PresentedCredential, opts: { timeoutMs?: number } = {}): Promise<PresentResult> {
    const timeoutMs = opts.timeoutMs ?? 5000;
    const requestId = this.#ids.newId();
    if (!this.connected) return { status: 'offline', requestId, decision: null, command: null, waitedFor: null, bolt: this.bolt };
    const deadline = Date.now() + timeoutMs;
    const decision = new Promise<LockDecision>((resolve) => this.#decisionWaiters.set(requestId, resolve));
    // Results of commands handled from now on: the command may arrive before the decision, and an
    // earlier delivery of the same id (the gateway replaying an old command) must not count.
    const results = new Map<string, CommandOutcome>();
    const wanted = new Map<string, (r: CommandOutcome) => void>();
    const listener = (r: CommandOutcome) => {
      if (!results.has(r.commandId)) results.set(r.commandId, r);
      wanted.get(r.commandId)?.(r);
    };
    this.#resultListeners.add(listener);
    try {
      // Not awaited on purpose: the publish ack may come after the decision, and an outage must not hang us.
      void this.#step({ type: 'present', requestId, credential }, true);
      const d = await raceTimeout(decision, timeoutMs);
      if (d === null) return { status: 'timeout', requestId, decision: null, command: null, waitedFor: 'decision', bolt: this.bolt };
      if (!d.allowed || d.commandId === null)
        return { status: 'decided', requestId, decision: d, command: null, waitedFor: null, bolt: this.bolt };
      const commandId = d.commandId;
      const c =
        results.get(commandId) ??
        (await raceTimeout(new Promise<CommandOutcome>((resolve) => wanted.set(commandId, resolve)), Math.max(0, deadline - Date.now())));
      return { status: 'decided', requestId, decision: d, command: c, waitedFor: c ? null : 'command', bolt: this.bolt };
    } finally {
      this.#decisionWaiters.delete(requestId);
      this.#resultListeners.delete(listener);
    }
  }

  /**
   * What the lock did with a command id, waiting up to `timeoutMs`; null on timeout. The first result
   * for an id is remembered (the last 256 ids), so a later replay's refusal does not hide that the
   * original was executed. `present()` instead reports the delivery that followed its own request.
   */
  async waitForCommand(commandId: string, timeoutMs = 5000): Promise<CommandOutcome | null> {
    const known = this.#recentResults.get(commandId);
    if (known) return known;
    let listener: ((r: CommandOutcome) => void) | null = null;
    const p = new Promise<CommandOutcome>((resolve) => {
      listener = (r) => {
        if (r.commandId === commandId) resolve(r);
      };
      this.#resultListeners.add(listener);
    });
    try {
      return await raceTimeout(p, timeoutMs);
    } finally {
      if (listener) this.#resultListeners.delete(listener);
    }
  }

  // ------------------------------------------------------------------ internals

  get #publishTimeoutMs(): number {
    return this.#o.publishTimeoutMs ?? 5000;
  }

  async #connect(): Promise<void> {
    const presence = this.#topic('presence');
    // throws before any byte is sent: a wrong pin, or plaintext off loopback
    const tls = siteTlsOptions(this.#o.url, { caPem: this.#o.siteCa?.caPem, pin: this.#o.siteCa?.pin });
    const client = connectMqtt(this.#o.url, {
      ...this.#o.mqtt,
      ...tls,
      ...(this.#o.siteLogin === true && {
        username: this.lockId,
        password: siteBrokerPassword(this.#o.secret, this.gatewayId, this.lockId),
      }),
      clientId: lockClientId(this.gatewayId, this.lockId),
      // Commands live for seconds: a lock that was away must not execute a backlog, so no persistent session.
      clean: true,
      will: { topic: presence, payload: Buffer.from(json({ online: false })), qos: 1, retain: true },
    });
    this.#client = client;
    let ready = false;
    client.on('message', (topic, payload) => this.#onMessage(topic, payload));
    client.on('error', (err) => this.#log.warn({ err }, 'mqtt error'));
    client.on('offline', () => {
      if (this.#client !== client || this.#stopping) return;
      this.#log.info('connection lost; mqtt.js reconnects by itself');
      this.#o.onActivity?.({ type: 'disconnected' });
    });
    // Every (re)connect: the will may have said offline, so say online again and re-publish the retained state.
    client.on('connect', () => {
      if (this.#client !== client || !ready) return;
      void this.#announce(client);
    });
    try {
      await waitConnected(client);
      // mqtt.js re-subscribes by itself after an automatic reconnect (resubscribe defaults to true).
      await client.subscribeAsync([this.#topic('command'), this.#topic('decision')], { qos: 1 });
    } catch (e) {
      this.#client = null;
      client.end(true);
      throw e;
    }
    // The first 'connect' fired before the subscription: announce now so nobody commands a lock that cannot hear.
    // Started means announced: the retained presence and state are at the broker (or their publish failed and was logged).
    ready = true;
    await this.#announce(client);
  }

  /** Publishes the retained presence and state. Never rejects. */
  async #announce(client: MqttClient): Promise<void> {
    if (!this.#lock || this.#stopping) return;
    this.#o.onActivity?.({ type: 'connected' });
    await Promise.all([
      this.#send(client, 'presence', json({ online: true }), true),
      this.#send(client, 'state', json(stateOf(this.#lock)), true),
    ]);
  }

  #step(i: LockInput, publish: boolean): Promise<readonly LockOutput[]> {
    if (!this.#lock) throw new Error(`lock ${this.lockId} not started`);
    const { lock, outputs } = onMessage(this.#lock, i, this.#clock.now(), this.#ids);
    // the window reaches the file before the bolt's state or any result leaves: a crash after cannot forget the id
    if (this.#o.replayWindowFile !== undefined && lock.seen !== this.#lock.seen)
      writeFileSync(this.#o.replayWindowFile, JSON.stringify(Object.fromEntries(lock.seen)), { mode: 0o600 });
    this.#lock = lock;
    for (const o of outputs) {
      // The boot before the first connect is announced by the connect itself, not as an output.
      if (publish) this.#o.onActivity?.({ type: 'output', output: o });
      if (o.kind === 'event' && o.event.kind === 'command_result')
        this.#recordResult(o.event.commandId, o.event.result, o.event.code, lock.bolt);
    }
    this.#armDeadline();
    if (!publish) return Promise.resolve(outputs);
    return Promise.all(outputs.map((o) => this.#publishOutput(o))).then(() => outputs);
  }

  #recordResult(commandId: string, result: 'executed' | 'refused', code: string | null, bolt: BoltState): void {
    const r: CommandOutcome = { commandId, result, code, bolt };
    // The first result for an id wins: a replay's refusal must not hide that the original was executed.
    if (!this.#recentResults.has(commandId)) {
      this.#recentResults.set(commandId, r);
      if (this.#recentResults.size > RECENT_RESULTS) {
        const oldest = this.#recentResults.keys().next().value;
        if (oldest !== undefined) this.#recentResults.delete(oldest);
      }
    }
    for (const l of [...this.#resultListeners]) l(r);
  }

  #armDeadline(): void {
    if (this.#deadlineTimer) clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = null;
    if ((this.#o.timers ?? 'auto') !== 'auto' || !this.#lock || this.#stopping) return;
    const at = nextDeadline(this.#lock);
    if (at === null) return;
    this.#deadlineTimer = setTimeout(
      () => {
        this.#deadlineTimer = null;
        void this.tick();
      },
      Math.max(0, at - this.#clock.now()),
    );
  }

  #publishOutput(o: LockOutput): Promise<void> {
    switch (o.kind) {
      case 'state':
        return this.#emit('state', json(o.state), true);
      case 'event':
        return this.#emit('event', json(o.event), false);
      case 'request':
        return this.#emit('request', json(o.request), false);
    }
  }

  /** Outgoing fault injection, then publish. Never rejects. */
  #emit(channel: LockChannel, payload: string, retain: boolean): Promise<void> {
    const f = rollFault(this.#faults.outgoing, channel, this.#random);
    if (f.drop) {
      this.stats.droppedOut += 1;
      this.#log.debug({ channel }, 'fault: outgoing message dropped');
      return Promise.resolve();
    }
    if (f.copies === 2) this.stats.duplicatedOut += 1;
    const send = async () => {
      const client = this.#client;
      if (!client || !client.connected) {
        this.stats.unsent += f.copies;
        this.#log.debug({ channel }, 'not connected: output not published');
        return;
      }
      for (let i = 0; i < f.copies; i++) await this.#send(client, channel, payload, retain);
    };
    if (f.delayMs > 0) {
      this.stats.delayedOut += 1;
      this.#later(f.delayMs, () => void send());
      return Promise.resolve();
    }
    return send();
  }

  async #send(client: MqttClient, channel: LockChannel, payload: string, retain: boolean): Promise<void> {
    try {
      await withTimeout(client.publishAsync(this.#topic(channel), payload, { qos: 1, retain }), this.#publishTimeoutMs);
      this.stats.published += 1;
    } catch (err) {
      this.stats.unsent += 1;
      this.#log.warn({ err, channel }, 'publish failed');
    }
  }

  #later(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.#delayed.delete(t);
      fn();
    }, ms);
    this.#delayed.add(t);
  }

  #clearTimers(): void {
    if (this.#deadlineTimer) clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = null;
    for (const t of this.#delayed) clearTimeout(t);
    this.#delayed.clear();
  }

  #onMessage(topic: string, payload: Buffer): void {
    try {
      const channel: LockChannel | null =
        topic === this.#topic('command') ? 'command' : topic === this.#topic('decision') ? 'decision' : null;
      if (channel === null) return;
      this.stats.received += 1;
      const f = rollFault(this.#faults.incoming, channel, this.#random);
      if (f.drop) {
        this.stats.droppedIn += 1;
        return;
      }
      if (f.copies === 2) this.stats.duplicatedIn += 1;
      const handle = () => {
        for (let i = 0; i < f.copies; i++) this.#handle(channel, payload);
      };
      if (f.delayMs > 0) {
        this.stats.delayedIn += 1;
        this.#later(f.delayMs, handle);
      } else handle();
    } catch (err) {
      // A bug, not bad input (bad input is handled in #handle); still never crash the process on a message.
      this.#log.error({ err, topic }, 'message handler failed');
    }
  }

  #handle(channel: 'command' | 'decision', payload: Buffer): void {
    if (this.#stopping || !this.#lock) return;
    if (channel === 'command') {
      const { input, rejected } = commandInput(payload);
      if (rejected) this.#reject(channel, rejected.code, rejected.detail);
      void this.#step(input, true);
      return;
    }
    const parsed = parsePayload(LockDecision, payload);
    if (!parsed.ok) {
      this.#reject(channel, parsed.code, parsed.detail);
      return;
    }
    this.#o.onActivity?.({ type: 'decision', decision: parsed.value });
    this.#decisionWaiters.get(parsed.value.requestId)?.(parsed.value);
  }

  #reject(channel: LockChannel, code: string, detail: string): void {
    this.stats.rejected += 1;
    this.stats.rejectedByCode[code] = (this.stats.rejectedByCode[code] ?? 0) + 1;
    this.#log.warn({ channel, code, detail }, 'rejected a malformed message');
    this.#o.onActivity?.({ type: 'rejected', channel, code, detail });
  }
}

/**
 * Reads a command payload into a machine input: the parsed command, or
 * `malformed_command` (with whatever id could be salvaged) and why it was
 * rejected. Never throws, whatever the bytes.
 */
export function commandInput(payload: unknown): {
  readonly input: LockInput;
  readonly rejected: { readonly code: string; readonly detail: string } | null;
} {
  const parsed = parsePayload(LockCommand, payload);
  if (parsed.ok) return { input: { type: 'command', command: parsed.value }, rejected: null };
  return { input: { type: 'malformed_command', commandId: commandIdOf(payload) }, rejected: { code: parsed.code, detail: parsed.detail } };
}

/** The id of a command that failed validation, if one can be read, so the gateway can match the refusal. */
function commandIdOf(payload: unknown): string {
  const text = decodeText(payload);
  if (!text.ok) return '';
  const v = parseJson(text.value);
  if (!v.ok || typeof v.value !== 'object' || v.value === null) return '';
  const id = (v.value as Record<string, unknown>).commandId;
  return typeof id === 'string' ? id.slice(0, 64) : '';
}

function json(v: unknown): string {
  return JSON.stringify(v);
}

function raceTimeout<T>(p: Promise<T>, ms: number): Promise<T | null> {
  return new Promise<T | null>((resolve, reject) => {
    const t = setTimeout(() => resolve(null), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  const r = await raceTimeout(
    p.then((v) => ({ v })),
    ms,
  );
  if (r === null) throw new Error(`timed out after ${ms} ms`);
  return r.v;
}
