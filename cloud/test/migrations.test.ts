import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MigrationRefused, generateSigningKeyPair, migrationChecksum } from '@tobira/shared';
import { createTestDatabase, pgBackends, type PgBackendName } from '@tobira/shared/testing';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Db } from '../src/adapters/db/db.js';
import { MIGRATIONS_DIR, migrate } from '../src/adapters/db/migrate.js';
import { openDb } from '../src/adapters/db/open.js';
import { T0, TEST_KEK, testLog } from './helpers.js';

/**
 * The cloud's migrator against a database that applied other migrations
 * than the files say: a renumbered migration (0002 moved to 0003, a new
 * 0002 added) is refused, not skipped; so is an applied file edited since,
 * one numbered below what was applied, and a database from before checksums
 * were kept is backfilled by name and then held to them. Last, `npm run
 * cloud` itself on such a database: exit 1, one JSON line with the code and
 * the file, and the database unchanged. PGlite and PostgreSQL.
 */
const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
// a fresh PGlite per test, on a shared machine
vi.setConfig({ testTimeout: 120_000 });

describe.each(pgBackends())('cloud migrations on %s', (backend: PgBackendName) => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  /** A database of its own (PGlite in a directory, so a child process can open it after us) and a migrations folder. */
  async function fresh(): Promise<{ db: Db; dir: string; env: Record<string, string>; reopen(): Promise<Db> }> {
    const t = await createTestDatabase(backend);
    const dataDir = mkdtempSync(join(tmpdir(), 'tobira-mig-db-'));
    const dir = `${mkdtempSync(join(tmpdir(), 'tobira-mig-'))}/`;
    const opts = { databaseUrl: t.backend === 'postgres' ? t.url : undefined, pgliteDataDir: dataDir };
    let db = await openDb(opts, testLog);
    cleanups.push(async () => {
      await db.close().catch(() => {});
      await t.drop();
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    });
    return {
      get db() {
        return db;
      },
      dir,
      env: t.backend === 'postgres' ? { DATABASE_URL: t.url } : { PGLITE_DATA_DIR: dataDir },
      async reopen() {
        db = await openDb(opts, testLog);
        return db;
      },
    };
  }
  const write = (dir: string, file: string, sql: string) => writeFileSync(join(dir, file), sql);
  const tables = async (db: Db) =>
    (
      await db.query<{ t: string }>(
        "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'm_%' ORDER BY 1",
      )
    ).rows.map((r) => r.t);
  const refusal = async (p: Promise<unknown>) => {
    const e = await p.then(
      () => null,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(MigrationRefused);
    return e as MigrationRefused;
  };

  it('a renumbered migration is refused, naming the file, and neither the new 0002 nor the old one as 0003 runs', async () => {
    const f = await fresh();
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);');
    write(f.dir, '0002_b.sql', 'CREATE TABLE m_b (id int);');
    expect(await migrate(f.db, testLog, T0, f.dir)).toEqual(['0001_a.sql', '0002_b.sql']);
    // the branch's 0002 renumbered to 0003 after it ran here, another 0002 landed before it
    renameSync(join(f.dir, '0002_b.sql'), join(f.dir, '0003_b.sql'));
    write(f.dir, '0002_c.sql', 'CREATE TABLE m_c (id int);');
    const e = await refusal(migrate(f.db, testLog, T0, f.dir));
    expect(e.code).toBe('MIGRATION_RENUMBERED');
    expect(e.file).toBe('0002_c.sql');
    expect(e.detail).toContain('0002_b.sql');
    expect(e.detail).toContain('0003_b.sql');
    expect(await tables(f.db)).toEqual(['m_a', 'm_b']);
    expect((await f.db.query('SELECT version FROM schema_migrations ORDER BY 1')).rows).toEqual([{ version: 1 }, { version: 2 }]);
  });

  it('an applied migration edited since is refused; a new migration after it is not run', async () => {
    const f = await fresh();
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);\n');
    await migrate(f.db, testLog, T0, f.dir);
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int, extra text);\n');
    write(f.dir, '0002_b.sql', 'CREATE TABLE m_b (id int);');
    const e = await refusal(migrate(f.db, testLog, T0, f.dir));
    expect([e.code, e.file]).toEqual(['MIGRATION_EDITED', '0001_a.sql']);
    expect(await tables(f.db)).toEqual(['m_a']);
    // the same content with other line endings is the same migration
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);\r\n');
    expect(await migrate(f.db, testLog, T0, f.dir)).toEqual(['0002_b.sql']);
  });

  it('a file numbered below the newest applied one, a missing one and a repeated number are refused', async () => {
    const f = await fresh();
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);');
    write(f.dir, '0003_c.sql', 'CREATE TABLE m_c (id int);');
    await migrate(f.db, testLog, T0, f.dir);
    write(f.dir, '0002_b.sql', 'CREATE TABLE m_b (id int);');
    expect(await refusal(migrate(f.db, testLog, T0, f.dir))).toMatchObject({ code: 'MIGRATION_OUT_OF_ORDER', file: '0002_b.sql' });
    rmSync(join(f.dir, '0002_b.sql'));
    rmSync(join(f.dir, '0001_a.sql'));
    expect(await refusal(migrate(f.db, testLog, T0, f.dir))).toMatchObject({ code: 'MIGRATION_MISSING', file: '0001_a.sql' });
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);');
    write(f.dir, '0004_d.sql', 'CREATE TABLE m_d (id int);');
    write(f.dir, '0004_e.sql', 'CREATE TABLE m_e (id int);');
    expect(await refusal(migrate(f.db, testLog, T0, f.dir))).toMatchObject({ code: 'MIGRATION_DUPLICATE' });
    expect(await tables(f.db)).toEqual(['m_a', 'm_c']);
  });

  it('a database migrated before checksums were kept is backfilled by name on the first start, then held to them', async () => {
    const f = await fresh();
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);');
    write(f.dir, '0002_b.sql', 'CREATE TABLE m_b (id int);');
    // what the migrator before this one left: numbers and names, no checksum column
    await f.db.exec(`CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL);
      CREATE TABLE m_a (id int); INSERT INTO schema_migrations VALUES (1, 'a', 0);`);
    expect(await migrate(f.db, testLog, T0, f.dir)).toEqual(['0002_b.sql']);
    expect((await f.db.query('SELECT version, checksum FROM schema_migrations ORDER BY 1')).rows).toEqual([
      { version: 1, checksum: migrationChecksum('CREATE TABLE m_a (id int);') },
      { version: 2, checksum: migrationChecksum('CREATE TABLE m_b (id int);') },
    ]);
    write(f.dir, '0001_a.sql', 'CREATE TABLE m_a (id bigint);');
    expect(await refusal(migrate(f.db, testLog, T0, f.dir))).toMatchObject({ code: 'MIGRATION_EDITED', file: '0001_a.sql' });

    // an old database whose number was applied under another name is refused at the backfill already
    const g = await fresh();
    write(g.dir, '0001_a.sql', 'CREATE TABLE m_a (id int);');
    await g.db.exec(`CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL);
      INSERT INTO schema_migrations VALUES (1, 'other', 0);`);
    expect(await refusal(migrate(g.db, testLog, T0, g.dir))).toMatchObject({ code: 'MIGRATION_RENUMBERED', file: '0001_a.sql' });
  });

  it(
    '`npm run cloud` on a database that applied its newest number under another name exits 1 with one coded JSON line naming the file',
    { timeout: 90_000 },
    async () => {
      const f = await fresh();
      await migrate(f.db, testLog, T0);
      const newest = readdirSync(MIGRATIONS_DIR)
        .filter((x) => /^\d{4}_[a-z0-9_]+\.sql$/.test(x))
        .sort()
        .at(-1);
      if (newest === undefined) throw new Error('no migrations');
      await f.db.query('UPDATE schema_migrations SET name = $1 WHERE version = $2', ['another_branch', Number(newest.slice(0, 4))]);
      const before = (await f.db.query('SELECT version, name, checksum FROM schema_migrations ORDER BY 1')).rows;
      await f.db.close();
      const { privateJwk } = await generateSigningKeyPair();
      const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
        env: {
          PATH: process.env.PATH ?? '',
          LOG_LEVEL: 'info',
          ADMIN_API_PORT: '0',
          MQTT_URL: 'mqtt://127.0.0.1:1',
          CLOUD_SIGNING_JWK: JSON.stringify(privateJwk),
          TOBIRA_KEK: TEST_KEK,
          ...f.env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
      child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      const code = await new Promise<number | null>((resolve) => {
        const timer = setTimeout(() => {
          child.kill('SIGKILL');
          resolve(null);
        }, 60_000);
        child.once('exit', (c) => {
          clearTimeout(timer);
          resolve(c);
        });
      });
      const lines = stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(code, stderr).toBe(1);
      expect(
        lines.find((l) => l.code === 'MIGRATION_RENUMBERED'),
        JSON.stringify(lines),
      ).toMatchObject({ file: newest, msg: 'migrations refused; not starting', cid: expect.any(String) });
      expect(lines.map((l) => l.msg)).not.toContain('cloud started');
      const db = await f.reopen();
      expect((await db.query('SELECT version, name, checksum FROM schema_migrations ORDER BY 1')).rows).toEqual(before);
    },
  );
});
