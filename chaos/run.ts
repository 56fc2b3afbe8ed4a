#!/usr/bin/env node
/**
 * `npm run chaos -- [--seed N] [--duration S] [--faults kill,cut,clock,...] [--gateways N]
 *                   [--grace S] [--out dir] [--keep] [--scenario name]`
 * `--scenario name`: a targeted scenario (chaos/scenarios.ts) instead of the random faults.
 * `npm run chaos -- --check <history.jsonl> [--grace S]` checks a recorded history again.
 * `npm run chaos -- --prove-bugs` (chaos/prove-bugs.ts): each known fail-open bug, re-introduced.
 *
 * Starts the whole system as separate processes (chaos/cluster.ts), runs the
 * workload and the seeded fault injector for `duration` seconds, heals
 * everything, gathers what the nodes did, checks the invariants on the
 * history (chaos/checker.ts) and prints the seed and a summary. Exit code 1
 * on a violation, 2 on a harness failure. See docs/reliability.md.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { check, type Verdict } from './checker.js';
import Database from 'better-sqlite3';
import { Cluster, type GatewayNode } from './cluster.js';
import { collect } from './collect.js';
import { Injector, parseFaults, releaseHeld, type FaultKind } from './faults.js';
import { History, readHistory } from './history.js';
import { prng } from './prng.js';
import { Workload } from './workload.js';
import { SCENARIOS, type ScenarioContext } from './scenarios.js';

async function runScenario(name: string, x: ScenarioContext): Promise<void> {
  const s = SCENARIOS[name];
  if (s === undefined) throw new Error(`unknown scenario ${JSON.stringify(name)}; scenarios: ${Object.keys(SCENARIOS).join(', ')}`);
  x.h.add('runner', 'scenario', { name });
  await s(x);
  x.h.add('runner', 'scenario-end', { name });
}

export interface RunOptions {
  readonly seed: number;
  readonly durationSeconds: number;
  readonly faults: readonly FaultKind[];
  readonly gateways: number;
  readonly offlineGraceSeconds: number;
  /** mean ms between two faults */
  readonly faultEveryMs: number;
  readonly out?: string;
  readonly keep?: boolean;
  readonly pgUrl?: string;
  readonly quiet?: boolean;
  /** a targeted scenario (chaos/scenarios.ts) instead of the random fault injector */
  readonly scenario?: string;
  /** how long healing may take before the run reports it did not settle (default 120 s) */
  readonly settleTimeoutSeconds?: number;
}

export interface RunResult {
  readonly seed: number;
  readonly historyFile: string;
  readonly operations: number;
  readonly faults: Record<string, number>;
  readonly faultsTotal: number;
  readonly verdict: Verdict;
  readonly seconds: number;
  /** what healing found: settled or not, and gateways left failing closed by a clock that was ahead */
  readonly healed: Record<string, unknown> | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runChaos(o: RunOptions): Promise<RunResult> {
  const say = (s: string) => {
    if (!o.quiet) process.stdout.write(`${s}\n`);
  };
  const started = performance.now();
  const dir = o.out ? resolve(o.out) : mkdtempSync(join(tmpdir(), `tobira-chaos-${o.seed}-`));
  mkdirSync(dir, { recursive: true });
  const historyFile = join(dir, 'history.jsonl');
  const h = new History(historyFile);
  const r = prng(o.seed);
  say(
    `chaos: seed ${o.seed}, ${o.durationSeconds} s, ${o.scenario !== undefined ? `scenario ${o.scenario}` : `faults ${o.faults.join(',') || 'none'}`}, history ${historyFile}`,
  );
  h.add('runner', 'run', {
    seed: o.seed,
    durationSeconds: o.durationSeconds,
    faults: o.faults,
    offlineGraceSeconds: o.offlineGraceSeconds,
    scenario: o.scenario ?? null,
  });
  const cluster = new Cluster(
    {
      dir,
      seed: o.seed,
      gateways: o.gateways,
      locksPerGateway: 2,
      offlineGraceSeconds: o.offlineGraceSeconds,
      pgUrl: o.pgUrl ?? process.env.TOBIRA_CHAOS_PG_URL ?? process.env.TOBIRA_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
      random: r,
    },
    h,
  );
  const workload = new Workload(cluster, h, r);
  let historyPath = historyFile;
  let healed: Record<string, unknown> | null;
  const injector = new Injector(cluster, h, r, o.faults, workload);
  try {
    await cluster.start();
    say(`chaos: system up (cloud ${cluster.apiUrl}, ${cluster.gateways.length} gateway(s)); first lease…`);
    await waitFresh(cluster, 60_000);
    h.add('runner', 'start-faults');

    // the three loops: workload, fault injector, observers (key statuses, /healthz)
    const end = performance.now() + o.durationSeconds * 1000;
    const running = () => performance.now() < end;
    const loops = [
      // three clients at once: one stuck on a dead cloud does not stop the others presenting at the doors
      ...[0, 1, 2].map(async () => {
        while (running()) {
          await workload.step().catch((e: unknown) => h.add('workload', 'error', { error: String(e) }));
          await sleep(100 + r() * 300);
        }
      }),
      (async () => {
        await sleep(1000);
        if (o.scenario !== undefined) return runScenario(o.scenario, { c: cluster, h, w: workload, running });
        while (running()) {
          injector.inject();
          await sleep(o.faultEveryMs * (0.5 + r()));
        }
      })(),
      (async () => {
        while (running()) {
          await workload.pollKeys().catch(() => {});
          await pollHealth(cluster, h);
          await sleep(500);
        }
      })(),
    ];
    await Promise.all(loops);

    // heal: faults end, every part runs, every link passes, clocks are right
    h.add('runner', 'heal');
    say(`chaos: ${injector.total} faults injected; healing…`);
    await injector.drain();
    await heal(cluster);
    const settled = await settle(cluster, workload, h, (o.settleTimeoutSeconds ?? 120) * 1000);
    h.add('runner', 'healed', settled);
    healed = settled;
    await collect(cluster, h);
  } catch (e) {
    h.add('runner', 'harness-error', { error: String(e instanceof Error ? e.stack : e) });
    throw e;
  } finally {
    await cluster.stop();
    if (!o.keep && !o.out) {
      // keep the history only
      const keepFile = join(tmpdir(), `tobira-chaos-${o.seed}-${process.pid}.jsonl`);
      writeFileSync(keepFile, h.entries.map((e) => JSON.stringify(e)).join('\n') + '\n');
      rmSync(dir, { recursive: true, force: true });
      historyPath = keepFile;
    }
  }
  const verdict = check(h.entries, { offlineGraceSeconds: o.offlineGraceSeconds });
  return {
    seed: o.seed,
    historyFile: historyPath,
    operations: workload.ops,
    faults: injector.counts,
    faultsTotal: injector.total,
    verdict,
    seconds: Math.round((performance.now() - started) / 1000),
    healed,
  };
}

async function healthOf(c: Cluster, port: number): Promise<Record<string, unknown> | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) });
    return (await res.json()) as Record<string, unknown>;
  } catch {
    return null;
  }
}

