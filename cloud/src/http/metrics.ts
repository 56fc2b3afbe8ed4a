import { Gauge, Registry } from 'prom-client';
import type { Queryable } from '../adapters/db/db.js';
import { gatewayGauges, type GatewayGauges } from '../adapters/db/gateways.js';

/**
 * The cloud's Prometheus metrics (GET /metrics, admin tokens only), read from
 * the database at scrape time so every replica reports the same: per
 * gateway, the skew of its clock as its last uplinks showed it (uplinks are
 * applied whatever it is; docs/cloud.md), the seqs handed out that it has
 * not confirmed, and its dead-lettered downlinks (an alarm: it stays behind).
 */
export function cloudMetrics(db: Queryable): Registry {
  const registry = new Registry();
  let rows: Promise<GatewayGauges[]> | null = null;
  // one query per scrape, shared by the gauges
  const read = () => (rows ??= gatewayGauges(db).finally(() => setImmediate(() => (rows = null))));
  new Gauge({
    name: 'tobira_cloud_gateway_clock_skew_seconds',
    help: "A gateway's clock minus the cloud's, as its last uplinks' iat showed it (absent until measured).",
    labelNames: ['gateway_id'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const r of await read()) if (r.clockSkewMs !== null) this.set({ gateway_id: r.gatewayId }, r.clockSkewMs / 1000);
    },
  });
  new Gauge({
    name: 'tobira_cloud_gateway_dead_letters',
    help: 'Downlinks to a gateway the dispatcher gave up on; it catches them up by resync or fails closed.',
    labelNames: ['gateway_id'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const r of await read()) this.set({ gateway_id: r.gatewayId }, r.deadLetters);
    },
  });
  return registry;
}
