import type Database from 'better-sqlite3';

const statements = new WeakMap<Database.Database, Map<string, Database.Statement>>();

/**
 * The handle's prepared statement for `sql`, prepared on its first use and
 * kept for the handle's life: preparing costs more than running most of our
 * statements (the decision path's profile showed a third of its CPU in
 * `prepare`). Only for fixed SQL text (the cache is keyed by it); a closed
 * handle's statements go with it.
 */
export function prepared(db: Database.Database, sql: string): Database.Statement {
  let byText = statements.get(db);
  if (byText === undefined) {
    byText = new Map();
    statements.set(db, byText);
  }
  let s = byText.get(sql);
  if (s === undefined) {
    s = db.prepare(sql);
    byText.set(sql, s);
  }
  return s;
}
