import { Worker } from 'node:worker_threads';
import type { Logger } from '@tobira/shared';
import type { WritableDb } from './db.js';

/**
 * WAL checkpoints off the decision's thread (issue #14).
 *
 * SQLite in WAL mode copies the log back into the database file when it has
 * grown past `wal_autocheckpoint` pages (1000 by default), in-line, inside the
 * COMMIT of whichever transaction crossed the line: a door decision writes
 * about a dozen WAL pages, so every ~80th decision also copied ~1000 pages and
 * synced the database file before its unlock went out (2–20 ms on this
 * machine: the tail of the decision latency). Here the main handle's
 * auto-checkpoint is off, and a worker thread with its own connection runs a
 * PASSIVE checkpoint every `everyMs`, on its own timer (a saturated main
 * thread cannot hold it back): it never waits for and never blocks the
 * writer, and once it has copied everything the writer starts the log again
 * from its beginning, so the WAL stays bounded by what is written between
 * two checkpoints. One thread serves every gateway database of the process
 * (tests and the fleet bench run many gateways in one process).
 *
 * Durability is unchanged: a commit is durable when its WAL frames are synced
 * (synchronous=FULL), whoever checkpoints them later. If the thread fails or
 * exits, every handle it served goes back to SQLite's in-line auto-checkpoint
 * (the WAL never grows without bound) and the failure is logged
 * (`WAL_CHECKPOINT_WORKER_FAILED`).
 */
export interface Checkpointer {
  /** Stops the timer and closes the thread's connection (call before the main handle closes). */
  stop(): Promise<void>;
}

export interface CheckpointResult {
  /** 1 when a reader or writer kept part of the log from being copied this time. */
  readonly busy: number;
  /** Frames in the WAL, and frames copied into the database file. */
  readonly log: number;
  readonly checkpointed: number;
  readonly ms: number;
}

export interface CheckpointerOptions {
  readonly everyMs: number;
  readonly log: Logger;
  /** Each checkpoint's result (metrics). */
  readonly onCheckpoint?: (r: CheckpointResult) => void;
}

/** SQLite's default: what a handle goes back to when the thread is gone. */
const INLINE_AUTOCHECKPOINT_PAGES = 1000;
/** A log this long that a checkpoint could not fully copy is worth a warning (~80 MB at 4 KiB pages). */
const WARN_LOG_FRAMES = 20_000;

interface Client {
  readonly onResult: (r: CheckpointResult) => void;
  readonly onClosed: () => void;
  readonly onFailed: (err: unknown) => void;
}

/** The process's checkpoint thread, started with its first database and ended with its last. */
class CheckpointThread {
  readonly #worker: Worker;
  readonly #clients = new Map<number, Client>();
  #nextId = 1;
  #failed = false;

  constructor(url: URL) {
    this.#worker = new Worker(url);
    this.#worker.unref();
    this.#worker.on('message', (m: CheckpointResult & { id: number; closed?: true }) => {
      const c = this.#clients.get(m.id);
      if (m.closed === true) {
        this.#clients.delete(m.id);
        c?.onClosed();
        if (this.#clients.size === 0) this.#end();
      } else c?.onResult(m);
    });
    this.#worker.on('error', (e) => this.#fail(e));
    this.#worker.on('exit', (code) => this.#fail(new Error(`exited with code ${code}`)));
  }

  get failed(): boolean {
    return this.#failed;
  }

  open(path: string, everyMs: number, client: Client): number {
    const id = this.#nextId++;
    this.#clients.set(id, client);
    this.#worker.postMessage({ op: 'open', id, path, everyMs });
    return id;
  }
  close(id: number): void {
    this.#worker.postMessage({ op: 'close', id });
  }

  #end(): void {
    if (thread === this) thread = null;
    this.#failed = true; // an intended end: no client is left to fall back
    void this.#worker.terminate();
  }

  #fail(err: unknown): void {
    if (this.#failed) return;
    this.#failed = true;
    if (thread === this) thread = null;
    for (const c of this.#clients.values()) c.onFailed(err);
    this.#clients.clear();
  }
}

let thread: CheckpointThread | null = null;
/** Test seam: the worker script of the next thread started. */
let workerUrl = new URL('./checkpoint-worker.mjs', import.meta.url);
export function checkpointWorkerForTests(url: URL | null): void {
  workerUrl = url ?? new URL('./checkpoint-worker.mjs', import.meta.url);
}

export function startCheckpointer(db: WritableDb, path: string, o: CheckpointerOptions): Checkpointer {
  if (path === ':memory:' || o.everyMs <= 0) return { stop: () => Promise.resolve() };
  if (thread === null || thread.failed) thread = new CheckpointThread(workerUrl);
  const t = thread;
  let done = false;
  let warnedAt = 0;
  let closed: () => void = () => {};
  const whenClosed = new Promise<void>((resolve) => (closed = resolve));
  const inline = () => {
    if (db.open) db.pragma(`wal_autocheckpoint = ${INLINE_AUTOCHECKPOINT_PAGES}`);
  };
  const id = t.open(path, o.everyMs, {
    onResult: (r) => {
      o.onCheckpoint?.(r);
      if (r.log > WARN_LOG_FRAMES && r.checkpointed < r.log && Date.now() - warnedAt > 60_000) {
        warnedAt = Date.now();
        o.log.warn(
          { code: 'WAL_CHECKPOINT_BEHIND', frames: r.log, checkpointed: r.checkpointed },
          'the WAL is long and was not fully checkpointed',
        );
      }
    },
    onClosed: () => closed(),
    onFailed: (err) => {
      closed();
      if (done) return;
      done = true;
      inline();
      o.log.error(
        { code: 'WAL_CHECKPOINT_WORKER_FAILED', err: err instanceof Error ? err.message : String(err) },
        'WAL checkpoint thread failed; SQLite checkpoints in-line again',
      );
    },
  });
  db.pragma('wal_autocheckpoint = 0');
  return {
    async stop() {
      if (done) return;
      done = true;
      t.close(id);
      await Promise.race([whenClosed, new Promise((r) => setTimeout(r, 2000).unref())]);
      inline();
    },
  };
}
