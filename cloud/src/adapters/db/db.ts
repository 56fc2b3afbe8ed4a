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

export interface Db extends Queryable {
  readonly kind: 'pg' | 'pglite';
  /** Runs `fn` in one transaction (BEGIN ... COMMIT, ROLLBACK on throw). The use case owns it. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** LISTEN on a channel; NOTIFYs are delivered after the sender's commit. Returns an unlisten function. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

/** A row that cannot be a valid domain object (DESIGN.md §6): an adapter error, never a half-built object. */
export class CorruptRow extends Error {
  constructor(table: string, detail: string) {
    super(`corrupt row in ${table}: ${detail}`);
    this.name = 'CorruptRow';
  }
}

/** PostgreSQL error code of a thrown driver error, if any (both drivers set `code`). */
export function pgErrorCode(e: unknown): string | undefined {
  if (typeof e === 'object' && e !== null && 'code' in e && typeof (e as { code: unknown }).code === 'string') return (e as { code: string }).code;
  return undefined;
}
