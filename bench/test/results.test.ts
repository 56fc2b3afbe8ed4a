import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { gapLags, roundLags } from '../fleet.js';
import { METRIC_NAMES, formatTable, percentile, resultsOf, thisMachine, writeResults } from '../results.js';

// The JSON the bench writes is read by people and scripts comparing runs: its shape is the contract.
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

  it('names every metric exactly as docs/performance.md does, each present in the file even when not measured', () => {
    // the documented JSON, verbatim: a renamed or missing metric breaks every script comparing runs
    const issue = [
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
    ];
    expect([...METRIC_NAMES]).toEqual(issue);
    const r = resultsOf({}, thisMachine(0), { quick: true, seconds: 1 });
    expect(Object.keys(r.metrics)).toEqual(issue);
    for (const name of issue) expect(formatTable(r)).toContain(name);
  });

  it('splits heartbeat arrivals into rounds and measures each behind its round’s first', () => {
    // two rounds 1000 ms apart; the second round's last arrival is 30 ms behind its first
    expect(roundLags([{ at: 0 }, { at: 5 }, { at: 12 }, { at: 1000 }, { at: 1030 }], 1000)).toEqual([0, 0, 5, 12, 30]);
  });

  it('counts a skipped or late heartbeat round as lag, and a gateway never reached as the whole window', () => {
    const w = { start: 0, end: 3500 };
    // a: on time every 1000 ms (its first 200 ms into the window); b: the round at 2000 skipped; c: nothing
    const arrivals = [
      { gatewayId: 'a', at: 200 },
      { gatewayId: 'a', at: 1200 },
      { gatewayId: 'a', at: 2200 },
      { gatewayId: 'a', at: 3200 },
      { gatewayId: 'b', at: 210 },
      { gatewayId: 'b', at: 1210 },
      { gatewayId: 'b', at: 3210 },
    ];
    expect(gapLags(['a', 'b', 'c'], arrivals, w, 1000)).toEqual([0, 0, 0, 0, 0, 0, 1000, 2500]);
  });

  it('takes nearest-rank percentiles', () => {
    const s = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(s, 50)).toBe(50);
    expect(percentile(s, 99)).toBe(99);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });
});
