import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { MigrationRefused, migrationFiles, planMigrations, type Logger } from '@tobira/shared';
import { z } from 'zod';
import type { Db } from './db.js';
import { syncVerbGuards } from './verb-guards.js';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../../migrations/', import.meta.url));

const Applied = z.object({ version: z.number(), name: z.string(), checksum: z.string().nullable() });

/**
 * Applies numbered, forward-only migrations (`NNNN_name.sql`) in order in
 * one transaction, each with its row in `schema_migrations` (number, name,
 * checksum of its content). An advisory lock keeps two replicas starting at
 * once from applying one twice. Before anything runs, what the database
 * applied is compared with the files (`planMigrations`, shared with the
 * gateway): a number applied under another name, an applied file edited
 * since, a file numbered below what was applied — `MigrationRefused`, with
 * its code and the file, and nothing changes. Rows from before checksums
 * were kept get the file's checksum when their name matches (they were
 * applied by name).
 * Then, in the same transaction, the verb guards are copied from the
 * code's state tables (`syncVerbGuards`).
 */
export async function migrate(db: Db, log: Logger, nowMs: number, dir = MIGRATIONS_DIR): Promise<string[]> {
  const names = (await readdir(dir)).sort();
  const contents = new Map<string, string>();
  for (const f of names) if (f.endsWith('.sql')) contents.set(f, await readFile(`${dir}${f}`, 'utf8'));
  const files = migrationFiles(
    names.filter((f) => contents.has(f)),
    (f) => contents.get(f) ?? '',
  );
  const applied: string[] = [];
  await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock(7461626972)');
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version int PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL, checksum text)`);
    await tx.query('ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text');
    const rows = (await tx.query('SELECT version, name, checksum FROM schema_migrations')).rows.map((r) => Applied.parse(r));
    const plan = planMigrations(files, rows);
    if (!plan.ok) throw new MigrationRefused(plan.code, plan.file, plan.detail);
    for (const a of plan.ahead)
      log.warn({ code: 'MIGRATION_AHEAD', version: a.version, name: a.name }, 'the database has a newer migration');
    for (const f of plan.backfill) {
      await tx.query('UPDATE schema_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL', [f.version, f.checksum]);
    }
    if (plan.backfill.length > 0) log.info({ count: plan.backfill.length }, 'migration checksums recorded');
    for (const f of plan.apply) {
      await tx.exec(f.sql);
      await tx.query('INSERT INTO schema_migrations (version, name, applied_at, checksum) VALUES ($1, $2, $3, $4)', [
        f.version,
        f.name,
        nowMs,
        f.checksum,
      ]);
      applied.push(f.file);
      log.info({ migration: f.file }, 'migration applied');
    }
    // A database some newer cloud migrated holds that cloud's verb guards, a superset of this
    // one's: an older replica restarting in a rolling deploy must not take its new moves away.
    if (plan.ahead.length === 0) await syncVerbGuards(tx);
    else log.warn({ code: 'VERB_GUARDS_KEPT' }, 'the database has migrations this cloud does not know: its verb guards are kept');
  });
  return applied;
}
