import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net';

/**
 * The chaos runner's own TCP proxy (docs/reliability.md): one per link (a
 * client and its broker, the cloud and PostgreSQL). Modes:
 * - `pass`: bytes flow;
 * - `cut`: every open connection is destroyed and new ones are refused (an outage);
 * - `stall`: connections stay open but nothing is forwarded; bytes queue until restore (a black hole);
 * - `slow`: every chunk waits `slowMs` (order kept);
 * `reset()` destroys the open connections once and keeps accepting (a NAT or router reset).
 * With `dupProbability` > 0 on an MQTT link, PUBLISH packets from the broker to the client are
 * sometimes sent twice (DUP flag set on the copy), as a broker redelivers after a lost PUBACK.
 */
export type ProxyMode = 'pass' | 'cut' | 'stall' | 'slow';

export interface Proxy {
  readonly port: number;
  readonly mode: ProxyMode;
  setMode(mode: ProxyMode, slowMs?: number): void;
  reset(): void;
  setDup(probability: number): void;
  readonly stats: { connections: number; duplicated: number };
  stop(): Promise<void>;
}

interface Pipe {
  readonly queue: Buffer[];
  busy: boolean;
  /** Frames MQTT packets broker→client, for duplication. */
  frame?: Buffer;
}

/** Splits complete MQTT packets off the front of `buf`; returns them and the rest. */
export function mqttPackets(buf: Buffer): { packets: Buffer[]; rest: Buffer } {
  const packets: Buffer[] = [];
  let off = 0;
  for (;;) {
    if (buf.length - off < 2) break;
    let len = 0;
    let mul = 1;
    let i = off + 1;
    let done = false;
    for (let k = 0; k < 4 && i < buf.length; k++, i++) {
      const b = buf[i] ?? 0;
      len += (b & 0x7f) * mul;
      mul *= 128;
      if ((b & 0x80) === 0) {
        done = true;
        i++;
        break;
      }
    }
    if (!done) break;
    const end = i + len;
    if (end > buf.length) break;
    packets.push(buf.subarray(off, end));
    off = end;
  }
  return { packets, rest: buf.subarray(off) };
}

export async function startProxy(
  targetHost: string,
  targetPort: number,
  opts: { random?: () => number; mqtt?: boolean; port?: number } = {},
): Promise<Proxy> {
  const random = opts.random ?? Math.random;
  const conns = new Set<{ client: Socket; upstream: Socket; pipes: Pipe[] }>();
  let mode: ProxyMode = 'pass';
  let slowMs = 0;
  let dup = 0;
  const stats = { connections: 0, duplicated: 0 };

  const pump = (pipe: Pipe, dst: Socket) => {
    if (pipe.busy || mode === 'stall') return;
    const chunk = pipe.queue.shift();
    if (chunk === undefined) return;
    if (mode === 'slow' && slowMs > 0) {
      pipe.busy = true;
      setTimeout(() => {
        pipe.busy = false;
        if (!dst.destroyed) dst.write(chunk);
        pump(pipe, dst);
      }, slowMs);
      return;
    }
    if (!dst.destroyed) dst.write(chunk);
    pump(pipe, dst);
  };

  const server: Server = createServer((client) => {
    if (mode === 'cut') return void client.destroy();
    stats.connections++;
    const upstream = tcpConnect(targetPort, targetHost);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const up: Pipe = { queue: [], busy: false };
    const down: Pipe = { queue: [], busy: false, ...(opts.mqtt && { frame: Buffer.alloc(0) }) };
    const c = { client, upstream, pipes: [up, down] };
    conns.add(c);
    const close = () => {
      conns.delete(c);
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', () => {});
      s.once('close', close);
    }
    client.on('data', (b: Buffer) => {
      up.queue.push(b);
      pump(up, upstream);
    });
    upstream.on('data', (b: Buffer) => {
      if (down.frame !== undefined && dup > 0) {
        const { packets, rest } = mqttPackets(Buffer.concat([down.frame, b]));
        down.frame = Buffer.from(rest);
        for (const p of packets) {
          down.queue.push(p);
          // PUBLISH (type 3): the copy carries the DUP flag, as a redelivery does
          if ((p[0] ?? 0) >> 4 === 3 && random() < dup) {
            const copy = Buffer.from(p);
            copy[0] = (copy[0] ?? 0) | 0x08;
            down.queue.push(copy);
            stats.duplicated++;
          }
        }
      } else {
        if (down.frame !== undefined && down.frame.length > 0) {
          b = Buffer.concat([down.frame, b]);
          down.frame = Buffer.alloc(0);
        }
        if (down.frame !== undefined) {
          // keep framing in step even while not duplicating, so a later dup starts on a packet boundary
          const { packets, rest } = mqttPackets(b);
          down.frame = Buffer.from(rest);
          down.queue.push(...packets);
        } else down.queue.push(b);
      }
      pump(down, client);
    });
  });
  await new Promise<void>((r) => server.listen(opts.port ?? 0, '127.0.0.1', r));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  const dropAll = () => {
    for (const c of [...conns]) {
      c.client.destroy();
      c.upstream.destroy();
    }
    conns.clear();
  };
  return {
    port,
    get mode() {
      return mode;
    },
    stats,
    setMode(m, ms = 0) {
      mode = m;
      slowMs = ms;
      if (m === 'cut') dropAll();
      if (m === 'pass' || m === 'slow')
        for (const c of conns) {
          const [up, down] = c.pipes;
          if (up) pump(up, c.upstream);
          if (down) pump(down, c.client);
        }
    },
    reset: dropAll,
    setDup(p) {
      dup = p;
    },
    async stop() {
      mode = 'cut';
      dropAll();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
