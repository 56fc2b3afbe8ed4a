import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { METRIC_NAMES, formatTable, percentile, resultsOf, thisMachine, writeResults } from '../results.js';

// The JSON the bench writes is read by people and scripts comparing runs: its shape is the contract (issue #14).
describe('bench results file', () => {
  it('writes every metric of the issue, in its order, measured ones with their values and the rest null', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tobira-bench-test-'));
    try {
      const file = join(dir, 'results', 'latest.json');
      const r = resultsOf(
        { raw_mqtt_rtt_ms: { p50: 0.2, p99: 1.4 }, raw_sqlite_full_tx_per_s: 900, decision_throughput_per_s: 0 },
        thisMachine(0.5),
        { quick: true, seconds: 1 },
        new Date('2026-11-30T20:00:00Z'),
      );
      writeResults(file, r);
      const back = JSON.parse(readFileSync(file, 'utf8')) as {
        at: string;
        machine: Record<string, unknown>;
        metrics: Record<string, unknown>;
      };
      expect(back.at).toBe('2026-11-30T20:00:00.000Z');
      expect(back.machine.cpus).toBeGreaterThan(0);
      expect(back.machine.node).toBe(process.version);
      expect(Object.keys(back.metrics)).toEqual([...METRIC_NAMES]);
      expect(back.metrics.raw_mqtt_rtt_ms).toEqual({ p50: 0.2, p99: 1.4 });
      expect(back.metrics.raw_sqlite_full_tx_per_s).toBe(900);
      // a measured zero stays a zero: "nothing sustained" is not "not measured"
      expect(back.metrics.decision_throughput_per_s).toBe(0);
      expect(back.metrics.raw_pg_cas_outbox_tx_per_s).toBeNull();
      expect(back.metrics.replicas_in_order).toBeNull();
      expect(formatTable(r)).toContain('not measured');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('takes nearest-rank percentiles', () => {
    const s = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(s, 50)).toBe(50);
    expect(percentile(s, 99)).toBe(99);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });
});
