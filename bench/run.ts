/**
 * `npm run bench [-- --quick]`: every scenario of docs/performance.md — the floors,
 * the door decision path, grant/revoke propagation and issue throughput
 * through the admin API, a 100k-key resync, the fleet one cloud process
 * serves, and two replicas in order — printed as a table and written to
 * bench/results/latest.json. `--only floors,decision,propagation,resync,fleet,replicas`
 * runs a subset (written only with `--out`, so a partial run never replaces
 * the full results). Needs the mosquitto binary (it starts its own
 * broker) and PostgreSQL (`DATABASE_URL`, else the local one). Benchmarks are
 * not tests: nothing here asserts a timing.
 */
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { startDecisionBench, type DecisionResult } from './decision.js';
import { runFleet, type FleetStep } from './fleet.js';
import { rawMqttRtt, rawPgCasOutbox, rawSqliteFull } from './floors.js';
import { startBroker } from './mosquitto.js';
import { runCloudPath } from './propagation.js';
import { runReplicas } from './replicas.js';
import { runResync } from './resync.js';
import { formatTable, resultsOf, round, thisMachine, writeResults, type Metrics, type ThroughputStep } from './results.js';

const quick = process.argv.includes('--quick');
const SCENARIOS = ['floors', 'decision', 'propagation', 'resync', 'fleet', 'replicas'] as const;
type ScenarioName = (typeof SCENARIOS)[number];
const onlyArg = process.argv.indexOf('--only');
const only: readonly string[] = onlyArg >= 0 ? (process.argv[onlyArg + 1] ?? '').split(',') : SCENARIOS;
const unknown = only.filter((n) => !(SCENARIOS as readonly string[]).includes(n));
if (unknown.length > 0) {
  console.error(`unknown scenario(s) ${unknown.join(', ')}; known: ${SCENARIOS.join(', ')}`);
  process.exit(2);
}
const runs = (name: ScenarioName) => only.includes(name);
const outArg = process.argv.indexOf('--out');
const OUT =
  outArg >= 0 ? process.argv[outArg + 1]! : onlyArg >= 0 ? null : fileURLToPath(new URL('./results/latest.json', import.meta.url));
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const P = quick
  ? { rttRequests: 1000, pgSeconds: 3, sqliteSeconds: 2, latencySeconds: 4, stepSeconds: 3 }
  : { rttRequests: 5000, pgSeconds: 10, sqliteSeconds: 5, latencySeconds: 20, stepSeconds: 8 };
/** The end-to-end scenarios' sizes: --quick checks they run (a small fixed fleet, fewer samples), the full run measures. */
const E = quick
  ? {
      propagationSamples: 10,
      issueSeconds: 5,
      resyncKeys: 100_000,
      fleet: { steps: [5], rounds: 3, intervalMs: 1000, lockPeriodMs: 10_000 },
      replicas: { gateways: 10, ops: 1000 },
    }
  : {
      propagationSamples: 100,
      issueSeconds: 15,
      resyncKeys: 100_000,
      fleet: { steps: [25, 50, 100, 200, 300, 400, 600], rounds: 5, intervalMs: 2000, lockPeriodMs: 30_000 },
      replicas: { gateways: 50, ops: 10_000 },
    };
const ISSUE_CLIENTS = 16;
const FLEET_LOCKS = 20;
const FLEET_PER_PROCESS = 25;
const FLEET_BOUND_MS = 1000;
/** Decision throughput: offered rates tried in order; the answer is the highest one sustained with p99 under the bound. */
const RATES = [500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 5000];
const P99_BOUND_MS = 10;
const LOCKS = 20;
const LATENCY_RATE = 500;

const log = (s: string) => console.log(s);
const describe = (r: DecisionResult) =>
  `offered ${r.offered}, sent ${r.sentPerSecond}/s, answered ${r.answered}, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms`;

