import { mkdtempSync, rmSync, statSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '@tobira/shared/testing';
import { checkpointWorkerForTests, startCheckpointer, type CheckpointResult } from '../src/adapters/sqlite/checkpointer.js';
import { openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';

/**
 * The WAL checkpoint thread (adapters/sqlite/checkpointer.ts): the main
 * handle never checkpoints in-line while the thread runs, the WAL stays
 * bounded anyway, and a thread that fails hands checkpoints back to SQLite's
 * in-line auto-checkpoint (never an unbounded WAL).
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const walBytes = (path: string) => (existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0);
const autocheckpoint = (db: WritableDb) => db.pragma('wal_autocheckpoint', { simple: true });

/** 2,000 transactions of a 4 KiB row each (≈ 2 WAL pages apiece), in rounds with a pause between; the largest WAL size seen. */
async function write(db: WritableDb, path: string): Promise<number> {
  db.exec('CREATE TABLE IF NOT EXISTS filler (x BLOB)');
  // start from an empty log (the migrations filled it; a WAL file never shrinks by itself)
  db.pragma('wal_checkpoint(TRUNCATE)');
  const insert = db.prepare('INSERT INTO filler (x) VALUES (randomblob(4096))');
  const one = db.transaction(() => insert.run());
  let largest = 0;
  for (let round = 0; round < 20; round++) {
    for (let i = 0; i < 100; i++) one();
    largest = Math.max(largest, walBytes(path));
    await sleep(30);
  }
  return largest;
}

describe('WAL checkpoints off the main thread', () => {
  let dir: string;
  const logs: string[] = [];
  const log = pino({ level: 'debug' }, { write: (l: string) => void logs.push(l) });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-ckpt-'));
    logs.length = 0;
  });
  afterEach(() => {
    checkpointWorkerForTests(null);
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the WAL bounded with in-line checkpoints off, for two databases on one thread; a stop hands back in-line checkpoints', async () => {
    // the control: in-line checkpoints off and no thread, the WAL holds everything written
    const controlPath = join(dir, 'control.sqlite');
    const control = openDatabase(controlPath);
    control.pragma('wal_autocheckpoint = 0');
    const unbounded = await write(control, controlPath);
    control.close();

    const paths = [join(dir, 'a.sqlite'), join(dir, 'b.sqlite')];
    const dbs = paths.map((p) => openDatabase(p));
    const results: CheckpointResult[][] = [[], []];
    const cps = dbs.map((db, i) => startCheckpointer(db, paths[i]!, { everyMs: 10, log, onCheckpoint: (r) => void results[i]!.push(r) }));
    for (const db of dbs) expect(autocheckpoint(db)).toBe(0);
    const largest = await Promise.all(dbs.map((db, i) => write(db, paths[i]!)));

    for (const [i, l] of largest.entries()) {
      expect(l).toBeLessThan(unbounded / 4);
      expect(results[i]!.some((r) => r.log > 0 && r.checkpointed === r.log)).toBe(true);
    }
    // one database stops; the other's checkpoints go on
    await cps[0]!.stop();
    expect(autocheckpoint(dbs[0]!)).toBe(1000);
    const seen = results[1]!.length;
    await waitFor(() => results[1]!.length > seen, 'a checkpoint of the database still running');
    await cps[1]!.stop();
    for (const db of dbs) db.close();
    // the last connection's close checkpointed and removed the log: the thread held nothing open
    for (const p of paths) expect(existsSync(`${p}-wal`)).toBe(false);
    expect(logs.join('')).not.toContain('WAL_CHECKPOINT_WORKER_FAILED');
  });

  it('a thread that fails hands checkpoints back to SQLite in-line, logged with a code, and the WAL stays bounded', async () => {
    const broken = join(dir, 'broken-worker.mjs');
    writeFileSync(
      broken,
      "import { parentPort } from 'node:worker_threads';\n" +
        // its first checkpoint throws
        "parentPort.on('message', (m) => { if (m.op === 'open') setTimeout(() => { throw new Error('disk on fire'); }, m.everyMs); });\n",
    );
    checkpointWorkerForTests(pathToFileURL(broken));
    const path = join(dir, 'g.sqlite');
    const db = openDatabase(path);
    const cp = startCheckpointer(db, path, { everyMs: 10, log });
    await waitFor(() => logs.some((l) => l.includes('WAL_CHECKPOINT_WORKER_FAILED')), 'the fallback log line');
    const line = JSON.parse(logs.find((l) => l.includes('WAL_CHECKPOINT_WORKER_FAILED'))!) as { level: number; err: string };
    expect(line.level).toBe(50);
    expect(line.err).toContain('disk on fire');
    expect(autocheckpoint(db)).toBe(1000);
    // in-line checkpoints again: 4,000 pages written, the log restarts near 1,000 pages
    expect(await write(db, path)).toBeLessThan(1500 * 4096 * 1.2);
    await cp.stop();
    db.close();
  });
});
