import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { authOf, type HttpDeps } from '../context.js';
import { NoQuery, issues, query } from '../query.js';

const UnlockParams = z.strictObject({ lockId: z.string().min(1).max(128) });
/** `emergency`: a supervisor's entry through the guest's privacy (docs/gateway.md "Privacy"); audited as PRIVACY_OVERRIDE. */
const UnlockBody = z.strictObject({ reason: z.string().max(200).optional(), emergency: z.boolean().optional() });
const REFUSED_STATUS = {
  NOT_SUPERVISOR: 403,
  REASON_REQUIRED: 422,
  LOCK_NOT_FOUND: 404,
  LOCK_OFFLINE: 409,
  SITE_LOCKDOWN: 409,
  PRIVACY_ACTIVE: 409,
} as const;

/**
 * GET /staff/locks: every lock the gateway knows, with state, lockout and open alarms (one page).
 * POST /staff/locks/:lockId/unlock: remote unlock by a supervisor with a reason (docs/gateway.md "Remote unlock").
 */
export async function locksRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.get('/staff/locks', async (req) => {
    query(NoQuery, req);
    return { items: deps.staff.locks(), nextCursor: null };
  });

  const unlock = deps.remoteUnlock;
  if (unlock === undefined) return;
  staff.post('/staff/locks/:lockId/unlock', async (req, reply) => {
    const actor = authOf(req).actor;
    // the role first: a staff member's hand-made request learns nothing else
    if (actor.role !== 'supervisor') return reply.status(403).send({ code: 'NOT_SUPERVISOR' });
    const p = UnlockParams.safeParse(req.params);
    if (!p.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(p.error) });
    const body = UnlockBody.safeParse(req.body ?? {});
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = unlock(p.data.lockId, body.data.reason ?? '', actor, req.id, body.data.emergency ?? false);
    if (r.status === 'refused') return reply.status(REFUSED_STATUS[r.code]).send({ code: r.code });
    return reply.status(200).send({
      status: 'applied',
      code: r.code,
      eventId: r.event.eventId,
      commandId: r.command.commandId,
      at: r.event.at,
      warning: r.warning,
    });
  });
}
