/**
 * The inbox's flow control: incoming messages of different keys
 * (gateways) are handled concurrently, the messages of one key one after
 * another in arrival order, and at most `maxInFlight` messages are held in
 * memory (received, not yet handled). When that bound is reached the queue
 * stops taking messages (it holds back the `release` of the message that
 * filled it: mqtt.js parses no further packet until then), so a flood waits
 * in the broker's queue and TCP, never in an unbounded array here.
 *
 * Acknowledgements: a message's `ack` (its PUBACK) is called only after its
 * handler resolved (after its commit), and in the order the messages were
 * received on the connection, as MQTT 3.1.1 and 5 ask of a client
 * ("PUBACK packets in the order in which the corresponding PUBLISH packets
 * were received", MQTT-4.6.0-2): a message handled early waits for the
 * earlier ones of other keys to settle before its PUBACK goes out. A failed
 * handler sends no PUBACK (the broker redelivers after a reconnect; the
 * receiver deduplicates). After the connection is lost the pending
 * acknowledgements are dropped: the broker redelivers those messages on the
 * next connection, where they queue behind the handlers still running for
 * their key.
 *
 * Pure over its callbacks (no MQTT here): link.ts wires it to mqtt.js.
 */
export interface InboxQueueOptions {
  /** Messages received and not yet handled, at most (handled concurrently across keys). */
  readonly maxInFlight: number;
  readonly handle: (topic: string, payload: Buffer) => Promise<void>;
  readonly onFailed: (err: unknown, topic: string) => void;
}

interface Entry {
  settled: boolean;
  ok: boolean;
  readonly ack: () => void;
}

export class InboxQueue {
  readonly #o: InboxQueueOptions;
  #inFlight = 0;
  #peak = 0;
  /** Per key, the tail of its chain of handlers. */
  readonly #chains = new Map<string, Promise<void>>();
  /** Acknowledgements of the current connection, in receipt order. */
  #acks: Entry[] = [];
  /** Releases held back while the queue was full, oldest first. */
  readonly #held: (() => void)[] = [];
  #idle: (() => void)[] = [];

  constructor(o: InboxQueueOptions) {
    if (!Number.isInteger(o.maxInFlight) || o.maxInFlight < 1)
      throw new Error(`maxInFlight must be a positive integer, got ${o.maxInFlight}`);
    this.#o = o;
  }

  /** Messages received and not handled yet (a gauge for /metrics). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** The most messages ever in flight at once (tests: the bound held, concurrency happened). */
  get peak(): number {
    return this.#peak;
  }

  /**
   * Takes one message. `ack` (null for QoS 0) is called once it is handled
   * and every message received before it on this connection has settled;
   * `release` lets the transport hand over the next message, at once while
   * there is room, else when a message in flight settles.
   */
  accept(key: string, topic: string, payload: Buffer, ack: (() => void) | null, release: () => void): void {
    const entry: Entry | null = ack ? { settled: false, ok: false, ack } : null;
    if (entry) this.#acks.push(entry);
    this.#inFlight++;
    this.#peak = Math.max(this.#peak, this.#inFlight);
    const previous = this.#chains.get(key) ?? Promise.resolve();
    const run: Promise<void> = previous
      .then(() => this.#o.handle(topic, payload))
      .then(
        () => {
          if (entry) entry.ok = true;
        },
        (e: unknown) => this.#o.onFailed(e, topic),
      )
      .finally(() => {
        if (entry) entry.settled = true;
        this.#inFlight--;
        if (this.#chains.get(key) === run) this.#chains.delete(key);
        this.#flushAcks();
        this.#held.shift()?.();
        if (this.#inFlight === 0) for (const r of this.#idle.splice(0)) r();
      });
    this.#chains.set(key, run);
    if (this.#inFlight < this.#o.maxInFlight) release();
    else this.#held.push(release);
  }

  /** The connection is gone: its pending acknowledgements can no longer be sent (the broker redelivers those messages). */
  connectionLost(): void {
    this.#acks = [];
  }

  /** Resolves once nothing is in flight. */
  idle(): Promise<void> {
    if (this.#inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #flushAcks(): void {
    while (this.#acks[0]?.settled) {
      const e = this.#acks.shift();
      if (e?.ok) e.ack();
    }
  }
}
