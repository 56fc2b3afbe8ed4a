import { z } from 'zod';
import { problem, who, type Api, type Ctx } from '../context.js';
import { decodeCursor } from '@tobira/shared';
import { listEvents } from '../../adapters/db/audit.js';
import { Cursor, Id, Limit, QueryMillis, Slug, TimeIdCursor, errorResponses } from '../schemas.js';

const Event = z.object({
  eventId: z.string(),
  siteId: z.string(),
  gatewayId: z.string(),
  lockId: z.string(),
  doorId: z.string().nullable(),
  at: z.int(),
  allowed: z.boolean(),
  code: z.string(),
  keyId: z.string().nullable(),
  keyVersion: z.int().nullable(),
  personId: z.string().nullable(),
  credentialType: z.string().nullable(),
  cid: z.string().describe('the cid of the grant of the key that matched (traces the decision to the API call that issued the key)'),
  receivedAt: z.int(),
  by: z
    .object({ accountId: z.string(), name: z.string(), reason: z.string() })
    .nullable()
    .describe('REMOTE_UNLOCK only: the gateway staff supervisor who opened the door remotely, and the reason; null otherwise'),
});

/** The audit log of door decisions, attributed to a person. */
export function eventsRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/access-events',
    {
      schema: {
        tags: ['access events'],
        summary: 'Query access events (oldest first) by site, gateway, door, person, key, code and time; cursor pagination',
        querystring: z.strictObject({
          siteId: Id.optional(),
          gatewayId: Slug.optional(),
          doorId: Id.optional(),
          personId: Id.optional(),
          keyId: Id.optional(),
          code: z
            .string()
            .regex(/^[A-Z_]{1,64}$/)
            .optional(),
          from: QueryMillis.optional().describe('epoch ms, inclusive'),
          to: QueryMillis.optional().describe('epoch ms, exclusive'),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Event), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      return listEvents(ctx.db, who(req).sites, { ...req.query, cursor });
    },
  );
}
