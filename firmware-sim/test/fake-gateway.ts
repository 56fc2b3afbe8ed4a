import { EventEmitter } from 'node:events';
import {
  LockEvent,
  LockRequest,
  LockState,
  Presence,
  asLockId,
  connectMqtt,
  filters,
  newId,
  newPairingSecret,
  parsePayload,
  parseTopic,
  signLockCommand,
  topics,
  waitConnected,
  type Clock,
  type DecisionCode,
  type LockCommand,
  type LockDecision,
} from '@tobira/shared';
import type { MqttClient } from 'mqtt';

/**
 * A tiny test-side gateway: it answers access requests with a decision and,
 * when it allows, an HMAC-signed unlock command, and records everything the
 * locks publish. `mode` makes it misbehave on purpose.
 */
export type CommandMode = 'valid' | 'wrong_secret' | 'expired' | 'replay' | 'silent' | 'no_command';

export type Seen =
  | { readonly channel: 'state'; readonly lockId: string; readonly value: LockState; readonly retained: boolean }
  | { readonly channel: 'event'; readonly lockId: string; readonly value: LockEvent; readonly retained: boolean }
  | { readonly channel: 'presence'; readonly lockId: string; readonly value: Presence; readonly retained: boolean }
  | { readonly channel: 'request'; readonly lockId: string; readonly value: LockRequest; readonly retained: boolean };

export class FakeGateway {
  mode: CommandMode = 'valid';
  holdMs = 3000;
  ttlMs = 10_000;
  /** PINs that open (any lock). */
  readonly pins = new Set(['1234']);
  readonly seen: Seen[] = [];
  readonly commands: LockCommand[] = [];
  readonly invalid: string[] = [];
  readonly #bus = new EventEmitter();
  readonly #lastCommand = new Map<string, LockCommand>();
  #client: MqttClient | null = null;

  constructor(
    readonly url: string,
    readonly gatewayId: string,
    readonly secretOf: (lockId: string) => Uint8Array,
    readonly clock: Clock,
  ) {}

  async start(): Promise<void> {
    const c = connectMqtt(this.url, { clientId: `fake-gw-${this.gatewayId}-${newId().slice(-8)}`, clean: true });
    this.#client = c;
    c.on('message', (topic, payload, packet) => this.#onMessage(topic, payload, packet.retain));
    await waitConnected(c);
    await c.subscribeAsync(
      (['request', 'state', 'event', 'presence'] as const).map((ch) => filters.locksOf(this.gatewayId, ch)),
      { qos: 1 },
    );
  }

  async stop(): Promise<void> {
    await this.#client?.endAsync();
    this.#client = null;
  }

  #onMessage(topic: string, payload: Buffer, retained: boolean): void {
    const t = parseTopic(topic);
    if (!t || t.kind !== 'lock') return;
    let rec: Seen | null = null;
    switch (t.channel) {
      case 'state': {
        const p = parsePayload(LockState, payload);
        if (p.ok) rec = { channel: 'state', lockId: t.lockId, value: p.value, retained };
        break;
      }
      case 'event': {
        const p = parsePayload(LockEvent, payload);
        if (p.ok) rec = { channel: 'event', lockId: t.lockId, value: p.value, retained };
        break;
      }
      case 'presence': {
        const p = parsePayload(Presence, payload);
        if (p.ok) rec = { channel: 'presence', lockId: t.lockId, value: p.value, retained };
        break;
      }
      case 'request': {
        const p = parsePayload(LockRequest, payload);
        if (p.ok) {
          rec = { channel: 'request', lockId: t.lockId, value: p.value, retained };
          this.#answer(t.lockId, p.value);
        }
        break;
      }
      case 'command':
      case 'decision':
        break;
    }
    if (!rec) {
      // Locks must only ever publish valid messages; tests assert this list stays empty.
      this.invalid.push(`${t.channel}: ${payload.toString('utf8').slice(0, 200)}`);
      return;
    }
    this.seen.push(rec);
    this.#bus.emit('seen', rec);
  }

