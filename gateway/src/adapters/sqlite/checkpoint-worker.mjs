// The WAL checkpoint thread (checkpointer.ts), one per process, for every
// gateway database the process has open. Plain JavaScript on purpose: a
// worker thread is started from a file, and this one must load the same way
// under tsx, vitest and plain node, with nothing to compile.
//
// For each database it opens its own connection and, on its own timer (a
// busy main thread must not be able to hold checkpoints back), runs a
// PASSIVE checkpoint: it copies committed WAL frames into the database file
// and syncs it, never waiting for the writer (the main thread keeps
// committing meanwhile) and never blocking it. Each result goes to the main
// thread for its metrics.
import { performance } from 'node:perf_hooks';
import { clearInterval, setInterval } from 'node:timers';
import { parentPort } from 'node:worker_threads';
import Database from 'better-sqlite3';

const open = new Map();

function checkpoint(id, db) {
  const started = performance.now();
  const [r] = db.pragma('wal_checkpoint(PASSIVE)');
  parentPort.postMessage({ id, busy: r.busy, log: r.log, checkpointed: r.checkpointed, ms: performance.now() - started });
}

parentPort.on('message', (m) => {
  if (m.op === 'open') {
    const db = new Database(m.path);
    db.pragma('busy_timeout = 1000');
    open.set(m.id, { db, timer: setInterval(() => checkpoint(m.id, db), m.everyMs) });
    return;
  }
  if (m.op === 'close') {
    const o = open.get(m.id);
    if (o !== undefined) {
      clearInterval(o.timer);
      o.db.close();
      open.delete(m.id);
    }
    parentPort.postMessage({ id: m.id, closed: true });
  }
});
