import { z } from 'zod';
import { listDeadBillingJobs, retryDeadBillingJob } from '../../adapters/db/billing-jobs.js';
import { listDeadWebhookEvents, retryDeadWebhookEvent } from '../../adapters/db/webhook-events.js';
import { idempotent, problem, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, errorResponses } from '../schemas.js';

const DeadWebhookEvent = z.object({
  eventId: z.string(),
  type: z.string(),
  objectId: z.string().nullable(),
  attempts: z.int(),
  lastError: z.string().nullable(),
  code: z.string().nullable(),
  cid: z.string(),
  receivedAt: z.int(),
  /** The site of the payment the event names; null when it names none of ours. */
  siteId: z.string().nullable(),
});
const DeadBillingJob = z.object({
  id: z.int(),
  kind: z.string(),
  subjectId: z.string(),
  attempts: z.int(),
  lastError: z.string().nullable(),
  code: z.string().nullable(),
  cid: z.string(),
  createdAt: z.int(),
  /** The site of the job's stay, payment or refund. */
  siteId: z.string().nullable(),
});
const DEAD_KINDS = ['webhook-events', 'billing-jobs'] as const;

/**
 * The billing dead letters (docs/payments.md): Stripe events the
 * worker gave up on and billing jobs that failed for good, each with its
 * code and the site it belongs to (an event: the site of the payment it
 * names; a job: the site of its stay, payment or refund). The list takes
 * `siteId` and is scoped by the token's sites like every list (an event that
 * names none of our payments has no site: only unscoped tokens see it); the
 * retry is admin only.
 */
export function billingRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/billing/dead-letters',
    {
      schema: {
        tags: ['billing'],
        summary: "Dead Stripe webhook events and dead billing jobs, oldest first, with their codes and sites; scoped by the token's sites",
        querystring: z.strictObject({ kind: z.enum(DEAD_KINDS), siteId: Id.optional(), cursor: Cursor.optional(), limit: Limit }),
        response: {
          ...errorResponses,
          200: z.object({ items: z.array(z.union([DeadWebhookEvent, DeadBillingJob])), nextCursor: z.string().nullable() }),
        },
      },
    },
    async (req, reply) => {
      const o = {
        limit: req.query.limit,
        ...(req.query.cursor === undefined ? {} : { cursor: req.query.cursor }),
        ...(req.query.siteId === undefined ? {} : { siteId: req.query.siteId }),
      };
      const scope = who(req).sites;
      if (req.query.kind === 'webhook-events') {
        const page = await listDeadWebhookEvents(ctx.db, scope, o);
        if (page === 'bad_cursor') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
        const items = page.items.map((e) => ({
          eventId: e.eventId,
          type: e.type,
          objectId: e.objectId,
          attempts: e.attempts,
          lastError: e.lastError,
          code: e.deadCode,
          cid: e.cid,
          receivedAt: e.receivedAt,
          siteId: e.siteId,
        }));
        return { items, nextCursor: page.nextCursor };
      }
      const page = await listDeadBillingJobs(ctx.db, scope, o);
      if (page === 'bad_cursor') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      const items = page.items.map((j) => ({
        id: j.id,
        kind: j.kind,
        subjectId: j.subjectId,
        attempts: j.attempts,
        lastError: j.lastError,
        code: j.lastCode,
        cid: j.cid,
        createdAt: j.createdAt,
        siteId: j.siteId,
      }));
      return { items, nextCursor: page.nextCursor };
    },
  );

  app.post(
    '/billing/dead-letters/:kind/:id/retry',
    {
      config: { adminOnly: true },
      schema: {
        tags: ['billing'],
        summary: 'Put a dead Stripe event or billing job back to pending, due now, attempts reset (admin only)',
        params: z.strictObject({ kind: z.enum(DEAD_KINDS), id: z.string().min(1).max(255) }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const now = ctx.clock.now();
        const { kind, id } = req.params;
        let n = 0;
        if (kind === 'webhook-events') n = await retryDeadWebhookEvent(db, id, now);
        else if (/^[1-9]\d{0,15}$/.test(id)) n = await retryDeadBillingJob(db, Number(id), now);
        if (n === 0) return { statusCode: 404, body: problem('DEAD_LETTER_NOT_FOUND') };
        return { statusCode: 200, body: { status: 'applied', code: 'MESSAGE_APPLIED' } };
      }),
  );
}
