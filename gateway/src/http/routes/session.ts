import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { StaffAccount } from '../../adapters/sqlite/staff-accounts.js';
import type { AccountCode, SignedIn } from '../../app/staff-accounts.js';
import { authOf, type HttpDeps } from '../context.js';
import { issues } from '../query.js';
import type { SignInThrottle } from '../sign-in-throttle.js';

export const Username = z
  .string()
  .trim()
  .regex(/^[A-Za-z0-9._@-]{2,64}$/, '2-64 of A-Z a-z 0-9 . _ @ -');
export const DisplayName = z.string().trim().min(1).max(100);
// Longer than the policy's maximum, so a long passphrase is answered WEAK_PASSWORD with the reason, not a bare 422.
export const Password = z.string().min(1).max(4096);

const SignInBody = z.strictObject({ username: z.string().trim().min(1).max(64), password: Password });
const Challenge = z.string().min(1).max(128);
/** A TOTP code (6 digits, spaces allowed) or a recovery code: one of the two. */
export const SecondFactor = {
  code: z.string().trim().min(1).max(16).optional(),
  recoveryCode: z.string().trim().min(1).max(32).optional(),
};
const oneOf = (b: { code?: string | undefined; recoveryCode?: string | undefined }) =>
  (b.code === undefined) !== (b.recoveryCode === undefined);
const SecondStepBody = z.strictObject({ challenge: Challenge, ...SecondFactor }).refine(oneOf, 'code or recoveryCode, one of them');
const EnrolBody = z.strictObject({ challenge: Challenge });
const ChangeBody = z.strictObject({ currentPassword: Password, newPassword: Password });
const SetupBody = z.strictObject({
  code: z.string().trim().min(1).max(64),
  username: Username,
  displayName: DisplayName,
  password: Password,
});

/** An account as the API shows it (never the hash); `totp`: its second factor is enrolled (where the caller knows). */
export const accountView = (a: StaffAccount, totp?: boolean) => ({
  ...(totp === undefined ? {} : { totp }),
  accountId: a.accountId,
  username: a.username,
  displayName: a.displayName,
  role: a.role,
  disabled: a.disabledAt !== null,
  disabledAt: a.disabledAt,
  createdAt: a.createdAt,
  createdBy: a.createdBy,
});

export interface SessionCookie {
  readonly name: string;
  readonly secure: boolean;
}

/** Refusals of a second step that are a wrong guess (they stay counted in the throttle). */
export const WRONG_ANSWER: ReadonlySet<AccountCode> = new Set([
  'TOTP_INVALID',
  'TOTP_REPLAYED',
  'RECOVERY_CODE_INVALID',
  'RECOVERY_CODE_USED',
]);

/** The throttle key of setup code guesses (no username can contain `#`). */
const SETUP_KEY = '#setup';

/** The process's Argon2 queue is full (app/password-work.ts): nothing was evaluated; try again in a second. */
export function busy(reply: FastifyReply, req: FastifyRequest) {
  req.log.warn({ code: 'SIGN_IN_BUSY', ip: req.ip }, 'staff password check shed');
  return reply.status(503).header('retry-after', '1').send({ code: 'SIGN_IN_BUSY' });
}

export function throttled(reply: FastifyReply, req: FastifyRequest, waitMs: number) {
  req.log.warn({ code: 'SIGN_IN_THROTTLED', ip: req.ip, waitMs }, 'staff sign-in refused');
  return reply
    .status(429)
    .header('retry-after', String(Math.ceil(waitMs / 1000)))
    .send({ code: 'SIGN_IN_THROTTLED', retryAfterSeconds: Math.ceil(waitMs / 1000) });
}

/**
 * The acting supervisor's current password in a request body. Optional in
 * the schema so that leaving it out (or empty) is answered REAUTH_REQUIRED,
 * not a bare BAD_REQUEST.
 */
export const Reauth = { currentPassword: z.string().max(4096).optional() };

