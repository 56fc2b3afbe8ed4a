import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { PublishFailure, Telemetry, UplinkResult, WebhookResult } from '../../app/telemetry.js';
import type { PoolStats } from '../db/db.js';

/** Help text suffix of everything counted in one process: a fleet of replicas is summed by the query. */
const PER_PROCESS = ' Per process: with several replicas, sum over them.';

/** Dispatch lag buckets (seconds): a downlink normally goes out in milliseconds; minutes mean a backlog or an outage. */
const LAG_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900];

export interface ProcessMetrics {
  /** What the uplink inbox, the dispatcher and the webhook worker of this process report. */
  readonly telemetry: Telemetry;
  /** Their counters and the database pool, on a registry of this cloud instance (several clouds can run in one test process). */
  readonly registry: Registry;
}

/**
 * The cloud's per-process metrics (prom-client): counters and the dispatch
 * lag histogram the moving parts feed through the Telemetry port, and the
 * database pool read at scrape time. `pool` returns null before the
 * database is open.
 */
export function processMetrics(sources: {
  readonly backend: () => string | null;
  readonly pool: () => PoolStats | null;
  /** The MQTT links (inbox, publishing) and the inbox's uplinks in flight; null before they are opened. */
  readonly links?: () => { readonly in: boolean; readonly out: boolean; readonly inFlight: number } | null;
}): ProcessMetrics {
  const registry = new Registry();
  const uplinks = new Counter({
    name: 'tobira_cloud_uplinks_total',
    help: `Uplinks from gateways by result (applied, noop, refused, duplicate; rejected: never applied, kept in GET /rejected-uplinks) and code.${PER_PROCESS}`,
    labelNames: ['result', 'code'] as const,
    registers: [registry],
  });
  const lag = new Histogram({
    name: 'tobira_cloud_dispatch_lag_seconds',
    help: `Time from an outbox row's commit to the broker's PUBACK of its downlink (retries and backoff included).${PER_PROCESS}`,
    buckets: LAG_BUCKETS,
    registers: [registry],
  });
  const publishFailures = new Counter({
    name: 'tobira_cloud_publish_failures_total',
    help: `Downlinks that did not go out, by result: retry (backed off), dead (dead-lettered), lease_lost, disconnected (broker link lost; given back, no attempt spent).${PER_PROCESS}`,
    labelNames: ['result'] as const,
    registers: [registry],
  });
  const webhooks = new Counter({
    name: 'tobira_cloud_webhook_deliveries_total',
    help: `Webhook delivery attempts by result (delivered, retry, dead, lease_lost) and code (OK, or a WEBHOOK_* delivery code).${PER_PROCESS}`,
    labelNames: ['result', 'code'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'tobira_cloud_db_pool_connections',
    help: `Database connections by state: max (allowed), total (open), idle, waiting (queries queued for one). PGlite is one connection.${PER_PROCESS}`,
    labelNames: ['backend', 'state'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const s = sources.pool();
      const backend = sources.backend();
      if (s === null || backend === null) return;
      for (const state of ['max', 'total', 'idle', 'waiting'] as const) this.set({ backend, state }, s[state]);
    },
  });
  new Gauge({
    name: 'tobira_cloud_mqtt_connected',
    help: `1 while the MQTT link is connected, by link: in (the uplink inbox) and out (dispatcher, heartbeats, resync answers).${PER_PROCESS}`,
    labelNames: ['link'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const l = sources.links?.();
      if (!l) return;
      this.set({ link: 'in' }, l.in ? 1 : 0);
      this.set({ link: 'out' }, l.out ? 1 : 0);
    },
  });
  new Gauge({
    name: 'tobira_cloud_uplinks_in_flight',
    help: `Uplinks received and not yet handled (at most UPLINK_MAX_IN_FLIGHT; at the bound the inbox stops reading and the broker queues).${PER_PROCESS}`,
    registers: [registry],
    collect() {
      this.set(sources.links?.()?.inFlight ?? 0);
    },
  });
  // every result a counter can have is exported from the start, so a rate() has a series before the first event
  for (const result of ['retry', 'dead', 'lease_lost', 'disconnected'] as const) publishFailures.inc({ result }, 0);
  const telemetry: Telemetry = {
    uplink: (result: UplinkResult, code: string) => uplinks.inc({ result, code }),
    published: (lagMs: number) => lag.observe(Math.max(0, lagMs) / 1000),
    publishFailed: (result: PublishFailure) => publishFailures.inc({ result }),
    webhook: (result: WebhookResult, code: string) => webhooks.inc({ result, code }),
  };
  return { telemetry, registry };
}
