import { z } from 'zod';
import { idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { listDeadLetters, outboxRowVisible } from '../../adapters/outbox/dead-letters.js';
import { Id, OutcomeStatus, Slug, errorResponses } from '../schemas.js';

const DeadLetter = z.object({
  id: z.int(),
  siteId: z.string(),
  gatewayId: z.string(),
  seq: z.int(),
  type: z.string(),
  keyId: z.string().nullable(),
  keyVersion: z.int().nullable(),
  attempts: z.int(),
  lastError: z.string().nullable(),
  cid: z.string(),
  createdAt: z.int(),
});

/** Outbox rows the dispatcher gave up on; an operator retries them. */
export function deadLettersRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/dead-letters',
    {
      schema: {
        tags: ['dead letters'],
        summary: 'List dead-lettered outbox rows',
        querystring: z.strictObject({
          siteId: Id.optional(),
          gatewayId: Slug.optional(),
          limit: z.coerce.number().int().min(1).max(500).default(100),
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(DeadLetter) }) },
      },
    },
    async (req) => ({ items: (await listDeadLetters(ctx.db, req.query, who(req).sites)).map(({ jti: _jti, ...d }) => d) }),
  );

  app.post(
    '/dead-letters/:id/retry',
    {
      schema: {
        tags: ['dead letters'],
        summary: 'Put a dead-lettered row back to pending (attempts reset)',
        params: z.strictObject({
          id: z.coerce
            .number()
            .int()
            .positive()
            .max(2 ** 53 - 1),
        }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        if (!(await outboxRowVisible(db, who(req).sites, req.params.id)))
          return { statusCode: 404, body: problem('DEAD_LETTER_NOT_FOUND') };
        const o = await ctx.cloud.retryDeadLetter(req.params.id, { db });
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code) : { status: o.status, code: o.code } };
      }),
  );
}
