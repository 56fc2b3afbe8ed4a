import type { Clock } from '@tobira/shared';
import { Gauge, Histogram, Registry } from 'prom-client';
import type { Queryable } from '../adapters/db/db.js';
import { gatewayGauges, queueGauges, type GatewayGauges, type QueueGauge } from '../adapters/db/metrics.js';
import { pendingRefundGauge } from '../adapters/db/payments.js';

/** HTTP latency buckets (seconds). */
const HTTP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface CloudMetrics {
  readonly contentType: string;
  /** The Prometheus text of a scrape: this API's registry and the process registry of its cloud. */
  metrics(): Promise<string>;
  /** One answered request: its route pattern (never the URL: ids would make a series each), method, status. */
  observeHttp(route: string, method: string, statusCode: number, seconds: number): void;
  /** Everything scraped (the test that deploy/'s alert rules and dashboard name only exported metrics reads it). */
  readonly registry: Registry;
}

/**
 * The cloud's Prometheus metrics (GET /metrics, admin tokens only; docs/cloud.md
 * "Metrics"). Two kinds:
 * - read from the database at scrape time, so every replica reports the
 *   same: per gateway, its downlink outbox (depth, age of the oldest row not
 *   delivered, dead letters), presence, failing closed, seq lag and clock
 *   skew; the webhook and notification queues;
 * - counted in this process (`processRegistry`, from the cloud core: uplinks,
 *   dispatch lag, publish failures, webhook deliveries, database pool), and
 *   the HTTP latency of this API: per replica, summed by the query.
 */
export function cloudMetrics(db: Queryable, clock: Clock, processRegistry?: Registry): CloudMetrics {
  const registry = new Registry();
  let snapshot: Promise<{
    gateways: GatewayGauges[];
    queues: QueueGauge[];
    refunds: { count: number; oldestAt: number | null };
    now: number;
  }> | null = null;
  // one set of queries per scrape (metrics() starts it afresh), shared by the gauges
  const read = () =>
    (snapshot ??= (async () => {
      const now = clock.now();
      const [gateways, queues, refunds] = await Promise.all([gatewayGauges(db, now), queueGauges(db), pendingRefundGauge(db)]);
      return { gateways, queues, refunds, now };
    })());
  const perGateway = (name: string, help: string, value: (g: GatewayGauges, now: number) => number | null) =>
    new Gauge({
      name,
      help,
      labelNames: ['gateway_id'],
      registers: [registry],
      async collect() {
        const { gateways, now } = await read();
        this.reset();
        for (const g of gateways) {
          const v = value(g, now);
          if (v !== null) this.set({ gateway_id: g.gatewayId }, v);
        }
      },
    });
  perGateway(
    'tobira_cloud_gateway_clock_skew_seconds',
    "A gateway's clock minus the cloud's, as its last uplinks' iat showed it (absent until measured).",
    (g) => (g.clockSkewMs === null ? null : g.clockSkewMs / 1000),
  );
  perGateway(
    'tobira_cloud_gateway_dead_letters',
    'Downlinks to a gateway the dispatcher gave up on; it catches them up by resync or fails closed.',
    (g) => g.deadLetters,
  );
  perGateway(
    'tobira_cloud_outbox_depth',
    'Downlinks to a gateway committed and not delivered yet (pending or being sent).',
    (g) => g.openDownlinks,
  );
  perGateway(
    'tobira_cloud_outbox_oldest_age_seconds',
    "Age of the oldest downlink to a gateway not delivered yet (0: none). Grows while the gateway or the broker is unreachable; the gateway's lease runs out meanwhile.",
    (g, now) => (g.oldestOpenAt === null ? 0 : Math.max(0, now - g.oldestOpenAt) / 1000),
  );
  perGateway(
    'tobira_cloud_gateway_online',
    'Gateway presence from its retained last will: 1 online, 0 offline (absent: never heard).',
    (g) => (g.online === null ? null : g.online ? 1 : 0),
  );
  perGateway(
    'tobira_cloud_gateway_failing_closed',
    "1 when the gateway's last status report, judged now on its clock, says it denies ordinary keys (CLOUD_STALE); absent before its first report.",
    (g) => (g.failingClosed === null ? null : g.failingClosed ? 1 : 0),
  );
  perGateway(
    'tobira_cloud_gateway_seq_lag',
    'Downlink seqs handed out to a gateway that its last status report had not applied yet (absent before its first report).',
    (g) => (g.appliedSeq === null ? null : Math.max(0, g.lastSeq - g.appliedSeq)),
  );
  const queue = (name: string, help: string, value: (q: QueueGauge, now: number) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['queue', 'status'],
      registers: [registry],
      async collect() {
        const { queues, now } = await read();
        this.reset();
        // every status of both queues has a series (0 when empty), so an alert on dead rows sees 0, not nothing
        for (const q of ['webhook', 'notification'] as const)
          for (const status of ['pending', 'sending', 'dead'] as const) this.set({ queue: q, status }, 0);
        for (const q of queues) this.set({ queue: q.queue, status: q.status }, value(q, now));
      },
    });
  queue(
    'tobira_cloud_queue_rows',
    'Rows of the webhook and notification queues by status (pending, sending, dead; delivered and sent rows are not counted).',
    (q) => q.rows,
  );
  queue(
    'tobira_cloud_queue_oldest_age_seconds',
    'Age of the oldest row of the webhook and notification queues in each status (0: none).',
    (q, now) => Math.max(0, now - q.oldestAt) / 1000,
  );
  new Gauge({
    name: 'tobira_cloud_refunds_pending',
    help: 'Refunds of ours Stripe holds pending (made, not yet succeeded or failed); the page tells the guest they are being refunded.',
    registers: [registry],
    async collect() {
      this.set((await read()).refunds.count);
    },
  });
  new Gauge({
    name: 'tobira_cloud_refunds_pending_oldest_age_seconds',
    help: 'Time since the oldest pending refund last changed (0: none). Past BILLING_RECONCILE_MS the worker re-reads it from Stripe; one that keeps growing is a refund Stripe keeps pending.',
    registers: [registry],
    async collect() {
      const { refunds, now } = await read();
      this.set(refunds.oldestAt === null ? 0 : Math.max(0, now - refunds.oldestAt) / 1000);
    },
  });
  const http = new Histogram({
    name: 'tobira_cloud_http_request_duration_seconds',
    help: 'Admin API answers by route pattern, method and status code. Per process: with several replicas, sum over them.',
    labelNames: ['route', 'method', 'status_code'],
    buckets: HTTP_BUCKETS,
    registers: [registry],
  });
  const scraped = processRegistry ? Registry.merge([registry, processRegistry]) : registry;
  return {
    contentType: scraped.contentType,
    metrics: () => {
      snapshot = null;
      return scraped.metrics();
    },
    observeHttp: (route, method, statusCode, seconds) => http.observe({ route, method, status_code: String(statusCode) }, seconds),
    registry: scraped,
  };
}