/**
 * Asks the session for its own current password before an action that
 * grants or moves lasting authority (docs/gateway.md "Re-authentication"):
 * null when it was given and is right (the action goes on), else the
 * refusal, sent. Throttled like a sign-in under the session's username and
 * in the same counters: shed before it is counted, counted before the
 * Argon2 await, a wrong one stays counted; so a stolen cookie is no faster
 * a password oracle than the sign-in form.
 */
export async function reauthenticated(
  deps: HttpDeps,
  throttle: SignInThrottle,
  req: FastifyRequest,
  reply: FastifyReply,
  currentPassword: string | undefined,
): Promise<FastifyReply | null> {
  const s = authOf(req).session;
  const accounts = deps.accounts;
  if (s === null || accounts === undefined) return reply.status(403).send({ code: 'SESSION_REQUIRED' });
  if (currentPassword === undefined || currentPassword === '') {
    req.log.warn({ code: 'REAUTH_REQUIRED', accountId: s.account.accountId, ip: req.ip }, 'staff re-authentication refused');
    return reply.status(403).send({ code: 'REAUTH_REQUIRED' });
  }
  const name = s.account.username;
  const wait = throttle.waitFor(req.ip, name);
  if (wait > 0) return throttled(reply, req, wait);
  if (!accounts.admitsSessionWork(s)) return busy(reply, req);
  const full = throttle.attempt(req.ip, name);
  if (full > 0) return throttled(reply, req, full);
  const r = await accounts.reauthenticate(s, currentPassword, req.ip, req.id);
  if (r.status === 'refused') {
    if (r.code === 'SIGN_IN_BUSY') {
      throttle.refund(req.ip, name);
      return busy(reply, req);
    }
    throttle.failed(req.ip, name);
    return reply.status(403).send({ code: 'REAUTH_FAILED' });
  }
  // Right: its count is given back; the pair's settled failures stay (a session is no sign-in).
  throttle.refund(req.ip, name);
  return null;
}

/**
 * Open routes (no session needed): GET /staff/setup (is the setup form
 * needed?), POST /staff/setup (the first supervisor, with the one-time
 * code), POST /staff/session (sign in). Each successful one sets a new
 * session cookie (a new id; any session the browser had is ended).
 */
