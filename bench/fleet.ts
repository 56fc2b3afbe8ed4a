import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { connectMqtt, filters, waitConnected } from '@tobira/shared';
import { percentile, round } from './results.js';
import {
  cloudEnv,
  Locks,
  provisionGateway,
  scratchDatabase,
  startCloudProcess,
  startGatewayProcess,
  tempDir,
  type GatewayProcess,
  type ProvisionedGateway,
} from './stack.js';

/**
 * How big a fleet one cloud process and one broker serve: real gateways
 * (several per process, `perProcess`, each with its own SQLite file and MQTT
 * connections), each with `locks` simulated locks (one MQTT connection per
 * gateway plays them) that present a PIN every `lockPeriodMs` (denied:
 * each decision is an access event the cloud takes in), all registered
 * through the admin API.
 *
 * Heartbeat lag: the cloud sends every online gateway a heartbeat per
 * `HEARTBEAT_INTERVAL_MS` round; an observer on the broker records when
 * each one arrives. A heartbeat's lag is how much longer than the interval
 * its gateway waited for it since the previous one (or since the window
 * opened; a gateway still waiting when the window closes counts that wait):
 * a round that is slow to sign and publish to the whole fleet shows as lag,
 * and so does a round the cloud skipped or sent late (a gateway's freshness
 * lease runs on these gaps). The round spread (arrival minus the round's
 * first arrival) is reported too. The fleet grows by `steps` while the lag
 * p99 stays under `boundMs`; the answer is the largest step that did.
 */
export interface FleetStep {
  readonly gateways: number;
  readonly locks: number;
  readonly lagP99Ms: number;
  /** Heartbeats seen in the window, and how many a round every interval to every gateway would have sent. */
  readonly heartbeats: number;
  readonly expected: number;
  readonly spreadP99Ms: number;
  readonly rounds: number;
}
export interface FleetResult {
  readonly gateways: number;
  readonly locks: number;
  readonly lagP99Ms: number;
  readonly steps: readonly FleetStep[];
}

