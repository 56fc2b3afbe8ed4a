import { createServer, type Server, type Socket } from 'node:net';
import { Duplex, Transform, type TransformCallback } from 'node:stream';
import { createServer as createTlsServer } from 'node:tls';
import { Aedes, type AedesOptions } from 'aedes';
import { isLoopbackHost } from './site-tls.js';

/**
 * An embedded MQTT broker (aedes) for the demo and tests: no system service
 * needed. Sockets get TCP no-delay. Sessions and QoS 1 queues
 * live in memory: like any broker, it is a transport, not storage.
 *
 * With `tls` it listens with Node's TLS server (mqtts), as a site broker must
 * on a LAN (no secret in clear); without it, it listens in plaintext, which is
 * allowed on a loopback address only (`host` anything else throws
 * PLAINTEXT_NOT_LOOPBACK). Either way a packet larger than `maxPacketSize`
 * closes the connection before it is buffered: aedes has no such limit of its
 * own (Mosquitto's `max_packet_size`).
 */
export interface EmbeddedBroker {
  readonly url: string;
  readonly port: number;
  readonly aedes: Aedes;
  /** Drops every client connection at once, as a network cut would (the broker keeps running). */
  dropAllConnections(): void;
  stop(): Promise<void>;
}

/** The largest Tobira message is a signed snapshot part (< 64 KiB); the same figure as deploy/mosquitto/conf.d/tuning.conf. */
export const DEFAULT_MAX_PACKET_SIZE = 131_072;

export interface EmbeddedBrokerOptions {
  readonly host?: string;
  readonly port?: number;
  readonly aedes?: AedesOptions;
  /** PEM key and certificate chain: the broker speaks TLS only. */
  readonly tls?: { readonly key: string; readonly cert: string };
  /** Whole MQTT packet (fixed header included), bytes. */
  readonly maxPacketSize?: number;
}

/**
 * Passes bytes through while reading the MQTT fixed headers (type byte, then
 * the Remaining Length varint of up to 4 bytes), and fails the stream on a
 * packet announcing more than `max` bytes, so nothing of it is buffered.
 */
export class MqttPacketLimit extends Transform {
  // bytes of the current packet's body still to pass; -1 while reading a header
  private remaining = -1;
  private header: number[] = [];
  constructor(private readonly max: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, chunk.length - i);
        this.remaining -= take;
        i += take;
        if (this.remaining === 0) this.remaining = -1;
        continue;
      }
      this.header.push(chunk[i]!);
      i++;
      if (this.header.length === 1) continue;
      const b = this.header[this.header.length - 1]!;
      if ((b & 0x80) !== 0) {
        if (this.header.length > 4) return cb(Object.assign(new Error('malformed MQTT remaining length'), { code: 'MQTT_MALFORMED' }));
        continue;
      }
      let len = 0;
      for (let k = this.header.length - 1; k >= 1; k--) len = len * 128 + (this.header[k]! & 0x7f);
      const total = len + this.header.length;
      this.header = [];
      if (total > this.max)
        return cb(
          Object.assign(new Error(`MQTT packet of ${total} bytes over the limit of ${this.max}`), { code: 'MQTT_PACKET_TOO_LARGE' }),
        );
      this.remaining = len === 0 ? -1 : len;
    }
    cb(null, chunk);
  }
}

export async function startEmbeddedBroker(opts: EmbeddedBrokerOptions = {}): Promise<EmbeddedBroker> {
  const host = opts.host ?? '127.0.0.1';
  if (opts.tls === undefined && !isLoopbackHost(host))
    throw Object.assign(new Error(`a plaintext MQTT listener may bind a loopback address only, not ${host}: give it tls`), {
      code: 'PLAINTEXT_NOT_LOOPBACK',
    });
  const max = opts.maxPacketSize ?? DEFAULT_MAX_PACKET_SIZE;
  const aedes = await Aedes.createBroker(opts.aedes);
  const sockets = new Set<Socket>();
  const onSocket = (socket: Socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    // socket -> limit -> aedes for what clients send; aedes writes straight to the socket
    const limit = new MqttPacketLimit(max);
    limit.once('error', () => socket.destroy());
    socket.on('error', () => limit.destroy());
    socket.pipe(limit);
    const conn = Duplex.from({ readable: limit, writable: socket });
    socket.once('close', () => conn.destroy());
    conn.on('error', () => socket.destroy());
    aedes.handle(conn);
  };
  const server: Server =
    opts.tls === undefined
      ? createServer(onSocket)
      : createTlsServer({ key: opts.tls.key, cert: opts.tls.cert, minVersion: 'TLSv1.2' }, onSocket);
  // a failed handshake (no TLS, an unknown CA on the client's side) only ends that connection
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `${opts.tls === undefined ? 'mqtt' : 'mqtts'}://${urlHost}:${port}`,
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