export async function openSessionRoutes(
  app: FastifyInstance,
  deps: HttpDeps,
  cookie: SessionCookie,
  throttle: SignInThrottle,
): Promise<void> {
  const accounts = deps.accounts;
  const notConfigured = (reply: FastifyReply) => reply.status(503).send({ code: 'STAFF_AUTH_NOT_CONFIGURED' });

  const startSession = (req: FastifyRequest, reply: FastifyReply, r: SignedIn & { recoveryCodes?: string[] }) => {
    // A session the browser still had ends: a sign-in always gets a fresh id (no fixation).
    const old = req.cookies[cookie.name];
    if (old !== undefined && accounts !== undefined) {
      const s = accounts.session(old);
      if (s !== null) accounts.signOut(s, req.id);
    }
    void reply.setCookie(cookie.name, r.sessionId, { path: '/', httpOnly: true, sameSite: 'strict', secure: cookie.secure });
    return reply.status(200).send({
      account: accountView(r.account, accounts?.totpEnrolled().has(r.account.accountId) ?? false),
      csrfToken: r.csrfToken,
      ...(r.recoveryCodes === undefined ? {} : { recoveryCodes: r.recoveryCodes }),
    });
  };

  app.get('/staff/setup', async (_req, reply) => {
    if (accounts === undefined) return notConfigured(reply);
    return { required: accounts.setupRequired() };
  });

  app.post('/staff/setup', async (req, reply) => {
    if (accounts === undefined) return notConfigured(reply);
    const wait = throttle.waitFor(req.ip, SETUP_KEY);
    if (wait > 0) return throttled(reply, req, wait);
    const body = SetupBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    // Shed before it is counted: a try that gets no Argon2 work guessed nothing and touches no counter.
    if (!accounts.admitsPasswordWork(req.ip, null)) return busy(reply, req);
    // Counted before the await: a burst of guesses sent at once is throttled like one sent in turn.
    const full = throttle.attempt(req.ip, SETUP_KEY);
    if (full > 0) return throttled(reply, req, full);
    const r = await accounts.setup(body.data, req.ip, req.id);
    if (r.status === 'refused') {
      if (r.code === 'SIGN_IN_BUSY') {
        throttle.refund(req.ip, SETUP_KEY);
        return busy(reply, req);
      }
      // Only a wrong code is a guess; a right code with a weak password guessed nothing.
      if (r.code === 'SETUP_CODE_INVALID') throttle.failed(req.ip, SETUP_KEY);
      else throttle.refund(req.ip, SETUP_KEY);
      const status = r.code === 'SETUP_CODE_INVALID' ? 403 : r.code === 'SETUP_ALREADY_DONE' ? 409 : 422;
      return reply.status(status).send(r.detail === undefined ? { code: r.code } : { code: r.code, detail: r.detail });
    }
    throttle.succeeded(req.ip, SETUP_KEY);
    throttle.remember(req.ip, r.account.username);
    return startSession(req, reply, r);
  });

  app.post('/staff/session', async (req, reply) => {
    if (accounts === undefined) return notConfigured(reply);
    const body = SignInBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const { username, password } = body.data;
    const wait = throttle.waitFor(req.ip, username);
    if (wait > 0) return throttled(reply, req, wait);
    // Shed before it is counted: a flood that gets no Argon2 work cannot make the account's wait for everyone.
    if (!accounts.admitsPasswordWork(req.ip, username)) return busy(reply, req);
    // Counted before the await (in flight counts as failed until known right), per address and per name alike.
    const full = throttle.attempt(req.ip, username);
    if (full > 0) return throttled(reply, req, full);
    const r = await accounts.signIn(username, password, req.ip, req.id);
    if (r.status === 'refused') {
      if (r.code === 'SIGN_IN_BUSY') {
        throttle.refund(req.ip, username);
        return busy(reply, req);
      }
      if (r.code === 'BAD_CREDENTIALS') {
        throttle.failed(req.ip, username);
        return reply.status(401).send({ code: r.code });
      }
      if (r.code === 'TOTP_REQUIRED' || r.code === 'TOTP_ENROLMENT_REQUIRED') {
        // The password was right, but this is no sign-in yet: its count is given back, the pair's count is not
        // reset (a right password must not wipe the count of wrong codes) and the address is not yet known.
        throttle.refund(req.ip, username);
        return reply.status(401).send({ code: r.code, challenge: r.challenge, expiresAt: r.expiresAt });
      }
      throttle.failed(req.ip, username);
      return reply.status(403).send({ code: r.code });
    }
    throttle.succeeded(req.ip, username);
    return startSession(req, reply, r);
  });

  /**
   * POST /staff/session/totp: the second step of a sign-in, bound to the
   * challenge the password step answered. Throttled under the challenge's
   * username like a password: counted before the check, a wrong code stays
   * counted, a right one ends the sign-in as a right password does.
   */
  app.post('/staff/session/totp', async (req, reply) => {
    if (accounts === undefined) return notConfigured(reply);
    const body = SecondStepBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const name = accounts.challengeUsername(body.data.challenge, req.ip);
    if (name === null) {
      req.log.warn({ code: 'TOTP_CHALLENGE_INVALID', ip: req.ip }, 'staff second step refused');
      return reply.status(401).send({ code: 'TOTP_CHALLENGE_INVALID' });
    }
    const wait = throttle.waitFor(req.ip, name);
    if (wait > 0) return throttled(reply, req, wait);
    const full = throttle.attempt(req.ip, name);
    if (full > 0) return throttled(reply, req, full);
    const r = accounts.secondStep(body.data.challenge, body.data, req.ip, req.id);
    if (r.status === 'refused') {
      if (WRONG_ANSWER.has(r.code)) throttle.failed(req.ip, name);
      else throttle.refund(req.ip, name);
      return reply.status(r.code === 'ACCOUNT_DISABLED' ? 403 : r.code === 'TOTP_NOT_ENROLLING' ? 409 : 401).send({ code: r.code });
    }
    throttle.succeeded(req.ip, name);
    return startSession(req, reply, r);
  });

  /**
   * POST /staff/session/totp/enrolment: under policy required, a supervisor
   * not yet enrolled starts enrolment with the challenge of a right password
   * (there is no session before the second factor exists); the first code,
   * sent to POST /staff/session/totp, confirms it.
   */
  app.post('/staff/session/totp/enrolment', async (req, reply) => {
    if (accounts === undefined) return notConfigured(reply);
    const body = EnrolBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = accounts.startEnrolment({ challenge: body.data.challenge, ip: req.ip }, req.id);
    if (r.status === 'refused') {
      req.log.warn({ code: r.code, ip: req.ip }, 'staff TOTP enrolment refused');
      return reply.status(r.code === 'TOTP_CHALLENGE_INVALID' ? 401 : 409).send({ code: r.code });
    }
    return reply.status(200).send({ secret: r.secret, uri: r.uri, qr: r.qr });
  });
}

