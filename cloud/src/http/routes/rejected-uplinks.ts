import { decodeCursor } from '@tobira/shared';
import { z } from 'zod';
import { listRejectedPage } from '../../adapters/db/uplinks.js';
import { problem, who, type Api, type Ctx } from '../context.js';
import { Cursor, Limit, QueryMillis, Slug, errorResponses } from '../schemas.js';

const RejectedUplink = z.object({
  id: z.int(),
  gatewayId: z.string().nullable().describe('null when the topic named no gateway'),
  topic: z.string(),
  code: z.string().describe('a verification code (UNKNOWN_KID, BAD_SIGNATURE, ...) or BAD_TOPIC, UNKNOWN_GATEWAY, APPLY_FAILED'),
  detail: z.string(),
  at: z.int(),
});
/** The last row's (at, id) sort key. */
const AtIdCursor = z.tuple([z.int().nonnegative(), z.int().positive()]);

/** Uplinks the cloud's inbox refused (failed verification or unstorable): never applied, kept for the operator. */
export function rejectedUplinksRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/rejected-uplinks',
    {
      schema: {
        tags: ['gateways'],
        summary: 'List rejected uplinks (newest first) by gateway, code and time; cursor pagination',
        querystring: z.strictObject({
          gatewayId: Slug.optional(),
          code: z
            .string()
            .regex(/^[A-Z_]{1,64}$/)
            .optional(),
          from: QueryMillis.optional().describe('epoch ms, inclusive'),
          to: QueryMillis.optional().describe('epoch ms, exclusive'),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(RejectedUplink), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(AtIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      return listRejectedPage(ctx.db, who(req).sites, { ...req.query, cursor });
    },
  );
}
