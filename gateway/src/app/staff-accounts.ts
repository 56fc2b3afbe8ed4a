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
  deleteSessionsOf,
  touchSession,
  trimSessionsOf,
  type StaffAccount,
  type StaffRole,
} from '../adapters/sqlite/staff-accounts.js';
import type { WritableDb } from '../adapters/sqlite/db.js';
import { isKnownAddress, purgeKnownAddresses, rememberAddress } from '../adapters/sqlite/staff-known-addresses.js';
import type { StaffActionKind } from '../adapters/sqlite/staff-actions.js';
import {
  advanceTotpStep,
  confirmTotp,
  deleteTotp,
  enrolledAccountIds,
  putPendingTotp,
  recoveryCodesLeft,
  totpOf,
  useRecoveryCode,
} from '../adapters/sqlite/staff-totp.js';
import { passwordProblem } from './password-policy.js';
import { PasswordWork, isShed, type Requester } from './password-work.js';
import {
  newRecoveryCodes,
  newTotpSecret,
  openSecret,
  qrModules,
  type QrModules,
  recoveryCodeHash,
  sealSecret,
  stepOfCode,
  totpUri,
  type TotpPolicy,
} from './staff-totp.js';

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
 *   timeout, by disabling the account or resetting its password; at most
 *   SESSIONS_PER_ACCOUNT live per account (a further sign-in ends the oldest).
 * - CSRF: the synchronizer token of a session is HMAC-SHA256(session id,
 *   "tobira-csrf"): nothing more to store, unknowable without the cookie.
 */

export const SETUP_CODE_TTL_MS = 24 * 3600 * 1000;
/** How long a successful sign-in keeps its address known for the account (exempt from the per-name throttle). */
export const KNOWN_ADDRESS_TTL_MS = 30 * 24 * 3600 * 1000;
/** Known addresses kept per account, the newest: the table grows only with real sign-ins, and no further. */
export const KNOWN_ADDRESSES_PER_ACCOUNT = 10;

/**
 * The addresses that signed in as a name (http/sign-in-throttle.ts exempts
 * them from its per-name limit). Kept in SQLite so a restart does not hand a
 * guesser on many addresses the owner's exemption back to zero.
 */
export interface KnownAddresses {
  isKnown(ip: string, username: string): boolean;
  remember(ip: string, username: string): void;
}
export { PASSWORD_MAX, PASSWORD_MIN, passwordProblem } from './password-policy.js';
/**
 * Work for an account's own trusted requests (its sessions' work, its sign-ins from a known address): the
 * priority lane, under one share per account however many addresses or sessions it uses.
 */
const trustedAccount = (username: string): Requester => ({ source: `account:${username.toLowerCase()}`, priority: true });
/** Live sessions one account may hold; a further sign-in ends the oldest (a sign-in loop cannot fill the table). */
export const SESSIONS_PER_ACCOUNT = 10;
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
  | 'NOT_SUPERVISOR'
  | 'TOTP_CHALLENGE_INVALID'
  | 'TOTP_INVALID'
  | 'TOTP_REPLAYED'
  | 'RECOVERY_CODE_INVALID'
  | 'RECOVERY_CODE_USED'
  | 'TOTP_POLICY_OFF'
  | 'TOTP_ALREADY_ENROLLED'
  | 'TOTP_NOT_ENROLLING'
  | 'TOTP_NOT_ENROLLED'
  | 'TOTP_RESET_OWN'
  | 'PASSWORD_RESET_OWN'
  | 'REASON_REQUIRED'
  | 'REAUTH_REQUIRED'
  | 'REAUTH_FAILED';

/** The password was right; a second step is due before there is a session (the challenge names it). */
export type SecondStepDue = {
  readonly status: 'refused';
  readonly code: 'TOTP_REQUIRED' | 'TOTP_ENROLMENT_REQUIRED';
  readonly challenge: string;
  readonly expiresAt: number;
};

/** What a started enrolment shows once: the secret, its otpauth:// URI and the URI as a QR code's modules. */
export interface EnrolmentStart {
  readonly status: 'applied';
  readonly secret: string;
  readonly uri: string;
  readonly qr: QrModules;
}

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
  /**
   * Supervisors' second factor: the site policy, the key that seals TOTP
   * secrets (app/staff-totp.ts sealKeyOf) and the issuer name authenticator
   * apps show. Absent: policy off.
   */
  readonly totp?: { readonly policy: TotpPolicy; readonly sealKey: Buffer; readonly issuer: string };
}