async function pollHealth(c: Cluster, h: History): Promise<void> {
  for (const g of c.gateways) {
    const tSend = h.now();
    const b = await healthOf(c, g.httpPort);
    if (b === null) continue;
    h.add(g.id, 'health', {
      gatewayId: g.id,
      tSend,
      ok: b.ok ?? null,
      status: b.status ?? null,
      failClosedReason: b.failClosedReason ?? null,
      leaseRemainingSeconds: b.leaseRemainingSeconds ?? null,
      outboxDepth: b.outboxDepth ?? null,
    });
  }
}

async function waitFresh(c: Cluster, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const all = await Promise.all(c.gateways.map((g) => healthOf(c, g.httpPort)));
    if (
      all.every(
        (b) => b !== null && b.failClosedReason === null && typeof b.leaseRemainingSeconds === 'number' && b.leaseRemainingSeconds > 0,
      )
    )
      return true;
    await sleep(300);
  }
  return false;
}

/** Every door-side fault undone: links pass, brokers, cloud, gateways and fleets run, clocks are right. */
export async function heal(c: Cluster): Promise<void> {
  for (const l of c.links) {
    l.proxy.setMode('pass');
    l.proxy.setDup(0);
  }
  if (!c.mosquitto.running) await c.mosquitto.start(true);
  if (!c.cloud.running) await c.startCloud();
  for (const g of c.gateways) {
    c.setClock(g, 0);
    await c.directDb(async (db) => {
      await db.query('DROP TRIGGER IF EXISTS chaos_hold ON outbox');
      await releaseHeld(db, null);
    });
    if (!g.child.running) await c.startGateway(g);
    if (!g.fleet.running) await c.startFleet(g);
  }
}

/** Uplinks older than 15 s the cloud has not acknowledged yet (the gateway's SQLite, read-only). */
function unackedUplinks(g: GatewayNode): number {
  const db = new Database(g.sqlitePath, { readonly: true, fileMustExist: true });
  try {
    // every heartbeat is acked by an uplink that the next heartbeats acknowledge: a few seconds' tail is always
    // unacknowledged while the link works; what must reach zero is anything older than that
    const row: unknown = db.prepare('SELECT count(*) AS n FROM outbox WHERE acked_at IS NULL AND created_at < ?').get(Date.now() - 15_000);
    return typeof row === 'object' && row !== null && 'n' in row && typeof row.n === 'number' ? row.n : -1;
  } finally {
    db.close();
  }
}

