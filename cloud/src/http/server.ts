import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { DEFAULT_API_CONFIG, type ApiDeps } from './context.js';
import { installApiToken } from './tokens.js';
import { WebhookDispatcher, type WebhookOptions } from './webhooks.js';
import { purgeApiTables } from './purge.js';

export interface AdminApiOptions extends ApiDeps {
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
  /** Webhook dispatcher options (its `allowPrivateNetworks` is `config.webhookAllowPrivateNetworks`); false: do not deliver webhooks from this process. */
  readonly webhooks?: Partial<WebhookOptions> | false;
}

export interface AdminApi {
  readonly url: string;
  readonly app: FastifyInstance;
  /** Stops accepting connections and waits for in-flight requests (Fastify close). */
  close(): Promise<void>;
}

/** Builds the admin API, listens, and starts the webhook dispatcher. The cloud must be started (its database open) first. */
export async function startAdminApi(opts: AdminApiOptions): Promise<AdminApi> {
  if (opts.bootstrapAdminToken) await installApiToken(opts.db, opts.bootstrapAdminToken, { name: 'bootstrap admin', role: 'admin' }, opts.clock.now());
  const app = await buildApp(opts);
  await app.listen({ host: opts.host ?? '127.0.0.1', port: opts.port ?? 0 });
  // one SSRF switch for registration and delivery: the API config's
  const allowPrivateNetworks = opts.config?.webhookAllowPrivateNetworks ?? DEFAULT_API_CONFIG.webhookAllowPrivateNetworks;
  const webhooks =
    opts.webhooks === false
      ? undefined
      : new WebhookDispatcher({ db: opts.db, clock: opts.clock, log: opts.log.child({ part: 'webhooks' }) }, { ...opts.webhooks, allowPrivateNetworks });
  webhooks?.start();
  // retention of idempotency keys and delivered webhooks, hourly; a failed pass is retried at the next
  const sweeper = setInterval(() => {
    purgeApiTables(opts.db, opts.clock.now()).catch((e: unknown) => opts.log.warn({ err: String(e) }, 'admin API purge failed'));
  }, 3_600_000);
  sweeper.unref();
  const addr = app.server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${host}:${addr.port}`,
    app,
    close: () =>
      (closing ??= (async () => {
        clearInterval(sweeper);
        await app.close();
        await webhooks?.stop();
      })()),
  };
}
