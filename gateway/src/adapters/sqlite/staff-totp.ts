import { parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import { prepared, type ReadableDb, type WritableDb } from './db.js';

/**
 * Supervisors' TOTP second factor (`staff_totp`) and their recovery codes
 * (`staff_recovery_codes`): every statement on these tables. The secret
 * arrives here sealed (app/staff-totp.ts), recovery codes as SHA-256 hex:
 * nothing in these tables is usable as it is. Writers that change more than
 * one row join the caller's transaction.
 */

export interface TotpRow {
  readonly accountId: string;
  readonly secretBox: string;
  readonly confirmedAt: number | null;
  readonly lastStep: number | null;
}
const Row = z
  .object({ account_id: z.string(), secret_box: z.string(), confirmed_at: z.int().nullable(), last_step: z.int().nullable() })
  .transform((r): TotpRow => ({ accountId: r.account_id, secretBox: r.secret_box, confirmedAt: r.confirmed_at, lastStep: r.last_step }));

export function totpOf(db: ReadableDb, accountId: string): TotpRow | null {
  const r: unknown = prepared(db, 'SELECT account_id, secret_box, confirmed_at, last_step FROM staff_totp WHERE account_id = ?').get(
    accountId,
  );
  return r === undefined ? null : parseRow('staff_totp', Row, r);
}

/** The ids of accounts whose enrolment is confirmed (the account list shows it). */
export function enrolledAccountIds(db: ReadableDb): Set<string> {
  const rows = parseRows(
    'staff_totp',
    z.object({ account_id: z.string() }),
    prepared(db, 'SELECT account_id FROM staff_totp WHERE confirmed_at IS NOT NULL').all(),
  );
  return new Set(rows.map((r) => r.account_id));
}

/** A new pending enrolment, replacing a pending one; false when a confirmed one exists (nothing written). */
export function putPendingTotp(db: WritableDb, accountId: string, secretBox: string, now: number): boolean {
  return (
    prepared(
      db,
      `INSERT INTO staff_totp (account_id, secret_box, confirmed_at, last_step, created_at) VALUES (?, ?, NULL, NULL, ?)
       ON CONFLICT (account_id) DO UPDATE SET secret_box = excluded.secret_box, created_at = excluded.created_at, last_step = NULL
       WHERE staff_totp.confirmed_at IS NULL`,
    ).run(accountId, secretBox, now).changes === 1
  );
}

/** The pending enrolment confirmed with the code of `step`, and its recovery codes replaced; false: nothing pending. */
export function confirmTotp(db: WritableDb, accountId: string, step: number, codeHashes: readonly string[], now: number): boolean {
  const done =
    prepared(db, 'UPDATE staff_totp SET confirmed_at = ?, last_step = ? WHERE account_id = ? AND confirmed_at IS NULL').run(
      now,
      step,
      accountId,
    ).changes === 1;
  if (!done) return false;
  prepared(db, 'DELETE FROM staff_recovery_codes WHERE account_id = ?').run(accountId);
  const ins = prepared(db, 'INSERT INTO staff_recovery_codes (account_id, code_hash, used_at) VALUES (?, ?, NULL)');
  for (const h of codeHashes) ins.run(accountId, h);
  return true;
}

/** Records `step` as the last accepted one; false when it is not after the last (a replay, or a race lost to one). */
export function advanceTotpStep(db: WritableDb, accountId: string, step: number): boolean {
  return (
    prepared(
      db,
      'UPDATE staff_totp SET last_step = ? WHERE account_id = ? AND confirmed_at IS NOT NULL AND (last_step IS NULL OR last_step < ?)',
    ).run(step, accountId, step).changes === 1
  );
}

/** The enrolment and its recovery codes deleted; true when there was one. */
export function deleteTotp(db: WritableDb, accountId: string): boolean {
  prepared(db, 'DELETE FROM staff_recovery_codes WHERE account_id = ?').run(accountId);
  return prepared(db, 'DELETE FROM staff_totp WHERE account_id = ?').run(accountId).changes === 1;
}

/** Uses a recovery code once: `used` when it was unused, `already_used`, or `unknown`. */
export function useRecoveryCode(db: WritableDb, accountId: string, codeHash: string, now: number): 'used' | 'already_used' | 'unknown' {
  if (
    prepared(db, 'UPDATE staff_recovery_codes SET used_at = ? WHERE account_id = ? AND code_hash = ? AND used_at IS NULL').run(
      now,
      accountId,
      codeHash,
    ).changes === 1
  )
    return 'used';
  const r: unknown = prepared(db, 'SELECT 1 AS x FROM staff_recovery_codes WHERE account_id = ? AND code_hash = ?').get(
    accountId,
    codeHash,
  );
  return r === undefined ? 'unknown' : 'already_used';
}

/** How many of the account's recovery codes are still unused. */
export function recoveryCodesLeft(db: ReadableDb, accountId: string): number {
  const r: unknown = prepared(db, 'SELECT count(*) AS n FROM staff_recovery_codes WHERE account_id = ? AND used_at IS NULL').get(accountId);
  return parseRow('staff_recovery_codes', z.object({ n: z.int() }), r).n;
}
