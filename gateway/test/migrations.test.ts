import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MigrationRefused, migrationChecksum } from '@tobira/shared';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR, migrate, openDatabase, type WritableDb } from '../src/adapters/sqlite/db.js';

/**
 * The gateway's migrator (run by `openDatabase`, the daemon's first step)
 * against a SQLite file that applied other migrations than the files say:
 * a renumbered migration is refused, not skipped; an applied file edited
 * since too; a file from before checksums were kept is backfilled by name
 * on its first open and then held to them. Nothing is applied on a refusal.
 */
describe('gateway migrations', () => {
  const dirs: string[] = [];
  const dbs: Database.Database[] = [];
  afterEach(() => {
    for (const d of dbs.splice(0)) if (d.open) d.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const fresh = () => {
    const root = mkdtempSync(join(tmpdir(), 'tobira-gw-mig-'));
    dirs.push(root);
    const dir = join(root, 'migrations');
    mkdirSync(dir);
    return { dir, file: join(root, 'gw.sqlite') };
  };
  const open = (file: string, dir: string): WritableDb => {
    const db = openDatabase(file, dir);
    dbs.push(db);
    return db;
  };
  const refusal = (fn: () => unknown): MigrationRefused => {
    try {
      fn();
    } catch (e) {
      expect(e).toBeInstanceOf(MigrationRefused);
      return e as MigrationRefused;
    }
    throw new Error('not refused');
  };
  const tables = (file: string) => {
    const db = new Database(file, { readonly: true });
    try {
      return (
        db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'm\\_%' ESCAPE '\\' ORDER BY 1").all() as {
          name: string;
        }[]
      ).map((r) => r.name);
    } finally {
      db.close();
    }
  };

  it('a renumbered migration (0002 moved to 0003, a new 0002) is refused at open, naming the file; neither runs', () => {
    const { dir, file } = fresh();
    writeFileSync(join(dir, '0001_a.sql'), 'CREATE TABLE m_a (id INTEGER) STRICT;');
    writeFileSync(join(dir, '0002_b.sql'), 'CREATE TABLE m_b (id INTEGER) STRICT;');
    open(file, dir).close();
    renameSync(join(dir, '0002_b.sql'), join(dir, '0003_b.sql'));
    writeFileSync(join(dir, '0002_c.sql'), 'CREATE TABLE m_c (id INTEGER) STRICT;');
    const e = refusal(() => open(file, dir));
    expect([e.code, e.file]).toEqual(['MIGRATION_RENUMBERED', '0002_c.sql']);
    expect(e.detail).toContain('0003_b.sql');
    expect(tables(file)).toEqual(['m_a', 'm_b']);
  });

  it('an applied migration edited since is refused; the same content with CRLF line endings is not an edit', () => {
    const { dir, file } = fresh();
    writeFileSync(join(dir, '0001_a.sql'), 'CREATE TABLE m_a (id INTEGER) STRICT;\n');
    open(file, dir).close();
    writeFileSync(join(dir, '0001_a.sql'), 'CREATE TABLE m_a (id INTEGER, x TEXT) STRICT;\n');
    writeFileSync(join(dir, '0002_b.sql'), 'CREATE TABLE m_b (id INTEGER) STRICT;');
    expect(refusal(() => open(file, dir))).toMatchObject({ code: 'MIGRATION_EDITED', file: '0001_a.sql' });
    expect(tables(file)).toEqual(['m_a']);
    writeFileSync(join(dir, '0001_a.sql'), 'CREATE TABLE m_a (id INTEGER) STRICT;\r\n');
    const db = open(file, dir);
    expect(tables(file)).toEqual(['m_a', 'm_b']);
    expect(migrate(db, dir)).toEqual([]);
  });

  it('a file migrated before checksums were kept is backfilled by name on its first open, then held to them', () => {
    const { dir, file } = fresh();
    writeFileSync(join(dir, '0001_a.sql'), 'CREATE TABLE m_a (id INTEGER) STRICT;');
    writeFileSync(join(dir, '0002_b.sql'), 'CREATE TABLE m_b (id INTEGER) STRICT;');
    // what the gateway before this migrator left: numbers and names only
    const old = new Database(file);
    old.exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT (datetime('now'))) STRICT;
      CREATE TABLE m_a (id INTEGER) STRICT; INSERT INTO schema_migrations (version, name) VALUES (1, 'a');`);
    old.close();
    const db = open(file, dir);
    expect(db.prepare('SELECT version, checksum FROM schema_migrations ORDER BY 1').all()).toEqual([
      { version: 1, checksum: migrationChecksum('CREATE TABLE m_a (id INTEGER) STRICT;') },
      { version: 2, checksum: migrationChecksum('CREATE TABLE m_b (id INTEGER) STRICT;') },
    ]);
    db.close();
    writeFileSync(join(dir, '0001_a.sql'), 'CREATE TABLE m_a (id INTEGER, y TEXT) STRICT;');
    expect(refusal(() => open(file, dir))).toMatchObject({ code: 'MIGRATION_EDITED', file: '0001_a.sql' });
  });

  it("the gateway's own migrations open a fresh file and record a checksum for each", () => {
    const { file } = fresh();
    const db = open(file, MIGRATIONS_DIR);
    const rows = db.prepare('SELECT checksum FROM schema_migrations').all() as { checksum: string | null }[];
    expect(rows.length).toBeGreaterThan(10);
    for (const r of rows) expect(r.checksum).toMatch(/^[0-9a-f]{64}$/);
  });
});
