import { createHash, createHmac, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import { newId, withCorrelation, type Logger } from '@tobira/shared';
import {
  accountById,
  accountCount,
  consumeSetupCode,
  credentialsOf,
  deleteSession,
  deleteSetupCode,
  insertAccount,
  insertSession,
  listAccounts,
  otherEnabledSupervisors,
  purgeSessions,
  putSetupCode,
  sessionByHash,
  setAccountDisabled,
  setPasswordHash,
  setupCode,
  touchSession,
  type StaffAccount,
  type StaffRole,
} from '../adapters/sqlite/staff-accounts.js';
import type { WritableDb } from '../adapters/sqlite/db.js';
import type { StaffActionKind } from '../adapters/sqlite/staff-actions.js';
import { passwordProblem } from './password-policy.js';
import { PasswordWork, isShed } from './password-work.js';

/**
 * Staff accounts and sessions (docs/gateway.md "Staff accounts and sessions").
 *
 * - Passwords: Argon2id (@node-rs/argon2, OWASP's minimum parameters: 19 MiB,
 *   2 passes, 1 lane), only the PHC string is stored; every hash and verify
 *   goes through one `PasswordWork` (a few at once, a bounded queue, the rest
 *   shed as SIGN_IN_BUSY). An unknown username is verified against a dummy
 *   hash of the same parameters, so it costs what a wrong password costs.
 *   What a password must be: password-policy.ts.
 * - No default password: while no account exists, a one-time setup code
 *   (80 random bits, Crockford base32) is made at start, printed once, kept
 *   only as its SHA-256, valid for SETUP_CODE_TTL_MS, replaced at every start,
 *   and deleted by the transaction that creates the first supervisor with it.
 * - Sessions: 32 random bytes in the cookie, their SHA-256 in the table; a
 *   new id at every sign-in; ended by sign-out, by the idle or absolute
 *   timeout, by disabling the account or resetting its password.
 * - CSRF: the synchronizer token of a session is HMAC-SHA256(session id,
 *   "tobira-csrf"): nothing more to store, unknowable without the cookie.
 */

export const SETUP_CODE_TTL_MS = 24 * 3600 * 1000;
export { PASSWORD_MAX, PASSWORD_MIN, passwordProblem } from './password-policy.js';
const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** Who did a staff action: an account, or the API token (automation, role staff). */
export interface StaffActor {
  readonly accountId: string | null;
  readonly username: string;
  readonly displayName: string;
  readonly role: StaffRole;
  readonly via: 'session' | 'token';
}

export const tokenActor: StaffActor = Object.freeze({
  accountId: null,
  username: 'api-token',
  displayName: 'API token',
  role: 'staff',
  via: 'token',
});

export const actorOf = (a: StaffAccount): StaffActor => ({
  accountId: a.accountId,
  username: a.username,
  displayName: a.displayName,
  role: a.role,
  via: 'session',
});

/** A staff action to audit (written by `StaffAudit` in the action's transaction). */
export interface StaffActionRecord {
  readonly actor: StaffActor;
  readonly action: StaffActionKind;
  readonly target: string | null;
  readonly detail: string | null;
  readonly result: 'applied' | 'noop' | 'refused';
  readonly code: string | null;
  readonly cid: string;
}
/** Records a staff action; joins the caller's transaction (app/staff-audit.ts). */
export type StaffAudit = (r: StaffActionRecord) => void;

export type AccountCode =
  | 'BAD_CREDENTIALS'
  | 'ACCOUNT_DISABLED'
  | 'SETUP_CODE_INVALID'
  | 'SETUP_ALREADY_DONE'
  | 'WEAK_PASSWORD'
  | 'BREACHED_PASSWORD'
  | 'SIGN_IN_BUSY'
  | 'CURRENT_PASSWORD_WRONG'
  | 'SESSION_REQUIRED'
  | 'USERNAME_TAKEN'
  | 'ACCOUNT_NOT_FOUND'
  | 'LAST_SUPERVISOR'
  | 'NOT_SUPERVISOR';

export type SignedIn = {
  readonly status: 'applied';
  readonly account: StaffAccount;
  readonly sessionId: string;
  readonly csrfToken: string;
};
export type Refused = { readonly status: 'refused'; readonly code: AccountCode; readonly detail?: string };

export interface SessionInfo {
  readonly account: StaffAccount;
  readonly sessionHash: string;
  readonly csrfToken: string;
}

export interface AccountsDeps {
  readonly db: WritableDb;
  /** Wall clock (ms). */
  readonly now: () => number;
  readonly log: Logger;
  readonly idleMs: number;
  readonly absoluteMs: number;
  readonly audit: StaffAudit;
  /** The process's Argon2 budget (default: its own, DEFAULT_PASSWORD_WORK). */
  readonly work?: PasswordWork;
}

export const csrfTokenOf = (sessionId: string): string => createHmac('sha256', sessionId).update('tobira-csrf').digest('base64url');

/** Constant time in the length too: both sides are hashed first. */
export function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

/** A new setup code: 16 Crockford base32 characters (80 bits) in groups of four. */
export function newSetupCode(): string {
  let s = '';
  for (let i = 0; i < 16; i++) s += CROCKFORD[randomInt(32)];
  return s.match(/.{4}/g)?.join('-') ?? s;
}
/** The code as typed: case, spaces and dashes do not matter; I, L → 1, O → 0 (Crockford). */
export const normalizeSetupCode = (typed: string): string =>
  typed.toUpperCase().replace(/[\s-]/g, '').replace(/[IL]/g, '1').replace(/O/g, '0');

export class StaffAccounts {
  readonly #d: AccountsDeps;
  readonly #work: PasswordWork;

  constructor(d: AccountsDeps) {
    this.#d = d;
    this.#work = d.work ?? new PasswordWork();
  }

  /** The Argon2 budget's counters (metrics, tests). */
  get passwordWork(): PasswordWork['stats'] {
    return this.#work.stats;
  }

  /** True while no account exists (the page shows the setup form). */
  setupRequired(): boolean {
    return accountCount(this.#d.db) === 0;
  }

  /**
   * At start: with no account, a fresh setup code (returned once, to be
   * printed); with accounts, none (and any old code is deleted).
   */
  issueSetupCode(): { code: string; expiresAt: number } | null {
    const db = this.#d.db;
    return db
      .transaction(() => {
        if (accountCount(db) > 0) {
          deleteSetupCode(db);
          return null;
        }
        const code = newSetupCode();
        const now = this.#d.now();
        putSetupCode(db, sha256(normalizeSetupCode(code)), now, now + SETUP_CODE_TTL_MS);
        return { code, expiresAt: now + SETUP_CODE_TTL_MS };
      })
      .immediate();
  }

  /**
   * The first supervisor, with the setup code; signed in at once. The code is
   * checked before the password is hashed, so a wrong code costs no Argon2
   * work; the transaction checks it again when it consumes it.
   */
  async setup(
    i: { code: string; username: string; displayName: string; password: string },
    ip: string,
    cid: string,
  ): Promise<SignedIn | Refused> {
    const db = this.#d.db;
    const log = withCorrelation(this.#d.log, cid);
    const early = this.#setupCodeProblem(i.code);
    if (early !== null) {
      log.warn({ code: early, ip }, 'staff setup refused');
      return { status: 'refused', code: early };
    }
    const weak = passwordProblem(i.password, i.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(i.password);
    if (isShed(passwordHash)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    const now = this.#d.now();
    const accountId = newId();
    const r = db
      .transaction((): AccountCode | null => {
        const again = this.#setupCodeProblem(i.code);
        if (again !== null) return again;
        if (!consumeSetupCode(db, sha256(normalizeSetupCode(i.code)), now)) return 'SETUP_CODE_INVALID';
        insertAccount(
          db,
          { accountId, username: i.username, displayName: i.displayName, role: 'supervisor', passwordHash, createdBy: 'setup code' },
          now,
        );
        const account = accountById(db, accountId);
        if (account !== null)
          this.#d.audit({ actor: actorOf(account), action: 'setup', target: accountId, detail: null, result: 'applied', code: null, cid });
        return null;
      })
      .immediate();
    if (r !== null) {
      log.warn({ code: r, ip }, 'staff setup refused');
      return { status: 'refused', code: r };
    }
    log.warn({ accountId, username: i.username }, 'first supervisor account created with the setup code');
    return this.#startSession(accountId, ip, cid, 'setup');
  }

  /** Why `typed` cannot create the first supervisor now (null: it is the live code). Constant time on the code's hash. */
  #setupCodeProblem(typed: string): 'SETUP_ALREADY_DONE' | 'SETUP_CODE_INVALID' | null {
    const db = this.#d.db;
    if (accountCount(db) > 0) return 'SETUP_ALREADY_DONE';
    const stored = setupCode(db);
    if (stored === null || stored.expiresAt <= this.#d.now()) return 'SETUP_CODE_INVALID';
    return sameSecret(stored.codeHash, sha256(normalizeSetupCode(typed))) ? null : 'SETUP_CODE_INVALID';
  }

  /** Checks the password; a success starts a new session (a new id: no fixation). */
  async signIn(username: string, password: string, ip: string, cid: string): Promise<SignedIn | Refused> {
    const c = credentialsOf(this.#d.db, username);
    const ok = await this.#work.verify(c?.passwordHash ?? null, password);
    const log = withCorrelation(this.#d.log, cid);
    if (isShed(ok)) {
      log.warn({ code: 'SIGN_IN_BUSY', ip }, 'staff sign-in refused');
      return { status: 'refused', code: 'SIGN_IN_BUSY' };
    }
    if (c === null || !ok) {
      log.warn({ code: 'BAD_CREDENTIALS', ip, username: username.slice(0, 64) }, 'staff sign-in refused');
      return { status: 'refused', code: 'BAD_CREDENTIALS' };
    }
    if (c.account.disabledAt !== null) {
      log.warn({ code: 'ACCOUNT_DISABLED', ip, accountId: c.account.accountId }, 'staff sign-in refused');
      return { status: 'refused', code: 'ACCOUNT_DISABLED' };
    }
    return this.#startSession(c.account.accountId, ip, cid, 'sign_in');
  }

  #startSession(accountId: string, ip: string, cid: string, action: 'sign_in' | 'setup'): SignedIn | Refused {
    const db = this.#d.db;
    const sessionId = randomBytes(32).toString('base64url');
    const now = this.#d.now();
    const account = db
      .transaction(() => {
        const a = accountById(db, accountId);
        if (a === null || a.disabledAt !== null) return null;
        insertSession(db, { sessionHash: sha256(sessionId), accountId, ip }, now);
        if (action === 'sign_in')
          this.#d.audit({ actor: actorOf(a), action: 'sign_in', target: null, detail: null, result: 'applied', code: null, cid });
        return a;
      })
      .immediate();
    if (account === null) return { status: 'refused', code: 'ACCOUNT_DISABLED' };
    withCorrelation(this.#d.log, cid).info({ accountId, role: account.role, ip }, 'staff signed in');
    return { status: 'applied', account, sessionId, csrfToken: csrfTokenOf(sessionId) };
  }

  /** The live session of a cookie value, or null (unknown, idle too long, too old, account disabled: such a row is deleted). */
  session(sessionId: string): SessionInfo | null {
    const db = this.#d.db;
    const h = sha256(sessionId);
    const s = sessionByHash(db, h);
    if (s === null) return null;
    const now = this.#d.now();
    const dead =
      s.account.disabledAt !== null || now - s.session.lastSeenAt >= this.#d.idleMs || now - s.session.createdAt >= this.#d.absoluteMs;
    if (dead) {
      deleteSession(db, h);
      return null;
    }
    // Not every request writes: the idle clock moves in steps of a few seconds at most.
    if (now - s.session.lastSeenAt >= Math.min(5000, this.#d.idleMs / 10)) touchSession(db, h, now);
    return { account: s.account, sessionHash: h, csrfToken: csrfTokenOf(sessionId) };
  }

  /**
   * Whether a session is still live, without counting as activity (a live
   * feed stream open for hours must not keep its session from idling out):
   * false once signed out, disabled, idle too long or too old.
   */
  stillLive(sessionHash: string): boolean {
    const s = sessionByHash(this.#d.db, sessionHash);
    if (s === null) return false;
    const now = this.#d.now();
    return s.account.disabledAt === null && now - s.session.lastSeenAt < this.#d.idleMs && now - s.session.createdAt < this.#d.absoluteMs;
  }

  signOut(s: SessionInfo, cid: string): void {
    const db = this.#d.db;
    db.transaction(() => {
      if (deleteSession(db, s.sessionHash))
        this.#d.audit({ actor: actorOf(s.account), action: 'sign_out', target: null, detail: null, result: 'applied', code: null, cid });
    }).immediate();
    withCorrelation(this.#d.log, cid).info({ accountId: s.account.accountId }, 'staff signed out');
  }

  /** Deletes expired sessions (periodic). */
  purge(): number {
    const now = this.#d.now();
    return purgeSessions(this.#d.db, now - this.#d.idleMs, now - this.#d.absoluteMs);
  }

  list(): StaffAccount[] {
    return listAccounts(this.#d.db);
  }

  async create(
    actor: StaffActor,
    i: { username: string; displayName: string; role: StaffRole; password: string },
    cid: string,
  ): Promise<{ status: 'applied'; account: StaffAccount } | Refused> {
    if (actor.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    const weak = passwordProblem(i.password, i.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(i.password);
    if (isShed(passwordHash)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    const db = this.#d.db;
    const accountId = newId();
    const account = db
      .transaction(() => {
        if (!insertAccount(db, { ...i, accountId, passwordHash, createdBy: actor.username }, this.#d.now())) return null;
        this.#d.audit({
          actor,
          action: 'account_create',
          target: accountId,
          detail: `${i.username} (${i.role})`,
          result: 'applied',
          code: null,
          cid,
        });
        return accountById(db, accountId);
      })
      .immediate();
    if (account === null) return { status: 'refused', code: 'USERNAME_TAKEN' };
    withCorrelation(this.#d.log, cid).warn({ by: actor.username, accountId, role: i.role }, 'staff account created');
    return { status: 'applied', account };
  }

  /** Disables (ending its sessions at once) or enables an account; the last enabled supervisor cannot be disabled. */
  setDisabled(
    actor: StaffActor,
    accountId: string,
    disabled: boolean,
    cid: string,
  ): { status: 'applied' | 'noop'; account: StaffAccount } | Refused {
    if (actor.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    const db = this.#d.db;
    const r = db
      .transaction(() => {
        const target = accountById(db, accountId);
        const guard = () => target?.role !== 'supervisor' || otherEnabledSupervisors(db, accountId) > 0;
        const res = setAccountDisabled(db, accountId, disabled, this.#d.now(), guard);
        if (res === 'applied')
          this.#d.audit({
            actor,
            action: disabled ? 'account_disable' : 'account_enable',
            target: accountId,
            detail: target?.username ?? null,
            result: 'applied',
            code: null,
            cid,
          });
        return res;
      })
      .immediate();
    if (r === 'not_found') return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    if (r === 'guarded') return { status: 'refused', code: 'LAST_SUPERVISOR' };
    const account = accountById(db, accountId);
    if (account === null) return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    withCorrelation(this.#d.log, cid).warn({ by: actor.username, accountId, disabled, result: r }, 'staff account changed');
    return { status: r, account };
  }

  /** Sets a new password (a supervisor for anyone); every session of the account ends. */
  async resetPassword(actor: StaffActor, accountId: string, password: string, cid: string): Promise<{ status: 'applied' } | Refused> {
    if (actor.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    const target = accountById(this.#d.db, accountId);
    if (target === null) return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    const weak = passwordProblem(password, target.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(password);
    if (isShed(passwordHash)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    const db = this.#d.db;
    const ok = db
      .transaction(() => {
        if (!setPasswordHash(db, accountId, passwordHash, this.#d.now())) return false;
        this.#d.audit({
          actor,
          action: 'account_password_reset',
          target: accountId,
          detail: target.username,
          result: 'applied',
          code: null,
          cid,
        });
        return true;
      })
      .immediate();
    if (!ok) return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    withCorrelation(this.#d.log, cid).warn({ by: actor.username, accountId }, 'staff password reset');
    return { status: 'applied' };
  }

  /**
   * A signed-in person changes their own password, giving the current one
   * (a session left open on a front-desk tablet must not be enough). The
   * account's other sessions end; this one stays.
   */
  async changeOwnPassword(
    s: SessionInfo,
    current: string,
    next: string,
    ip: string,
    cid: string,
  ): Promise<{ status: 'applied' } | Refused> {
    const db = this.#d.db;
    const log = withCorrelation(this.#d.log, cid);
    const c = credentialsOf(db, s.account.username);
    const ok = await this.#work.verify(c?.passwordHash ?? null, current);
    if (isShed(ok)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    if (c === null || c.account.accountId !== s.account.accountId || !ok) {
      log.warn({ code: 'CURRENT_PASSWORD_WRONG', accountId: s.account.accountId }, 'staff password change refused');
      return { status: 'refused', code: 'CURRENT_PASSWORD_WRONG' };
    }
    const weak = passwordProblem(next, s.account.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(next);
    if (isShed(passwordHash)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    const actor = actorOf(s.account);
    const changed = db
      .transaction(() => {
        // setPasswordHash ends every session of the account; this one is put back under its own hash.
        const row = sessionByHash(db, s.sessionHash);
        if (row === null || !setPasswordHash(db, s.account.accountId, passwordHash, this.#d.now())) return false;
        insertSession(db, { sessionHash: s.sessionHash, accountId: s.account.accountId, ip }, row.session.createdAt);
        touchSession(db, s.sessionHash, this.#d.now());
        this.#d.audit({
          actor,
          action: 'account_password_reset',
          target: s.account.accountId,
          detail: 'self-service',
          result: 'applied',
          code: null,
          cid,
        });
        return true;
      })
      .immediate();
    if (!changed) return { status: 'refused', code: 'SESSION_REQUIRED' };
    log.warn({ accountId: s.account.accountId }, 'staff password changed by its owner');
    return { status: 'applied' };
  }
}
