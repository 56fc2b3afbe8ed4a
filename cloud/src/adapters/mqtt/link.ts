import { connectMqtt, parseTopic, waitConnected, type Logger } from '@tobira/shared';
import type { MqttClient, IClientOptions } from 'mqtt';
import { InboxQueue } from './inbox-queue.js';

/**
 * One MQTT connection of the cloud. Publishing resolves only on the broker's
 * PUBACK (QoS 1) and fails fast when disconnected, so the outbox decides what
 * to do; incoming QoS 1 messages are PUBACKed only after the handler resolved
 * (after its database commit), so a crash mid-handling means redelivery.
 * A replica opens two (openMqttLinks): the inbox and the publishing link.
 */
export interface MqttLink {
  readonly connected: boolean;
  /** QoS 1 (default) resolves on PUBACK; QoS 0 resolves once written. */
  publish(topic: string, payload: string, timeoutMs: number, qos?: 0 | 1): Promise<void>;
  /**
   * One handler for all incoming messages: one message at a time per gateway
   * (in arrival order), messages of different gateways concurrently, up to
   * the link's `maxInFlight` (inbox-queue.ts).
   */
  onMessage(handler: (topic: string, payload: Buffer) => Promise<void>): void;
  subscribe(filter: string): Promise<void>;
  onConnect(cb: () => void): void;
  /** Resolves true once connected, false after `timeoutMs` (the link keeps trying). */
  waitConnected(timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

export class NotConnected extends Error {
  constructor() {
    super('MQTT not connected');
    this.name = 'NotConnected';
  }
}

/**
 * Shared subscriptions (MQTT 5 `$share/<group>/<filter>`, also honoured by
 * Mosquitto ≥ 2 for 3.1.1 clients, EMQX, VerneMQ; not by aedes): with
 * `group` set, a subscription to one of `filters` is made as
 * `$share/<group>/<filter>`, so the broker hands each message to one member
 * of the group (one replica) instead of to every replica. Messages still
 * arrive under their own topic. Retained messages are not delivered on a
 * shared subscription, so retained topics (presence) must stay unshared.
 */
export interface SharedSubscriptions {
  readonly group: string;
  readonly filters: readonly string[];
}

/** The filter as subscribed: `$share/<group>/<filter>` when it is one of the shared filters, else itself. */
export function subscribedFilter(filter: string, shared: SharedSubscriptions | undefined): string {
  return shared && shared.group !== '' && shared.filters.includes(filter) ? `$share/${shared.group}/${filter}` : filter;
}

/** The serial key of an incoming message: its gateway (uplink and presence alike), else the topic itself. */
export function inboxKeyOf(topic: string): string {
  const t = parseTopic(topic);
  return t?.kind === 'gateway' ? `gw:${t.gatewayId}` : `topic:${topic}`;
}

/** Released a message to mqtt.js without its PUBACK (that is sent once the message is handled). */
const ACK_LATER = Object.assign(new Error('acknowledged once handled'), { name: 'AckLater' });

/** mqtt.js's own packet writer, the one its handlePublish sends a PUBACK with (there is no public call for a deferred PUBACK). */
type PacketWriter = { _writePacket(packet: { cmd: 'puback'; messageId: number }, cb?: () => void): void };

export interface LinkOptions {
  /** Incoming messages received and not yet handled, at most (default 1: one at a time, as the gateway does). */
  readonly maxInFlight?: number;
}

export function openMqttLink(
  url: string,
  log: Logger,
  opts: IClientOptions = {},
  shared?: SharedSubscriptions,
  linkOpts: LinkOptions = {},
): MqttLink & { readonly inFlight: number; readonly inFlightPeak: number } {
  const client: MqttClient = connectMqtt(url, { clean: false, reconnectPeriod: 500, ...opts });
  // A persistent session redelivers unacknowledged messages right at CONNECT,
  // possibly before the inbox registered its handler: they wait for it instead
  // of being acknowledged unhandled.
  let registered: (h: (topic: string, payload: Buffer) => Promise<void>) => void = () => {};
  const handlerReady = new Promise<(topic: string, payload: Buffer) => Promise<void>>((resolve) => {
    registered = resolve;
  });
  let handler: (topic: string, payload: Buffer) => Promise<void> = async (topic, payload) => (await handlerReady)(topic, payload);
  const connectCbs: (() => void)[] = [];
  let closing = false;
  const queue = new InboxQueue({
    maxInFlight: linkOpts.maxInFlight ?? 1,
    handle: (topic, payload) => handler(topic, payload),
    onFailed: (e, topic) =>
      log.error({ err: e instanceof Error ? e.message : String(e), topic }, 'uplink handling failed; not acknowledged'),
  });
  client.on('connect', () => {
    log.info({ url, clientId: opts.clientId }, 'mqtt connected');
    for (const cb of connectCbs) cb();
  });
  client.on('close', () => queue.connectionLost());
  client.on('offline', () => log.warn({ url, clientId: opts.clientId }, 'mqtt offline'));
  client.on('error', (e) => log.warn({ err: e.message, clientId: opts.clientId }, 'mqtt error'));
  // mqtt.js hands over incoming PUBLISHes one at a time: the next only after
  // `done`, which also sends the QoS 1 PUBACK. `done(error)` moves on without a
  // PUBACK (handlers/publish.ts), so each message is released at once into the
  // queue (or held while it is full) and its PUBACK written later, after its
  // commit, on the connection it came in on; a PUBACK is never queued for a
  // later connection, where its message id may name another message.
  client.handleMessage = (packet, done) => {
    const payload = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
    if (closing) return done(ACK_LATER); // not taken, not acknowledged: redelivered to the next session
    const stream = client.stream;
    const messageId = packet.messageId;
    const ack =
      packet.qos === 1 && messageId !== undefined
        ? () => {
            if (client.stream === stream && client.connected)
              (client as unknown as PacketWriter)._writePacket({ cmd: 'puback', messageId });
          }
        : null;
    queue.accept(inboxKeyOf(packet.topic), packet.topic, payload, ack, () => done(packet.qos === 0 ? undefined : ACK_LATER));
  };
  return {
    get connected() {
      return client.connected;
    },
    get inFlight() {
      return queue.inFlight;
    },
    get inFlightPeak() {
      return queue.peak;
    },
    publish(topic, payload, timeoutMs, qos = 1) {
      if (!client.connected) return Promise.reject(new NotConnected());
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no PUBACK within ${timeoutMs} ms`)), timeoutMs);
        client.publish(topic, payload, { qos }, (err) => {
          clearTimeout(timer);
          if (err) reject(err);
          else resolve();
        });
      });
    },
    onMessage(h) {
      handler = h;
      registered(h);
    },
    async subscribe(filter) {
      await client.subscribeAsync(subscribedFilter(filter, shared), { qos: 1 });
    },
    onConnect(cb) {
      connectCbs.push(cb);
    },
    waitConnected(timeoutMs) {
      return waitConnected(client, timeoutMs).then(
        () => true,
        () => false,
      );
    },
    async close() {
      // graceful: take nothing new, let the messages in flight commit and be acknowledged, then go
      closing = true;
      await queue.idle();
      await client.endAsync(true);
    },
  };
}

/** A replica's two connections; each is an MqttLink. */
export interface MqttLinks {
  /** The uplink subscription (shared when configured) and presence: receives, never publishes. */
  readonly inbox: MqttLink & { readonly inFlight: number; readonly inFlightPeak: number };
  /** The dispatcher's, the heartbeat's and the resync answers' publishes: subscribes to nothing. */
  readonly out: MqttLink;
  /** Both connected. */
  readonly connected: boolean;
  /** Drains the inbox (handlers in flight commit and are acknowledged), then closes both. */
  close(): Promise<void>;
}

/** A client id and its suffix, within MQTT's usual 128-character limit of this project's config. */
export function linkClientId(clientId: string, suffix: 'in' | 'out'): string {
  return `${clientId.slice(0, 128 - suffix.length - 1)}-${suffix}`;
}

/**
 * Opens a replica's inbox and publishing links to one broker (MQTT_URL) with
 * the client ids `<id>-in` and `<id>-out`. Apart, because mqtt.js handles a
 * connection's incoming packets one at a time: on one connection the PUBACKs
 * of the dispatcher's publishes queued behind a burst of uplinks, publishes
 * timed out and heartbeats came late (docs/performance.md). The inbox keeps
 * the configured session (persistent: unacknowledged uplinks survive a
 * restart); the publishing link has nothing to keep, so it is a clean session.
 */
export function openMqttLinks(
  url: string,
  log: Logger,
  opts: IClientOptions & { clientId: string },
  shared: SharedSubscriptions | undefined,
  linkOpts: LinkOptions = {},
): MqttLinks {
  const inbox = openMqttLink(url, log.child({ link: 'in' }), { ...opts, clientId: linkClientId(opts.clientId, 'in') }, shared, linkOpts);
  const out = openMqttLink(url, log.child({ link: 'out' }), { ...opts, clean: true, clientId: linkClientId(opts.clientId, 'out') });
  return {
    inbox,
    out,
    get connected() {
      return inbox.connected && out.connected;
    },
    async close() {
      await inbox.close();
      await out.close();
    },
  };
}
