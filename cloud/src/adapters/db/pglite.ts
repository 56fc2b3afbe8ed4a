import { chmodSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { withSavepoints, type Db, type QueryResult, type Queryable } from './db.js';

/**
 * PGlite is one connection: transactions are serialized through a mutex here
 * (PGlite also serializes internally; ours makes the order explicit and keeps
 * plain queries from interleaving with an open transaction).
 */
class Mutex {
  #tail: Promise<void> = Promise.resolve();
  /** Runs queued or running (the pool metrics). */
  #inFlight = 0;
  run<T>(fn: () => Promise<T>): Promise<T> {
    this.#inFlight++;
    const result = this.#tail.then(fn);
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    void this.#tail.then(() => this.#inFlight--);
    return result;
  }
  get inFlight(): number {
    return this.#inFlight;
  }
}

function wrap(c: Pick<PGlite, 'query' | 'exec'>): Queryable {
  return {
    async query<T>(sql: string, params: readonly unknown[] = []): Promise<QueryResult<T>> {
      const r = await c.query<T>(sql, params as unknown[]);
      return { rows: r.rows, rowCount: r.rowCount ?? r.affectedRows ?? r.rows.length };
    },
    async exec(sql: string): Promise<void> {
      await c.exec(sql);
    },
  };
}

/** A PGlite data directory on disk (not `memory://` or a browser store). */
const onDisk = (dataDir: string) => !/^[a-z]+:\/\//i.test(dataDir);

/**
 * The database holds every guest's name and the sealed secrets, and its files are the server's code too
 * (stored functions): only its owner may read or write it. PGlite creates its files 0666 whatever the
 * umask, so the folder is made 0700 (nobody else can reach a file in it) and every entry already there is
 * tightened to the owner's bits. Returns how many entries it changed.
 */
export function securePgliteDir(dataDir: string): number {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  let changed = 0;
  const tighten = (path: string) => {
    const st = lstatSync(path);
    if (st.isSymbolicLink()) return;
    if ((st.mode & 0o077) !== 0) {
      chmodSync(path, st.mode & 0o700);
      changed += 1;
    }
    if (st.isDirectory()) for (const name of readdirSync(path)) tighten(join(path, name));
  };
  tighten(dataDir);
  return changed;
}

export async function openPgliteDb(dataDir: string): Promise<Db> {
  if (onDisk(dataDir)) securePgliteDir(dataDir);
  const pglite = await PGlite.create(dataDir);
  // the files PGlite made just now (a new database), 0666 like every one it makes later, inside the 0700 folder
  if (onDisk(dataDir)) securePgliteDir(dataDir);
  const mutex = new Mutex();
  const direct = wrap(pglite);
  let closed = false;
  return {
    kind: 'pglite',
    query: (sql, params) => mutex.run(() => direct.query(sql, params)),
    exec: (sql) => mutex.run(() => direct.exec(sql)),
    transaction: (fn) => mutex.run(() => pglite.transaction((tx) => fn(withSavepoints(wrap(tx))))),
    async listen(channel, onNotify) {
      const unlisten = await pglite.listen(channel, onNotify);
      return async () => {
        if (!closed) await unlisten();
      };
    },
    poolStats: () => ({
      max: 1,
      total: closed ? 0 : 1,
      idle: !closed && mutex.inFlight === 0 ? 1 : 0,
      waiting: Math.max(0, mutex.inFlight - 1),
    }),
    async close() {
      if (closed) return;
      closed = true;
      await mutex.run(() => pglite.close());
    },
  };
}
