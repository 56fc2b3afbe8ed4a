import { StaffActionKind, decodeCursor } from '@tobira/shared';
import { z } from 'zod';
import { listStaffActions } from '../../adapters/db/staff-actions.js';
import { problem, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, QueryMillis, Slug, TimeIdCursor, errorResponses } from '../schemas.js';

const StaffAction = z.object({
  actionId: z.string(),
  siteId: z.string(),
  gatewayId: z.string(),
  at: z.int().describe("when the staff member acted (the gateway's trusted time)"),
  actor: z.object({
    accountId: z.string().nullable().describe("the gateway's staff account id; null: the gateway's API token (automation)"),
    name: z.string().describe('their display name at the time'),
  }),
  action: z.string().describe(`one of ${StaffActionKind.options.join(', ')}`),
  target: z.string().nullable().describe('a lock id, alarm id, account id or site mode; null for sign-in/out'),
  detail: z.string().nullable().describe('the reason or note given, or the account changed'),
  result: z.enum(['applied', 'noop', 'refused']),
  code: z.string().nullable().describe('the refusal code, or a warning such as FAILING_CLOSED'),
  cid: z.string(),
  receivedAt: z.int(),
});

/** What staff did at the gateways' staff UI and API (sign-in/out, lockdown, alarm ack, remote unlock, account changes). */
export function staffActionsRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/staff-actions',
    {
      schema: {
        tags: ['staff actions'],
        summary:
          "List gateway staff actions (newest first) by site, gateway, action, account and time; cursor pagination; only the caller's sites",
        querystring: z.strictObject({
          site: Id.optional().describe('site id'),
          gatewayId: Slug.optional(),
          action: StaffActionKind.optional(),
          actorId: z.string().min(1).max(128).optional(),
          from: QueryMillis.optional().describe('epoch ms, inclusive'),
          to: QueryMillis.optional().describe('epoch ms, exclusive'),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(StaffAction), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      const { site, ...rest } = req.query;
      return listStaffActions(ctx.db, who(req).sites, { ...rest, ...(site === undefined ? {} : { siteId: site }), cursor });
    },
  );
}