/** A half-signed-in state: the password was right, the second step is not done. In memory only. */
interface Challenge {
  readonly accountId: string;
  readonly username: string;
  readonly ip: string;
  readonly kind: 'totp' | 'enrol';
  readonly expiresAt: number;
  tries: number;
}
export const CHALLENGE_TTL_MS = 5 * 60_000;
/** Wrong codes one challenge takes before it is dropped (then the password again; every try also counts in the throttle). */
export const CHALLENGE_MAX_TRIES = 5;
const CHALLENGES_MAX = 1000;

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
  readonly #challenges = new Map<string, Challenge>();

  constructor(d: AccountsDeps) {
    this.#d = d;
    this.#work = d.work ?? new PasswordWork();
  }

  /** Addresses that signed in as each account within KNOWN_ADDRESS_TTL_MS (the newest KNOWN_ADDRESSES_PER_ACCOUNT). */
  readonly knownAddresses: KnownAddresses = {
    isKnown: (ip, username) => {
      const now = this.#d.now();
      return isKnownAddress(this.#d.db, username, ip, now - KNOWN_ADDRESS_TTL_MS, now);
    },
    remember: (ip, username) => {
      const now = this.#d.now();
      const db = this.#d.db;
      try {
        db.transaction(() => rememberAddress(db, username, ip, now, now - KNOWN_ADDRESS_TTL_MS, KNOWN_ADDRESSES_PER_ACCOUNT)).immediate();
      } catch (e) {
        // The session is already started: a sign-in is not undone because its address could not be noted (disk full).
        this.#d.log.error({ err: e, code: 'KNOWN_ADDRESS_NOT_SAVED', ip }, 'known sign-in address not saved');
      }
    },
  };

  /** The Argon2 budget's counters (metrics, tests). */
  get passwordWork(): PasswordWork['stats'] {
    return this.#work.stats;
  }

  /**
   * The Argon2 lane of a try from `ip`: `username` null is the setup-code
   * holder, who goes first under the address's share; a sign-in goes first,
   * under its account's share, only from an address that account signed in
   * from before; any other sign-in is in the shared lane under its address.
   */
  #requester(ip: string, username: string | null): Requester {
    if (username === null) return { source: ip, priority: true };
    return this.knownAddresses.isKnown(ip, username) ? trustedAccount(username) : { source: ip, priority: false };
  }

  /** Whether a try from `ip` (to `username`; null: the setup) would get Argon2 work now; false counts it shed. */
  admitsPasswordWork(ip: string, username: string | null): boolean {
    return this.#work.admitOrShed(this.#requester(ip, username));
  }

  /** As `admitsPasswordWork`, for work a session asks for about its own account (its password change). */
  admitsSessionWork(s: SessionInfo): boolean {
    return this.#work.admitOrShed(trustedAccount(s.account.username));
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
    const passwordHash = await this.#work.hash(i.password, this.#requester(ip, null));
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
  async signIn(username: string, password: string, ip: string, cid: string): Promise<SignedIn | SecondStepDue | Refused> {
    const c = credentialsOf(this.#d.db, username);
    const ok = await this.#work.verify(c?.passwordHash ?? null, password, this.#requester(ip, username));
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
    const due = this.#secondStepDue(c.account);
    if (due !== null) {
      const challenge = this.#newChallenge(c.account, ip, due === 'TOTP_REQUIRED' ? 'totp' : 'enrol');
      log.info({ code: due, ip, accountId: c.account.accountId }, 'staff password right, second step due');
      return { status: 'refused', code: due, ...challenge };
    }
    return this.#startSession(c.account.accountId, ip, cid, 'sign_in');
  }

  get totpPolicy(): TotpPolicy {
    return this.#d.totp?.policy ?? 'off';
  }

  /** Which second step an account owes at sign-in (null: none): supervisors only, by the site policy. */
  #secondStepDue(a: StaffAccount): SecondStepDue['code'] | null {
    const policy = this.totpPolicy;
    if (a.role !== 'supervisor' || policy === 'off') return null;
    if (totpOf(this.#d.db, a.accountId)?.confirmedAt != null) return 'TOTP_REQUIRED';
    return policy === 'required' ? 'TOTP_ENROLMENT_REQUIRED' : null;
  }

  #newChallenge(a: StaffAccount, ip: string, kind: Challenge['kind']): { challenge: string; expiresAt: number } {
    const now = this.#d.now();
    for (const [k, v] of this.#challenges) if (v.expiresAt <= now) this.#challenges.delete(k);
    if (this.#challenges.size >= CHALLENGES_MAX) {
      const oldest = this.#challenges.keys().next();
      if (oldest.done !== true) this.#challenges.delete(oldest.value);
    }
    const challenge = randomBytes(32).toString('base64url');
    const expiresAt = now + CHALLENGE_TTL_MS;
    this.#challenges.set(sha256(challenge), { accountId: a.accountId, username: a.username, ip, kind, expiresAt, tries: 0 });
    return { challenge, expiresAt };
  }

  /** The live challenge of this address (null: unknown, expired, used up, or made for another address). */
  #challenge(challenge: string, ip: string): Challenge | null {
    const h = sha256(challenge);
    const c = this.#challenges.get(h);
    if (c === undefined) return null;
    if (c.expiresAt <= this.#d.now() || c.tries >= CHALLENGE_MAX_TRIES) {
      this.#challenges.delete(h);
      return null;
    }
    return c.ip === ip ? c : null;
  }

  /** The username a challenge was made for (the route throttles the second step under it), or null. */
  challengeUsername(challenge: string, ip: string): string | null {
    return this.#challenge(challenge, ip)?.username ?? null;
  }

  /**
   * The second step of a sign-in: a current TOTP code (or a recovery code)
   * for a `totp` challenge; for an `enrol` challenge (policy required, not yet
   * enrolled) the first code of the enrolment started with it, which confirms
   * it and returns the recovery codes. A right answer uses the challenge up
   * and starts the session; a wrong one counts against the challenge.
   */
  secondStep(
    challenge: string,
    answer: { code?: string | undefined; recoveryCode?: string | undefined },
    ip: string,
    cid: string,
  ): (SignedIn & { recoveryCodes?: string[] }) | Refused {
    const log = withCorrelation(this.#d.log, cid);
    const c = this.#challenge(challenge, ip);
    if (c === null) {
      log.warn({ code: 'TOTP_CHALLENGE_INVALID', ip }, 'staff second step refused');
      return { status: 'refused', code: 'TOTP_CHALLENGE_INVALID' };
    }
    let r: AccountCode | null;
    let recoveryCodes: string[] | undefined;
    let detail: string;
    if (c.kind === 'enrol') {
      const confirmed = answer.code === undefined ? ({ code: 'TOTP_INVALID' } as const) : this.#confirm(c.accountId, answer.code);
      r = 'codes' in confirmed ? null : confirmed.code;
      if ('codes' in confirmed) recoveryCodes = confirmed.codes;
      detail = 'totp enrolled';
    } else if (answer.recoveryCode !== undefined) {
      r = this.#useRecoveryCode(c.accountId, answer.recoveryCode);
      detail = 'recovery code';
    } else {
      r = answer.code === undefined ? 'TOTP_INVALID' : this.#checkCode(c.accountId, answer.code);
      detail = 'totp';
    }
    if (r !== null) {
      c.tries += 1;
      log.warn({ code: r, ip, accountId: c.accountId, tries: c.tries }, 'staff second step refused');
      return { status: 'refused', code: r };
    }
    this.#challenges.delete(sha256(challenge));
    const s = this.#startSession(c.accountId, ip, cid, 'sign_in', detail);
    if (s.status === 'applied' && recoveryCodes !== undefined)
      this.#d.db
        .transaction(() =>
          this.#d.audit({
            actor: actorOf(s.account),
            action: 'account_totp_enrol',
            target: c.accountId,
            detail: 'at sign-in',
            result: 'applied',
            code: null,
            cid,
          }),
        )
        .immediate();
    if (s.status === 'applied' && detail === 'recovery code')
      log.warn({ accountId: c.accountId, left: recoveryCodesLeft(this.#d.db, c.accountId) }, 'staff signed in with a recovery code');
    return s.status === 'applied' && recoveryCodes !== undefined ? { ...s, recoveryCodes } : s;
  }

  /** A current code of the account's confirmed secret, not used before: the step is recorded (single use). */
  #checkCode(accountId: string, code: string): 'TOTP_INVALID' | 'TOTP_REPLAYED' | null {
    const db = this.#d.db;
    const row = totpOf(db, accountId);
    if (row === null || row.confirmedAt === null) return 'TOTP_INVALID';
    const secret = this.#open(accountId, row.secretBox);
    if (secret === null) return 'TOTP_INVALID';
    const step = stepOfCode(secret, code, this.#d.now());
    if (step === null) return 'TOTP_INVALID';
    if (row.lastStep !== null && step <= row.lastStep) return 'TOTP_REPLAYED';
    return advanceTotpStep(db, accountId, step) ? null : 'TOTP_REPLAYED';
  }

  #useRecoveryCode(accountId: string, typed: string): 'RECOVERY_CODE_INVALID' | 'RECOVERY_CODE_USED' | null {
    const db = this.#d.db;
    if (totpOf(db, accountId)?.confirmedAt == null) return 'RECOVERY_CODE_INVALID';
    const r = db.transaction(() => useRecoveryCode(db, accountId, recoveryCodeHash(typed), this.#d.now())).immediate();
    return r === 'used' ? null : r === 'already_used' ? 'RECOVERY_CODE_USED' : 'RECOVERY_CODE_INVALID';
  }

  #open(accountId: string, box: string): string | null {
    const key = this.#d.totp?.sealKey;
    const secret = key === undefined ? null : openSecret(key, accountId, box);
    // A box that does not open: the credentialPepper changed since enrolment (or the row was tampered with).
    if (secret === null) this.#d.log.error({ code: 'TOTP_SECRET_UNREADABLE', accountId }, 'a TOTP secret does not open with this key');
    return secret;
  }

  /** Accounts with a confirmed second factor (the account list shows it). */
  totpEnrolled(): Set<string> {
    return enrolledAccountIds(this.#d.db);
  }

  /**
   * Starts (or restarts) the enrolment of a supervisor: a new secret, sealed,
   * pending until confirmed with a code. Shown once, here. Either from a
   * session, or from an `enrol` challenge of a sign-in under policy required.
   */
  startEnrolment(
    who: { readonly session: SessionInfo } | { readonly challenge: string; readonly ip: string },
    cid: string,
  ): EnrolmentStart | Refused {
    const log = withCorrelation(this.#d.log, cid);
    const t = this.#d.totp;
    if (t === undefined || t.policy === 'off') return { status: 'refused', code: 'TOTP_POLICY_OFF' };
    let account: StaffAccount | null;
    if ('session' in who) account = who.session.account;
    else {
      const c = this.#challenge(who.challenge, who.ip);
      if (c === null || c.kind !== 'enrol') return { status: 'refused', code: 'TOTP_CHALLENGE_INVALID' };
      account = accountById(this.#d.db, c.accountId);
    }
    if (account === null) return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    if (account.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    const secret = newTotpSecret();
    if (!putPendingTotp(this.#d.db, account.accountId, sealSecret(t.sealKey, account.accountId, secret), this.#d.now()))
      return { status: 'refused', code: 'TOTP_ALREADY_ENROLLED' };
    const uri = totpUri(t.issuer, account.username, secret);
    log.info({ accountId: account.accountId }, 'staff TOTP enrolment started');
    return { status: 'applied', secret, uri, qr: qrModules(uri) };
  }

  /** Confirms the signed-in supervisor's pending enrolment with a current code: the recovery codes, shown once. */
  confirmEnrolment(s: SessionInfo, code: string, cid: string): { status: 'applied'; recoveryCodes: string[] } | Refused {
    const r = this.#confirm(s.account.accountId, code);
    if (!('codes' in r)) {
      withCorrelation(this.#d.log, cid).warn({ code: r.code, accountId: s.account.accountId }, 'staff TOTP enrolment refused');
      return { status: 'refused', code: r.code };
    }
    this.#d.db
      .transaction(() =>
        this.#d.audit({
          actor: actorOf(s.account),
          action: 'account_totp_enrol',
          target: s.account.accountId,
          detail: null,
          result: 'applied',
          code: null,
          cid,
        }),
      )
      .immediate();
    withCorrelation(this.#d.log, cid).warn({ accountId: s.account.accountId }, 'staff TOTP enrolled');
    return { status: 'applied', recoveryCodes: r.codes };
  }

  #confirm(accountId: string, code: string): { codes: string[] } | { code: 'TOTP_INVALID' | 'TOTP_NOT_ENROLLING' | 'TOTP_POLICY_OFF' } {
    if (this.totpPolicy === 'off') return { code: 'TOTP_POLICY_OFF' };
    const db = this.#d.db;
    const row = totpOf(db, accountId);
    if (row === null || row.confirmedAt !== null) return { code: 'TOTP_NOT_ENROLLING' };
    const secret = this.#open(accountId, row.secretBox);
    const step = secret === null ? null : stepOfCode(secret, code, this.#d.now());
    if (step === null) return { code: 'TOTP_INVALID' };
    const codes = newRecoveryCodes();
    const ok = db.transaction(() => confirmTotp(db, accountId, step, codes.map(recoveryCodeHash), this.#d.now())).immediate();
    return ok ? { codes } : { code: 'TOTP_NOT_ENROLLING' };
  }

  /**
   * The signed-in supervisor turns their own second factor off, with their
   * password and a current code (or a recovery code): a session left open is
   * not enough. Under policy required the next sign-in enrols again.
   */
  async disableOwnTotp(
    s: SessionInfo,
    i: { password: string; code?: string | undefined; recoveryCode?: string | undefined },
    cid: string,
  ): Promise<{ status: 'applied' } | Refused> {
    const db = this.#d.db;
    const log = withCorrelation(this.#d.log, cid);
    const accountId = s.account.accountId;
    const c = credentialsOf(db, s.account.username);
    const ok = await this.#work.verify(c?.passwordHash ?? null, i.password, trustedAccount(s.account.username));
    if (isShed(ok)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    if (c === null || c.account.accountId !== accountId || !ok) {
      log.warn({ code: 'CURRENT_PASSWORD_WRONG', accountId }, 'staff TOTP disable refused');
      return { status: 'refused', code: 'CURRENT_PASSWORD_WRONG' };
    }
    if (totpOf(db, accountId)?.confirmedAt == null) return { status: 'refused', code: 'TOTP_NOT_ENROLLED' };
    const r =
      i.recoveryCode !== undefined
        ? this.#useRecoveryCode(accountId, i.recoveryCode)
        : i.code === undefined
          ? 'TOTP_INVALID'
          : this.#checkCode(accountId, i.code);
    if (r !== null) {
      log.warn({ code: r, accountId }, 'staff TOTP disable refused');
      return { status: 'refused', code: r };
    }
    db.transaction(() => {
      deleteTotp(db, accountId);
      this.#d.audit({
        actor: actorOf(s.account),
        action: 'account_totp_reset',
        target: accountId,
        detail: 'self-service',
        result: 'applied',
        code: null,
        cid,
      });
    }).immediate();
    log.warn({ accountId }, 'staff TOTP turned off by its owner');
    return { status: 'applied' };
  }

  /**
   * Another supervisor resets an account's second factor (a lost phone),
   * with a reason: the enrolment and its recovery codes are deleted and the
   * account's sessions end. The own one is turned off with password and code.
   */
  resetTotp(actor: StaffActor, accountId: string, reason: string, cid: string): { status: 'applied' | 'noop' } | Refused {
    if (actor.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    if (actor.accountId === accountId) return { status: 'refused', code: 'TOTP_RESET_OWN' };
    const why = reason.trim();
    if (why === '') return { status: 'refused', code: 'REASON_REQUIRED' };
    const db = this.#d.db;
    const target = accountById(db, accountId);
    if (target === null) return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    const done = db
      .transaction(() => {
        if (!deleteTotp(db, accountId)) return false;
        deleteSessionsOf(db, accountId);
        this.#d.audit({
          actor,
          action: 'account_totp_reset',
          target: accountId,
          detail: `${target.username}: ${why}`.slice(0, 200),
          result: 'applied',
          code: null,
          cid,
        });
        return true;
      })
      .immediate();
    withCorrelation(this.#d.log, cid).warn({ by: actor.username, accountId, result: done ? 'applied' : 'noop' }, 'staff TOTP reset');
    return { status: done ? 'applied' : 'noop' };
  }

  #startSession(accountId: string, ip: string, cid: string, action: 'sign_in' | 'setup', detail: string | null = null): SignedIn | Refused {
    const db = this.#d.db;
    const sessionId = randomBytes(32).toString('base64url');
    const now = this.#d.now();
    const account = db
      .transaction(() => {
        const a = accountById(db, accountId);
        if (a === null || a.disabledAt !== null) return null;
        insertSession(db, { sessionHash: sha256(sessionId), accountId, ip }, now);
        const ended = trimSessionsOf(db, accountId, SESSIONS_PER_ACCOUNT);
        if (ended > 0)
          withCorrelation(this.#d.log, cid).warn(
            { code: 'SESSIONS_PER_ACCOUNT_REACHED', accountId, ended, max: SESSIONS_PER_ACCOUNT },
            'staff sign-in ended the oldest session of the account',
          );
        if (action === 'sign_in')
          this.#d.audit({ actor: actorOf(a), action: 'sign_in', target: null, detail, result: 'applied', code: null, cid });
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

  /** Deletes expired sessions and known addresses past their 30 days (periodic). */
  purge(): number {
    const now = this.#d.now();
    return (
      purgeSessions(this.#d.db, now - this.#d.idleMs, now - this.#d.absoluteMs) +
      purgeKnownAddresses(this.#d.db, now - KNOWN_ADDRESS_TTL_MS)
    );
  }

  list(): StaffAccount[] {
    return listAccounts(this.#d.db);
  }

  /** One account by id (null: none), disabled ones included. */
  account(accountId: string): StaffAccount | null {
    return accountById(this.#d.db, accountId);
  }

  async create(
    actor: StaffActor,
    i: { username: string; displayName: string; role: StaffRole; password: string },
    cid: string,
  ): Promise<{ status: 'applied'; account: StaffAccount } | Refused> {
    if (actor.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    const weak = passwordProblem(i.password, i.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(i.password, trustedAccount(actor.username));
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

  /**
   * Sets a new password on another account (a supervisor for anyone else);
   * every session of that account ends. One's own goes through
   * changeOwnPassword, which asks for the current one: otherwise a session
   * left open would be enough to take the account over.
   */
  async resetPassword(actor: StaffActor, accountId: string, password: string, cid: string): Promise<{ status: 'applied' } | Refused> {
    if (actor.role !== 'supervisor') return { status: 'refused', code: 'NOT_SUPERVISOR' };
    if (actor.accountId === accountId) {
      withCorrelation(this.#d.log, cid).warn({ code: 'PASSWORD_RESET_OWN', accountId }, 'staff password reset refused');
      return { status: 'refused', code: 'PASSWORD_RESET_OWN' };
    }
    const target = accountById(this.#d.db, accountId);
    if (target === null) return { status: 'refused', code: 'ACCOUNT_NOT_FOUND' };
    const weak = passwordProblem(password, target.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(password, trustedAccount(actor.username));
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
   * Whether `password` is the current one of the session's own account: what
   * a supervisor's session shows before it grants or moves lasting authority
   * (a supervisor account, another account's password or second factor, its
   * own enrolment), so a stolen or unattended session alone cannot take the
   * site over. Verified under the one Argon2 budget, in the account's lane,
   * like its password change; a wrong one is logged with the request's cid.
   */
  async reauthenticate(s: SessionInfo, password: string, ip: string, cid: string): Promise<{ status: 'applied' } | Refused> {
    const c = credentialsOf(this.#d.db, s.account.username);
    const ok = await this.#work.verify(c?.passwordHash ?? null, password, trustedAccount(s.account.username));
    if (isShed(ok)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    if (c === null || c.account.accountId !== s.account.accountId || !ok) {
      withCorrelation(this.#d.log, cid).warn(
        { code: 'REAUTH_FAILED', accountId: s.account.accountId, ip },
        'staff re-authentication refused',
      );
      return { status: 'refused', code: 'REAUTH_FAILED' };
    }
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
    const ok = await this.#work.verify(c?.passwordHash ?? null, current, trustedAccount(s.account.username));
    if (isShed(ok)) return { status: 'refused', code: 'SIGN_IN_BUSY' };
    if (c === null || c.account.accountId !== s.account.accountId || !ok) {
      log.warn({ code: 'CURRENT_PASSWORD_WRONG', accountId: s.account.accountId }, 'staff password change refused');
      return { status: 'refused', code: 'CURRENT_PASSWORD_WRONG' };
    }
    const weak = passwordProblem(next, s.account.username);
    if (weak !== null) return { status: 'refused', ...weak };
    const passwordHash = await this.#work.hash(next, trustedAccount(s.account.username));
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
