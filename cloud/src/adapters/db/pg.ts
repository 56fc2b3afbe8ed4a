import pg from 'pg';
import type { Logger } from '@tobira/shared';
import type { Db, QueryResult, Queryable } from './db.js';

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
  const pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10, types });
  // An idle client that errors (server restart) must not crash the process.
  pool.on('error', (e) => log.warn({ err: e }, 'idle pg client error'));
  const base = wrap(pool);
  const listeners: pg.Client[] = [];
  return {
    kind: 'pg',
    query: base.query,
    exec: base.exec,
    async transaction(fn) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await fn(wrap(client));
        await client.query('COMMIT');
        return result;
      } catch (e) {
        await client.query('ROLLBACK').catch(() => {});
        throw e;
      } finally {
        client.release();
      }
    },
    async listen(channel, onNotify) {
      // LISTEN needs one long-lived session; a pooled client would lose it.
      const client = new pg.Client({ connectionString: url, types });
      client.on('error', (e) => log.warn({ err: e, channel }, 'pg listen client error; the slow poll covers until restart'));
      client.on('notification', (n) => {
        if (n.channel === channel) onNotify(n.payload ?? '');
      });
      await client.connect();
      await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
      listeners.push(client);
      return async () => {
        const i = listeners.indexOf(client);
        if (i >= 0) listeners.splice(i, 1);
        await client.end().catch(() => {});
      };
    },
    async close() {
      await Promise.all(listeners.splice(0).map((c) => c.end().catch(() => {})));
      await pool.end();
    },
  };
}
