/**
 * The one database port. Two implementations run the same SQL: PostgreSQL
 * through `pg` (when DATABASE_URL is set) and PGlite (embedded) otherwise.
 * Times are stored as bigint epoch milliseconds passed in from the Clock, so
 * SQL and code share one injectable clock.
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

/** A row that cannot be a valid domain object; one definition for both services. */
export { CorruptRow } from '@tobira/shared';

/** PostgreSQL error code of a thrown driver error, if any (both drivers set `code`). */
export function pgErrorCode(e: unknown): string | undefined {
  if (typeof e === 'object' && e !== null && 'code' in e && typeof (e as { code: unknown }).code === 'string')
    return (e as { code: string }).code;
  return undefined;
}

/** Codes and messages of a database that is not there for a moment (a restart, a cut link), not of a wrong query. */
const UNAVAILABLE_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ETIMEDOUT',
  'EPIPE',
  '57P01',
  '57P02',
  '57P03',
  '08000',
  '08001',
  '08003',
  '08006',
]);
export function isDatabaseUnavailable(e: unknown): boolean {
  const code = pgErrorCode(e);
  if (code !== undefined && UNAVAILABLE_CODES.has(code)) return true;
  return e instanceof Error && /Connection terminated|connection timeout|Client has encountered a connection error/i.test(e.message);
}

/**
 * Runs `f` (the start-up's first database work) until the database answers, at most `waitMs`: a cloud
 * started while its database restarts or its link is cut waits for it (one `DATABASE_UNAVAILABLE` line a
 * try) instead of exiting; any other error, or the wait used up, is thrown.
 */
export async function whenDatabaseAnswers<T>(
  f: () => Promise<T>,
  log: { warn: (o: object, msg: string) => void },
  waitMs = 60_000,
  sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
): Promise<T> {
  const until = Date.now() + waitMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await f();
    } catch (e) {
      if (!isDatabaseUnavailable(e) || Date.now() >= until) throw e;
      const pauseMs = Math.min(10_000, 500 * 2 ** Math.min(attempt, 5));
      log.warn(
        { code: 'DATABASE_UNAVAILABLE', attempt, pauseMs, err: e instanceof Error ? e.message : String(e) },
        'database not answering at start; trying again',
      );
      await sleep(pauseMs);
    }
  }
}

/**
 * Sets the transaction-local marker (`tobira.verb`) the verb guard checks:
 * each guarded column changes only in the moves its table gives this verb
 * (I4; `domain/verb-guards.ts`, migration `verb_guards`).
 */
export async function enterVerb(q: Queryable, verb: string): Promise<void> {
  await q.query("SELECT set_config('tobira.verb', $1, true)", [verb]);
}

/** Sets the marker and answers the one it replaced ('' when none), in one round trip. */
export async function swapVerb(q: Queryable, verb: string): Promise<string> {
  const r = await q.query<{ outer_verb: string }>(
    // OFFSET 0 keeps the read of the old value in its own plan node, evaluated before the set
    `SELECT o.outer_verb, set_config('tobira.verb', $1, true) FROM (SELECT coalesce(current_setting('tobira.verb', true), '') AS outer_verb OFFSET 0) o`,
    [verb],
  );
  return r.rows[0]?.outer_verb ?? '';
}

/**
 * Runs `fn` as the verb `verb` inside a caller's transaction that runs
 * another (a cancelled membership cancels its stays through the stay verb),
 * then gives the caller its own verb back: each write is checked against
 * the verb that decided it, not the last one that happened to run.
 */
export async function withVerb<T>(q: Queryable, verb: string, fn: () => Promise<T>): Promise<T> {
  const outer = await swapVerb(q, verb);
  const result = await fn();
  if (outer !== verb) await enterVerb(q, outer);
  return result;
}