/** GET /staff/session (who am I, and the CSRF token) and DELETE /staff/session (sign out), behind the auth hook. */
export async function sessionRoutes(
  staff: FastifyInstance,
  deps: HttpDeps,
  cookie: SessionCookie,
  throttle: SignInThrottle,
): Promise<void> {
  staff.get('/staff/session', async (req) => {
    const a = authOf(req);
    return {
      via: a.actor.via,
      account:
        a.session === null
          ? { accountId: null, username: a.actor.username, displayName: a.actor.displayName, role: a.actor.role }
          : accountView(a.session.account, deps.accounts?.totpEnrolled().has(a.session.account.accountId) ?? false),
      totpPolicy: deps.accounts?.totpPolicy ?? 'off',
      csrfToken: a.session?.csrfToken ?? null,
    };
  });

  staff.delete('/staff/session', async (req, reply) => {
    const a = authOf(req);
    if (a.session !== null) deps.accounts?.signOut(a.session, req.id);
    void reply.clearCookie(cookie.name, { path: '/', httpOnly: true, sameSite: 'strict', secure: cookie.secure });
    return reply.status(200).send({ status: a.session === null ? 'noop' : 'applied' });
  });

  /**
   * POST /staff/session/password: the signed-in person changes their own
   * password with the current one (throttled like a sign-in: a session left
   * open must not become a password oracle). The API token has no password.
   */
  staff.post('/staff/session/password', async (req, reply) => {
    const a = authOf(req);
    const accounts = deps.accounts;
    if (a.session === null || accounts === undefined) return reply.status(403).send({ code: 'SESSION_REQUIRED' });
    const body = ChangeBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const name = a.session.account.username;
    const wait = throttle.waitFor(req.ip, name);
    if (wait > 0) return throttled(reply, req, wait);
    if (!accounts.admitsSessionWork(a.session)) return busy(reply, req);
    const full = throttle.attempt(req.ip, name);
    if (full > 0) return throttled(reply, req, full);
    const r = await accounts.changeOwnPassword(a.session, body.data.currentPassword, body.data.newPassword, req.ip, req.id);
    if (r.status === 'refused') {
      if (r.code === 'SIGN_IN_BUSY') {
        throttle.refund(req.ip, name);
        return busy(reply, req);
      }
      if (r.code === 'CURRENT_PASSWORD_WRONG') {
        throttle.failed(req.ip, name);
        return reply.status(403).send({ code: r.code });
      }
      throttle.refund(req.ip, name);
      const status = r.code === 'SESSION_REQUIRED' ? 403 : 422;
      return reply.status(status).send(r.detail === undefined ? { code: r.code } : { code: r.code, detail: r.detail });
    }
    throttle.refund(req.ip, name);
    return reply.status(200).send({ status: 'applied' });
  });
}
