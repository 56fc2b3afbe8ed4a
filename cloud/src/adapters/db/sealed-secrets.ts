import { parseRows } from '@tobira/shared';
import { z } from 'zod';
import { ConfigError } from '../../config.js';
import { SecretUnreadable, kidOf, type SecretBox } from '../kek.js';
import type { Queryable } from './db.js';

/**
 * Every secret column the cloud seals with its KEK (migration 0032,
 * docs/security.md "Secrets at rest"): the clear column (emptied once
 * sealed; dropped by a later migration) and the sealed one. One table here,
 * so sealing at start, the key check and `secrets rotate` cover the same set.
 */
export const SEALED_SECRETS = [
  { table: 'gateways', clear: 'credential_pepper', sealed: 'credential_pepper_sealed' },
  { table: 'webhook_endpoints', clear: 'secret', sealed: 'secret_sealed' },
] as const;
export type SealedSecret = (typeof SEALED_SECRETS)[number];
export type SealedColumn = `${SealedSecret['table']}.${SealedSecret['clear']}`;

/** The additional authenticated data of a row's secret: its table, column and id, so a ciphertext opens in that row only. */
export const aadOf = (column: SealedColumn, id: string): string => `${column}:${id}`;

/** A row's secret in clear: the sealed value opened, or (a row an older cloud wrote, not yet sealed) the clear one. Throws SecretUnreadable. */
export function openSecret(box: SecretBox, column: SealedColumn, id: string, sealed: string | null, clear: string | null): string {
  if (sealed !== null) {
    const o = box.open(sealed, aadOf(column, id));
    if (!o.ok) throw new SecretUnreadable(o.code, `${column} of ${id}`, o.kid);
    return o.value;
  }
  if (clear !== null) return clear;
  throw new SecretUnreadable('SECRET_UNREADABLE', `${column} of ${id}`, null);
}

const Row = z.object({ id: z.string(), clear: z.string().nullable(), sealed: z.string().nullable() });

export interface RotateProgress {
  readonly column: SealedColumn;
  /** Rows of this column sealed under the current KEK by this run so far. */
  readonly rotated: number;
  /** Rows that did not open (their code and kid are logged by the caller): left as they are. */
  readonly unreadable: readonly { readonly id: string; readonly code: 'KEK_UNKNOWN' | 'SECRET_UNREADABLE'; readonly kid: string | null }[];
  /** Rows of this column that were still to do when the run started on it. */
  readonly total: number;
}

export interface RotateResult {
  readonly kid: string;
  readonly rotated: number;
  readonly unreadable: RotateProgress['unreadable'];
  /** Rows not under the current KEK after this run (0: the older KEKs may be removed). */
  readonly remaining: number;
}

/** Rows whose secret is not yet sealed under the key id `$1`: clear, or sealed under another key id. */
const pending = (s: SealedSecret): string =>
  `(${s.clear} IS NOT NULL OR ${s.sealed} IS NULL OR split_part(${s.sealed}, ':', 2) <> $1::text)`;
/** Only the clear ones (a starting cloud); `$1` named so both filters take the same parameters. */
const clearOnly = (s: SealedSecret): string => `(${s.clear} IS NOT NULL AND $1::text IS NOT NULL)`;

/** How many secrets are not under the current KEK (clear ones included). */
export async function countNotUnder(db: Queryable, kid: string): Promise<number> {
  let n = 0;
  for (const s of SEALED_SECRETS) {
    const r = await db.query<{ n: number | string }>(`SELECT count(*) AS n FROM ${s.table} WHERE ${pending(s)}`, [kid]);
    n += Number(r.rows[0]?.n ?? 0);
  }
  return n;
}

/**
 * Seals every secret not under the current KEK with it: clear ones (`onlyClear`,
 * as a starting cloud does) or also those under an older KEK (`secrets rotate`).
 * Batches of `batch` rows in id order, each row written with a compare-and-set
 * on the values it read, so it runs beside live replicas (a row changed
 * meanwhile is left to the next run). Idempotent and resumable: what is done
 * is what is under the current KEK, so a run stopped anywhere (or `limit`
 * reached) is finished by the next one, and a run with nothing to do writes
 * nothing.
 */
