import { createHash } from 'node:crypto';

/**
 * The one rule both migrators (the cloud's on PostgreSQL/PGlite, the
 * gateway's on SQLite) judge a database's applied migrations by, against
 * the migration files of the code that starts. A migration is known by its
 * number, its name and the checksum of its content: a number applied under
 * another name, or content changed since it was applied, means this code and
 * this database disagree about the schema, and starting would run a new
 * migration's number as done (it never runs) or an old one twice. So the
 * process refuses to start, naming the file, and applies nothing.
 *
 * The checksum is of the file's content only (line endings normalized), not
 * of its number or name: this repository's merges renumber a branch's
 * migrations before they land, which changes neither.
 */
export const MIGRATION_CODES = Object.freeze({
  MIGRATION_RENUMBERED:
    'The database applied this number under another name: a migration was renumbered or replaced after it ran here; nothing was applied.',
  MIGRATION_EDITED: 'The content of a migration the database already applied has changed since; nothing was applied.',
  MIGRATION_MISSING: 'The database applied a migration that the code no longer has (below its newest one); nothing was applied.',
  MIGRATION_OUT_OF_ORDER: 'A migration is numbered below one the database already applied, so it would never run; nothing was applied.',
  MIGRATION_DUPLICATE: 'Two migration files have the same number; nothing was applied.',
});
export type MigrationCode = keyof typeof MIGRATION_CODES;

/** `NNNN_name.sql`: the only file names a migrator reads. */
export const MIGRATION_FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

export interface MigrationFile {
  readonly file: string;
  readonly version: number;
  readonly name: string;
  readonly checksum: string;
  readonly sql: string;
}

export interface AppliedMigration {
  readonly version: number;
  readonly name: string;
  /** null: applied before checksums were recorded (backfilled from the file when its name matches). */
  readonly checksum: string | null;
}

export type MigrationPlan =
  | {
      readonly ok: true;
      /** to run now, in order */
      readonly apply: readonly MigrationFile[];
      /** applied by name before checksums were kept: record the file's checksum */
      readonly backfill: readonly MigrationFile[];
      /** applied versions above every file: a database migrated by newer code */
      readonly ahead: readonly AppliedMigration[];
    }
  | { readonly ok: false; readonly code: MigrationCode; readonly file: string; readonly detail: string };

/** A refusal to start: the database and the migration files disagree. */
export class MigrationRefused extends Error {
  constructor(
    readonly code: MigrationCode,
    readonly file: string,
    readonly detail: string,
  ) {
    super(`${code}: ${file}: ${detail}`);
    this.name = 'MigrationRefused';
  }
}

export const migrationChecksum = (sql: string): string => createHash('sha256').update(sql.replace(/\r\n/g, '\n'), 'utf8').digest('hex');

const fileName = (version: number, name: string) => `${String(version).padStart(4, '0')}_${name}.sql`;

/** The migration files among `names`, parsed, with their content read by `read`. */
export function migrationFiles(names: readonly string[], read: (file: string) => string): MigrationFile[] {
  return names
    .map((file) => ({ file, m: MIGRATION_FILE.exec(file) }))
    .filter((x): x is { file: string; m: RegExpExecArray } => x.m !== null)
    .map(({ file, m }) => {
      const sql = read(file);
      return { file, version: Number(m[1]), name: m[2] ?? '', checksum: migrationChecksum(sql), sql };
    })
    .sort((a, b) => a.version - b.version || a.file.localeCompare(b.file));
}

/** What to do with a database that applied `applied`, given the code's `files`; or why not to start. Pure. */
export function planMigrations(files: readonly MigrationFile[], applied: readonly AppliedMigration[]): MigrationPlan {
  const byVersion = new Map<number, MigrationFile>();
  for (const f of files) {
    const other = byVersion.get(f.version);
    if (other) return { ok: false, code: 'MIGRATION_DUPLICATE', file: f.file, detail: `${other.file} has the same number` };
    byVersion.set(f.version, f);
  }
  const newestFile = Math.max(0, ...files.map((f) => f.version));
  const done = new Map(applied.map((a) => [a.version, a]));
  const backfill: MigrationFile[] = [];
  const ahead: AppliedMigration[] = [];
  for (const a of [...applied].sort((x, y) => x.version - y.version)) {
    const f = byVersion.get(a.version);
    if (!f) {
      if (a.version > newestFile) {
        ahead.push(a);
        continue;
      }
      return {
        ok: false,
        code: 'MIGRATION_MISSING',
        file: fileName(a.version, a.name),
        detail: 'applied here, and no file has its number',
      };
    }
    if (f.name !== a.name) {
      const moved = files.find((x) => x.name === a.name);
      return {
        ok: false,
        code: 'MIGRATION_RENUMBERED',
        file: f.file,
        detail: `the database applied ${fileName(a.version, a.name)} as number ${a.version}${moved ? `, now ${moved.file}` : ''}`,
      };
    }
    if (a.checksum === null) backfill.push(f);
    else if (a.checksum !== f.checksum)
      return {
        ok: false,
        code: 'MIGRATION_EDITED',
        file: f.file,
        detail: `applied with checksum ${a.checksum}, the file now has ${f.checksum}`,
      };
  }
  const newestApplied = Math.max(0, ...applied.map((a) => a.version));
  const apply: MigrationFile[] = [];
  for (const f of files) {
    if (done.has(f.version)) continue;
    if (f.version < newestApplied)
      return { ok: false, code: 'MIGRATION_OUT_OF_ORDER', file: f.file, detail: `the database already applied number ${newestApplied}` };
    apply.push(f);
  }
  return { ok: true, apply, backfill, ahead };
}
