import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';

/**
 * The gateway's SQLite file (better-sqlite3 12: never 13, it crashes on Node 20).
 * WAL so readers do not block the writer; synchronous=FULL so a commit is on
 * disk before we ack anything to the broker (DESIGN.md §5).
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
  migrate(db as WritableDb, migrationsDir);
  return db as WritableDb;
}

const MIGRATION_FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/** Applies numbered, forward-only migrations in order, each in its own transaction. Returns the versions applied now. */
export function migrate(db: WritableDb, dir = MIGRATIONS_DIR): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT (datetime('now'))
  ) STRICT`);
  const done = new Set((db.prepare('SELECT version FROM schema_migrations').all() as { version: number }[]).map((r) => r.version));
  const files = readdirSync(dir)
    .map((f) => ({ f, m: MIGRATION_FILE.exec(f) }))
    .filter((x): x is { f: string; m: RegExpExecArray } => x.m !== null)
    .map(({ f, m }) => ({ file: f, version: Number(m[1]), name: m[2] ?? '' }))
    .sort((a, b) => a.version - b.version);
  const applied: number[] = [];
  for (const { file, version, name } of files) {
    if (done.has(version)) continue;
    const sql = readFileSync(join(dir, file), 'utf8');
    db.transaction(() => {
      db.exec(sql);
      db.prepare('INSERT INTO schema_migrations (version, name) VALUES (?, ?)').run(version, name);
    }).immediate();
    applied.push(version);
  }
  return applied;
}