/** Waits until no key is in flight, every gateway is fresh and the cloud acknowledged every uplink it has. */
async function settle(
  c: Cluster,
  w: Workload,
  h: History,
  timeoutMs: number,
): Promise<{ ok: boolean; reason?: string; waitedMs: number; failingClosedAhead?: string[] }> {
  const t0 = performance.now();
  let reason = '';
  while (performance.now() - t0 < timeoutMs) {
    await w.pollKeys().catch(() => {});
    const inFlight = [...h.entries]
      .filter((e) => e.what === 'key-status')
      .reduce((m, e) => m.set(String(e.keyId), String(e.status)), new Map<string, string>());
    const pending = [...inFlight].filter(([, s]) => s === 'issuing' || s === 'revoking').map(([k]) => k);
    const health = await Promise.all(c.gateways.map((g) => healthOf(c, g.httpPort)));
    const aheadStale = c.gateways.filter((g) => g.aheadUntil > Date.now()).map((g) => g.id);
    const unacked = c.gateways.map(unackedUplinks);
    const unhealthy = c.gateways.filter((g, i) => {
      const b = health[i];
      // a gateway whose clock was stepped ahead fails closed until real time catches up (trusted time never goes back)
      const fresh = b?.failClosedReason === null || (aheadStale.includes(g.id) && b?.failClosedReason === 'LEASE_EXPIRED');
      return !(b && fresh && b.outboxDepth === 0 && unacked[i] === 0);
    });
    if (pending.length === 0 && unhealthy.length === 0)
      return { ok: true, waitedMs: Math.round(performance.now() - t0), ...(aheadStale.length > 0 && { failingClosedAhead: aheadStale }) };
    reason = `${pending.length} key(s) in flight (${pending.slice(0, 5).join(' ')}); not settled: ${
      unhealthy
        .map((g) => {
          const i = c.gateways.indexOf(g);
          return `${g.id} (${String(health[i]?.failClosedReason ?? 'fresh')}, outbox ${String(health[i]?.outboxDepth)}, unacked uplinks ${unacked[i]})`;
        })
        .join(' ') || 'none'
    }`;
    await sleep(1000);
  }
  return { ok: false, reason, waitedMs: Math.round(performance.now() - t0) };
}

export function summary(res: RunResult): string {
  const v = res.verdict;
  const lines = [
    `chaos: seed ${res.seed} (reproduce: npm run chaos -- --seed ${res.seed} …)`,
    `  ran ${res.seconds} s; operations ${res.operations}; faults ${res.faultsTotal}: ${Object.entries(res.faults)
      .sort()
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')}`,
    `  checks: ${Object.entries(v.checks)
      .map(([k, n]) => `${k} ${n}`)
      .join('; ')}`,
    `  healed: ${res.healed ? JSON.stringify(res.healed) : 'no'}`,
    `  violations: ${v.violations.length}`,
    ...v.violations.slice(0, 20).map((x) => `    [${x.invariant}] ${x.message} (history lines ${x.lines.join(', ')})`),
    `  history: ${res.historyFile}`,
  ];
  return lines.join('\n');
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      seed: { type: 'string' },
      duration: { type: 'string', default: '60' },
      faults: { type: 'string', default: 'all' },
      gateways: { type: 'string', default: '1' },
      grace: { type: 'string', default: '10' },
      'fault-every': { type: 'string', default: '1000' },
      out: { type: 'string' },
      keep: { type: 'boolean', default: false },
      check: { type: 'string' },
      'prove-bugs': { type: 'boolean', default: false },
      only: { type: 'string' },
      scenario: { type: 'string' },
      quick: { type: 'boolean', default: false },
      'settle-timeout': { type: 'string' },
    },
  });
  if (values['prove-bugs']) {
    const { proveBugs } = await import('./prove-bugs.js');
    return proveBugs(values.only, values.quick);
  }
  if (values.check !== undefined) {
    const v = check(readHistory(values.check), { offlineGraceSeconds: Number(values.grace) });
    process.stdout.write(`${JSON.stringify(v, null, 2)}\n`);
    return v.violations.length > 0 ? 1 : 0;
  }
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  process.stdout.write(`chaos: seed ${seed}\n`);
  const res = await runChaos({
    seed,
    durationSeconds: Number(values.duration),
    faults: parseFaults(values.faults),
    gateways: Number(values.gateways),
    offlineGraceSeconds: Number(values.grace),
    faultEveryMs: Number(values['fault-every']),
    ...(values.out !== undefined && { out: values.out }),
    keep: values.keep,
    ...(values.scenario !== undefined && { scenario: values.scenario }),
    ...(values['settle-timeout'] !== undefined && { settleTimeoutSeconds: Number(values['settle-timeout']) }),
  });
  process.stdout.write(`${summary(res)}\n`);
  writeFileSync(`${res.historyFile}.summary.json`, JSON.stringify(res, null, 2));
  return res.verdict.violations.length > 0 ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`chaos: harness failure: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      process.exit(2);
    },
  );
}
