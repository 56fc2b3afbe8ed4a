import { createServer, type Server, type Socket } from 'node:net';
import { Aedes, type AedesOptions } from 'aedes';

/**
 * An embedded MQTT broker (aedes) for the demo and tests: no system service
 * needed. Sockets get TCP no-delay (DESIGN.md §5). Sessions and QoS 1 queues
 * live in memory: like any broker, it is a transport, not storage.
 */
export interface EmbeddedBroker {
  readonly url: string;
  readonly port: number;
  readonly aedes: Aedes;
  /** Drops every client connection at once, as a network cut would (the broker keeps running). */
  dropAllConnections(): void;
  stop(): Promise<void>;
}

export async function startEmbeddedBroker(opts: { host?: string; port?: number; aedes?: AedesOptions } = {}): Promise<EmbeddedBroker> {
  const host = opts.host ?? '127.0.0.1';
  const aedes = await Aedes.createBroker(opts.aedes);
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    aedes.handle(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    url: `mqtt://${host}:${port}`,
    port,
    aedes,
    dropAllConnections() {
      for (const s of sockets) s.destroy();
    },
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
    },
  };
}