async function main() {
  const machine = thisMachine(round(loadavg()[0] ?? 0, 2));
  const m: { -readonly [K in keyof Metrics]?: Metrics[K] } = {};
  const steps: ThroughputStep[] = [];
  const fleetSteps: FleetStep[] = [];
  const failures: { scenario: string; error: string }[] = [];
  const broker = await startBroker();
  try {
    log(`broker ${broker.url}; ${quick ? 'quick' : 'full'} run`);
    if (runs('floors')) {
      m.raw_mqtt_rtt_ms = await rawMqttRtt(broker.url, P.rttRequests);
      log(`raw mqtt rtt: p50 ${m.raw_mqtt_rtt_ms.p50} ms, p99 ${m.raw_mqtt_rtt_ms.p99} ms`);
      m.raw_pg_cas_outbox_tx_per_s = await rawPgCasOutbox(DATABASE_URL, 16, P.pgSeconds);
      log(`raw pg CAS+outbox at 16 connections: ${m.raw_pg_cas_outbox_tx_per_s} tx/s`);
      m.raw_sqlite_full_tx_per_s = rawSqliteFull(P.sqliteSeconds);
      log(`raw sqlite synchronous=FULL: ${m.raw_sqlite_full_tx_per_s} tx/s`);
    }

    if (runs('decision')) {
      const bench = await startDecisionBench(broker.url, LOCKS);
      try {
        await bench.run({ rate: LATENCY_RATE, seconds: 2 }); // warm-up: JIT, SQLite page cache
        const steady = await bench.run({ rate: LATENCY_RATE, seconds: P.latencySeconds });
        log(`decision at ${LATENCY_RATE}/s over ${LOCKS} locks: ${describe(steady)}`);
        m.decision_latency_ms = steady.latency;
        // Up the rates until the path saturates (requests unanswered or not sent on time): a step whose p99
        // misses the bound on a shared machine does not end the search, and the log shows where it saturates.
        let best = 0;
        for (const rate of RATES) {
          const r = await bench.run({ rate, seconds: P.stepSeconds });
          const saturated = r.answered < 0.99 * r.offered || r.sentPerSecond < 0.95 * rate;
          const ok = !saturated && r.latency.p99 < P99_BOUND_MS;
          log(`decision throughput step ${rate}/s: ${describe(r)} -> ${ok ? 'sustained' : saturated ? 'saturated' : 'p99 over the bound'}`);
          steps.push({
            rate,
            ...r.latency,
            answered: r.answered,
            offered: r.offered,
            verdict: ok ? 'sustained' : saturated ? 'saturated' : 'p99',
          });
          if (ok) best = rate;
          if (saturated) break;
        }
        m.decision_throughput_per_s = best;
      } finally {
        await bench.stop();
      }
    }

    // Each end-to-end scenario stands alone: one that fails (a loaded machine can starve a gateway of its
    // heartbeats) leaves its metrics null and says why in `run.failures`, and the run goes on.
    const scenario = async (name: ScenarioName, body: () => Promise<void>) => {
      if (!runs(name)) return;
      try {
        await body();
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        failures.push({ scenario: name, error: why });
        log(`scenario ${name} failed: ${why}`);
      }
    };
    await scenario('propagation', async () => {
      const path = await runCloudPath({
        brokerUrl: broker.url,
        databaseUrl: DATABASE_URL,
        samples: E.propagationSamples,
        clients: ISSUE_CLIENTS,
        seconds: E.issueSeconds,
        log,
      });
      m.grant_propagation_ms = path.grant;
      m.revoke_propagation_ms = path.revoke;
      m.issue_throughput_per_s = path.issuePerSecond;
    });
    await scenario('resync', async () => {
      const resync = await runResync({ brokerUrl: broker.url, keys: E.resyncKeys, log });
      m.resync_100k_keys_s = resync.seconds;
      m.gateway_rss_mb_100k_keys = resync.rssMb;
    });
    await scenario('fleet', async () => {
      const fleet = await runFleet({
        brokerUrl: broker.url,
        databaseUrl: DATABASE_URL,
        steps: E.fleet.steps,
        locks: FLEET_LOCKS,
        perProcess: FLEET_PER_PROCESS,
        intervalMs: E.fleet.intervalMs,
        rounds: E.fleet.rounds,
        lockPeriodMs: E.fleet.lockPeriodMs,
        boundMs: FLEET_BOUND_MS,
        log,
      });
      m.fleet_gateways = fleet.gateways;
      m.fleet_locks = fleet.locks;
      m.fleet_heartbeat_lag_p99_ms = fleet.lagP99Ms;
      fleetSteps.push(...fleet.steps);
    });
    await scenario('replicas', async () => {
      const replicas = await runReplicas({ brokerUrl: broker.url, databaseUrl: DATABASE_URL, ...E.replicas, log });
      m.replicas_in_order = replicas.inOrder;
    });
  } finally {
    await broker.stop();
  }
  const results = resultsOf(m, machine, {
    quick,
    seconds: P.latencySeconds,
    throughputSteps: steps,
    fleetSteps,
    failures,
    sizes: {
      propagationSamples: E.propagationSamples,
      issueClients: ISSUE_CLIENTS,
      issueSeconds: E.issueSeconds,
      resyncKeys: E.resyncKeys,
      fleetLocksPerGateway: FLEET_LOCKS,
      fleetIntervalMs: E.fleet.intervalMs,
      replicasGateways: E.replicas.gateways,
      replicasOps: E.replicas.ops,
    },
  });
  if (OUT !== null) writeResults(OUT, results);
  log(`\n${formatTable(results)}\n\n${OUT === null ? 'a partial run (--only): not written (give --out to keep it)' : `written to ${OUT}`}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
