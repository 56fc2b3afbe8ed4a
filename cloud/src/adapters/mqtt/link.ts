import { ackAfterHandled, connectMqtt, waitConnected, type Logger } from '@tobira/shared';
import type { MqttClient, IClientOptions } from 'mqtt';

/**
 * The cloud's one MQTT connection. Publishing resolves only on the broker's
 * PUBACK (QoS 1) and fails fast when disconnected, so the outbox decides what
 * to do; incoming QoS 1 messages are PUBACKed only after the handler resolved
 * (after its database commit), so a crash mid-handling means redelivery.
 */
export interface MqttLink {
  readonly connected: boolean;
  /** QoS 1 (default) resolves on PUBACK; QoS 0 resolves once written. */
  publish(topic: string, payload: string, timeoutMs: number, qos?: 0 | 1): Promise<void>;
  /** One handler for all incoming messages; it runs one message at a time. */
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

export function openMqttLink(url: string, log: Logger, opts: IClientOptions = {}, shared?: SharedSubscriptions): MqttLink {
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
  client.on('connect', () => {
    log.info({ url }, 'mqtt connected');
    for (const cb of connectCbs) cb();
  });
  client.on('offline', () => log.warn({ url }, 'mqtt offline'));
  client.on('error', (e) => log.warn({ err: e.message }, 'mqtt error'));
  ackAfterHandled(
    client,
    (topic, payload) => handler(topic, payload),
    (e, topic) => log.error({ err: e instanceof Error ? e.message : String(e), topic }, 'uplink handling failed; not acknowledged'),
  );
  return {
    get connected() {
      return client.connected;
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
      await client.endAsync(true);
    },
  };
}
