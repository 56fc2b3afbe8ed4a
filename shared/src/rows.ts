import { type z } from 'zod';

/**
 * Rows read back from a database are a boundary like any other:
 * each is parsed once by a zod schema into the domain type, and a row that
 * does not fit is a `CorruptRow`, never a half-built object. Both services'
 * storage adapters use these; pagination cursors are here for the same reason.
 */

/** A row that cannot be a valid domain object: an adapter error (a 500 at the HTTP edge, details logged). */
export class CorruptRow extends Error {
  constructor(
    readonly table: string,
    detail: string,
  ) {
    super(`corrupt row in ${table}: ${detail}`);
    this.name = 'CorruptRow';
  }
}

/** Parses one row with `schema`, or throws `CorruptRow` naming the table and the fields that did not fit. */
export function parseRow<S extends z.ZodType>(table: string, schema: S, raw: unknown): z.infer<S> {
  const r = schema.safeParse(raw);
  if (!r.success)
    throw new CorruptRow(
      table,
      r.error.issues
        .map((i) => `${i.path.join('.')}: ${i.message}`)
        .join('; ')
        .slice(0, 300),
    );
  return r.data;
}

/** `parseRow` over every row of a result. */
export function parseRows<S extends z.ZodType>(table: string, schema: S, rows: readonly unknown[]): z.infer<S>[] {
  return rows.map((raw) => parseRow(table, schema, raw));
}

/** One page of a keyset-paginated list: never OFFSET, so rows inserted meanwhile neither repeat nor skip. */
export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}

/**
 * What a keyset-paginated list is asked: the filters `F` (each optional,
 * absent or undefined = any), the sort key `C` of the previous page's last
 * row (decoded from its cursor; null for the first page) and the page size.
 */
export type PageQuery<F, C extends readonly unknown[]> = { readonly [K in keyof F]?: F[K] | undefined } & {
  readonly cursor: Readonly<C> | null;
  readonly limit: number;
};

/** Opaque cursor: base64url JSON of the last row's sort key. */
export const encodeCursor = (key: readonly (string | number)[]): string => Buffer.from(JSON.stringify(key)).toString('base64url');

/** Decodes a cursor against the sort key's schema: the key, null when absent, or 'bad' for anything else. */
export function decodeCursor<S extends z.ZodType>(schema: S, cursor: string | undefined): z.infer<S> | null | 'bad' {
  if (cursor === undefined) return null;
  try {
    const r = schema.safeParse(JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')));
    return r.success ? r.data : 'bad';
  } catch {
    return 'bad';
  }
}

/** A page from `limit + 1` rows read in sort order: the extra row only says another page exists. */
export function pageOf<T>(rows: readonly T[], limit: number, key: (r: T) => readonly (string | number)[]): Page<T> {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, nextCursor: rows.length > limit && last !== undefined ? encodeCursor(key(last)) : null };
}
