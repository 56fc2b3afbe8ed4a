import { parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import { countOf, prepared, type ReadableDb, type WritableDb } from './db.js';

/**
 * Staff accounts (`staff_accounts`), their sessions (`staff_sessions`) and the
 * one-time setup code (`staff_setup_code`): every statement on these tables.
 * Passwords arrive here already hashed (Argon2id PHC strings), session ids and
 * the setup code as SHA-256 hex: nothing in these tables is usable as it is.
 * Writers that change more than one row own their transaction.
 */

export const StaffRole = z.enum(['staff', 'supervisor']);
export type StaffRole = z.infer<typeof StaffRole>;

export interface StaffAccount {
  readonly accountId: string;
  readonly username: string;
  readonly displayName: string;
  readonly role: StaffRole;
  readonly disabledAt: number | null;
  readonly createdAt: number;
  readonly createdBy: string;
  readonly updatedAt: number;
}

const AccountRow = z
  .object({
    account_id: z.string(),
    username: z.string(),
    display_name: z.string(),
    role: StaffRole,
    disabled_at: z.int().nullable(),
    created_at: z.int(),
    created_by: z.string(),
    updated_at: z.int(),
  })
  .transform((r): StaffAccount => ({
    accountId: r.account_id,
    username: r.username,
    displayName: r.display_name,
    role: r.role,
    disabledAt: r.disabled_at,
    createdAt: r.created_at,
    createdBy: r.created_by,
    updatedAt: r.updated_at,
  }));
const COLS = 'account_id, username, display_name, role, disabled_at, created_at, created_by, updated_at';

export function accountCount(db: ReadableDb): number {
  return countOf(db, 'staff_accounts', 'SELECT count(*) AS n FROM staff_accounts');
}

export function listAccounts(db: ReadableDb): StaffAccount[] {
  return parseRows('staff_accounts', AccountRow, prepared(db, `SELECT ${COLS} FROM staff_accounts ORDER BY username`).all());
}

export function accountById(db: ReadableDb, accountId: string): StaffAccount | null {
  const r: unknown = prepared(db, `SELECT ${COLS} FROM staff_accounts WHERE account_id = ?`).get(accountId);
  return r === undefined ? null : parseRow('staff_accounts', AccountRow, r);
}

/** The account and its password hash, by username (without case); null: no such account. */
export function credentialsOf(db: ReadableDb, username: string): { account: StaffAccount; passwordHash: string } | null {
  const r: unknown = prepared(db, `SELECT ${COLS}, password_hash FROM staff_accounts WHERE username = ?`).get(username);
  if (r === undefined) return null;
  return {
    account: parseRow('staff_accounts', AccountRow, r),
    passwordHash: parseRow('staff_accounts', z.object({ password_hash: z.string() }), r).password_hash,
  };
}

export interface NewAccount {
  readonly accountId: string;
  readonly username: string;
  readonly displayName: string;
  readonly role: StaffRole;
  readonly passwordHash: string;
  readonly createdBy: string;
}

/** Inserts an account; false when the username is taken (judged by rows affected). Joins the caller's transaction. */
export function insertAccount(db: WritableDb, a: NewAccount, now: number): boolean {
  return (
    prepared(
      db,
      `INSERT INTO staff_accounts (account_id, username, display_name, role, password_hash, created_at, created_by, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
    ).run(a.accountId, a.username, a.displayName, a.role, a.passwordHash, now, a.createdBy, now).changes === 1
  );
}

/** Enabled supervisors other than `exceptId`: a change that would leave none is refused by the caller. */
export function otherEnabledSupervisors(db: ReadableDb, exceptId: string): number {
  return countOf(
    db,
    'staff_accounts',
    "SELECT count(*) AS n FROM staff_accounts WHERE role = 'supervisor' AND disabled_at IS NULL AND account_id <> ?",
    exceptId,
  );
}

/**
 * Disables (`disabled = true`) or enables an account, and on disabling deletes
 * its sessions in the same transaction: a disabled person's open page is
 * refused at its next request. 'noop' when it already was so; 'not_found'.
 */
export function setAccountDisabled(
  db: WritableDb,
  accountId: string,
  disabled: boolean,
  now: number,
  guard: () => boolean = () => true,
): 'applied' | 'noop' | 'not_found' | 'guarded' {
  return db
    .transaction(() => {
      if (accountById(db, accountId) === null) return 'not_found' as const;
      if (disabled && !guard()) return 'guarded' as const;
      const changes = disabled
        ? prepared(db, 'UPDATE staff_accounts SET disabled_at = ?, updated_at = ? WHERE account_id = ? AND disabled_at IS NULL').run(
            now,
            now,
            accountId,
          ).changes
        : prepared(db, 'UPDATE staff_accounts SET disabled_at = NULL, updated_at = ? WHERE account_id = ? AND disabled_at IS NOT NULL').run(
            now,
            accountId,
          ).changes;
      if (disabled) deleteSessionsOf(db, accountId);
      return changes === 1 ? ('applied' as const) : ('noop' as const);
    })
    .immediate();
}

/** Sets a new password hash and ends every session of the account (one transaction); false: no such account. */
export function setPasswordHash(db: WritableDb, accountId: string, passwordHash: string, now: number): boolean {
  return db
    .transaction(() => {
      const changed =
        prepared(db, 'UPDATE staff_accounts SET password_hash = ?, updated_at = ? WHERE account_id = ?').run(passwordHash, now, accountId)
          .changes === 1;
      if (changed) deleteSessionsOf(db, accountId);
      return changed;
    })
    .immediate();
}

// ---------------------------------------------------------------- sessions

export interface SessionRow {
  readonly sessionHash: string;
  readonly accountId: string;
  readonly createdAt: number;
  readonly lastSeenAt: number;
}
const SessionRowSchema = z
  .object({ session_hash: z.string(), account_id: z.string(), created_at: z.int(), last_seen_at: z.int() })
  .transform((r): SessionRow => ({
    sessionHash: r.session_hash,
    accountId: r.account_id,
    createdAt: r.created_at,
    lastSeenAt: r.last_seen_at,
  }));

export function insertSession(db: WritableDb, s: { sessionHash: string; accountId: string; ip: string }, now: number): void {
  prepared(db, 'INSERT INTO staff_sessions (session_hash, account_id, created_at, last_seen_at, ip) VALUES (?, ?, ?, ?, ?)').run(
    s.sessionHash,
    s.accountId,
    now,
    now,
    s.ip.slice(0, 64),
  );
}

/** The session and its account (enabled or not: the caller judges), or null. */
export function sessionByHash(db: ReadableDb, sessionHash: string): { session: SessionRow; account: StaffAccount } | null {
  const r: unknown = prepared(
    db,
    `SELECT s.session_hash, s.created_at AS s_created_at, s.last_seen_at, ${COLS.split(', ')
      .map((c) => `a.${c}`)
      .join(', ')}
     FROM staff_sessions s JOIN staff_accounts a ON a.account_id = s.account_id WHERE s.session_hash = ?`,
  ).get(sessionHash);
  if (r === undefined) return null;
  const account = parseRow('staff_accounts', AccountRow, r);
  const s = parseRow('staff_sessions', z.object({ session_hash: z.string(), s_created_at: z.int(), last_seen_at: z.int() }), r);
  return {
    account,
    session: parseRow('staff_sessions', SessionRowSchema, {
      session_hash: s.session_hash,
      account_id: account.accountId,
      created_at: s.s_created_at,
      last_seen_at: s.last_seen_at,
    }),
  };
}

/** Moves `last_seen_at` forward (the idle timeout's clock). Single statement. */
export function touchSession(db: WritableDb, sessionHash: string, now: number): void {
  prepared(db, 'UPDATE staff_sessions SET last_seen_at = max(last_seen_at, ?) WHERE session_hash = ?').run(now, sessionHash);
}

/** Deletes one session; true when there was one. */
export function deleteSession(db: WritableDb, sessionHash: string): boolean {
  return prepared(db, 'DELETE FROM staff_sessions WHERE session_hash = ?').run(sessionHash).changes === 1;
}

export function deleteSessionsOf(db: WritableDb, accountId: string): number {
  return prepared(db, 'DELETE FROM staff_sessions WHERE account_id = ?').run(accountId).changes;
}

/**
 * Ends the account's sessions beyond its newest `keep` (the oldest sign-in first, insertion order among
 * equal times); returns how many ended.
 */
export function trimSessionsOf(db: WritableDb, accountId: string, keep: number): number {
  return prepared(
    db,
    `DELETE FROM staff_sessions WHERE account_id = ? AND rowid NOT IN
       (SELECT rowid FROM staff_sessions WHERE account_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?)`,
  ).run(accountId, accountId, keep).changes;
}

/** Deletes sessions idle since before `idleBefore` or created before `createdBefore`; returns how many. */
export function purgeSessions(db: WritableDb, idleBefore: number, createdBefore: number): number {
  return prepared(db, 'DELETE FROM staff_sessions WHERE last_seen_at < ? OR created_at < ?').run(idleBefore, createdBefore).changes;
}

export function sessionCount(db: ReadableDb, accountId: string): number {
  return countOf(db, 'staff_sessions', 'SELECT count(*) AS n FROM staff_sessions WHERE account_id = ?', accountId);
}

// ---------------------------------------------------------------- setup code

/** Replaces any setup code by this one (only its hash is kept). */
export function putSetupCode(db: WritableDb, codeHash: string, now: number, expiresAt: number): void {
  prepared(
    db,
    `INSERT INTO staff_setup_code (id, code_hash, created_at, expires_at) VALUES (1, ?, ?, ?)
     ON CONFLICT (id) DO UPDATE SET code_hash = excluded.code_hash, created_at = excluded.created_at, expires_at = excluded.expires_at`,
  ).run(codeHash, now, expiresAt);
}

export function setupCode(db: ReadableDb): { codeHash: string; expiresAt: number } | null {
  const r: unknown = prepared(db, 'SELECT code_hash, expires_at FROM staff_setup_code WHERE id = 1').get();
  if (r === undefined) return null;
  const p = parseRow('staff_setup_code', z.object({ code_hash: z.string(), expires_at: z.int() }), r);
  return { codeHash: p.code_hash, expiresAt: p.expires_at };
}

/** Deletes the setup code if it is `codeHash` (single use: judged by rows affected). Joins the caller's transaction. */
export function consumeSetupCode(db: WritableDb, codeHash: string, now: number): boolean {
  return prepared(db, 'DELETE FROM staff_setup_code WHERE id = 1 AND code_hash = ? AND expires_at > ?').run(codeHash, now).changes === 1;
}

export function deleteSetupCode(db: WritableDb): void {
  prepared(db, 'DELETE FROM staff_setup_code').run();
}
