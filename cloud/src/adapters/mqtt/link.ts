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

export function openMqttLink(url: string, log: Logger, opts: IClientOptions = {}): MqttLink {
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
      await client.subscribeAsync(filter, { qos: 1 });
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
