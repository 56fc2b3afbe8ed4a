#!/usr/bin/env node
/**
 * `npm run chaos:money -- [--seed N] [--duration S] [--faults quick|all|stripe-down,kill-cloud,...]
 *                         [--grace S] [--out dir] [--keep]`
 * `npm run chaos:money -- --check <dir>` checks a recorded run again (its history.jsonl and ledgers.json).
 * `npm run chaos:money -- --prove-bugs [--only name]` (chaos/money/prove-bugs.ts).
 * `npm run chaos:money -- --scenario <name> --duration 0 --faults none`: one targeted scenario
 * (chaos/money/scenarios.ts) before the random workload.
 *
 * The money chaos run (docs/reliability.md, "Money"): the cloud as a child process on PostgreSQL with
 * the real `stripe` SDK against a local Stripe of the run's own, a gateway and its lock fleet; the
 * money workload and the seeded money faults for `duration` seconds; then healing (faults off, held
 * webhooks sent, the desk cancels what is still pending), the three ledgers read, and the money
 * checker (M1..M6). Exit code 1 on a violation, 2 on a harness failure.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Injector, parseFaults, type FaultKind } from '../faults.js';
import { History, readHistory } from '../history.js';
import { heal as healDoors } from '../run.js';
import { prng } from '../prng.js';
import { checkMoney, type MoneyVerdict } from './checker.js';
import { MoneyInjector, parseMoneyFaults, type MoneyFault } from './faults.js';
import type { MoneyLedgers } from './ledgers.js';
import { MoneyCluster, readLedgers } from './system.js';
import { LOCKS, MoneyWorkload } from './workload.js';

export interface MoneyRunOptions {
  readonly seed: number;
  readonly durationSeconds: number;
  readonly faults: readonly MoneyFault[];
  /**
   * Door-side faults drawn as often as the money faults (`--door-faults`): the gateway, its locks and
   * the brokers killed, its links cut, stalled, slowed, reset, partitioned, duplicated, its clock stepped.
   */
  readonly doorFaults?: readonly FaultKind[];
  readonly offlineGraceSeconds: number;
  /** mean ms between two faults */
  readonly faultEveryMs: number;
  readonly out?: string;
  readonly keep?: boolean;
  readonly pgUrl?: string;
  readonly quiet?: boolean;
  /**
   * A targeted scenario instead of (before) the random workload: it drives the system into the
   * conditions of one known bug (chaos/money/prove-bugs.ts) without relying on random faults.
   */
  readonly scenario?: (w: MoneyWorkload, i: MoneyInjector) => Promise<void>;
  /** extra env for the cloud (a prove-bugs scenario may shorten a timeout) */
  readonly cloudEnv?: Record<string, string>;
}

