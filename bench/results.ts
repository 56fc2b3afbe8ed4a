import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname } from 'node:path';

/**
 * The shape of `bench/results/latest.json`: every metric name is
 * always present; a metric this bench does not measure yet is `null`, never
 * left out, so a reader can tell "not measured" from "renamed".
 */
export interface Percentiles {
  readonly p50: number;
  readonly p99: number;
}

export interface Metrics {
  readonly raw_mqtt_rtt_ms: Percentiles | null;
  readonly raw_pg_cas_outbox_tx_per_s: number | null;
  readonly raw_sqlite_full_tx_per_s: number | null;
  readonly decision_latency_ms: Percentiles | null;
  readonly decision_throughput_per_s: number | null;
  readonly grant_propagation_ms: Percentiles | null;
  readonly revoke_propagation_ms: Percentiles | null;
  readonly issue_throughput_per_s: number | null;
  readonly resync_100k_keys_s: number | null;
  readonly gateway_rss_mb_100k_keys: number | null;
  readonly fleet_gateways: number | null;
  readonly fleet_locks: number | null;
  readonly fleet_heartbeat_lag_p99_ms: number | null;
  readonly replicas_in_order: boolean | null;
}

export const METRIC_NAMES = [
  'raw_mqtt_rtt_ms',
  'raw_pg_cas_outbox_tx_per_s',
  'raw_sqlite_full_tx_per_s',
  'decision_latency_ms',
  'decision_throughput_per_s',
  'grant_propagation_ms',
  'revoke_propagation_ms',
  'issue_throughput_per_s',
  'resync_100k_keys_s',
  'gateway_rss_mb_100k_keys',
  'fleet_gateways',
  'fleet_locks',
  'fleet_heartbeat_lag_p99_ms',
  'replicas_in_order',
] as const satisfies readonly (keyof Metrics)[];

export const NOT_MEASURED: Metrics = Object.freeze({
  raw_mqtt_rtt_ms: null,
  raw_pg_cas_outbox_tx_per_s: null,
  raw_sqlite_full_tx_per_s: null,
  decision_latency_ms: null,
  decision_throughput_per_s: null,
  grant_propagation_ms: null,
  revoke_propagation_ms: null,
  issue_throughput_per_s: null,
  resync_100k_keys_s: null,
  gateway_rss_mb_100k_keys: null,
  fleet_gateways: null,
  fleet_locks: null,
  fleet_heartbeat_lag_p99_ms: null,
  replicas_in_order: null,
});

export interface Machine {
  readonly cpus: number;
  readonly node: string;
  readonly cpuModel: string;
  readonly memMb: number;
  /** 1-minute load average when the run started: other work on the machine moves every figure. */
  readonly loadAvg1m: number;
}

/** One offered rate of the decision-throughput search, as measured. */
export interface ThroughputStep {
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  readonly answered: number;
  readonly offered: number;
  readonly verdict: 'sustained' | 'p99' | 'saturated';
}

export interface Results {
  readonly at: string;
  readonly machine: Machine;
  /** `--quick` or full, and the run's parameters, so two files can be compared fairly. */
  readonly run: {
    readonly quick: boolean;
    readonly seconds: number;
    readonly throughputSteps?: readonly ThroughputStep[];
    /** The fleet's steps as measured (the metric is the largest whose heartbeat lag p99 stayed under 1 s). */
    readonly fleetSteps?: readonly {
      readonly gateways: number;
      readonly locks: number;
      readonly lagP99Ms: number;
      readonly rounds: number;
    }[];
    /** Scenarios that did not finish (their metrics stay null), and why. */
    readonly failures?: readonly { readonly scenario: string; readonly error: string }[];
    /** The end-to-end scenarios' sizes (samples, clients, keys, fleet and replica sizes). */
    readonly sizes?: Readonly<Record<string, number>>;
  };
  readonly metrics: Metrics;
}

export function thisMachine(loadAvg1m: number): Machine {
  const c = cpus();
  return { cpus: c.length, node: process.version, cpuModel: c[0]?.model ?? 'unknown', memMb: Math.round(totalmem() / 2 ** 20), loadAvg1m };
}

/** Nearest-rank percentile of an ascending array (NaN when empty). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
}

export function percentiles(samples: readonly number[]): Percentiles {
  const s = [...samples].sort((a, b) => a - b);
  return { p50: round(percentile(s, 50)), p99: round(percentile(s, 99)) };
}

export const round = (x: number, digits = 3): number => Number(x.toFixed(digits));

/** The metrics in the issue's order: what was measured, the rest null. */
export function resultsOf(measured: Partial<Metrics>, machine: Machine, run: Results['run'], at = new Date()): Results {
  const metrics = Object.fromEntries(METRIC_NAMES.map((n) => [n, measured[n] ?? NOT_MEASURED[n]]));
  return { at: at.toISOString(), machine, run, metrics: { ...NOT_MEASURED, ...metrics } };
}

export function writeResults(path: string, r: Results): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify(r, null, 2)}\n`);
}

/** The table printed after a run (and pasted into docs/performance.md). */
export function formatTable(r: Results): string {
  const show = (v: Metrics[keyof Metrics]): string =>
    v === null ? 'not measured' : typeof v === 'object' ? `p50 ${v.p50} / p99 ${v.p99}` : String(v);
  const width = Math.max(...METRIC_NAMES.map((n) => n.length));
  return [
    `${r.at}  ${r.machine.cpus} × ${r.machine.cpuModel}, ${r.machine.memMb} MB, Node ${r.machine.node}, load ${r.machine.loadAvg1m}${r.run.quick ? ', --quick' : ''}`,
    ...METRIC_NAMES.map((n) => `${n.padEnd(width)}  ${show(r.metrics[n])}`),
  ].join('\n');
}