export async function runFleet(o: {
  brokerUrl: string;
  databaseUrl: string;
  steps: readonly number[];
  locks: number;
  perProcess: number;
  intervalMs: number;
  rounds: number;
  lockPeriodMs: number;
  boundMs: number;
  log: (s: string) => void;
}): Promise<FleetResult> {
  const db = await scratchDatabase(o.databaseUrl);
  const tmp = tempDir('tobira-bench-fleet-');
  const cloud = await startCloudProcess(await cloudEnv(db.url, o.brokerUrl, { HEARTBEAT_INTERVAL_MS: String(o.intervalMs) }));
  const procs: GatewayProcess[] = [];
  const sims: Locks[] = [];
  const timers: NodeJS.Timeout[] = [];
  const observer = connectMqtt(o.brokerUrl, { clientId: `bench-fleet-observer-${randomBytes(3).toString('hex')}` });
  await waitConnected(observer);
  // every heartbeat's arrival, per gateway
  let arrivals: { gatewayId: string; at: number }[] = [];
  observer.on('message', (topic, payload) => {
    const at = performance.now();
    const claims: unknown = JSON.parse(Buffer.from(payload.toString().split('.')[1] ?? '', 'base64url').toString());
    if (typeof claims === 'object' && claims !== null && 'type' in claims && claims.type === 'heartbeat') {
      arrivals.push({ gatewayId: topic.split('/')[3] ?? '', at });
    }
  });
  await observer.subscribeAsync(filters.allGatewaysUp.replace(/up$/, 'down'), { qos: 0 });
  const steps: FleetStep[] = [];
  const fleet: ProvisionedGateway[] = [];
  try {
    for (const target of o.steps) {
      // grow the fleet to `target` gateways
      const added: ProvisionedGateway[] = [];
      while (fleet.length + added.length < target) {
        const n = fleet.length + added.length + 1;
        added.push(await provisionGateway(cloud.api, tmp.dir, { gatewayId: `gw-fleet-${n}`, locks: o.locks, mqttUrl: o.brokerUrl }));
      }
      for (let i = 0; i < added.length; i += o.perProcess) {
        procs.push(await startGatewayProcess(added.slice(i, i + o.perProcess).map((g) => g.config)));
      }
      for (const g of added) {
        const sim = await Locks.open(o.brokerUrl, g.gatewayId, g.locks);
        sims.push(sim);
        // each lock presents a wrong PIN every lockPeriodMs, spread over the period
        for (const [i, lockId] of g.locks.entries()) {
          const start = setTimeout(
            () => {
              const t = setInterval(() => void sim.present(lockId, '000000', 10_000), o.lockPeriodMs);
              timers.push(t);
            },
            (i * o.lockPeriodMs) / g.locks.length,
          );
          timers.push(start);
        }
      }
      fleet.push(...added);
      // wait until every gateway has had a heartbeat, then measure `rounds` rounds
      const seen = () => new Set(arrivals.map((a) => a.gatewayId)).size;
      for (let waited = 0; seen() < fleet.length && waited < 60_000 + 10 * o.intervalMs; waited += 200) await sleep(200);
      arrivals = [];
      const windowStart = performance.now();
      await sleep(o.rounds * o.intervalMs + o.intervalMs / 2);
      const windowEnd = performance.now();
      const lags = gapLags(
        fleet.map((g) => g.gatewayId),
        arrivals,
        { start: windowStart, end: windowEnd },
        o.intervalMs,
      );
      const lagP99Ms = round(percentile(lags, 99), 1);
      const spreadP99Ms = round(percentile(roundLags(arrivals, o.intervalMs), 99), 1);
      const step = {
        gateways: fleet.length,
        locks: fleet.length * o.locks,
        lagP99Ms,
        heartbeats: arrivals.length,
        expected: fleet.length * Math.floor((windowEnd - windowStart) / o.intervalMs),
        spreadP99Ms,
        rounds: o.rounds,
      };
      steps.push(step);
      o.log(
        `fleet ${step.gateways} gateways × ${o.locks} locks: heartbeat lag p99 ${lagP99Ms} ms, round spread p99 ${spreadP99Ms} ms (${step.heartbeats} heartbeats of ${step.expected} due)`,
      );
      if (!(lagP99Ms <= o.boundMs)) break;
    }
  } finally {
    for (const t of timers) clearInterval(t);
    await Promise.all(sims.map((s) => s.close()));
    await observer.endAsync(true);
    await Promise.all(procs.map((p) => p.stop()));
    await cloud.stop();
    await db.drop();
    tmp.remove();
  }
  const kept = steps.filter((s) => s.lagP99Ms <= o.boundMs).at(-1);
  return { gateways: kept?.gateways ?? 0, locks: kept?.locks ?? 0, lagP99Ms: kept?.lagP99Ms ?? steps.at(-1)?.lagP99Ms ?? NaN, steps };
}

/**
 * Each heartbeat's lag behind its due time: for every gateway, the gaps
 * between its arrivals in the window (the first measured from the window's
 * start, and the wait still open at its end), less the interval, floored at
 * 0. A gateway that got nothing in the window counts the whole window.
 */
export function gapLags(
  gatewayIds: readonly string[],
  arrivals: readonly { gatewayId: string; at: number }[],
  window: { start: number; end: number },
  intervalMs: number,
): number[] {
  const byGateway = new Map<string, number[]>(gatewayIds.map((id) => [id, []]));
  for (const a of arrivals) byGateway.get(a.gatewayId)?.push(a.at);
  const lags: number[] = [];
  for (const ats of byGateway.values()) {
    ats.sort((a, b) => a - b);
    let prev = window.start;
    for (const at of ats) {
      lags.push(Math.max(0, at - prev - intervalMs));
      prev = at;
    }
    const open = window.end - prev - intervalMs;
    if (open > 0 || ats.length === 0) lags.push(Math.max(0, open));
  }
  return lags.sort((a, b) => a - b);
}

/** Splits arrivals into rounds (a new round starts more than half an interval after the current one began); each arrival's lag behind its round's first. */
export function roundLags(arrivals: readonly { at: number }[], intervalMs: number): number[] {
  const sorted = arrivals.map((a) => a.at).sort((a, b) => a - b);
  const lags: number[] = [];
  let first = -Infinity;
  for (const at of sorted) {
    if (at - first > intervalMs / 2) first = at;
    lags.push(at - first);
  }
  return lags.sort((a, b) => a - b);
}
