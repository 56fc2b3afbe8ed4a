/**
 * `npm run chaos:money -- --prove-bugs [--only name]`: shows the money checker can fail. Each patch in
 * chaos/money/bugs/ re-introduces a money bug that was fixed on main; for each, a throwaway `git
 * worktree` of HEAD gets the patch and runs the bug's targeted scenario (chaos/money/scenarios.ts, no
 * random faults, no random workload), which must end with a violation of the invariant the bug
 * breaks. Prints one line per bug; exits non-zero when a bug went unnoticed.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { removeWorktree, throwawayWorktree } from '../worktree.js';

const REPO = resolve(import.meta.dirname, '../..');

export interface MoneyBugCase {
  readonly patch: string;
  /** the scenario of chaos/money/scenarios.ts that forces the bug's conditions */
  readonly scenario: string;
  /** the invariants a violation may name to count as caught */
  readonly expect: readonly string[];
}

export const MONEY_BUGS: readonly MoneyBugCase[] = [
  // failStay / expireStay no longer refund what was paid: a deposit is kept by a stay never delivered
  { patch: 'deposit-kept-on-failed-stay.patch', scenario: 'deposit-kept-on-failed-stay', expect: ['M2'] },
  // the gates at booking and at key issue removed: a blocked guest books, pays and opens the door
  { patch: 'blocked-guest-books-and-opens.patch', scenario: 'blocked-guest-books-and-opens', expect: ['M1'] },
  // a self-cancel Stripe gave no answer to counts as "nothing changed", and the observer ignores cancel_at_period_end:
  // the membership stays active while Stripe stops billing at period end
  { patch: 'slow-stripe-self-cancel.patch', scenario: 'slow-stripe-self-cancel', expect: ['M3'] },
];

/** Runs one scenario with `chaos/money/run.ts` of `dir` (the patched tree, or this one); resolves with its exit code. */
export function runScenario(dir: string, scenario: string, out: string, seed = 1, quiet = false): Promise<number> {
  return new Promise((res) => {
    const p = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(dir, 'chaos/money/run.ts'),
        '--seed',
        String(seed),
        '--duration',
        '0',
        '--faults',
        'none',
        '--scenario',
        scenario,
        '--out',
        out,
      ],
      { cwd: dir, stdio: ['ignore', quiet ? 'ignore' : 'inherit', quiet ? 'ignore' : 'inherit'] },
    );
    p.once('exit', (code) => res(code ?? 2));
  });
}

export interface MoneyProveResult {
  readonly patch: string;
  readonly caught: boolean;
  readonly violations: string[];
  readonly exitCode: number;
}

export async function proveMoneyBug(b: MoneyBugCase, quiet = false): Promise<MoneyProveResult> {
  const dir = throwawayWorktree(`money-${b.patch.replace(/\.patch$/, '')}`);
  try {
    execFileSync('git', ['-C', dir, 'apply', join(REPO, 'chaos/money/bugs', b.patch)]);
    const out = join(dir, '.chaos-money');
    const code = await runScenario(dir, b.scenario, out, 1, quiet);
    const summaryFile = join(out, 'summary.json');
    if (!existsSync(summaryFile)) return { patch: b.patch, caught: false, violations: [], exitCode: code };
    const s = JSON.parse(readFileSync(summaryFile, 'utf8')) as { verdict: { violations: { invariant: string; message: string }[] } };
    const hits = s.verdict.violations.filter((v) => b.expect.includes(v.invariant)).map((v) => `[${v.invariant}] ${v.message}`);
    return { patch: b.patch, caught: hits.length > 0, violations: hits, exitCode: code };
  } finally {
    removeWorktree(dir);
  }
}

export async function proveMoneyBugs(only?: string): Promise<number> {
  const results: MoneyProveResult[] = [];
  for (const b of MONEY_BUGS.filter((x) => only === undefined || x.patch.startsWith(only))) results.push(await proveMoneyBug(b));
  for (const r of results)
    process.stdout.write(
      r.caught
        ? `prove-bugs (money): CAUGHT ${r.patch}: ${r.violations.length} violation(s), e.g. ${r.violations[0]}\n`
        : `prove-bugs (money): MISSED ${r.patch}: no violation of the expected invariant (exit ${r.exitCode})\n`,
    );
  return results.every((r) => r.caught) ? 0 : 1;
}
