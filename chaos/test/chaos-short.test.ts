import { describe, expect, it } from 'vitest';
import { parseFaults } from '../faults.js';
import { runChaos, summary } from '../run.js';

/**
 * The short form of `npm run chaos` inside `npm test`: the whole system as separate processes
 * (cloud on PostgreSQL, a gateway, a lock fleet, the run's own Mosquitto), every fault kind, a
 * fixed seed, then the checker over the history. It needs PostgreSQL (TOBIRA_TEST_PG_URL, else
 * the local default) and the `mosquitto` binary. The long run is docs/reliability.md's.
 */
const SEED = 7;

describe('npm run chaos (short, fixed seed)', () => {
  it(`holds every invariant under a random mix of faults (seed ${SEED})`, async () => {
    const res = await runChaos({
      seed: SEED,
      durationSeconds: 40,
      faults: parseFaults('all'),
      gateways: 1,
      offlineGraceSeconds: 10,
      faultEveryMs: 700,
      quiet: true,
    });
    const text = summary(res);
    expect(res.verdict.violations, text).toEqual([]);
    // it did something: faults of several kinds, decisions at the door, and the after-healing checks ran
    expect(res.faultsTotal, text).toBeGreaterThanOrEqual(15);
    expect(Object.keys(res.faults).length, text).toBeGreaterThanOrEqual(5);
    expect(res.verdict.checks['I1 allowed decisions checked'] ?? 0, text).toBeGreaterThan(0);
    expect(res.verdict.checks['I2 gateway decisions checked'] ?? 0, text).toBeGreaterThan(0);
    expect(res.verdict.checks['outbox settled'], text).toBe(1);
  }, 600_000);
});
