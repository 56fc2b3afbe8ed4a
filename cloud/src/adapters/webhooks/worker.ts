import type { Clock, Logger } from '@tobira/shared';
import type { BackoffPolicy } from '../backoff.js';
import type { Queryable } from '../db/db.js';
import { claimDue, type ClaimedWebhook } from './claim.js';
import { DeliveryTimeout, postWebhook, signWebhook } from './deliver.js';
import { EgressRefusedError, checkUrlShape, type ResolveAll } from './egress.js';
import { logAttempt } from './endpoints.js';
import type { DeliveryCode } from './events.js';
import { failDelivery } from './fail.js';
import { SecretUnreadable, type SecretBox } from '../kek.js';
import { openSecret } from '../db/sealed-secrets.js';
import { markDelivered } from './mark-delivered.js';
import { noTelemetry, type Telemetry } from '../../app/telemetry.js';

/**
 * Webhook delivery (docs/api.md "Webhooks"). Triggers (migrations 0006, 0013)
 * enqueue one `webhook_outbox` row per matching endpoint in the transaction
 * of the change itself; this worker claims due rows with a lease (claim.ts),
 * POSTs the signed body (deliver.ts), logs the attempt, and marks the row
 * delivered (mark-delivered.ts) or backs it off (fail.ts; dead after
 * maxAttempts). Guarantee: at least once per endpoint; receivers dedupe by
 * the `id` in the body (also the `Tobira-Event-Id` header).
 *
 * SSRF guard (egress.ts): unless `allowPrivateNetworks`, the address actually
 * connected to must be public (checked in the connection's DNS lookup, so a
 * host re-pointed at an internal address after registration is refused before
 * any byte is sent), and redirects are never followed (a 3xx is a failure).
 */

/** Leads the logged error of an attempt the egress guard refused. */
const ADDRESS_FORBIDDEN = 'WEBHOOK_ADDRESS_FORBIDDEN' satisfies DeliveryCode;
/** Leads the logged error of an attempt whose endpoint secret did not open (wrong or missing KEK, a ciphertext moved). */
const SECRET_UNREADABLE = 'WEBHOOK_SECRET_UNREADABLE' satisfies DeliveryCode;

export interface WebhookOptions extends BackoffPolicy {
  readonly pollMs: number;
  readonly batch: number;
  readonly leaseMs: number;
  readonly timeoutMs: number;
  /** Deliver to loopback, private and other internal addresses, and over plain http (the SSRF guard off). */
  readonly allowPrivateNetworks: boolean;
}
export const DEFAULT_WEBHOOK_OPTIONS: WebhookOptions = Object.freeze({
  pollMs: 1_000,
  batch: 20,
  leaseMs: 30_000,
  timeoutMs: 10_000,
  maxAttempts: 8,
  baseMs: 1_000,
  maxMs: 15 * 60_000,
  allowPrivateNetworks: false,
});

export class WebhookDispatcher {
  readonly #o: WebhookOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;

  constructor(
    private readonly deps: {
      db: Queryable;
      /** Opens the endpoints' sealed signing secrets (docs/security.md "Secrets at rest"). */
      secrets: SecretBox;
      clock: Clock;
      log: Logger;
      random?: () => number;
      resolve?: ResolveAll;
      telemetry?: Telemetry;
    },
    options: Partial<WebhookOptions> = {},
  ) {
    this.#o = { ...DEFAULT_WEBHOOK_OPTIONS, ...options };
  }

