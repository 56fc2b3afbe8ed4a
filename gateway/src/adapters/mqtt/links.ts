import { ackAfterHandled, connectMqtt, type Logger } from '@tobira/shared';
import type { IClientOptions, MqttClient } from 'mqtt';

/**
 * MQTT clients of the gateway (both through shared `connectMqtt`, TCP no-delay).
 *
 * The cloud link keeps a persistent session (clean: false, fixed client id) so
 * QoS 1 downlink queued while it was away is delivered when it comes back. It
 * acks a downlink PUBLISH only after `onDownlink` resolved, i.e. after the
 * inbox commit (shared `ackAfterHandled`), in broker order. If `onDownlink`
 * throws (the database is broken), no PUBACK is sent and the broker
 * redelivers after the next reconnect.
 */
export interface BrokerOptions {
  readonly url: string;
  readonly username?: string | undefined;
  readonly password?: string | undefined;
  readonly protocolVersion: 4 | 5;
  /** TLS client options (shared siteTlsOptions: the site CA only); absent: none. */
  readonly tls?: IClientOptions | undefined;
}

export interface Link {
  readonly client: MqttClient;
  readonly connected: boolean;
  publish(topic: string, payload: string, opts: { qos: 0 | 1; retain?: boolean }): Promise<void>;
  end(force?: boolean): Promise<void>;
}

function wrap(client: MqttClient): Link {
  return {
    client,
    get connected() {
      return client.connected;
    },
    async publish(topic, payload, opts) {
      await client.publishAsync(topic, payload, { qos: opts.qos, retain: opts.retain ?? false });
    },
    end(force = false) {
      return new Promise<void>((resolve) => client.end(force, {}, () => resolve()));
    },
  };
}

function baseOptions(b: BrokerOptions, clientId: string, clean: boolean): IClientOptions {
  const o: IClientOptions = {
    clientId,
    clean,
    protocolVersion: b.protocolVersion,
    reconnectPeriod: 1000,
    connectTimeout: 5000,
    keepalive: 30,
    ...b.tls,
  };
  if (b.username !== undefined) o.username = b.username;
  if (b.password !== undefined) o.password = b.password;
  // MQTT 5 forgets a session at disconnect unless it is given an expiry.
  if (b.protocolVersion === 5 && !clean) o.properties = { sessionExpiryInterval: 7 * 24 * 3600 };
  return o;
}

export interface CloudLinkHandlers {
  /** Resolves once the message is durably handled (stored or rejected); the PUBACK follows. */
  onDownlink(topic: string, payload: Buffer): Promise<void>;
  onConnect(sessionPresent: boolean): void;
}

export function connectCloudLink(
  b: BrokerOptions,
  ids: { clientId: string; downTopic: string; presenceTopic: string },
  handlers: CloudLinkHandlers,
  log: Logger,
): Link {
  const client = connectMqtt(b.url, {
    ...baseOptions(b, ids.clientId, false),
    will: { topic: ids.presenceTopic, payload: Buffer.from(JSON.stringify({ online: false })), qos: 1, retain: true },
  });
  // Only the down topic is subscribed; anything else is acknowledged and dropped.
  ackAfterHandled(
    client,
    (topic, payload) => (topic === ids.downTopic ? handlers.onDownlink(topic, payload) : Promise.resolve()),
    (err) => log.error({ err }, 'downlink not stored; not acking it to the broker'),
  );
  client.on('connect', (connack) => {
    log.info({ sessionPresent: connack.sessionPresent }, 'cloud broker connected');
    client.publish(ids.presenceTopic, JSON.stringify({ online: true }), { qos: 1, retain: true });
    // onConnect (which asks for a resync) only once the subscription stands, so the answer cannot be missed.
    client.subscribe(ids.downTopic, { qos: 1 }, (err) => {
      if (err) log.error({ err }, 'cloud subscribe failed');
      else handlers.onConnect(connack.sessionPresent);
    });
  });
  client.on('close', () => log.debug('cloud broker connection closed'));
  client.on('error', (err) => log.warn({ err: err.message }, 'cloud broker error'));
  return wrap(client);
}

export function connectSiteLink(
  b: BrokerOptions,
  ids: { clientId: string; filters: readonly string[] },
  onMessage: (topic: string, payload: Buffer) => void,
  log: Logger,
  onConnect: () => void = () => {},
): Link {
  // Clean session: a lock retries its own requests, and a request queued for
  // minutes must not open a door late. Retained state and presence come back
  // on every subscribe.
  const client = connectMqtt(b.url, baseOptions(b, ids.clientId, true));
  client.on('connect', () => {
    log.info('site broker connected');
    onConnect();
    client.subscribe([...ids.filters], { qos: 1 }, (err) => {
      if (err) log.error({ err }, 'site subscribe failed');
    });
  });
  client.on('message', (topic, payload) => onMessage(topic, payload));
  client.on('error', (err) => log.warn({ err: err.message }, 'site broker error'));
  return wrap(client);
}
