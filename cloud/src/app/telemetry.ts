/**
 * What the cloud's moving parts report as they work (GET /metrics): a port,
 * so the uplink inbox, the dispatcher and the webhook worker do not depend on
 * prom-client, and a part built without it (tests, tools) reports nowhere.
 * Everything here is counted in the process that did the work: with several
 * replicas, sum over them (the database gauges of http/metrics.ts are the
 * same on every replica instead).
 */
export interface Telemetry {
  /** A verified uplink's result (applied, noop, refused, duplicate), or `rejected` with its verification code. */
  uplink(result: UplinkResult, code: string): void;
  /** A downlink the broker acknowledged, `lagMs` after its outbox row was committed. */
  published(lagMs: number): void;
  /** A downlink that did not go out: `retry` (backed off), `dead` (dead-lettered), `lease_lost`, `disconnected` (given back unspent). */
  publishFailed(result: PublishFailure): void;
  /** A webhook delivery attempt: `delivered`, or failed (`retry`, `dead`) with its delivery code. */
  webhook(result: WebhookResult, code: string): void;
}

export type UplinkResult = 'applied' | 'noop' | 'refused' | 'duplicate' | 'rejected';
export type PublishFailure = 'retry' | 'dead' | 'lease_lost' | 'disconnected';
export type WebhookResult = 'delivered' | 'retry' | 'dead' | 'lease_lost';

/** Reports nowhere. */
export const noTelemetry: Telemetry = Object.freeze({
  uplink: () => {},
  published: () => {},
  publishFailed: () => {},
  webhook: () => {},
});
