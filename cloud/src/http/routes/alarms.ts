import { AlarmUplinkKind, decodeCursor } from '@tobira/shared';
import { z } from 'zod';
import { acknowledgeAlarm, listAlarms } from '../../adapters/db/alarms.js';
import { cidOf, idempotent, problem, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, QueryMillis, Slug, TimeIdCursor, errorResponses } from '../schemas.js';

const Alarm = z.object({
  alarmId: z.string(),
  siteId: z.string(),
  gatewayId: z.string(),
  lockId: z.string(),
  doorId: z.string().nullable(),
  kind: z.string(),
  at: z.int().describe("when the lock raised it (the gateway's clock)"),
  receivedAt: z.int(),
  cid: z.string(),
  ackedAt: z.int().nullable().describe('null while open'),
  ackedBy: z.string().nullable().describe('the name of the API token that acknowledged it'),
});

/** Door alarms the gateways reported (door ajar, forced open, tamper, jam, low battery): list, acknowledge. */
export function alarmsRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/alarms',
    {
      schema: {
        tags: ['alarms'],
        summary: 'List alarms (newest first) by site, gateway, lock, kind, open/acknowledged and time; cursor pagination',
        querystring: z.strictObject({
          siteId: Id.optional(),
          gatewayId: Slug.optional(),
          lockId: Id.optional(),
          kind: AlarmUplinkKind.optional(),
          state: z.enum(['open', 'acknowledged']).optional(),
          from: QueryMillis.optional().describe('epoch ms, inclusive'),
          to: QueryMillis.optional().describe('epoch ms, exclusive'),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Alarm), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      return listAlarms(ctx.db, who(req).sites, { ...req.query, cursor });
    },
  );

  app.post(
    '/alarms/:alarmId/ack',
    {
      schema: {
        tags: ['alarms'],
        summary: 'Acknowledge an alarm (records the token and the time, once); a second ack is a noop ALARM_ALREADY_ACKED',
        params: z.strictObject({ alarmId: z.uuid() }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string(), alarm: Alarm }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const p = who(req);
        // an alarm of another site is not found (404), like every scoped resource
        const r = await acknowledgeAlarm(db, p.sites, {
          alarmId: req.params.alarmId,
          by: p.name,
          byToken: p.tokenId,
          cid: cidOf(req),
          at: ctx.clock.now(),
        });
        if (r.kind === 'not_found') return { statusCode: 404, body: problem('ALARM_NOT_FOUND') };
        if (r.kind === 'already') {
          req.log.info({ code: 'ALARM_ALREADY_ACKED', alarmId: r.alarm.alarmId }, 'alarm already acknowledged');
          return { statusCode: 200, body: { status: 'noop', code: 'ALARM_ALREADY_ACKED', alarm: r.alarm } };
        }
        req.log.info({ code: 'ALARM_ACKNOWLEDGED', alarmId: r.alarm.alarmId }, 'alarm acknowledged');
        return { statusCode: 200, body: { status: 'applied', code: 'ALARM_ACKNOWLEDGED', alarm: r.alarm } };
      }),
  );
}
