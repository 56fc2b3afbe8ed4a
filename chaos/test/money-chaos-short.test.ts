import { describe, expect, it } from 'vitest';
import { parseMoneyFaults } from '../money/faults.js';
import { MONEY_BUGS, proveMoneyBug } from '../money/prove-bugs.js';
import { moneySummary, runMoneyChaos } from '../money/run.js';
import { SCENARIOS } from '../money/scenarios.js';

/**
 * The quick form of `npm run chaos:money` inside `npm test`: the cloud as a child process on
 * PostgreSQL with the real SDK against the local Stripe, a gateway and its lock fleet, the money
 * workload under Stripe, webhook and PostgreSQL faults for a few seconds (a fixed seed), healed, then
 * the money checker over the history and the three ledgers: no violation. And the quick
 * `--prove-bugs`: the deposit bug's patch in a throwaway worktree, its targeted scenario, and the
 * checker reports M2. Needs PostgreSQL (TOBIRA_TEST_PG_URL, else the local default) and the
 * `mosquitto` binary. The longer runs (every fault, the cloud killed) are docs/reliability.md's.
 */
const SEED = 7;

describe('npm run chaos:money (quick, fixed seed)', () => {
  it(`keeps M1..M6 under Stripe, webhook and PostgreSQL faults (seed ${SEED})`, async () => {
    const scenario = SCENARIOS['deposit-kept-on-failed-stay'];
    if (scenario === undefined) throw new Error('the deposit scenario is not listed');
    const res = await runMoneyChaos({
      seed: SEED,
      durationSeconds: 12,
      faults: parseMoneyFaults('stripe-down,stripe-slow,stripe-lost-answer,stripe-decline,webhook-dup,webhook-reorder,pg-cut'),
      offlineGraceSeconds: 10,
      faultEveryMs: 1200,
      quiet: true,
      // a deposit paid and the stay failed at Stripe first, so the run always holds a refund to check
      scenario,
    });
    const text = moneySummary(res);
    expect(res.verdict.violations, text).toEqual([]);
    expect(res.healed.ok, text).toBe(true);
    // it did something: faults, bookings with money to account for, refunds, answers checked
    expect(res.faultsTotal, text).toBeGreaterThanOrEqual(4);
    expect(res.verdict.checks['M2 subjects checked'] ?? 0, text).toBeGreaterThan(0);
    expect(res.verdict.checks['M2 refunds checked'] ?? 0, text).toBeGreaterThan(0);
    expect(res.verdict.checks['M5 answers checked'] ?? 0, text).toBeGreaterThan(10);
  }, 600_000);

  it('reports the deposit kept by a failed stay once its fix is reverted (prove-bugs, quick)', async () => {
    const bug = MONEY_BUGS.find((b) => b.patch === 'deposit-kept-on-failed-stay.patch');
    if (bug === undefined) throw new Error('the deposit bug is not listed');
    const r = await proveMoneyBug(bug, true);
    expect(r.caught, JSON.stringify(r)).toBe(true);
    expect(r.violations.join('\n')).toMatch(/\[M2\] stay .*: received 3000 − refunded 0 = 3000 at Stripe, its policy keeps 0/);
  }, 600_000);
});
