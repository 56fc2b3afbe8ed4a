/**
 * `node --import tsx bench/snapshot-apply.ts [keys]`: the gateway's apply of
 * a resync snapshot without the broker or signatures
 * (`resync_100k_keys_s` and `gateway_rss_mb_100k_keys`). The parts of
 * bench/resync.ts's snapshot (simple PIN keys, under the part size budget and
 * 1000 keys per part) are put in the inbox of an empty gateway on a real
 * SQLite file (WAL, synchronous=FULL), then `applyPending` applies them: each
 * part stored, the last one applying the whole snapshot in one transaction.
 * Prints wall and process CPU time of that apply, and the RSS and heap after
 * it: CPU time is what a loaded, shared machine disturbs least. Not a test:
 * asserts nothing.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  asDoorId,
  asKeyId,
  asPersonId,
  credentialDigest,
  newCorrelationId,
  newMessageId,
  newPairingSecret,
  monotonicClock,
  systemClock,
  type DownlinkMessage,
  type KeyGrant,
} from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../gateway/src/adapters/sqlite/db.js';
import { loadMemory } from '../gateway/src/adapters/sqlite/memory.js';
import { GatewayStore } from '../gateway/src/adapters/sqlite/store.js';
import { applyPending, type ApplyDeps } from '../gateway/src/app/apply.js';
import { TrustedTime, noCrash } from '../gateway/src/app/context.js';
import { createMetrics } from '../gateway/src/metrics.js';

const N = Number(process.argv[2] ?? 100_000);
const DAY = 86_400_000;
/** As bench/resync.ts: raw JSON per part under the 64 KiB token once base64url'd. */
const PART_BUDGET = Math.floor((64 * 1024 * 3) / 4) - 4096;

/** The snapshot's keys split as bench/resync.ts (and the cloud's chunkSnapshot) split them. */
function chunks(now: number): KeyGrant[][] {
  const pepper = newPairingSecret();
  const out: KeyGrant[][] = [];
  let cur: KeyGrant[] = [];
  let size = 0;
  for (let i = 0; i < N; i++) {
    const k: KeyGrant = {
      keyId: asKeyId(`key-${i}`),
      version: 1,
      personId: asPersonId(`person-${i}`),
      credential: { type: 'pin', digest: credentialDigest(pepper, 'pin', String(10_000_000 + i)) },
      doors: [asDoorId('door-1')],
      validFrom: now - DAY,
      validUntil: now + 30 * DAY,
      schedule: null,
      offlineCapable: false,
    };
    const n = JSON.stringify(k).length + 1;
    if (cur.length > 0 && (size + n > PART_BUDGET || cur.length >= 1000)) {
      out.push(cur);
      cur = [];
      size = 0;
    }
    cur.push(k);
    size += n;
  }
  if (cur.length > 0) out.push(cur);
  return out;
}

const dir = mkdtempSync(join(tmpdir(), 'tobira-snapshot-apply-'));
try {
  const db = openDatabase(join(dir, 'g.sqlite'));
  const store = new GatewayStore(db);
  loadMemory(db);
  const now = systemClock.now();
  const time = new TrustedTime(systemClock, monotonicClock);
  const deps: ApplyDeps = {
    gatewayId: 'gw-bench',
    store,
    time,
    log: pino({ level: 'silent' }),
    metrics: createMetrics(),
    crash: noCrash,
    outboxWritten: () => {},
    options: { offlineGraceSeconds: 300, maxAttempts: 5, claimLeaseMs: 600_000, resyncIntervalMs: 0, uplinkAckTimeoutMs: 60_000 },
    resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
    requestResync: () => {},
  };
  const snapshotId = randomUUID();
  const parts = chunks(now);
  parts.forEach((keys, i) => {
    const m: DownlinkMessage = {
      jti: newMessageId(),
      iss: 'tobira-cloud',
      aud: 'gw-bench',
      iat: Math.floor(now / 1000),
      exp: Math.floor(now / 1000) + 3600,
      cid: newCorrelationId(),
      type: 'keyset.snapshot',
      body: { snapshotId, asOfSeq: 1, part: i + 1, parts: parts.length, keys, revoked: [] },
    };
    store.insertInbox(m, now);
  });
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const settled = applyPending(deps);
  const wallS = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const mb = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
  const mem = process.memoryUsage();
  console.log(
    JSON.stringify({
      keys: N,
      parts: parts.length,
      settled,
      applyWallS: Math.round(wallS * 100) / 100,
      applyCpuS: { user: Math.round(cpu.user / 1e4) / 100, system: Math.round(cpu.system / 1e4) / 100 },
      afterMb: { rss: mb(mem.rss), heapTotal: mb(mem.heapTotal), heapUsed: mb(mem.heapUsed) },
      loadavg: loadavg().map((l) => Math.round(l * 100) / 100),
    }),
  );
  db.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
