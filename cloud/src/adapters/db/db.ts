/**
 * The one database port. Two implementations run the same SQL: PostgreSQL
 * through `pg` (when DATABASE_URL is set) and PGlite (embedded) otherwise.
 * Times are stored as bigint epoch milliseconds passed in from the Clock, so
 * SQL and code share one injectable clock (DESIGN.md §9).
 */
export interface QueryResult<T> {
  readonly rows: T[];
  /** Rows affected (UPDATE/INSERT/DELETE) or returned (SELECT). CAS is judged by this. */
  readonly rowCount: number;
}

export interface Queryable {
  query<T = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<QueryResult<T>>;
  /** Runs a multi-statement script with no parameters (migrations). */
  exec(sql: string): Promise<void>;
}

/**
 * A handle that can open a unit of work: the database itself (BEGIN ...
 * COMMIT) or an open transaction (SAVEPOINT ... RELEASE), so a use case that
 * owns its transaction also runs inside a caller's (pg-boss `send(..., { db })`):
 * the admin API stores an idempotent response in the transaction of the effect.
 */
export interface Tx extends Queryable {
  /** Runs `fn` as one unit: committed (or released) together, rolled back on throw. */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}

/** Nested units of an open transaction are savepoints; a throw rolls back to the savepoint and rethrows. */
export function withSavepoints(q: Queryable, depth = 0): Tx {
  return {
    query: (sql, params) => q.query(sql, params),
    exec: (sql) => q.exec(sql),
    async transaction(fn) {
      const sp = `tobira_sp_${depth + 1}`;
      await q.query(`SAVEPOINT ${sp}`);
      let result;
      try {
        result = await fn(withSavepoints(q, depth + 1));
      } catch (e) {
        await q.query(`ROLLBACK TO SAVEPOINT ${sp}`).catch(() => {});
        throw e;
      }
      await q.query(`RELEASE SAVEPOINT ${sp}`);
      return result;
    },
  };
}

export interface Db extends Tx {
  readonly kind: 'pg' | 'pglite';
  /** LISTEN on a channel; NOTIFYs are delivered after the sender's commit. Returns an unlisten function. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
  /** Connection use right now (GET /metrics): the pg pool's, or PGlite's one connection and the queries queued for it. */
  poolStats(): PoolStats;
}

/**
 * `max`: connections it may open; `total`: open now; `idle`: open, not in
 * use; `waiting`: queries or transactions queued for a connection. PGlite is
 * one in-process connection: max = total = 1, idle 1 while nothing runs.
 * LISTEN sessions (pg) are dedicated clients, outside the pool.
 */
export interface PoolStats {
  readonly max: number;
  readonly total: number;
  readonly idle: number;
  readonly waiting: number;
}

/** Makes the open transaction read one consistent snapshot; must be its first statement. */
export async function setRepeatableRead(tx: Queryable): Promise<void> {
  await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
}

/** A row that cannot be a valid domain object (DESIGN.md §6); one definition for both services. */
export { CorruptRow } from '@tobira/shared';

/** PostgreSQL error code of a thrown driver error, if any (both drivers set `code`). */
export function pgErrorCode(e: unknown): string | undefined {
  if (typeof e === 'object' && e !== null && 'code' in e && typeof (e as { code: unknown }).code === 'string')
    return (e as { code: string }).code;
  return undefined;
}

/**
 * Sets the transaction-local marker (`tobira.verb`) the status guards check:
 * a key's, a stay's or a payment's status changes only inside a verb's
 * transaction (I4; migrations 0001 and 0014).
 */
export async function enterVerb(q: Queryable, verb: string): Promise<void> {
  await q.query("SELECT set_config('tobira.verb', $1, true)", [verb]);
}
