import type { FastifyInstance, FastifyReply } from 'fastify';
import { z } from 'zod';
import { StaffRole } from '../../adapters/sqlite/staff-accounts.js';
import type { Refused } from '../../app/staff-accounts.js';
import { authOf, type HttpDeps } from '../context.js';
import { NoQuery, issues, query } from '../query.js';
import { DisplayName, Password, Username, accountView } from './session.js';

const CreateBody = z.strictObject({ username: Username, displayName: DisplayName, role: StaffRole, password: Password });
const PasswordBody = z.strictObject({ password: Password });
const Params = z.strictObject({ accountId: z.string().min(1).max(128) });

const STATUS: Record<Refused['code'], number> = {
  NOT_SUPERVISOR: 403,
  ACCOUNT_NOT_FOUND: 404,
  USERNAME_TAKEN: 409,
  LAST_SUPERVISOR: 409,
  WEAK_PASSWORD: 422,
  BAD_CREDENTIALS: 401,
  ACCOUNT_DISABLED: 403,
  SETUP_CODE_INVALID: 403,
  SETUP_ALREADY_DONE: 409,
};
const refuse = (reply: FastifyReply, r: Refused) =>
  reply.status(STATUS[r.code]).send(r.detail === undefined ? { code: r.code } : { code: r.code, detail: r.detail });

/**
 * Staff accounts, supervisors only (checked here and in the use case: a
 * staff member's hand-made request gets 403 NOT_SUPERVISOR): list, create,
 * disable (its sessions end at once), enable, reset the password.
 */
export async function accountsRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  const accounts = deps.accounts;
  if (accounts === undefined) return;

  staff.get('/staff/accounts', async (req, reply) => {
    query(NoQuery, req);
    if (authOf(req).actor.role !== 'supervisor') return reply.status(403).send({ code: 'NOT_SUPERVISOR' });
    return { items: accounts.list().map(accountView), nextCursor: null };
  });

  staff.post('/staff/accounts', async (req, reply) => {
    const body = CreateBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = await accounts.create(authOf(req).actor, body.data, req.id);
    if (r.status === 'refused') return refuse(reply, r);
    return reply.status(201).send({ status: 'applied', account: accountView(r.account) });
  });

  for (const [verb, disabled] of [
    ['disable', true],
    ['enable', false],
  ] as const) {
    staff.post(`/staff/accounts/:accountId/${verb}`, async (req, reply) => {
      const p = Params.safeParse(req.params);
      if (!p.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(p.error) });
      const r = accounts.setDisabled(authOf(req).actor, p.data.accountId, disabled, req.id);
      if (r.status === 'refused') return refuse(reply, r);
      return reply.status(200).send({ status: r.status, account: accountView(r.account) });
    });
  }

  staff.post('/staff/accounts/:accountId/password', async (req, reply) => {
    const p = Params.safeParse(req.params);
    if (!p.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(p.error) });
    const body = PasswordBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = await accounts.resetPassword(authOf(req).actor, p.data.accountId, body.data.password, req.id);
    if (r.status === 'refused') return refuse(reply, r);
    return reply.status(200).send(r);
  });
}
