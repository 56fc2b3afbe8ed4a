import { Schedule } from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { authOf, type HttpDeps } from '../context.js';
import { issues } from '../query.js';

/** `schedule: null` clears the door's passage (the door relocks at once if it was held). */
const PassageBody = z.strictObject({
  doorId: z.string().min(1).max(128),
  schedule: Schedule.nullable(),
  reason: z.string().min(1).max(200).optional(),
});

const REFUSED_STATUS = { NOT_SUPERVISOR: 403, DOOR_NOT_FOUND: 404, PASSAGE_GUEST_ROOM: 409, PASSAGE_TOO_LONG: 422 } as const;

/**
 * POST /staff/passage: set or clear a door's passage schedule (docs/gateway.md
 * "Passage mode"): a supervisor's session only (domain/staff-modes.ts). The
 * role is checked before the body, so a staff member or the API token learns
 * nothing else.
 */
export async function passageRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  const set = deps.setPassage;
  if (set === undefined) return;
  staff.post('/staff/passage', async (req, reply) => {
    const actor = authOf(req).actor;
    if (actor.role !== 'supervisor' || actor.via !== 'session') return reply.status(403).send({ code: 'NOT_SUPERVISOR' });
    const body = PassageBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const r = set(body.data.doorId, body.data.schedule, body.data.reason ?? 'staff', req.id, actor);
    if (r.status === 'refused') return reply.status(REFUSED_STATUS[r.code]).send({ code: r.code });
    return reply.status(200).send({ status: r.status, doorId: body.data.doorId });
  });
}
