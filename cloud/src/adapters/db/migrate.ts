import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Logger } from '@tobira/shared';
import type { Db } from './db.js';
import { syncVerbGuards } from './verb-guards.js';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../../migrations/', import.meta.url));
const NAME = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/**
 * Applies numbered, forward-only migrations (`NNNN_name.sql`) in order, each
 * in its own transaction with its row in `schema_migrations`. An advisory
 * lock keeps two replicas starting at once from applying one twice. Then,
 * in the same transaction, the verb guards are copied from the code's state
 * tables (`syncVerbGuards`).
 */
export async function migrate(db: Db, log: Logger, nowMs: number, dir = MIGRATIONS_DIR): Promise<string[]> {
  const files = (await readdir(dir)).filter((f) => NAME.test(f)).sort();
  // two files with one number (parallel branches) would apply in an arbitrary order: refuse to start
  const numbers = files.map((f) => f.slice(0, 4));
  const dup = numbers.find((n, i) => numbers.indexOf(n) !== i);
  if (dup !== undefined) throw new Error(`two migrations are numbered ${dup}: ${files.filter((f) => f.startsWith(dup)).join(', ')}`);
  const applied: string[] = [];
  await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock(7461626972)');
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version int PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)`);
    const done = new Set((await tx.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
    for (const f of files) {
      const m = NAME.exec(f);
      if (!m) continue;
      const version = Number(m[1]);
      if (done.has(version)) continue;
      const sql = await readFile(`${dir}${f}`, 'utf8');
      await tx.exec(sql);
      await tx.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [version, m[2], nowMs]);
      applied.push(f);
      log.info({ migration: f }, 'migration applied');
    }
    // A database some newer cloud migrated holds that cloud's verb guards, a superset of this
    // one's: an older replica restarting in a rolling deploy must not take its new moves away.
    const known = new Set(files.map((f) => Number(f.slice(0, 4))));
    if ([...done].every((v) => known.has(v))) await syncVerbGuards(tx);
    else log.warn({ code: 'VERB_GUARDS_KEPT' }, 'the database has migrations this cloud does not know: its verb guards are kept');
  });
  return applied;
}