  #answer(lockId: string, req: LockRequest): void {
    if (this.mode === 'silent') return;
    const allowed = req.credential.type === 'pin' && this.pins.has(req.credential.value);
    const code: DecisionCode = allowed ? 'ALLOWED' : 'UNKNOWN_CREDENTIAL';
    let command: LockCommand | null = null;
    if (allowed && this.mode !== 'no_command') {
      const now = this.clock.now();
      const fresh = (secret: Uint8Array, expiresAt: number) =>
        signLockCommand(secret, { commandId: newId(), lockId: asLockId(lockId), action: 'unlock', holdMs: this.holdMs, expiresAt });
      switch (this.mode) {
        case 'valid':
          command = fresh(this.secretOf(lockId), now + this.ttlMs);
          break;
        case 'wrong_secret':
          command = fresh(newPairingSecret(), now + this.ttlMs);
          break;
        case 'expired':
          command = fresh(this.secretOf(lockId), now - 1);
          break;
        case 'replay':
          command = this.#lastCommand.get(lockId) ?? null;
          if (!command) throw new Error('replay mode needs an earlier command to this lock');
          break;
      }
    }
    const decision: LockDecision = { requestId: req.requestId, allowed, code, commandId: command?.commandId ?? null };
    if (command) {
      this.#lastCommand.set(lockId, command);
      this.commands.push(command);
      this.publish(topics.lock(this.gatewayId, lockId, 'command'), JSON.stringify(command));
    }
    this.publish(topics.lock(this.gatewayId, lockId, 'decision'), JSON.stringify(decision));
  }

  publish(topic: string, payload: string | Buffer): void {
    this.#client?.publish(topic, payload, { qos: 1 });
  }

  sendCommand(lockId: string, c: LockCommand): void {
    this.publish(topics.lock(this.gatewayId, lockId, 'command'), JSON.stringify(c));
  }

  /** The first record (already seen or arriving within `timeoutMs`) that matches. */
  waitFor<S extends Seen>(match: (s: Seen) => s is S, timeoutMs?: number): Promise<S>;
  waitFor(match: (s: Seen) => boolean, timeoutMs?: number): Promise<Seen>;
  waitFor(match: (s: Seen) => boolean, timeoutMs = 5000): Promise<Seen> {
    const found = this.seen.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const onSeen = (s: Seen) => {
        if (!match(s)) return;
        clearTimeout(timer);
        this.#bus.off('seen', onSeen);
        resolve(s);
      };
      const timer = setTimeout(() => {
        this.#bus.off('seen', onSeen);
        reject(new Error(`fake gateway: nothing matched within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#bus.on('seen', onSeen);
    });
  }

  eventsOf(lockId: string): LockEvent[] {
    return this.seen.flatMap((s) => (s.channel === 'event' && s.lockId === lockId ? [s.value] : []));
  }
  statesOf(lockId: string): LockState[] {
    return this.seen.flatMap((s) => (s.channel === 'state' && s.lockId === lockId ? [s.value] : []));
  }
}

/** Reads the retained messages of one lock with a fresh client: what a gateway that starts now would see. */
export async function retainedOf(
  url: string,
  gatewayId: string,
  lockId: string,
): Promise<{ presence: Presence | null; state: LockState | null }> {
  const c = connectMqtt(url, { clientId: `probe-${newId().slice(-12)}`, clean: true });
  const out: { presence: Presence | null; state: LockState | null } = { presence: null, state: null };
  try {
    await waitConnected(c);
    const got = new Promise<void>((resolve) => {
      c.on('message', (topic, payload, packet) => {
        if (!packet.retain) return;
        if (topic === topics.lock(gatewayId, lockId, 'presence')) {
          const p = parsePayload(Presence, payload);
          if (p.ok) out.presence = p.value;
        } else if (topic === topics.lock(gatewayId, lockId, 'state')) {
          const p = parsePayload(LockState, payload);
          if (p.ok) out.state = p.value;
        }
        if (out.presence && out.state) resolve();
      });
    });
    await c.subscribeAsync([topics.lock(gatewayId, lockId, 'presence'), topics.lock(gatewayId, lockId, 'state')], { qos: 1 });
    await Promise.race([got, new Promise((r) => setTimeout(r, 2000))]);
    return out;
  } finally {
    await c.endAsync();
  }
}
