/**
 * Webhook delivery as Stripe does it: every event POSTed as JSON to each
 * endpoint with a `Stripe-Signature` header (made by the SDK's own
 * `webhooks.generateTestHeaderString`, so `constructEvent` on the receiving
 * side is the real check), retried with capped exponential backoff on a
 * non-2xx answer or a connection error.
 *
 * Delivery guarantee: at least once per endpoint while attempts remain, no
 * order promised — as Stripe says ("Stripe doesn't guarantee the delivery of
 * events in the order that they're generated"). First attempts go out one at
 * a time in event order so a test reads deterministically; retries run on
 * their own timers and may overtake later events. Fault knobs make the
 * weaker cases happen on demand: `duplicates` (each event N times, same id),
 * `hold` + `release(order)` (reverse / seeded shuffle), `drop` (never sent).
 */
import Stripe from 'stripe';
import type { Logger } from 'pino';
import type { StripeEvent } from './objects.js';
import type { Clock } from './ledger.js';

export interface WebhookEndpoint {
  url: string;
  /** `whsec_...`, the signing secret the receiver verifies with */
  secret: string;
  /**
   * the endpoint's API version: Stripe renders every event it sends here at
   * this version (`api_version` of the payload), whatever version the request
   * that caused it sent; unset, the account's
   */
  apiVersion?: string;
}

export interface WebhookRetry {
  /** total tries per event and endpoint, the first included */
  attempts: number;
  backoffMs: number;
  maxBackoffMs: number;
  /** per attempt */
  timeoutMs: number;
}

export interface WebhookFaults {
  /** deliver each event this many times (1 = normal); every copy has the same event id */
  duplicates: number;
  /** keep events back until `release()` */
  hold: boolean;
  /** record events but never send them */
  drop: boolean;
}

export type ReleaseOrder = 'fifo' | 'reverse' | 'shuffle';

export interface DeliveryAttempt {
  eventId: string;
  type: string;
  url: string;
  attempt: number;
  /** HTTP status, or null when the connection failed */
  status: number | null;
  error?: string;
}

export const DEFAULT_WEBHOOK_RETRY: WebhookRetry = { attempts: 5, backoffMs: 200, maxBackoffMs: 5_000, timeoutMs: 5_000 };

/** mulberry32: a seeded shuffle keeps "shuffled" reproducible */
function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class WebhookDispatcher {
  readonly endpoints: WebhookEndpoint[] = [];
  readonly faults: WebhookFaults = { duplicates: 1, hold: false, drop: false };
  readonly attempts: DeliveryAttempt[] = [];
  private held: StripeEvent[] = [];
  private dropped: StripeEvent[] = [];
  private chain: Promise<void> = Promise.resolve();
  private readonly pending = new Set<Promise<void>>();
  /** retry timers, each with the resolver of the promise idle() waits on */
  private readonly timers = new Map<NodeJS.Timeout, () => void>();
  private closed = false;
  /** aborts deliveries still in flight when the server closes */
  private readonly shutdown = new AbortController();

  constructor(
    private readonly log: Logger,
    private readonly clock: Clock,
    readonly retry: WebhookRetry,
  ) {}

  addEndpoint(endpoint: WebhookEndpoint): void {
    if (!this.endpoints.some((e) => e.url === endpoint.url)) this.endpoints.push({ ...endpoint });
  }

  removeEndpoint(url: string): void {
    const i = this.endpoints.findIndex((e) => e.url === url);
    if (i >= 0) this.endpoints.splice(i, 1);
  }

  heldEvents(): readonly StripeEvent[] {
    return this.held;
  }

  droppedEvents(): readonly StripeEvent[] {
    return this.dropped;
  }

  dispatch(events: readonly StripeEvent[]): void {
    for (const event of events) {
      if (this.faults.drop) this.dropped.push(event);
      else if (this.faults.hold) this.held.push(event);
      else this.enqueue(event);
    }
  }

  /** Sends the held events in the order asked for; returns their ids in that order. */
  release(order: ReleaseOrder = 'fifo', seed = 1): string[] {
    const batch = this.held;
    this.held = [];
    if (order === 'reverse') batch.reverse();
    if (order === 'shuffle') {
      const rnd = seededRandom(seed);
      for (let i = batch.length - 1; i > 0; i--) {
        const j = Math.floor(rnd() * (i + 1));
        const a = batch[i];
        const b = batch[j];
        if (a !== undefined && b !== undefined) {
          batch[i] = b;
          batch[j] = a;
        }
      }
    }
    for (const event of batch) this.enqueue(event);
    return batch.map((e) => e.id);
  }

  /** Resolves once nothing is being sent and no retry is waiting. */
  async idle(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  close(): void {
    this.closed = true;
    this.shutdown.abort();
    for (const [t, resolve] of this.timers) {
      clearTimeout(t);
      resolve();
    }
    this.timers.clear();
  }

  private track(p: Promise<void>): void {
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  private enqueue(event: StripeEvent): void {
    const copies = Math.max(1, this.faults.duplicates);
    for (const endpoint of [...this.endpoints]) {
      for (let c = 0; c < copies; c++) {
        const next = this.chain.then(() => this.attempt(event, endpoint, 1));
        this.chain = next.catch(() => undefined);
        this.track(next);
      }
    }
  }

  private async attempt(event: StripeEvent, endpoint: WebhookEndpoint, attempt: number): Promise<void> {
    if (this.closed) return;
    const payload = JSON.stringify(endpoint.apiVersion === undefined ? event : { ...event, api_version: endpoint.apiVersion }, null, 2);
    const header = Stripe.webhooks.generateTestHeaderString({
      payload,
      secret: endpoint.secret,
      timestamp: Math.floor(this.clock.now() / 1000),
    });
    const log = this.log.child({ cid: event.request.id ?? event.id, evt: event.id, type: event.type, url: endpoint.url, attempt });
    let status: number | null = null;
    let error: string | undefined;
    try {
      const res = await fetch(endpoint.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json; charset=utf-8',
          'stripe-signature': header,
          'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
        },
        body: payload,
        signal: AbortSignal.any([AbortSignal.timeout(this.retry.timeoutMs), this.shutdown.signal]),
      });
      status = res.status;
      await res.arrayBuffer().catch(() => undefined);
    } catch (err) {
      error = err instanceof Error ? err.message : String(err);
    }
    this.attempts.push({
      eventId: event.id,
      type: event.type,
      url: endpoint.url,
      attempt,
      status,
      ...(error !== undefined ? { error } : {}),
    });
    if (status !== null && status >= 200 && status < 300) {
      log.info({ status }, 'webhook delivered');
      return;
    }
    if (attempt >= this.retry.attempts || this.closed) {
      log.warn({ status, err: error }, 'webhook given up');
      return;
    }
    const delay = Math.min(this.retry.backoffMs * 2 ** (attempt - 1), this.retry.maxBackoffMs);
    log.info({ status, err: error, retryInMs: delay }, 'webhook failed, will retry');
    this.track(
      new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.timers.delete(t);
          void this.attempt(event, endpoint, attempt + 1).finally(resolve);
        }, delay);
        this.timers.set(t, resolve);
      }),
    );
  }
}
