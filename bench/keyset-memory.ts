/**
 * `node --expose-gc --import tsx bench/keyset-memory.ts [keys]`: the heap the
 * decision's in-memory key set (gateway/src/adapters/sqlite/memory.ts) takes
 * per key (`gateway_rss_mb_100k_keys`). Writes `keys` simple PIN
 * keys (one door, no schedule, the grant of bench/resync.ts) through the real
 * adapter (`saveSlot`) into a real SQLite file, then measures the live heap
 * (after `global.gc()`) twice: filled by the load at start (`loadMemory`),
 * and filled by write-through (the keys written again while the memory is
 * loaded, as a snapshot apply writes them). Not a test: asserts nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { asDoorId, asKeyId, asPersonId, credentialDigest, newCorrelationId, newPairingSecret, type KeyGrant } from '@tobira/shared';
import { openDatabase, type WritableDb } from '../gateway/src/adapters/sqlite/db.js';
import { dropActiveKeys, saveSlot } from '../gateway/src/adapters/sqlite/keyset.js';
import { loadMemory } from '../gateway/src/adapters/sqlite/memory.js';
import { applyGrant, emptySlot } from '../gateway/src/domain/keyset.js';

const N = Number(process.argv[2] ?? 100_000);
const DAY = 86_400_000;
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with node --expose-gc');

/** Live heap after a full collection, in bytes. */
function liveHeap(): number {
  gc?.();
  gc?.();
  return process.memoryUsage().heapUsed;
}

/** N grants as the resync bench makes them (fresh objects each call: parsed from a snapshot body, in the gateway). */
function grants(pepper: Uint8Array, now: number): KeyGrant[] {
  return Array.from({ length: N }, (_, i) => ({
    keyId: asKeyId(`key-${i}`),
    version: 1,
    personId: asPersonId(`person-${i}`),
    credential: { type: 'pin', digest: credentialDigest(pepper, 'pin', String(10_000_000 + i)) },
    doors: [asDoorId('door-1')],
    validFrom: now - DAY,
    validUntil: now + 30 * DAY,
    schedule: null,
    offlineCapable: false,
  }));
}

/** Every grant written with `saveSlot` in one transaction; JSON round trip so no object is shared with the caller. */
function writeAll(db: WritableDb, gs: readonly KeyGrant[], cid: string, now: number): void {
  db.transaction(() => {
    for (const g of gs) {
      const o = applyGrant(emptySlot, JSON.parse(JSON.stringify(g)) as KeyGrant);
      if (o.status === 'applied') saveSlot(db, g.keyId, o.state, cid, now, 'kid-1');
    }
  }).immediate();
}

const dir = mkdtempSync(join(tmpdir(), 'tobira-keyset-memory-'));
try {
  const now = Date.now();
  const cid = newCorrelationId();
  const gs = grants(newPairingSecret(), now);
  const path = join(dir, 'g.sqlite');
  const first = openDatabase(path);
  writeAll(first, gs, cid, now);
  first.close();

  const db = openDatabase(path);
  const before = liveHeap();
  loadMemory(db);
  const loaded = liveHeap();
  db.transaction(() => dropActiveKeys(db)).immediate();
  const dropped = liveHeap();
  writeAll(db, gs, cid, now);
  const written = liveHeap();
  const perKey = (bytes: number) => Math.round(bytes / N);
  console.log(
    JSON.stringify({
      keys: N,
      heapBytesPerKey: { loadedAtStart: perKey(loaded - before), writtenThrough: perKey(written - dropped) },
      heapMb: { empty: round(before), loaded: round(loaded), written: round(written) },
      rssMb: round(process.memoryUsage().rss),
      loadavg: loadavg().map((l) => Math.round(l * 100) / 100),
    }),
  );
  db.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}

function round(bytes: number): number {
  return Math.round((bytes / 2 ** 20) * 10) / 10;
}
