import { createServer, connect, type Server, type Socket } from 'node:net';
import {
  DownlinkMessage,
  KeySet,
  connectMqtt,
  importSigningKey,
  newCorrelationId,
  signMessage,
  topics,
  verifyMessage,
  waitConnected,
  type Clock,
  type Jwks,
  type KeyPairJwk,
  type UplinkMessage,
} from '@tobira/shared';
import type { MqttClient } from 'mqtt';
import { NotConnected, type MqttLink } from '../src/adapters/mqtt/link.js';

// the suite's one polling helper (shared/src/testing/wait.ts), re-exported for the tests that import it from here
export { waitFor } from '@tobira/shared/testing';

/** The inbox's MQTT port, disconnected: tests that only feed the inbox messages need no broker (nothing they do publishes). */
export const disconnectedLink: MqttLink = {
  connected: false,
  waitConnected: async () => false,
  publish: () => Promise.reject(new NotConnected()),
  onMessage: () => {},
  subscribe: async () => {},
  onConnect: () => {},
  close: async () => {},
};

/**
 * A TCP proxy in front of a broker that a test can cut and restore: "the
 * broker is down" for whoever connects through it, with any real broker
 * behind (aedes or Mosquitto), while others keep their direct connection.
 */
export async function startCutProxy(
  brokerUrl: string,
): Promise<{ url: string; cut(): Promise<void>; restore(): Promise<void>; stop(): Promise<void> }> {
  const target = new URL(brokerUrl);
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = createServer((client) => {
        client.setNoDelay(true);
        const upstream = connect(Number(target.port || 1883), target.hostname);
        upstream.setNoDelay(true);
        sockets.add(client);
        sockets.add(upstream);
        client.pipe(upstream).pipe(client);
        const close = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        client.on('error', close).on('close', close);
        upstream.on('error', close).on('close', close);
      });
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        const a = server?.address();
        if (a && typeof a === 'object') port = a.port;
        resolve();
      });
    });
  const cut = async () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    server = undefined;
  };
  await listen();
  return { url: `mqtt://127.0.0.1:${port}`, cut, restore: listen, stop: cut };
}

export interface FakeGateway {
  readonly client: MqttClient;
  readonly received: DownlinkMessage[];
  readonly rejected: string[];
  send(draft: Record<string, unknown>): Promise<UplinkMessage>;
  sendRaw(payload: string | Buffer, topic?: string): Promise<void>;
  close(): Promise<void>;
}

/** A stand-in gateway: verifies every downlink with the cloud JWKS and signs uplinks with its own key. */
export async function fakeGateway(opts: {
  url: string;
  gatewayId: string;
  pair: KeyPairJwk;
  cloudJwks: Jwks;
  cloudIssuer: string;
  clock: Clock;
}): Promise<FakeGateway> {
  const keys = await KeySet.fromJwks(opts.cloudJwks);
  const signing = await importSigningKey(opts.pair.privateJwk);
  const client = connectMqtt(opts.url, { clientId: `fake-${opts.gatewayId}`, clean: false, reconnectPeriod: 200 });
  await waitConnected(client);
  const received: DownlinkMessage[] = [];
  const rejected: string[] = [];
  client.on('message', (_t, payload) => {
    void verifyMessage(payload, {
      keys,
      issuer: opts.cloudIssuer,
      audience: opts.gatewayId,
      schema: DownlinkMessage,
      clock: opts.clock,
    }).then((v) => {
      if (v.ok) received.push(v.message);
      else rejected.push(v.code);
    });
  });
  await client.subscribeAsync(topics.gatewayDown(opts.gatewayId), { qos: 1 });
  return {
    client,
    received,
    rejected,
    async send(draft) {
      const { token, message } = await signMessage<UplinkMessage>(
        signing,
        opts.gatewayId,
        { aud: opts.cloudIssuer, cid: newCorrelationId(), ...draft } as unknown as Parameters<typeof signMessage<UplinkMessage>>[2],
        opts.clock,
      );
      await client.publishAsync(topics.gatewayUp(opts.gatewayId), token, { qos: 1 });
      return message;
    },
    async sendRaw(payload, topic = topics.gatewayUp(opts.gatewayId)) {
      await client.publishAsync(topic, payload, { qos: 1 });
    },
    async close() {
      await client.endAsync(true);
    },
  };
}
