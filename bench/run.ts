/**
 * `npm run bench [-- --quick]`: the floors and the door decision path
 * (issue #14, first part), printed as a table and written to
 * bench/results/latest.json. Needs the mosquitto binary (it starts its own
 * broker) and PostgreSQL (`DATABASE_URL`, else the local one). Benchmarks are
 * not tests: nothing here asserts a timing.
 */
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { startDecisionBench, type DecisionResult } from './decision.js';
import { rawMqttRtt, rawPgCasOutbox, rawSqliteFull } from './floors.js';
import { startBroker } from './mosquitto.js';
import { formatTable, resultsOf, round, thisMachine, writeResults, type Metrics, type ThroughputStep } from './results.js';

const quick = process.argv.includes('--quick');
const outArg = process.argv.indexOf('--out');
const OUT = outArg >= 0 ? process.argv[outArg + 1]! : fileURLToPath(new URL('./results/latest.json', import.meta.url));
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const P = quick
  ? { rttRequests: 1000, pgSeconds: 3, sqliteSeconds: 2, latencySeconds: 4, stepSeconds: 3 }
  : { rttRequests: 5000, pgSeconds: 10, sqliteSeconds: 5, latencySeconds: 20, stepSeconds: 8 };
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
  const broker = await startBroker();
  try {
    log(`broker ${broker.url}; ${quick ? 'quick' : 'full'} run`);
    m.raw_mqtt_rtt_ms = await rawMqttRtt(broker.url, P.rttRequests);
    log(`raw mqtt rtt: p50 ${m.raw_mqtt_rtt_ms.p50} ms, p99 ${m.raw_mqtt_rtt_ms.p99} ms`);
    m.raw_pg_cas_outbox_tx_per_s = await rawPgCasOutbox(DATABASE_URL, 16, P.pgSeconds);
    log(`raw pg CAS+outbox at 16 connections: ${m.raw_pg_cas_outbox_tx_per_s} tx/s`);
    m.raw_sqlite_full_tx_per_s = rawSqliteFull(P.sqliteSeconds);
    log(`raw sqlite synchronous=FULL: ${m.raw_sqlite_full_tx_per_s} tx/s`);

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
  } finally {
    await broker.stop();
  }
  const results = resultsOf(m, machine, { quick, seconds: P.latencySeconds, throughputSteps: steps });
  writeResults(OUT, results);
  log(`\n${formatTable(results)}\n\nwritten to ${OUT}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
