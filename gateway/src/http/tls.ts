import { Server as HttpsServer, createServer } from 'node:https';
import type { FastifyInstance, FastifyServerOptions } from 'fastify';
import { SERVER_CONNECTION_OPTIONS } from './connections.js';

/**
 * The staff UI over HTTPS (no secret in clear): Fastify's server made by Node's
 * https with the site CA's staff-UI certificate, and HSTS on every answer so a
 * browser that once reached the page never sends a session cookie in clear
 * afterwards. `setSecureContext` swaps a renewed certificate in without a
 * restart. A plain-HTTP request to this port gets no answer: Node ends a
 * connection whose first bytes are not a TLS handshake.
 */
export interface StaffTls {
  readonly key: string;
  readonly cert: string;
}

/** A year, the value browsers' preload lists ask for; no includeSubDomains: the box is named by address or one name. */
export const HSTS = 'max-age=31536000';

export function httpsServerOptions(tls: StaffTls | undefined): Pick<FastifyServerOptions, 'serverFactory'> {
  if (tls === undefined) return {};
  return {
    serverFactory: (handler) =>
      createServer({ key: tls.key, cert: tls.cert, minVersion: 'TLSv1.2', ...SERVER_CONNECTION_OPTIONS }, handler) as unknown as ReturnType<
        NonNullable<FastifyServerOptions['serverFactory']>
      >,
  };
}

export function addHsts(app: FastifyInstance, tls: StaffTls | undefined): void {
  if (tls === undefined) return;
  app.addHook('onRequest', async (_req, reply) => {
    void reply.header('strict-transport-security', HSTS);
  });
}

/** Puts a renewed certificate in place for new connections. */
export function renewHttpsCertificate(app: FastifyInstance, tls: StaffTls): void {
  const server: object = app.server;
  if (server instanceof HttpsServer) server.setSecureContext({ key: tls.key, cert: tls.cert });
}
