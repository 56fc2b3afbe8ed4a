import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import mqttPacket from 'mqtt-packet';
import { afterEach, describe, expect, it } from 'vitest';
import { connectMqtt } from '../src/index.js';

/**
 * A broker that drops the first connection while holding a QoS 1 publish, then answers the reconnect with
 * CONNACK and that publish's PUBACK in one TCP write: what a real broker does when the resent message
 * was already delivered, and the window in which a process stopping its link used to crash.
 */
async function flappingBroker() {
  let connections = 0;
  let heldId: number | undefined;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    const n = ++connections;
    const parser = mqttPacket.parser({ protocolVersion: 4 });
    parser.on('packet', (p) => {
      if (p.cmd === 'connect' && n === 1) socket.write(mqttPacket.generate({ cmd: 'connack', returnCode: 0, sessionPresent: false }));
      if (p.cmd === 'connect' && n > 1 && heldId !== undefined) {
        socket.write(
          Buffer.concat([
            mqttPacket.generate({ cmd: 'connack', returnCode: 0, sessionPresent: true }),
            mqttPacket.generate({ cmd: 'puback', messageId: heldId }),
          ]),
        );
      }
      if (p.cmd === 'publish' && p.qos === 1 && n === 1) {
        heldId = p.messageId;
        socket.destroy();
      }
    });
    socket.on('data', (d) => parser.parse(d));
    socket.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `mqtt://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections: () => connections,
    async close() {
      for (const s of sockets) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

describe('connectMqtt: ending a link while it reconnects', () => {
  let broker: Awaited<ReturnType<typeof flappingBroker>> | undefined;
  afterEach(async () => {
    await broker?.close();
    broker = undefined;
  });

  it('an ack that arrives after the stores closed is dropped, not thrown: the process stopping its link keeps running', async () => {
    broker = await flappingBroker();
    const b = broker;
    const uncaught: Error[] = [];
    const onUncaught = (e: Error) => uncaught.push(e);
    // vitest's own handler would fail the run; this one records what escaped so the test can name it
    const previous = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    process.on('uncaughtException', onUncaught);
    try {
      const client = connectMqtt(b.url, { reconnectPeriod: 50 });
      let ended = false;
      // stop while the reconnect's CONNACK is being read: not connected yet, so mqtt.js closes its stores at once
      client.on('packetreceive', (p) => {
        if (p.cmd === 'connack' && b.connections() > 1 && !ended) {
          ended = true;
          client.end(true);
        }
      });
      await new Promise<void>((r) => client.once('connect', () => r()));
      const published = new Promise<Error | undefined>((resolve) => client.publish('t/out', 'y', { qos: 1 }, (e) => resolve(e)));
      await new Promise<void>((r) => client.once('end', () => r()));
      // the PUBACK in the same write is handled on a later tick than the stores closing
      await new Promise((r) => setTimeout(r, 100));
      expect(ended).toBe(true);
      expect(uncaught.map((e) => e.message)).toEqual([]);
      // the publish is answered (it never hangs): delivered or not, its caller hears the link is gone
      const outcome = await Promise.race([published, new Promise((r) => setTimeout(() => r('pending'), 1000))]);
      expect(outcome).not.toBe('pending');
    } finally {
      process.off('uncaughtException', onUncaught);
      for (const l of previous) process.on('uncaughtException', l);
    }
  });
});
