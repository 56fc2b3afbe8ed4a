import { STATUS_GUARDS, VALUE_GUARDS } from '../../domain/verb-guards.js';
import type { Queryable } from './db.js';

/** SQLSTATE of a write the verb guard refused (migration `verb_guards`); the error's `table` and `column` name the column. */
export const VERB_GUARD_SQLSTATE = 'TB401';

export interface VerbGuardRows {
  readonly columns: readonly { readonly table: string; readonly column: string; readonly kind: 'status' | 'value' }[];
  readonly moves: readonly {
    readonly table: string;
    readonly column: string;
    readonly verb: string;
    readonly from: string | null;
    readonly to: string;
  }[];
  readonly writers: readonly { readonly table: string; readonly column: string; readonly verb: string }[];
}

/** The rows the database must hold, from the code's literal tables (`domain/verb-guards.ts`). */
export function verbGuardRows(): VerbGuardRows {
  return {
    columns: [
      ...STATUS_GUARDS.map((g) => ({ table: g.table, column: g.column, kind: 'status' as const })),
      ...VALUE_GUARDS.map((g) => ({ table: g.table, column: g.column, kind: 'value' as const })),
    ],
    moves: STATUS_GUARDS.flatMap((g) => g.moves.map((m) => ({ table: g.table, column: g.column, ...m }))),
    writers: VALUE_GUARDS.flatMap((g) => g.verbs.map((verb) => ({ table: g.table, column: g.column, verb }))),
  };
}

/** What the database holds now. */
export async function loadVerbGuardRows(q: Queryable): Promise<VerbGuardRows> {
  const c = await q.query<{ table_name: string; column_name: string; kind: 'status' | 'value' }>(
    'SELECT table_name, column_name, kind FROM verb_guarded_columns',
  );
  const m = await q.query<{ table_name: string; column_name: string; verb: string; from_value: string | null; to_value: string }>(
    'SELECT table_name, column_name, verb, from_value, to_value FROM verb_moves',
  );
  const w = await q.query<{ table_name: string; column_name: string; verb: string }>(
    'SELECT table_name, column_name, verb FROM verb_columns',
  );
  return {
    columns: c.rows.map((r) => ({ table: r.table_name, column: r.column_name, kind: r.kind })),
    moves: m.rows.map((r) => ({ table: r.table_name, column: r.column_name, verb: r.verb, from: r.from_value, to: r.to_value })),
    writers: w.rows.map((r) => ({ table: r.table_name, column: r.column_name, verb: r.verb })),
  };
}

/**
 * Makes the database's verb-guard tables equal to the code's, in the caller's
 * transaction (the migration's, under its lock: replicas starting together
 * write them one after the other, and a verb running meanwhile reads the old
 * rows or the new ones, never none). A database without the tables (a
 * migrations directory before them) is left alone.
 */
export async function syncVerbGuards(q: Queryable): Promise<void> {
  const exists = await q.query<{ t: string | null }>("SELECT to_regclass('verb_moves')::text AS t");
  if (exists.rows[0]?.t == null) return;
  const rows = verbGuardRows();
  await q.query('DELETE FROM verb_guarded_columns');
  await q.query('DELETE FROM verb_moves');
  await q.query('DELETE FROM verb_columns');
  await q.query(
    'INSERT INTO verb_guarded_columns (table_name, column_name, kind) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])',
    [rows.columns.map((r) => r.table), rows.columns.map((r) => r.column), rows.columns.map((r) => r.kind)],
  );
  await q.query(
    `INSERT INTO verb_moves (table_name, column_name, verb, from_value, to_value)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])`,
    [
      rows.moves.map((r) => r.table),
      rows.moves.map((r) => r.column),
      rows.moves.map((r) => r.verb),
      rows.moves.map((r) => r.from),
      rows.moves.map((r) => r.to),
    ],
  );
  await q.query('INSERT INTO verb_columns (table_name, column_name, verb) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])', [
    rows.writers.map((r) => r.table),
    rows.writers.map((r) => r.column),
    rows.writers.map((r) => r.verb),
  ]);
}
