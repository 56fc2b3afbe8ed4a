import { parseRow } from '@tobira/shared';
import { z } from 'zod';
import { countOf, prepared, type ReadableDb, type WritableDb } from './db.js';

/**
 * The addresses each staff account signed in from (`staff_known_addresses`,
 * migration 0017): every statement on the table. The sign-in throttle asks
 * whether an address is known for a name (exempt from the per-name limit);
 * a successful sign-in records it. The name is matched like a sign-in's
 * (without case); an unknown name has no row.
 */

/** Whether `ip` signed in as `username` within (`since`, `now`]. */
export function isKnownAddress(db: ReadableDb, username: string, ip: string, since: number, now: number): boolean {
  return (
    countOf(
      db,
      'staff_known_addresses',
      `SELECT count(*) AS n FROM staff_known_addresses k JOIN staff_accounts a ON a.account_id = k.account_id
       WHERE a.username = ? AND k.ip = ? AND k.last_signed_in_at > ? AND k.last_signed_in_at <= ?`,
      username,
      ip,
      since,
      now,
    ) > 0
  );
}

/**
 * Records a successful sign-in of `username` from `ip` at `now`, and keeps the
 * account's rows bounded: those at or before `since` go, and of the rest only
 * the newest `keep`. Joins the caller's transaction; false: no such account.
 */
export function rememberAddress(db: WritableDb, username: string, ip: string, now: number, since: number, keep: number): boolean {
  const r: unknown = prepared(db, 'SELECT account_id FROM staff_accounts WHERE username = ?').get(username);
  if (r === undefined) return false;
  const id = parseRow('staff_accounts', z.object({ account_id: z.string() }), r);
  prepared(
    db,
    `INSERT INTO staff_known_addresses (account_id, ip, last_signed_in_at) VALUES (?, ?, ?)
     ON CONFLICT (account_id, ip) DO UPDATE SET last_signed_in_at = excluded.last_signed_in_at`,
  ).run(id.account_id, ip, now);
  prepared(
    db,
    `DELETE FROM staff_known_addresses WHERE account_id = @account AND (last_signed_in_at <= @since OR ip NOT IN (
       SELECT ip FROM staff_known_addresses WHERE account_id = @account ORDER BY last_signed_in_at DESC, ip LIMIT @keep))`,
  ).run({ account: id.account_id, since, keep });
  return true;
}

/** Deletes every row last used at or before `since`; returns how many. */
export function purgeKnownAddresses(db: WritableDb, since: number): number {
  return prepared(db, 'DELETE FROM staff_known_addresses WHERE last_signed_in_at <= ?').run(since).changes;
}
