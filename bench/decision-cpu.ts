/**
 * `node --import tsx bench/decision-cpu.ts [decisions]`: the gateway's CPU
 * per door decision without the broker: `handleLockRequests` on a real
 * SQLite file (WAL, synchronous=FULL), one request per transaction, the
 * grant of bench/decision.ts (20 doors, an all-week schedule) and 20 locks.
 * Prints process CPU (user + system) and wall time per decision: CPU time
 * is what a loaded, shared machine disturbs least, so before/after
 * comparisons of the hot path use it. Not a test: asserts nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  asDoorId,
  asKeyId,
  asPersonId,
  credentialDigest,
  newCorrelationId,
  newPairingSecret,
  monotonicClock,
  systemClock,
} from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../gateway/src/adapters/sqlite/db.js';
import { saveSlot } from '../gateway/src/adapters/sqlite/keyset.js';
import { upsertLock } from '../gateway/src/adapters/sqlite/locks.js';
import { setLease } from '../gateway/src/adapters/sqlite/settings.js';
import { GatewayStore } from '../gateway/src/adapters/sqlite/store.js';
import { handleLockRequests, type AccessDeps } from '../gateway/src/app/access.js';
import { TrustedTime, noCrash } from '../gateway/src/app/context.js';
import { createMetrics } from '../gateway/src/metrics.js';

const N = Number(process.argv[2] ?? 4000);
const PIN = '246810';
const dir = mkdtempSync(join(tmpdir(), 'tobira-decision-cpu-'));
try {
  const db = openDatabase(join(dir, 'g.sqlite'));
  const store = new GatewayStore(db);
  const pepper = newPairingSecret();
  const clock = systemClock;
  const now = clock.now();
  const locks = Array.from({ length: 20 }, (_, i) => `lock-${i + 1}`);
  locks.forEach((l, i) => upsertLock(db, l, `door-${i + 1}`, now));
  setLease(db, now + 24 * 3600_000);
  const grant = {
    keyId: asKeyId('key-bench'),
    version: 1,
    personId: asPersonId('person-bench'),
    credential: { type: 'pin' as const, digest: credentialDigest(pepper, 'pin', PIN) },
    doors: locks.map((_, i) => asDoorId(`door-${i + 1}`)),
    validFrom: now - 3600_000,
    validUntil: now + 24 * 3600_000,
    schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }] },
    offlineCapable: false,
  };
  saveSlot(db, 'key-bench', { key: { grant, version: 1, status: 'active' }, tombstone: null }, newCorrelationId(), now, null);
  const time = new TrustedTime(clock, monotonicClock);
  time.asked('bench');
  time.answered('bench', now);
  const deps: AccessDeps = {
    gatewayId: 'gw-bench',
    store,
    time,
    log: pino({ level: 'silent' }),
    metrics: createMetrics(),
    crash: noCrash,
    outboxWritten: () => {},
    access: {
      pepper,
      lockout: { limit: 0, cooldownSeconds: 60 },
      siteLockout: { limit: 0, windowSeconds: 600, cooldownSeconds: 300 },
      requestRate: { burst: 1_000_000, perSecond: 1_000_000 },
      holdMs: 1000,
      commandTtlMs: 10_000,
      pairingSecrets: new Map(locks.map((l) => [l, newPairingSecret()])),
      offlineGraceSeconds: 300,
    },
    buckets: new Map(),
    storageLow: () => false,
  };
  let n = 0;
  const one = () => {
    const lockId = locks[n % locks.length]!;
    const payload = Buffer.from(JSON.stringify({ requestId: `r-${n++}`, credential: { type: 'pin', value: PIN }, at: clock.now() }));
    const [a] = handleLockRequests(deps, [{ lockId, payload }]);
    if (a?.decision.code !== 'ALLOWED') throw new Error(`bench decision not allowed: ${a?.decision.code}`);
  };
  for (let i = 0; i < 500; i++) one(); // warm-up: JIT, page cache
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  for (let i = 0; i < N; i++) one();
  const cpu = process.cpuUsage(cpu0);
  const wall = performance.now() - wall0;
  console.log(
    JSON.stringify({
      decisions: N,
      cpuUsPerDecision: Math.round((cpu.user + cpu.system) / N),
      userUsPerDecision: Math.round(cpu.user / N),
      wallUsPerDecision: Math.round((wall * 1000) / N),
      load1: loadavg()[0],
    }),
  );
  db.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