export async function resealSecrets(
  db: Queryable,
  box: SecretBox,
  o: {
    readonly batch?: number;
    readonly limit?: number;
    readonly onlyClear?: boolean;
    readonly onProgress?: (p: RotateProgress) => void;
  } = {},
): Promise<RotateResult> {
  const batch = o.batch ?? 100;
  let budget = o.limit ?? Number.POSITIVE_INFINITY;
  let rotated = 0;
  const unreadable: { id: string; code: 'KEK_UNKNOWN' | 'SECRET_UNREADABLE'; kid: string | null }[] = [];
  for (const s of SEALED_SECRETS) {
    const column: SealedColumn = `${s.table}.${s.clear}`;
    const which = o.onlyClear === true ? clearOnly(s) : pending(s);
    const total = Number(
      (await db.query<{ n: number | string }>(`SELECT count(*) AS n FROM ${s.table} WHERE ${which}`, [box.currentKid])).rows[0]?.n ?? 0,
    );
    let done = 0;
    const bad: typeof unreadable = [];
    let after = '';
    while (budget > 0) {
      const r = await db.query(
        `SELECT id, ${s.clear} AS clear, ${s.sealed} AS sealed FROM ${s.table} WHERE ${which} AND id > $2::text ORDER BY id LIMIT $3::int`,
        [box.currentKid, after, Math.min(batch, budget)],
      );
      const rows = parseRows(s.table, Row, r.rows);
      if (rows.length === 0) break;
      for (const row of rows) {
        after = row.id;
        budget -= 1;
        let value: string;
        try {
          value = openSecret(box, column, row.id, row.sealed, row.clear);
        } catch (e) {
          if (!(e instanceof SecretUnreadable)) throw e;
          bad.push({ id: row.id, code: e.code, kid: e.kid });
          continue;
        }
        const w = await db.query(
          `UPDATE ${s.table} SET ${s.sealed} = $2, ${s.clear} = NULL
            WHERE id = $1 AND ${s.sealed} IS NOT DISTINCT FROM $3 AND ${s.clear} IS NOT DISTINCT FROM $4`,
          [row.id, box.seal(value, aadOf(column, row.id)), row.sealed, row.clear],
        );
        done += w.rowCount;
      }
      o.onProgress?.({ column, rotated: done, unreadable: bad, total });
    }
    rotated += done;
    unreadable.push(...bad);
  }
  return { kid: box.currentKid, rotated, unreadable, remaining: await countNotUnder(db, box.currentKid) };
}

/**
 * At start, before any secret is used: every key id the sealed rows name must
 * be in the ring (ConfigError KEK_UNKNOWN), and the ring's key of that id must
 * open one of them (KEK_WRONG), so a cloud given the wrong KEK refuses to
 * start instead of failing each verb and webhook one by one.
 */
export async function checkKeyRing(db: Queryable, box: SecretBox): Promise<void> {
  for (const s of SEALED_SECRETS) {
    const column: SealedColumn = `${s.table}.${s.clear}`;
    const r = await db.query(
      `SELECT DISTINCT ON (split_part(${s.sealed}, ':', 2)) id, NULL AS clear, ${s.sealed} AS sealed
         FROM ${s.table} WHERE ${s.sealed} IS NOT NULL ORDER BY split_part(${s.sealed}, ':', 2), id`,
    );
    for (const row of parseRows(s.table, Row, r.rows)) {
      const o = box.open(row.sealed ?? '', aadOf(column, row.id));
      if (o.ok) continue;
      const kid = o.kid ?? kidOf(row.sealed ?? '');
      // KEK_UNKNOWN names TOBIRA_KEKS whatever was set: the fix is a ring holding the old key behind the new one
      if (o.code === 'KEK_UNKNOWN') throw new ConfigError('KEK_UNKNOWN', 'TOBIRA_KEKS', `kid ${kid ?? '?'} (${column})`);
      throw new ConfigError('KEK_WRONG', box.variable, `kid ${kid ?? '?'} (${column} of ${row.id})`);
    }
  }
}
