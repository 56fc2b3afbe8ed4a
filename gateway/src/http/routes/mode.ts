import { SiteMode } from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { authOf, type HttpDeps } from '../context.js';
import { issues } from '../query.js';

const ModeBody = z.strictObject({ mode: SiteMode, reason: z.string().min(1).max(200).optional() });

const REFUSED_STATUS = { CLOUD_LOCKDOWN: 403, REASON_REQUIRED: 422 } as const;

/**
 * POST /staff/mode: the local lockdown switch (`applied`, or `noop` when the
 * site already is in that mode). A lockdown the cloud set is lifted here only
 * by a supervisor with a reason (domain/staff-modes.ts decideModeChange).
 */
export async function modeRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.post('/staff/mode', async (req, reply) => {
    const body = ModeBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = deps.setMode(body.data.mode, body.data.reason, req.id, authOf(req).actor);
    if ('refused' in r) return reply.status(REFUSED_STATUS[r.refused]).send({ code: r.refused });
    return reply.status(200).send({ status: r.changed ? 'applied' : 'noop', mode: r.mode });
  });
}
