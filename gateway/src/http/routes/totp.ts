import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { SessionInfo, StaffAccounts } from '../../app/staff-accounts.js';
import { authOf, type HttpDeps } from '../context.js';
import { issues } from '../query.js';
import type { SignInThrottle } from '../sign-in-throttle.js';
import { refuse } from './accounts.js';
import { Password, Reauth, SecondFactor, WRONG_ANSWER, busy, reauthenticated, throttled } from './session.js';

const EnrolBody = z.strictObject({ ...Reauth });
const ConfirmBody = z.strictObject({ code: z.string().trim().min(1).max(16) });
const DisableBody = z
  .strictObject({ password: Password, ...SecondFactor })
  .refine((b) => (b.code === undefined) !== (b.recoveryCode === undefined), 'code or recoveryCode, one of them');

/**
 * A signed-in supervisor's own second factor (docs/gateway.md "Second factor
 * (TOTP)"): start enrolment, confirm it with a code (the recovery codes come
 * back once), turn it off with password and code. A session only: the API
 * token has no second factor (403 SESSION_REQUIRED), a staff member none to
 * enrol (403 NOT_SUPERVISOR). Starting an enrolment asks for the current
 * password (a second factor of the session's choosing would lock its owner
 * out). Codes are throttled like passwords, under the account's username.
 */
export async function totpRoutes(staff: FastifyInstance, deps: HttpDeps, throttle: SignInThrottle): Promise<void> {
  const accounts = deps.accounts;
  if (accounts === undefined) return;

  const supervisorSession = (req: FastifyRequest, reply: FastifyReply): SessionInfo | null => {
    const a = authOf(req);
    if (a.session === null) {
      void reply.status(403).send({ code: 'SESSION_REQUIRED' });
      return null;
    }
    if (a.session.account.role !== 'supervisor') {
      void reply.status(403).send({ code: 'NOT_SUPERVISOR' });
      return null;
    }
    return a.session;
  };

  staff.post('/staff/totp/enrolment', async (req, reply) => {
    const s = supervisorSession(req, reply);
    if (s === null) return reply;
    const body = EnrolBody.safeParse(req.body ?? {});
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    // Before anything is written: a session without the password must not replace a pending enrolment either.
    const unproven = await reauthenticated(deps, throttle, req, reply, body.data.currentPassword);
    if (unproven !== null) return unproven;
    const r = accounts.startEnrolment({ session: s }, req.id);
    if (r.status === 'refused') {
      req.log.warn({ code: r.code, accountId: s.account.accountId }, 'staff TOTP enrolment refused');
      return refuse(reply, r);
    }
    return reply.status(200).send({ secret: r.secret, uri: r.uri, qr: r.qr });
  });

  staff.post('/staff/totp/enrolment/confirm', async (req, reply) => {
    const s = supervisorSession(req, reply);
    if (s === null) return reply;
    const body = ConfirmBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    return guarded(throttle, req, reply, s, () => accounts.confirmEnrolment(s, body.data.code, req.id));
  });

  staff.post('/staff/totp/disable', async (req, reply) => {
    const s = supervisorSession(req, reply);
    if (s === null) return reply;
    const body = DisableBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    return guarded(throttle, req, reply, s, () => accounts.disableOwnTotp(s, body.data, req.id));
  });
}

/** Runs a check of a code (and password) under the sign-in throttle of the session's username. */
async function guarded(
  throttle: SignInThrottle,
  req: FastifyRequest,
  reply: FastifyReply,
  s: SessionInfo,
  run: () => ReturnType<StaffAccounts['confirmEnrolment']> | ReturnType<StaffAccounts['disableOwnTotp']>,
) {
  const name = s.account.username;
  const wait = throttle.waitFor(req.ip, name);
  if (wait > 0) return throttled(reply, req, wait);
  const full = throttle.attempt(req.ip, name);
  if (full > 0) return throttled(reply, req, full);
  const r = await run();
  if (r.status === 'refused') {
    if (r.code === 'SIGN_IN_BUSY') {
      throttle.refund(req.ip, name);
      return busy(reply, req);
    }
    if (WRONG_ANSWER.has(r.code) || r.code === 'CURRENT_PASSWORD_WRONG') throttle.failed(req.ip, name);
    else throttle.refund(req.ip, name);
    return refuse(reply, r);
  }
  throttle.refund(req.ip, name);
  return reply.status(200).send(r);
}
