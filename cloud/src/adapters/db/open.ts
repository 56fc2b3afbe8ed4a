import type { Logger } from '@tobira/shared';
import type { Db } from './db.js';
import { openPgDb } from './pg.js';
import { openPgliteDb } from './pglite.js';

/** PostgreSQL when a URL is given, PGlite otherwise. */
export async function openDb(opts: { databaseUrl: string | undefined; pgliteDataDir: string }, log: Logger): Promise<Db> {
  if (opts.databaseUrl) return openPgDb(opts.databaseUrl, log);
  return openPgliteDb(opts.pgliteDataDir);
}
