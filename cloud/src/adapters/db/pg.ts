import pg from 'pg';
import type { Logger } from '@tobira/shared';
import { withSavepoints, type Db, type QueryResult, type Queryable } from './db.js';

const INT8_OID = 20;
/** int8 (bigint epoch ms, seq) as a JS number, as PGlite returns it; values stay far below 2^53. */
const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

function wrap(c: pg.Pool | pg.PoolClient): Queryable {
  return {
    async query<T>(sql: string, params: readonly unknown[] = []): Promise<QueryResult<T>> {
      const r = await c.query(sql, params as unknown[]);
      return { rows: r.rows as T[], rowCount: r.rowCount ?? 0 };
    },
    async exec(sql: string): Promise<void> {
      await c.query(sql);
    },
  };
}

export function openPgDb(url: string, log: Logger, opts: { max?: number } = {}): Db {
  const max = opts.max ?? 10;
  const pool = new pg.Pool({ connectionString: url, max, types });
  // An idle client that errors (server restart) must not crash the process.
  pool.on('error', (e) => log.warn({ err: e }, 'idle pg client error'));
  const base = wrap(pool);
  const listeners = new Set<pg.Client>();
  let dbClosed = false;
  return {
    kind: 'pg',
    query: base.query,
    exec: base.exec,
    async transaction(fn) {
      const client = await pool.connect();
      // The pool listens for errors on idle clients only: a checked-out one whose session the server ends (a
      // restart, a cut link) while the transaction awaits something else would emit an unhandled 'error' and
      // kill the process. Caught here, the transaction fails on its next query and the client is destroyed.
      let broken: Error | undefined;
      const onError = (e: Error) => {
        broken = e;
        log.warn({ err: e.message }, 'pg session ended during a transaction');
      };
      client.on('error', onError);
      try {
        await client.query('BEGIN');
        const result = await fn(withSavepoints(wrap(client)));
        await client.query('COMMIT');
        return result;
      } catch (e) {
        if (broken === undefined) await client.query('ROLLBACK').catch(() => {});
        throw e;
      } finally {
        client.off('error', onError);
        client.release(broken);
      }
    },
    async listen(channel, onNotify) {
      // LISTEN needs one long-lived session; a pooled client would lose it.
      // When that session dies (server restart), it is re-opened after a pause;
      // the dispatcher's slow poll covers the gap, and a wake after
      // reconnecting catches up on anything committed meanwhile.
      let closed = false;
      let client: pg.Client | undefined;
      const open = async (): Promise<void> => {
        const c = new pg.Client({ connectionString: url, types });
        c.on('notification', (n) => {
          if (n.channel === channel) onNotify(n.payload ?? '');
        });
        c.on('error', (e) => log.warn({ err: e.message, channel }, 'pg listen session error'));
        c.on('end', () => {
          if (closed || dbClosed) return;
          log.warn({ channel }, 'pg listen session ended; re-opening');
          setTimeout(() => void reopen(), 1000).unref();
        });
        await c.connect();
        await c.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
        client = c;
        listeners.add(c);
      };
      const reopen = async (): Promise<void> => {
        if (client) listeners.delete(client);
        client = undefined;
        if (closed || dbClosed) return;
        try {
          await open();
          onNotify('');
        } catch (e) {
          log.warn({ err: e instanceof Error ? e.message : String(e), channel }, 'pg listen re-open failed; retrying');
          setTimeout(() => void reopen(), 1000).unref();
        }
      };
      await open();
      return async () => {
        closed = true;
        if (client) {
          listeners.delete(client);
          await client.end().catch(() => {});
        }
      };
    },
    poolStats: () => ({ max, total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    async close() {
      dbClosed = true;
      const open = [...listeners];
      listeners.clear();
      await Promise.all(open.map((c) => c.end().catch(() => {})));
      await pool.end();
    },
  };
}