export interface MoneyRunResult {
  readonly seed: number;
  readonly dir: string;
  readonly operations: number;
  readonly faults: Record<string, number>;
  readonly faultsTotal: number;
  readonly verdict: MoneyVerdict;
  readonly seconds: number;
  readonly healed: { ok: boolean; waitedMs: number; reason?: string };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runMoneyChaos(o: MoneyRunOptions): Promise<MoneyRunResult> {
  const say = (s: string) => {
    if (!o.quiet) process.stdout.write(`${s}\n`);
  };
  const started = performance.now();
  const dir = o.out ? resolve(o.out) : mkdtempSync(join(tmpdir(), `tobira-money-${o.seed}-`));
  mkdirSync(dir, { recursive: true });
  const h = new History(join(dir, 'history.jsonl'));
  const r = prng(o.seed);
  const doorList = (o.doorFaults ?? []).length > 0 ? `, door faults ${(o.doorFaults ?? []).join(',')}` : '';
  say(`chaos:money: seed ${o.seed}, ${o.durationSeconds} s, faults ${o.faults.join(',') || 'none'}${doorList}, in ${dir}`);
  h.add('runner', 'run', {
    seed: o.seed,
    durationSeconds: o.durationSeconds,
    faults: o.faults,
    doorFaults: o.doorFaults ?? [],
    offlineGraceSeconds: o.offlineGraceSeconds,
  });
  const cluster = new MoneyCluster(
    {
      dir,
      seed: o.seed,
      gateways: 1,
      locksPerGateway: LOCKS,
      offlineGraceSeconds: o.offlineGraceSeconds,
      pgUrl: o.pgUrl ?? process.env.TOBIRA_CHAOS_PG_URL ?? process.env.TOBIRA_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
      random: r,
    },
    h,
    o.cloudEnv,
  );
  const propagationMs = o.offlineGraceSeconds * 1000 + 2000;
  const w = new MoneyWorkload(cluster, h, r);
  w.propagationMs = propagationMs;
  const injector = new MoneyInjector(cluster, h, r, o.faults);
  const doors = new Injector(cluster, h, r, o.doorFaults ?? []);
  let ledgers: MoneyLedgers;
  let healed: MoneyRunResult['healed'];
  try {
    await cluster.start();
    await w.setup();
    say(`chaos:money: system up (cloud ${cluster.apiUrl}, local Stripe ${cluster.stripe.url})`);
    h.add('runner', 'start-faults');
    if (o.scenario) {
      h.add('runner', 'scenario');
      await o.scenario(w, injector);
      h.add('runner', 'scenario-done');
    }
    const end = performance.now() + o.durationSeconds * 1000;
    const running = () => performance.now() < end;
    await Promise.all([
      // two clients at once: one stuck on a slow Stripe does not stop the other
      ...[0, 1].map(async () => {
        while (running()) {
          await w.step().catch((e: unknown) => h.add('workload', 'error', { error: String(e) }));
          await sleep(100 + r() * 250);
        }
      }),
      (async () => {
        await sleep(800);
        while (running()) {
          if (doors.kinds.length > 0 && (injector.kinds.length === 0 || r() < 0.5)) doors.inject();
          else injector.inject();
          await sleep(o.faultEveryMs * (0.5 + r()));
        }
      })(),
      (async () => {
        while (running()) {
          await w.refresh().catch(() => {});
          await sleep(1000);
        }
      })(),
    ]);
    h.add('runner', 'heal');
    say(`chaos:money: ${injector.total + doors.total} faults injected; healing…`);
    await Promise.all([injector.drain(), doors.drain()]);
    await injector.heal();
    if (doors.kinds.length > 0) await healDoors(cluster);
    healed = await settle(cluster, w, h, 120_000);
    h.add('runner', 'healed', healed);
    ledgers = await readLedgers(cluster);
    writeFileSync(join(dir, 'ledgers.json'), JSON.stringify(ledgers, null, 1));
  } catch (e) {
    h.add('runner', 'harness-error', { error: String(e instanceof Error ? e.stack : e) });
    throw e;
  } finally {
    await cluster.stop();
  }
  const verdict = checkMoney(h.entries, ledgers, { propagationMs });
  const res: MoneyRunResult = {
    seed: o.seed,
    dir,
    operations: w.ops,
    faults: { ...injector.counts, ...Object.fromEntries(Object.entries(doors.counts).map(([k, n]) => [`door:${k}`, n])) },
    faultsTotal: injector.total + doors.total,
    verdict,
    seconds: Math.round((performance.now() - started) / 1000),
    healed,
  };
  writeFileSync(join(dir, 'summary.json'), JSON.stringify(res, null, 2));
  if (!o.keep && !o.out && verdict.violations.length === 0) rmSync(dir, { recursive: true, force: true });
  return res;
}

/**
 * Healing ends the money in flight: the desk cancels every stay and walk-in still pending (a run is
 * shorter than the one-minute hold), then the runner waits until the cloud's queues are empty (the
 * webhook inbox, billing jobs, notifications), no refund is pending, every open checkout has been re-read
 * from Stripe since (the checkout recheck) and no key is in flight.
 */
async function settle(c: MoneyCluster, w: MoneyWorkload, h: History, timeoutMs: number): Promise<MoneyRunResult['healed']> {
  const t0 = performance.now();
  const healFrom = Date.now();
  let reason = '';
  let cancelled = false;
  while (performance.now() - t0 < timeoutMs) {
    await c.stripe.webhooks.idle();
    await w.refresh().catch(() => {});
    if (!cancelled || performance.now() - t0 > 5000) {
      await w.refresh().catch(() => {});
      for (const s of w.stays.filter((x) => x.status === 'pending')) await w.cancelStay(s, 'staff_cancelled');
      // the guest walks away: the desk cancels the pending walk-in (its intent cancelled at Stripe first; money
      // that landed with its webhook lost is refunded)
      for (const x of w.walkIns.filter((y) => y.status === 'pending')) await w.cancelWalkIn(x);
      // an approval answered 503 or not at all may have made its subscription at Stripe: the desk repeats it, as
      // docs/api.md asks of a 503 (the repeat finds the subscription under its idempotency key)
      for (const m of w.memberships.filter((y) => y.status === 'applied' && y.approveUnsure === true)) await w.approve(m);
      cancelled = true;
    }
    const open = await c
      .directDb(async (db) => {
        const one = async (sql: string) => Number((await db.query<{ n: string }>(sql)).rows[0]?.n ?? 0);
        return {
          webhooks: await one("SELECT count(*) AS n FROM payment_webhook_events WHERE status IN ('pending', 'processing')"),
          // a booking's create_intent job is a safety net due a minute later that finds its intent recorded: it
          // counts once due; every other job (a pending billing stop's reconcile_membership, a refund backing off) is
          // waited for
          jobs: await one(
            `SELECT count(*) AS n FROM billing_jobs WHERE status = 'running' OR (status = 'pending' AND (kind <> 'create_intent' OR next_attempt_at <= ${Date.now()}))`,
          ),
          notices: await one("SELECT count(*) AS n FROM notification_outbox WHERE status IN ('pending', 'sending')"),
          refunds: await one("SELECT count(*) AS n FROM refunds WHERE status = 'pending'"),
          stays: await one("SELECT count(*) AS n FROM stays WHERE status = 'pending'"),
          walkIns: await one("SELECT count(*) AS n FROM walk_ins WHERE status = 'pending'"),
          // every open checkout re-read from Stripe at least once since the faults ended (its webhooks may be lost)
          checkouts: await one(
            `SELECT count(*) AS n FROM memberships WHERE status = 'applied' AND approved_at IS NOT NULL
               AND subscription_id IS NOT NULL AND billing_stop_pending IS NULL
               AND (checkout_checked_at IS NULL OR checkout_checked_at < ${healFrom})`,
          ),
          // every living membership's subscription re-read from Stripe at least once since the faults ended (a
          // renewal, an end or a dashboard change with its webhooks lost converges only through that read)
          subscriptions: await one(
            `SELECT count(*) AS n FROM memberships WHERE status IN ('active', 'past_due', 'ending')
               AND subscription_id IS NOT NULL AND billing_stop_pending IS NULL
               AND (subscription_checked_at IS NULL OR subscription_checked_at < ${healFrom})`,
          ),
          keys: await one("SELECT count(*) AS n FROM keys WHERE status IN ('issuing', 'revoking')"),
        };
      })
      .catch((e: unknown) => ({ error: String(e) }));
    const busy = Object.entries(open).filter(([, v]) => v !== 0);
    if (busy.length === 0) return { ok: true, waitedMs: Math.round(performance.now() - t0) };
    reason = busy.map(([k, v]) => `${k} ${String(v)}`).join(', ');
    h.add('runner', 'settling', { open });
    await sleep(1000);
  }
  return { ok: false, reason, waitedMs: Math.round(performance.now() - t0) };
}

export function moneySummary(res: MoneyRunResult): string {
  const v = res.verdict;
  return [
    `chaos:money: seed ${res.seed} (reproduce: npm run chaos:money -- --seed ${res.seed} …)`,
    `  ran ${res.seconds} s; operations ${res.operations}; faults ${res.faultsTotal}: ${Object.entries(res.faults)
      .sort()
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')}`,
    `  checks: ${Object.entries(v.checks)
      .map(([k, n]) => `${k} ${n}`)
      .join('; ')}`,
    `  healed: ${JSON.stringify(res.healed)}`,
    `  violations: ${v.violations.length}`,
    ...v.violations
      .slice(0, 20)
      .map((x) => `    [${x.invariant}] ${x.message}${x.lines.length > 0 ? ` (history lines ${x.lines.join(', ')})` : ''}`),
    `  run files: ${res.dir}`,
  ].join('\n');
}

/**
 * The door faults a money run may draw: all but the cloud's kill and crash points (the money faults kill the
 * cloud themselves, one kill at a time), the stuck outbox (a test trigger of the door runs) and the clock a
 * day ahead (it fails a gateway closed for the rest of the run).
 */
export const MONEY_RUN_DOOR_FAULTS: readonly FaultKind[] = [
  'kill-gateway',
  'kill-fleet',
  'kill-broker',
  'cut',
  'stall',
  'slow',
  'reset',
  'partition',
  'dup',
  'clock',
];

export function parseDoorFaults(spec: string): FaultKind[] {
  if (spec === '' || spec === 'none') return [];
  if (spec === 'doors') return [...MONEY_RUN_DOOR_FAULTS];
  const kinds = parseFaults(spec);
  const bad = kinds.filter((k) => !MONEY_RUN_DOOR_FAULTS.includes(k));
  if (bad.length > 0)
    throw new Error(`door fault(s) ${bad.join(', ')} cannot run with money (allowed: ${MONEY_RUN_DOOR_FAULTS.join(', ')})`);
  return kinds;
}

const USAGE = `usage: npm run chaos:money -- [--seed N] [--duration S] [--faults quick|all|stripe-down,kill-cloud,...]
                             [--door-faults doors|kill-gateway,cut,partition,...]
                             [--grace S] [--fault-every MS] [--out dir] [--keep] [--scenario name]
       npm run chaos:money -- --check <dir>
       npm run chaos:money -- --prove-bugs [--only name]
(docs/reliability.md, "Money")
`;

function parseMoneyArgs() {
  return parseArgs({
    options: {
      seed: { type: 'string' },
      duration: { type: 'string', default: '30' },
      faults: { type: 'string', default: 'quick' },
      'door-faults': { type: 'string', default: 'none' },
      grace: { type: 'string', default: '10' },
      'fault-every': { type: 'string', default: '1500' },
      out: { type: 'string' },
      keep: { type: 'boolean', default: false },
      check: { type: 'string' },
      'prove-bugs': { type: 'boolean', default: false },
      only: { type: 'string' },
      scenario: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseMoneyArgs();
  } catch (e) {
    // a wrong option is the operator's typo, not a harness failure: say which, and how to call it
    process.stderr.write(`chaos:money: ${e instanceof Error ? e.message : String(e)}\n${USAGE}`);
    return 2;
  }
  if (parsed.values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  return mainWith(parsed.values);
}

async function mainWith(values: ReturnType<typeof parseMoneyArgs>['values']): Promise<number> {
  if (values['prove-bugs']) {
    const { proveMoneyBugs } = await import('./prove-bugs.js');
    return proveMoneyBugs(values.only);
  }
  if (values.check !== undefined) {
    const ledgers = JSON.parse(readFileSync(join(values.check, 'ledgers.json'), 'utf8')) as MoneyLedgers;
    const v = checkMoney(readHistory(join(values.check, 'history.jsonl')), ledgers, {
      propagationMs: Number(values.grace) * 1000 + 2000,
    });
    process.stdout.write(`${JSON.stringify(v, null, 2)}\n`);
    return v.violations.length > 0 ? 1 : 0;
  }
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  let scenario: MoneyRunOptions['scenario'];
  if (values.scenario !== undefined) {
    const { SCENARIOS } = await import('./scenarios.js');
    scenario = SCENARIOS[values.scenario];
    if (scenario === undefined) throw new Error(`unknown scenario ${values.scenario} (known: ${Object.keys(SCENARIOS).join(', ')})`);
  }
  const res = await runMoneyChaos({
    ...(scenario !== undefined && { scenario }),
    seed,
    durationSeconds: Number(values.duration),
    faults: parseMoneyFaults(values.faults),
    doorFaults: parseDoorFaults(values['door-faults']),
    offlineGraceSeconds: Number(values.grace),
    faultEveryMs: Number(values['fault-every']),
    ...(values.out !== undefined && { out: values.out }),
    keep: values.keep,
  });
  process.stdout.write(`${moneySummary(res)}\n`);
  return res.verdict.violations.length > 0 ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`chaos:money: harness failure: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      process.exit(2);
    },
  );
}
