import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { newId, type Clock, type Logger } from '@tobira/shared';
import type { Queryable } from '../adapters/db/db.js';
import type { ApiCode } from './codes.js';
import { EgressRefusedError, checkUrlShape, guardedLookup, resolveAll, type ResolveAll } from './egress.js';

/**
 * Webhook delivery (docs/api.md "Webhooks"). Triggers (migration 0006) write
 * one `webhook_outbox` row per matching endpoint in the transaction of the
 * change itself; this dispatcher claims due rows with a lease (FOR UPDATE
 * SKIP LOCKED, so replicas share the work), POSTs the signed body, and marks
 * the row delivered or backs it off (capped exponential, dead after
 * maxAttempts). Guarantee: at least once per endpoint; receivers dedupe by
 * the `id` in the body (also the `Tobira-Event-Id` header).
 *
 * SSRF guard (egress.ts): unless `allowPrivateNetworks`, the address actually
 * connected to must be public (checked in the connection's DNS lookup, so a
 * host re-pointed at an internal address after registration is refused before
 * any byte is sent), and redirects are never followed (a 3xx is a failure).
 */
export const WEBHOOK_EVENTS = ['key.state_changed', 'access.event', 'alarm', 'downlink.dead_lettered'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/** Leads the logged error of an attempt the egress guard refused. */
const ADDRESS_FORBIDDEN = 'WEBHOOK_ADDRESS_FORBIDDEN' satisfies ApiCode;

/** The stable code of a failed delivery attempt (webhook_deliveries.code; null when delivered). */
export type DeliveryCode = Extract<ApiCode, 'WEBHOOK_HTTP_STATUS' | 'WEBHOOK_REDIRECT_NOT_FOLLOWED' | 'WEBHOOK_ADDRESS_FORBIDDEN' | 'WEBHOOK_TIMEOUT' | 'WEBHOOK_CONNECTION_FAILED'>;

class DeliveryTimeout extends Error {
  override readonly name = 'DeliveryTimeout';
}

export interface WebhookOptions {
  readonly pollMs: number;
  readonly batch: number;
  readonly leaseMs: number;
  readonly timeoutMs: number;
  readonly maxAttempts: number;
  readonly baseMs: number;
  readonly maxMs: number;
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

/** `Tobira-Signature: t=<unix ms>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`; receivers check it and reject old `t`. */
export function signWebhook(secret: string, t: number, body: string): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

export async function createWebhook(db: Queryable, input: { siteId: string; url: string; events: readonly WebhookEvent[] }, now: number) {
  const id = newId();
  const secret = `whsec_${randomBytes(32).toString('base64url')}`;
  await db.query('INSERT INTO webhook_endpoints (id, site_id, url, secret, events, created_at) VALUES ($1,$2,$3,$4,$5,$6)', [
    id,
    input.siteId,
    input.url,
    secret,
    [...input.events],
    now,
  ]);
  return { id, siteId: input.siteId, url: input.url, events: [...input.events], enabled: true, createdAt: now, secret };
}

interface Claimed {
  id: number;
  endpoint_id: string;
  event_id: string;
  type: string;
  body: unknown;
  cid: string | null;
  attempts: number;
  lease_token: string;
  url: string;
  secret: string;
  created_at: number;
}

export class WebhookDispatcher {
  readonly #o: WebhookOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;

  constructor(
    private readonly deps: { db: Queryable; clock: Clock; log: Logger; random?: () => number; resolve?: ResolveAll },
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

  /** One pass: claim due rows (pending and due, or sending with an expired lease), deliver each. Returns how many were tried. */
  async runOnce(): Promise<number> {
    const now = this.deps.clock.now();
    const token = randomUUID();
    const r = await this.deps.db.query<Claimed>(
      `UPDATE webhook_outbox w SET status = 'sending', lease_token = $1, lease_until = $2, attempts = w.attempts + 1
         FROM (SELECT id FROM webhook_outbox
                WHERE (status = 'pending' AND next_attempt_at <= $3) OR (status = 'sending' AND lease_until <= $3)
                ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) due, webhook_endpoints e
        WHERE w.id = due.id AND e.id = w.endpoint_id
        RETURNING w.id, w.endpoint_id, w.event_id, w.type, w.body, w.cid, w.attempts, w.lease_token, e.url, e.secret, w.created_at`,
      [token, now + this.#o.leaseMs, now, this.#o.batch],
    );
    await Promise.all(r.rows.map((row) => this.#deliver(row)));
    return r.rows.length;
  }

  async #deliver(row: Claimed): Promise<void> {
    const log = this.deps.log.child({ cid: row.cid ?? undefined, webhook: row.endpoint_id, outboxId: row.id, attempt: row.attempts });
    const body = JSON.stringify({ id: row.event_id, type: row.type, createdAt: row.created_at, cid: row.cid, data: row.body });
    const t = this.deps.clock.now();
    let statusCode: number | null = null;
    let error: string | null = null;
    let code: DeliveryCode | null = null;
    // a refusal by the egress guard: its code leads the logged error; the address goes to the server log only
    let refused: Record<string, unknown> = {};
    const shape = checkUrlShape(row.url, { allowPrivateNetworks: this.#o.allowPrivateNetworks });
    if (!shape.ok) {
      refused = { code: ADDRESS_FORBIDDEN };
      code = ADDRESS_FORBIDDEN;
      error = `${ADDRESS_FORBIDDEN}: ${shape.detail}`;
    } else {
      try {
        statusCode = await this.#post(shape.url, {
          'content-type': 'application/json',
          'tobira-event-id': row.event_id,
          'tobira-event-type': row.type,
          'tobira-signature': signWebhook(row.secret, t, body),
          ...(row.cid ? { 'x-correlation-id': row.cid } : {}),
        }, body);
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
    await this.deps.db.query('INSERT INTO webhook_deliveries (outbox_id, endpoint_id, attempt, status_code, error, code, at) VALUES ($1,$2,$3,$4,$5,$6,$7)', [
      row.id,
      row.endpoint_id,
      row.attempts,
      statusCode,
      error,
      code,
      now,
    ]);
    if (error === null) {
      const m = await this.deps.db.query(
        `UPDATE webhook_outbox SET status = 'delivered', delivered_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL WHERE id = $1 AND lease_token = $2`,
        [row.id, row.lease_token, now],
      );
      log.info({ statusCode, marked: m.rowCount === 1 }, 'webhook delivered');
      return;
    }
    const dead = row.attempts >= this.#o.maxAttempts;
    const cap = Math.min(this.#o.maxMs, this.#o.baseMs * 2 ** (row.attempts - 1));
    const delay = cap / 2 + ((this.deps.random ?? Math.random)() * cap) / 2;
    await this.deps.db.query(
      `UPDATE webhook_outbox SET status = $3, next_attempt_at = $4, last_error = $5, lease_token = NULL, lease_until = NULL WHERE id = $1 AND lease_token = $2`,
      [row.id, row.lease_token, dead ? 'dead' : 'pending', Math.round(now + delay), error.slice(0, 500)],
    );
    log.warn({ statusCode, error, dead, code, ...refused }, 'webhook delivery failed');
  }

  /**
   * One POST with node:http(s) (not fetch: it takes a `lookup` hook), a fresh
   * connection each time (`agent: false`: a pooled socket could have been
   * opened under another policy), redirects not followed (node:http never
   * does), bounded by `timeoutMs` up to the answer's status. Resolves the status.
   */
  #post(url: URL, headers: Record<string, string>, body: string): Promise<number> {
    const guard = !this.#o.allowPrivateNetworks;
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise<number>((resolve, reject) => {
      const req = request(
        url,
        {
          method: 'POST',
          headers: { ...headers, 'content-length': String(Buffer.byteLength(body)), 'user-agent': 'tobira-webhooks' },
          agent: false,
          ...(guard ? { lookup: guardedLookup(this.deps.resolve ?? resolveAll) } : {}),
        },
        (res) => {
          clearTimeout(timer);
          resolve(res.statusCode ?? 0);
          res.destroy(); // the answer's body is not read
        },
      );
      const timer = setTimeout(() => req.destroy(new DeliveryTimeout(`timed out after ${this.#o.timeoutMs} ms`)), this.#o.timeoutMs);
      req.on('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
      req.end(body);
    });
  }
}
