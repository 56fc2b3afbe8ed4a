/**
 * `npm run chaos -- --prove-bugs [--only name] [--quick]`: shows the checker can fail. Each patch in
 * chaos/bugs/ re-introduces one known fail-open bug; for each, a throwaway `git worktree` of HEAD
 * gets the patch and a chaos run of the bug's targeted scenario (chaos/scenarios.ts: it forces the
 * bug's conditions, so the proof does not wait for random faults to line up) must end with a
 * violation of an invariant the bug breaks. `--quick` (and chaos/test/prove-bugs.test.ts, in
 * `npm test`) runs only the first seed of each. Prints one line per bug and exits non-zero when a bug
 * went unnoticed.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { removeWorktree, throwawayWorktree } from './worktree.js';

const REPO = resolve(import.meta.dirname, '..');

export interface BugCase {
  readonly patch: string;
  /** the targeted scenario (chaos/scenarios.ts) that forces the bug's conditions */
  readonly scenario: string;
  /** the invariants a violation may name to count as caught */
  readonly expect: readonly string[];
  readonly seeds: readonly number[];
  /** seconds of workload: the scenario runs to its end even when that is later */
  readonly durationSeconds: number;
  /** `--settle-timeout`: a bug that keeps the system from settling need not be waited on for the full 120 s */
  readonly settleTimeoutSeconds?: number;
}

export const BUGS: readonly BugCase[] = [
  // trusted time not carried by the monotonic clock: a stopped wall clock keeps the lease alive offline
  // (the request-age check, which refuses honest locks' requests against a stopped gateway clock, is taken out too)
  {
    patch: 'stopped-clock.patch',
    scenario: 'stopped-clock',
    expect: ['I1 offline grace', 'fail-closed reported'],
    seeds: [11, 12],
    durationSeconds: 10,
  },
  // lease renewed over a revoke stuck in the cloud's backoff: the revoked key keeps opening
  {
    patch: 'lease-over-stuck-revoke.patch',
    scenario: 'lease-over-stuck-revoke',
    expect: ['I1 lease over gap', 'I1 revoke lag'],
    seeds: [21, 22],
    durationSeconds: 10,
  },
  // uplinks dropped once the broker took them: decisions the broker lost never reach the audit log
  {
    patch: 'uplink-dropped-on-puback.patch',
    scenario: 'uplink-dropped-on-puback',
    expect: ['I2 audit exactly once', 'stuck without dead letter', 'heal'],
    seeds: [31, 32],
    durationSeconds: 10,
    settleTimeoutSeconds: 30,
  },
  // heartbeat iat taken after its seq was read: a revoke committed in between gets a lease counted from after it
  {
    patch: 'heartbeat-iat-after-seq.patch',
    scenario: 'heartbeat-iat-after-seq',
    expect: ['I1 revoke lag'],
    seeds: [41, 42],
    durationSeconds: 10,
  },
  // no ceiling on trusted time: a wall clock ahead of real time opens a key before its validFrom
  // (the request-age check, which refuses honest locks' requests against a gateway a day ahead, is taken out too)
  {
    patch: 'clock-ahead-unbounded.patch',
    scenario: 'clock-ahead-unbounded',
    expect: ['I1 not yet valid'],
    seeds: [51, 52],
    durationSeconds: 10,
    settleTimeoutSeconds: 30,
  },
  // a gateway restored from a backup taken before a one-time key's entry: the cloud sends no sequenced revoke of
  // the use and the restore is not detected, so the restored store opens the used key again
  {
    patch: 'restore-revives-one-time.patch',
    scenario: 'restore-revives-one-time',
    expect: ['I1 one-time once'],
    seeds: [61, 62],
    durationSeconds: 10,
    settleTimeoutSeconds: 30,
  },
  // privacy learnt from the lock's event only, and a lock that has not said counts as not private: a privacy turned
  // on while the gateway was away (carried by the lock's retained state only) lets staff keys in after a restart
  {
    patch: 'privacy-lost-on-restart.patch',
    scenario: 'privacy-lost-on-restart',
    expect: ['I1 privacy'],
    seeds: [71, 72],
    durationSeconds: 10,
    settleTimeoutSeconds: 30,
  },
];

function runIn(dir: string, args: string[]): Promise<number> {
  return new Promise((res) => {
    const p = spawn(process.execPath, ['--import', 'tsx', join(dir, 'chaos/run.ts'), ...args], {
      cwd: dir,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    p.once('exit', (code) => res(code ?? 2));
  });
}

export interface ProveResult {
  readonly patch: string;
  readonly caught: boolean;
  readonly seed: number | null;
  readonly violations: string[];
}

export async function proveBug(
  b: BugCase,
  log: (s: string) => void = (s) => process.stdout.write(`${s}\n`),
  seeds: readonly number[] = b.seeds,
): Promise<ProveResult> {
  const name = b.patch.replace(/\.patch$/, '');
  const dir = throwawayWorktree(name);
  try {
    execFileSync('git', ['-C', dir, 'apply', join(REPO, 'chaos/bugs', b.patch)]);
    for (const seed of seeds) {
      const out = join(dir, `.chaos-${seed}`);
      log(`prove-bugs: ${b.patch}: seed ${seed}, scenario ${b.scenario}, ${b.durationSeconds} s`);
      const code = await runIn(dir, [
        '--seed',
        String(seed),
        '--duration',
        String(b.durationSeconds),
        '--scenario',
        b.scenario,
        '--out',
        out,
        ...(b.settleTimeoutSeconds !== undefined ? ['--settle-timeout', String(b.settleTimeoutSeconds)] : []),
      ]);
      const summaryFile = join(out, 'history.jsonl.summary.json');
      if (code === 2 || !existsSync(summaryFile)) {
        log(`prove-bugs: ${b.patch}: seed ${seed}: harness failure (exit ${code})`);
        continue;
      }
      const s = JSON.parse(readFileSync(summaryFile, 'utf8')) as { verdict: { violations: { invariant: string; message: string }[] } };
      const hits = s.verdict.violations.filter((v) => b.expect.includes(v.invariant)).map((v) => `[${v.invariant}] ${v.message}`);
      if (hits.length > 0) return { patch: b.patch, caught: true, seed, violations: hits };
    }
    return { patch: b.patch, caught: false, seed: null, violations: [] };
  } finally {
    removeWorktree(dir);
  }
}

export async function proveBugs(only?: string, quick = false): Promise<number> {
  const results: ProveResult[] = [];
  for (const b of BUGS.filter((x) => only === undefined || x.patch.startsWith(only)))
    results.push(await proveBug(b, undefined, quick ? b.seeds.slice(0, 1) : b.seeds));
  for (const r of results)
    process.stdout.write(
      r.caught
        ? `prove-bugs: CAUGHT ${r.patch} (seed ${r.seed}): ${r.violations.length} violation(s), e.g. ${r.violations[0]}\n`
        : `prove-bugs: MISSED ${r.patch}: no violation of the expected invariant\n`,
    );
  return results.every((r) => r.caught) ? 0 : 1;
}
