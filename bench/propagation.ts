import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { percentiles, round, type Percentiles } from './results.js';
import {
  cloudEnv,
  Locks,
  pollLock,
  provisionGateway,
  scratchDatabase,
  startCloudProcess,
  startGatewayProcess,
  tempDir,
  type Api,
} from './stack.js';

/**
 * The admin API to the door, end to end: a cloud process (core + admin API,
 * PostgreSQL, dispatcher running), a gateway process provisioned through
 * the API, and simulated locks on the same broker.
 *
 * - grant / revoke propagation: from the start of the API call that issues
 *   (revokes) a key to the moment its PIN opens (is denied) at the lock. The
 *   lock side is polled (a request, wait for its decision, again), never an
 *   ack: the figure includes the API transaction, the dispatcher's claim,
 *   sign and publish, the gateway applying the grant, and the decision.
 * - issue throughput: keys issued per second through `POST /keys` by
 *   `clients` concurrent HTTP clients for `seconds`, the dispatcher sending
 *   every grant meanwhile (every request counted once it answered 202).
 */
export interface CloudPathResult {
  readonly grant: Percentiles;
  readonly revoke: Percentiles;
  readonly issuePerSecond: number;
}

const DAY = 86_400_000;

export async function runCloudPath(o: {
  brokerUrl: string;
  databaseUrl: string;
  samples: number;
  clients: number;
  seconds: number;
  log: (s: string) => void;
}): Promise<CloudPathResult> {
  const db = await scratchDatabase(o.databaseUrl);
  const tmp = tempDir('tobira-bench-path-');
  const cloud = await startCloudProcess(await cloudEnv(db.url, o.brokerUrl, { HEARTBEAT_INTERVAL_MS: '1000' }));
  let gateway: Awaited<ReturnType<typeof startGatewayProcess>> | undefined;
  let locks: Locks | undefined;
  try {
    const gw = await provisionGateway(cloud.api, tmp.dir, { gatewayId: 'gw-path', locks: 20, mqttUrl: o.brokerUrl });
    gateway = await startGatewayProcess([gw.config]);
    locks = await Locks.open(o.brokerUrl, gw.gatewayId, gw.locks);
    const door = gw.doors[0] ?? '';
    const lock = gw.locks[0] ?? '';
    let pin = 300_000;
    const issue = (api: Api, keyId: string, p: string) =>
      api.call('POST', '/keys', {
        keyId,
        personId: gw.personId,
        doors: [door],
        credential: { type: 'pin', value: p },
        validFrom: Date.now() - DAY,
        validUntil: Date.now() + DAY,
      });

    // warm-up: the gateway has its lease and the path is hot once a fresh key opens
    const warm = String(pin++);
    await issue(cloud.api, `key-warm-${randomBytes(3).toString('hex')}`, warm);
    if ((await pollLock(locks, lock, warm, (d) => d.allowed, 60_000)) === null) throw new Error('the gateway never opened for a fresh key');

    const grant: number[] = [];
    const revoke: number[] = [];
    for (let i = 0; i < o.samples; i++) {
      const p = String(pin++);
      const keyId = `key-prop-${i}`;
      const t0 = performance.now();
      const r = await issue(cloud.api, keyId, p);
      if (r.status !== 202) throw new Error(`POST /keys: ${r.status} ${JSON.stringify(r.body)}`);
      const opened = await pollLock(locks, lock, p, (d) => d.allowed);
      if (opened === null) throw new Error(`key ${keyId} never opened`);
      grant.push(opened - t0);
      const t1 = performance.now();
      const v = await cloud.api.call('POST', `/keys/${keyId}/revoke`, { reason: 'staff_revoked' });
      if (v.status !== 202) throw new Error(`revoke: ${v.status} ${JSON.stringify(v.body)}`);
      const denied = await pollLock(locks, lock, p, (d) => !d.allowed);
      if (denied === null) throw new Error(`key ${keyId} was never denied after its revoke`);
      revoke.push(denied - t1);
    }
    o.log(
      `grant propagation ${JSON.stringify(percentiles(grant))} ms, revoke ${JSON.stringify(percentiles(revoke))} ms (${o.samples} each)`,
    );

    // issue throughput: `clients` concurrent HTTP clients, each issuing keys back to back
    let issued = 0;
    let refused = 0;
    const until = performance.now() + o.seconds * 1000;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: o.clients }, async (_, c) => {
        for (let i = 0; performance.now() < until; i++) {
          const r = await issue(cloud.api, `key-tp-${c}-${i}`, String(pin++));
          if (r.status === 202) issued++;
          else refused++;
        }
      }),
    );
    const issuePerSecond = round(issued / ((performance.now() - t0) / 1000), 1);
    o.log(`issue throughput with ${o.clients} clients: ${issuePerSecond}/s (${issued} issued, ${refused} not)`);
    return { grant: percentiles(grant), revoke: percentiles(revoke), issuePerSecond };
  } finally {
    await locks?.close();
    await gateway?.stop();
    await cloud.stop();
    await db.drop();
    tmp.remove();
  }
}
