import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MigrationRefused, migrationFiles, parseRow, parseRows, planMigrations } from '@tobira/shared';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { guardTransactions } from './memory.js';

/**
 * The gateway's SQLite file (better-sqlite3 12: never 13, it crashes on Node 20).
 * WAL so readers do not block the writer; synchronous=FULL so a commit is on
 * disk before we ack anything to the broker.
 *
 * Write-capable handles have their own type (after Signal-Desktop's
 * `WritableDB`): only code given a `WritableDb` can write.
 */
declare const writable: unique symbol;
export type ReadableDb = Database.Database;
export type WritableDb = Database.Database & { readonly [writable]: true };

export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), '../../../migrations');

export function openDatabase(path: string, migrationsDir = MIGRATIONS_DIR): WritableDb {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  // The one place a handle becomes writable: the brand is given here and nowhere else.
  const writableDb = db as WritableDb;
  // the in-memory decision state (memory.ts) follows each transaction's commit or rollback
  guardTransactions(db);
  migrate(writableDb, migrationsDir);
  return writableDb;
}

/**
 * Runs `fn` in one immediate transaction that commits without waiting for the
 * disk flush (synchronous=NORMAL for that commit only; WAL stays consistent).
 * For commits a power cut may lose without harm: the last few seconds of the
 * time floor, 'sent' marks (the row is resent with the same jti), bounded
 * diagnostics rows. The next FULL commit makes them durable anyway. Inside a
 * caller's transaction `fn` simply joins it (and its durability).
 */
export function withoutFsync<T>(db: WritableDb, fn: () => T): T {
  if (db.inTransaction) return fn();
  db.pragma('synchronous = NORMAL');
  try {
    return db.transaction(fn).immediate();
  } finally {
    db.pragma('synchronous = FULL');
  }
}

import { prepared } from './statements.js';

export { prepared };

/** A TEXT column holding JSON: parsed, then validated by `schema` (a row that is not JSON fails the row's parse, never throws a SyntaxError). */
export const jsonColumn = <S extends z.ZodType>(schema: S) =>
  z
    .string()
    .transform((text, ctx): unknown => {
      try {
        const v: unknown = JSON.parse(text);
        return v;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'not JSON' });
        return z.NEVER;
      }
    })
    .pipe(schema);

/** SQLite's 0/1 booleans. */
export const flag = z.union([z.literal(0), z.literal(1)]).transform((v) => v === 1);

const Count = z.object({ n: z.int() });
/** `SELECT count(*) AS n ...` read back. */
export const countOf = (db: ReadableDb, table: string, sql: string, ...params: unknown[]): number =>
  parseRow(table, Count, prepared(db, sql).get(...params)).n;

const Applied = z.object({ version: z.int(), name: z.string(), checksum: z.string().nullable() });

/**
 * Applies numbered, forward-only migrations in order, each in its own
 * transaction with its row in `schema_migrations` (number, name, checksum of
 * its content). Returns the versions applied now. First the database's
 * applied migrations are judged against the files by the rule the cloud
 * uses (`planMigrations`): a number applied under another name, an applied
 * file edited since, a file numbered below one applied — `MigrationRefused`
 * with its code and the file, and nothing is applied. Rows from before
 * checksums were kept get the file's checksum when their name matches.
 */
export function migrate(db: WritableDb, dir = MIGRATIONS_DIR): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT (datetime('now')), checksum TEXT
  ) STRICT`);
  const columns = parseRows('schema_migrations', z.object({ name: z.string() }), db.prepare('PRAGMA table_info(schema_migrations)').all());
  if (!columns.some((c) => c.name === 'checksum')) db.exec('ALTER TABLE schema_migrations ADD COLUMN checksum TEXT');
  const rows = parseRows('schema_migrations', Applied, db.prepare('SELECT version, name, checksum FROM schema_migrations').all());
  const files = migrationFiles(
    readdirSync(dir).filter((f) => f.endsWith('.sql')),
    (f) => readFileSync(join(dir, f), 'utf8'),
  );
  const plan = planMigrations(files, rows);
  if (!plan.ok) throw new MigrationRefused(plan.code, plan.file, plan.detail);
  db.transaction(() => {
    for (const f of plan.backfill)
      db.prepare('UPDATE schema_migrations SET checksum = ? WHERE version = ? AND checksum IS NULL').run(f.checksum, f.version);
  }).immediate();
  const applied: number[] = [];
  for (const f of plan.apply) {
    db.transaction(() => {
      db.exec(f.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, checksum) VALUES (?, ?, ?)').run(f.version, f.name, f.checksum);
    }).immediate();
    applied.push(f.version);
  }
  return applied;
}
