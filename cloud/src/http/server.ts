import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { ApiDeps } from './context.js';
import { installApiToken } from '../adapters/db/tokens.js';
import { whenDatabaseAnswers } from '../adapters/db/db.js';

export interface ListenOptions extends ApiDeps {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0 (a free port). */
  readonly port?: number;
  /**
   * A clear admin token the operator chose (`TOBIRA_BOOTSTRAP_ADMIN_TOKEN`,
   * `tbr_` + 43 base64url chars): installed at start if not there yet, so the
   * first admin can call the API. There is no default token.
   */
  readonly bootstrapAdminToken?: string;
}

export interface Listener {
  readonly url: string;
  readonly app: FastifyInstance;
  /** Stops accepting connections and waits for in-flight requests (Fastify close). */
  close(): Promise<void>;
}

/**
 * Builds the admin API and listens; nothing else (its background work, the
 * webhook worker and the hourly purge, is started by the composition root,
 * cloud.ts). The cloud's database must be open first.
 */
export async function listenAdminApi(opts: ListenOptions): Promise<Listener> {
  const token = opts.bootstrapAdminToken;
  // idempotent (ON CONFLICT DO NOTHING): a database link cut at start is waited out like the migrations
  if (token)
    await whenDatabaseAnswers(
      () => installApiToken(opts.db, token, { name: 'bootstrap admin', role: 'admin' }, opts.clock.now()),
      opts.log,
    );
  const app = await buildApp(opts);
  await app.listen({ host: opts.host ?? '127.0.0.1', port: opts.port ?? 0 });
  const addr = app.server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${host}:${addr.port}`,
    app,
    close: () => (closing ??= app.close()),
  };
}
