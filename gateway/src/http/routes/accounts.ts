import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { StaffRole } from '../../adapters/sqlite/staff-accounts.js';
import type { Refused } from '../../app/staff-accounts.js';
import { authOf, type HttpDeps } from '../context.js';
import { NoQuery, issues, query } from '../query.js';
import type { SignInThrottle } from '../sign-in-throttle.js';
import { DisplayName, Password, Reauth, Username, accountView, reauthenticated } from './session.js';

const CreateBody = z.strictObject({ username: Username, displayName: DisplayName, role: StaffRole, password: Password, ...Reauth });
const PasswordBody = z.strictObject({ password: Password, ...Reauth });
const ResetTotpBody = z.strictObject({ reason: z.string().max(200), ...Reauth });
const EnableBody = z.strictObject({ ...Reauth });
const Params = z.strictObject({ accountId: z.string().min(1).max(128) });

const STATUS: Record<Refused['code'], number> = {
  TOTP_CHALLENGE_INVALID: 401,
  // inside a session a wrong code is 403 (401 would tell the page its session ended)
  TOTP_INVALID: 403,
  TOTP_REPLAYED: 403,
  RECOVERY_CODE_INVALID: 403,
  RECOVERY_CODE_USED: 403,
  TOTP_POLICY_OFF: 409,
  TOTP_ALREADY_ENROLLED: 409,
  TOTP_NOT_ENROLLING: 409,
  TOTP_NOT_ENROLLED: 409,
  TOTP_RESET_OWN: 409,
  PASSWORD_RESET_OWN: 409,
  REASON_REQUIRED: 422,
  NOT_SUPERVISOR: 403,
  ACCOUNT_NOT_FOUND: 404,
  USERNAME_TAKEN: 409,
  LAST_SUPERVISOR: 409,
  WEAK_PASSWORD: 422,
  BREACHED_PASSWORD: 422,
  SIGN_IN_BUSY: 503,
  CURRENT_PASSWORD_WRONG: 403,
  SESSION_REQUIRED: 403,
  BAD_CREDENTIALS: 401,
  ACCOUNT_DISABLED: 403,
  SETUP_CODE_INVALID: 403,
  SETUP_ALREADY_DONE: 409,
  REAUTH_REQUIRED: 403,
  REAUTH_FAILED: 403,
};
export const refuse = (reply: FastifyReply, r: Refused) => {
  if (r.code === 'SIGN_IN_BUSY') void reply.header('retry-after', '1');
  return reply.status(STATUS[r.code]).send(r.detail === undefined ? { code: r.code } : { code: r.code, detail: r.detail });
};
/** The role before anything else: a staff member's hand-made request learns nothing, not even which fields exist. */
const notSupervisor = (req: FastifyRequest, reply: FastifyReply) =>
  authOf(req).actor.role === 'supervisor' ? null : reply.status(403).send({ code: 'NOT_SUPERVISOR' });

/**
 * Staff accounts, supervisors only (checked here and in the use case: a
 * staff member's hand-made request gets 403 NOT_SUPERVISOR): list, create,
 * disable (its sessions end at once), enable, reset the password. What
 * grants or moves lasting authority (a supervisor account, enabling one,
 * another account's password or second factor) also asks for the acting
 * supervisor's current password (`reauthenticated`).
 */
export async function accountsRoutes(staff: FastifyInstance, deps: HttpDeps, throttle: SignInThrottle): Promise<void> {
  const accounts = deps.accounts;
  if (accounts === undefined) return;

  staff.get('/staff/accounts', async (req, reply) => {
    const refused = notSupervisor(req, reply);
    if (refused !== null) return refused;
    query(NoQuery, req);
    const enrolled = accounts.totpEnrolled();
    return { items: accounts.list().map((a) => accountView(a, enrolled.has(a.accountId))), nextCursor: null };
  });

  staff.post('/staff/accounts', async (req, reply) => {
    const refused = notSupervisor(req, reply);
    if (refused !== null) return refused;
    const body = CreateBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const { currentPassword, ...input } = body.data;
    // A staff account can reach no supervisor's authority; a supervisor account is the site's.
    if (input.role === 'supervisor') {
      const unproven = await reauthenticated(deps, throttle, req, reply, currentPassword);
      if (unproven !== null) return unproven;
    }
    const r = await accounts.create(authOf(req).actor, input, req.id);
    if (r.status === 'refused') return refuse(reply, r);
    return reply.status(201).send({ status: 'applied', account: accountView(r.account) });
  });

  for (const [verb, disabled] of [
    ['disable', true],
    ['enable', false],
  ] as const) {
    staff.post(`/staff/accounts/:accountId/${verb}`, async (req, reply) => {
      const refused = notSupervisor(req, reply);
      if (refused !== null) return refused;
      const p = Params.safeParse(req.params);
      if (!p.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(p.error) });
      // Enabling a supervisor gives the site's authority back to whoever knows that account's password.
      if (!disabled && accounts.account(p.data.accountId)?.role === 'supervisor') {
        const body = EnableBody.safeParse(req.body ?? {});
        if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
        const unproven = await reauthenticated(deps, throttle, req, reply, body.data.currentPassword);
        if (unproven !== null) return unproven;
      }
      const r = accounts.setDisabled(authOf(req).actor, p.data.accountId, disabled, req.id);
      if (r.status === 'refused') return refuse(reply, r);
      return reply.status(200).send({ status: r.status, account: accountView(r.account) });
    });
  }

  staff.post('/staff/accounts/:accountId/password', async (req, reply) => {
    const refused = notSupervisor(req, reply);
    if (refused !== null) return refused;
    const p = Params.safeParse(req.params);
    if (!p.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(p.error) });
    const body = PasswordBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const unproven = await reauthenticated(deps, throttle, req, reply, body.data.currentPassword);
    if (unproven !== null) return unproven;
    const r = await accounts.resetPassword(authOf(req).actor, p.data.accountId, body.data.password, req.id);
    if (r.status === 'refused') return refuse(reply, r);
    return reply.status(200).send(r);
  });

  /** Another supervisor resets an account's second factor (a lost phone) with a reason; its sessions end. */
  staff.post('/staff/accounts/:accountId/totp/reset', async (req, reply) => {
    const refused = notSupervisor(req, reply);
    if (refused !== null) return refused;
    const p = Params.safeParse(req.params);
    if (!p.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(p.error) });
    const body = ResetTotpBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const unproven = await reauthenticated(deps, throttle, req, reply, body.data.currentPassword);
    if (unproven !== null) return unproven;
    const r = accounts.resetTotp(authOf(req).actor, p.data.accountId, body.data.reason, req.id);
    if (r.status === 'refused') {
      req.log.warn({ code: r.code, accountId: p.data.accountId }, 'staff TOTP reset refused');
      return refuse(reply, r);
    }
    return reply.status(200).send(r);
  });
}
