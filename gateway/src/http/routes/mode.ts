import { SiteMode } from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { authOf, type HttpDeps } from '../context.js';
import { issues } from '../query.js';

const ModeBody = z.strictObject({ mode: SiteMode, reason: z.string().min(1).max(200).optional() });

/** POST /staff/mode: the local lockdown switch (`applied`, or `noop` when the site already is in that mode). */
export async function modeRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.post('/staff/mode', async (req, reply) => {
    const body = ModeBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = deps.setMode(body.data.mode, body.data.reason ?? 'staff', req.id, authOf(req).actor);
    return reply.status(200).send({ status: r.changed ? 'applied' : 'noop', mode: r.mode });
  });
}
