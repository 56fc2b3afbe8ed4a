import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from '@tobira/shared';
import { Counter, type Registry } from 'prom-client';

/**
 * Bounds on the HTTP server's TCP connections (docs/gateway.md "Flood
 * bounds"). Every connection holds a file descriptor, and the gateway's
 * broker links need descriptors too: idle sockets opened by the thousand
 * must not make /healthz unanswerable or the MQTT reconnects fail with
 * EMFILE (a door controller whose links cannot come back fails closed when
 * its lease runs out).
 *
 * - per client address at most `perAddress` open at once: one more is
 *   destroyed at once, before a byte is read (for HTTPS before the
 *   handshake), counted, and logged once per flood
 *   (`HTTP_CONNECTIONS_PER_ADDRESS`) until that address is back under it;
 * - in all at most `max` (`server.maxConnections`; Node drops the rest at
 *   accept, counted and logged as `HTTP_CONNECTIONS_MAX`);
 * - a connection that has not sent a whole request head within
 *   `headersTimeoutSeconds`, or a whole request within
 *   `requestTimeoutSeconds`, is answered 408 and closed (checked every
 *   second, not Node's 30 s); a kept-alive one idle between requests for
 *   `keepAliveSeconds` is closed. An answer being streamed (the live event
 *   feed) is none of these.
 */
export interface ConnectionLimits {
  readonly perAddress: number;
  readonly max: number;
  readonly headersTimeoutSeconds: number;
  readonly requestTimeoutSeconds: number;
  readonly keepAliveSeconds: number;
}
export const DEFAULT_CONNECTIONS: ConnectionLimits = Object.freeze({
  perAddress: 64,
  max: 1024,
  headersTimeoutSeconds: 10,
  requestTimeoutSeconds: 10,
  keepAliveSeconds: 10,
});
/** Limits as configured: any field left out (or undefined) takes its default. */
export type ConnectionConfig = { readonly [K in keyof ConnectionLimits]?: number | undefined };

/**
 * Options of the server's creation: how often Node looks for connections
 * past their head or request timeout (its default, 30 s, would add that much
 * to every timeout).
 */
export const SERVER_CONNECTION_OPTIONS = Object.freeze({ connectionsCheckingInterval: 1000 });

export type ConnectionRefusal = 'HTTP_CONNECTIONS_PER_ADDRESS' | 'HTTP_CONNECTIONS_MAX';

export interface ConnectionStats {
  /** Open connections of one address. */
  open(address: string): number;
  /** Connections refused so far, by code. */
  readonly refused: Readonly<Record<ConnectionRefusal, number>>;
}

/** Installs the bounds on `server` (before it listens; made with SERVER_CONNECTION_OPTIONS). */
export function boundConnections(server: Server, config: ConnectionConfig | undefined, log: Logger, registry: Registry): ConnectionStats {
  const d = DEFAULT_CONNECTIONS;
  const l: ConnectionLimits = {
    perAddress: config?.perAddress ?? d.perAddress,
    max: config?.max ?? d.max,
    headersTimeoutSeconds: config?.headersTimeoutSeconds ?? d.headersTimeoutSeconds,
    requestTimeoutSeconds: config?.requestTimeoutSeconds ?? d.requestTimeoutSeconds,
    keepAliveSeconds: config?.keepAliveSeconds ?? d.keepAliveSeconds,
  };
  server.maxConnections = l.max;
  // Node requires the head timeout to be no longer than the request timeout.
  server.requestTimeout = l.requestTimeoutSeconds * 1000;
  server.headersTimeout = Math.min(l.headersTimeoutSeconds, l.requestTimeoutSeconds) * 1000;
  server.keepAliveTimeout = l.keepAliveSeconds * 1000;

  const counter = new Counter({
    name: 'tobira_gateway_http_connections_refused_total',
    help: 'HTTP connections closed at accept, by code (per-address or global connection cap).',
    labelNames: ['code'] as const,
    registers: [registry],
  });
  const refused: Record<ConnectionRefusal, number> = { HTTP_CONNECTIONS_PER_ADDRESS: 0, HTTP_CONNECTIONS_MAX: 0 };
  const open = new Map<string, number>();
  /** Addresses refused since they were last under their cap: one log line per flood, not per socket. */
  const flooding = new Set<string>();
  let maxFlood = false;
  let total = 0;

  const refuse = (code: ConnectionRefusal) => {
    refused[code] += 1;
    counter.inc({ code });
  };

  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const n = open.get(address) ?? 0;
    if (n >= l.perAddress) {
      socket.destroy();
      refuse('HTTP_CONNECTIONS_PER_ADDRESS');
      if (!flooding.has(address)) {
        flooding.add(address);
        log.warn({ code: 'HTTP_CONNECTIONS_PER_ADDRESS', ip: address, max: l.perAddress }, 'HTTP connection refused');
      }
      return;
    }
    open.set(address, n + 1);
    total += 1;
    socket.once('close', () => {
      total -= 1;
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
      if (left < l.perAddress && flooding.delete(address))
        log.info(
          { code: 'HTTP_CONNECTIONS_PER_ADDRESS', ip: address, refused: refused.HTTP_CONNECTIONS_PER_ADDRESS },
          'HTTP connection flood over',
        );
      if (total < l.max) maxFlood = false;
    });
  });
  server.on('drop', (data?: { remoteAddress?: string }) => {
    refuse('HTTP_CONNECTIONS_MAX');
    if (maxFlood) return;
    maxFlood = true;
    log.warn({ code: 'HTTP_CONNECTIONS_MAX', ip: data?.remoteAddress ?? null, max: l.max }, 'HTTP connection refused');
  });

  return { open: (address) => open.get(address) ?? 0, refused };
}
