import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { AlarmCursor } from '../../adapters/sqlite/staff-queries.js';
import { authOf, type HttpDeps } from '../context.js';
import { Cursor, Id, Limit, cursorOf, issues, query } from '../query.js';

const AlarmQuery = z.strictObject({
  status: z.enum(['open', 'all']).default('all'),
  lock: Id.optional(),
  cursor: Cursor.optional(),
  limit: Limit,
});
const AckBody = z.strictObject({ note: z.string().trim().min(1).max(200).optional() });
const AckParams = z.strictObject({ alarmId: z.string().min(1).max(128) });

/** GET /staff/alarms (open ones first) and POST /staff/alarms/:alarmId/ack (close one; a second ack is a noop). */
export async function alarmsRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.post('/staff/alarms/:alarmId/ack', async (req, reply) => {
    const params = AckParams.safeParse(req.params);
    if (!params.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(params.error) });
    const body = AckBody.safeParse(req.body ?? {});
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
    const note = body.data.note;
    const actor = authOf(req).actor;
    const who = actor.via === 'token' ? 'staff' : actor.displayName;
    const r = deps.ackAlarm(params.data.alarmId, note === undefined ? who : `${who}: ${note}`, req.id, actor);
    if (r.status === 'refused') return reply.status(404).send({ code: r.code });
    return reply.status(200).send(r);
  });

  staff.get('/staff/alarms', async (req) => {
    const q = query(AlarmQuery, req);
    return deps.staff.alarms({ ...q, cursor: cursorOf(AlarmCursor, q.cursor) });
  });
}