  start(): void {
    this.#timer ??= setInterval(() => {
      this.#running ??= this.runOnce()
        .then(() => undefined)
        .catch((e: unknown) => this.deps.log.warn({ err: String(e) }, 'webhook pass failed'))
        .finally(() => {
          this.#running = undefined;
        });
    }, this.#o.pollMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  /** One pass: claim due rows, deliver each. Returns how many were tried. */
  async runOnce(): Promise<number> {
    const rows = await claimDue(this.deps.db, this.deps.clock.now(), this.#o);
    await Promise.all(rows.map((row) => this.#deliver(row)));
    return rows.length;
  }

  async #deliver(row: ClaimedWebhook): Promise<void> {
    const log = this.deps.log.child({ cid: row.cid ?? undefined, webhook: row.endpoint_id, outboxId: row.id, attempt: row.attempts });
    const body = JSON.stringify({ id: row.event_id, type: row.type, createdAt: row.created_at, cid: row.cid, data: row.body });
    const t = this.deps.clock.now();
    let statusCode: number | null = null;
    let error: string | null = null;
    let code: DeliveryCode | null = null;
    // a refusal by the egress guard: its code leads the logged error; the address goes to the server log only
    let refused: Record<string, unknown> = {};
    const shape = checkUrlShape(row.url, { allowPrivateNetworks: this.#o.allowPrivateNetworks });
    let secret: string | null = null;
    try {
      secret = openSecret(this.deps.secrets, 'webhook_endpoints.secret', row.endpoint_id, row.secret_sealed, row.secret);
    } catch (e) {
      if (!(e instanceof SecretUnreadable)) throw e;
      // never sent unsigned: the attempt fails (and backs off) until the KEK that sealed it is loaded
      refused = { code: SECRET_UNREADABLE, cause: e.code, kid: e.kid };
    }
    if (secret === null) {
      code = SECRET_UNREADABLE;
      error = `${SECRET_UNREADABLE}: the endpoint's signing secret does not open with the loaded KEKs`;
    } else if (!shape.ok) {
      refused = { code: ADDRESS_FORBIDDEN };
      code = ADDRESS_FORBIDDEN;
      error = `${ADDRESS_FORBIDDEN}: ${shape.detail}`;
    } else {
      try {
        statusCode = await postWebhook(
          shape.url,
          {
            'content-type': 'application/json',
            'tobira-event-id': row.event_id,
            'tobira-event-type': row.type,
            'tobira-signature': signWebhook(secret, t, body),
            ...(row.cid ? { 'x-correlation-id': row.cid } : {}),
          },
          body,
          { timeoutMs: this.#o.timeoutMs, guard: !this.#o.allowPrivateNetworks, resolve: this.deps.resolve },
        );
        if (statusCode >= 300 && statusCode < 400) {
          code = 'WEBHOOK_REDIRECT_NOT_FOLLOWED';
          error = `HTTP ${statusCode}: redirects are not followed`;
        } else if (statusCode < 200 || statusCode >= 300) {
          code = 'WEBHOOK_HTTP_STATUS';
          error = `HTTP ${statusCode}`;
        }
      } catch (e) {
        if (e instanceof EgressRefusedError) {
          refused = { code: e.code, addressClass: e.addressClass, address: e.address };
          code = e.code;
          error = `${e.code}: ${e.message}`;
        } else {
          code = e instanceof DeliveryTimeout ? 'WEBHOOK_TIMEOUT' : 'WEBHOOK_CONNECTION_FAILED';
          error = e instanceof Error ? e.message : String(e);
        }
      }
    }
    const now = this.deps.clock.now();
    await logAttempt(this.deps.db, { outboxId: row.id, endpointId: row.endpoint_id, attempt: row.attempts, statusCode, error, code }, now);
    const leased = { id: row.id, leaseToken: row.lease_token, attempts: row.attempts };
    if (error === null) {
      const marked = await markDelivered(this.deps.db, leased, now);
      (this.deps.telemetry ?? noTelemetry).webhook('delivered', 'OK');
      log.info({ statusCode, marked }, 'webhook delivered');
      return;
    }
    const status = await failDelivery(this.deps.db, leased, error, now, this.#o, (this.deps.random ?? Math.random)());
    (this.deps.telemetry ?? noTelemetry).webhook(
      status === null ? 'lease_lost' : status === 'dead' ? 'dead' : 'retry',
      code ?? 'WEBHOOK_CONNECTION_FAILED',
    );
    log.warn({ statusCode, error, dead: status === 'dead', code, ...refused }, 'webhook delivery failed');
  }
}
