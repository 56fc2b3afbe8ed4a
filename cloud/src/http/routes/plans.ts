import { DoorId, decodeCursor } from '@tobira/shared';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { listPlans, loadPlan } from '../../adapters/db/plans.js';
import { BILLING_INTERVALS, type Plan } from '../../domain/plans.js';
import { cidOf, defined, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, TimeIdCursor, errorResponses } from '../schemas.js';
import { heldElsewhere, hiddenReference, idUnavailableBody, notFoundBody } from '../scope-guard.js';

export const PlanJson = z.object({
  id: z.string(),
  siteId: z.string(),
  name: z.string(),
  amount: z.int(),
  currency: z.string(),
  interval: z.enum(BILLING_INTERVALS),
  intervalCount: z.int(),
  doors: z.array(z.string()),
  membersOnly: z.boolean(),
  monthlyEntryQuota: z.int().nullable(),
  walkInAmount: z.int().nullable(),
  graceSeconds: z.int(),
  status: z.enum(['active', 'retired']),
  stripePriceId: z.string().nullable(),
  createdAt: z.int(),
  updatedAt: z.int(),
  retiredAt: z.int().nullable(),
});
const planJson = (p: Plan) => ({ ...p, doors: [...p.doors] });
const PlanAnswer = PlanJson.extend({ status: OutcomeStatus, code: z.string(), cid: z.string(), planStatus: z.enum(['active', 'retired']) });

/** The outcome fields beside the plan: the plan's own status is `planStatus` there. */
const answer = (o: { status: 'applied' | 'noop'; code: string; state: Plan }, cid: string) => ({
  ...planJson(o.state),
  planStatus: o.state.status,
  status: o.status,
  code: o.code,
  cid,
});

/** A refusal or conflict as a problem body with the status its code maps to. */
function sendProblem(
  reply: FastifyReply,
  o: { status: 'refused' | 'conflict'; code: Parameters<typeof problem>[0]; detail?: string },
  cid: string,
) {
  return reply.status(statusOf(o)).send({ ...problem(o.code, o.status === 'refused' ? o.detail : undefined), cid });
}
function sendCreated(reply: FastifyReply, status: number, location: string, body: unknown) {
  return reply.status(status).header('location', location).send(body);
}

/** Membership plans (docs/memberships.md): create, list, get, retire. Site-scoped by token. */
export function plansRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/plans',
    {
      schema: {
        tags: ['memberships'],
        summary: 'Create a membership plan: price per interval, doors, members-only flag, monthly entry quota, past-due grace',
        body: z.strictObject({
          id: Id.optional(),
          siteId: Id,
          name: z.string().min(1).max(200),
          amount: z.int().min(1).max(99_999_999),
          currency: z.string().regex(/^[a-z]{3}$/),
          interval: z.enum(BILLING_INTERVALS),
          intervalCount: z.int().min(1).max(12).optional(),
          doors: z.array(DoorId).min(1).max(64),
          membersOnly: z.boolean().optional(),
          monthlyEntryQuota: z.int().min(0).max(10_000).nullable().optional(),
          // the price of a walk-in day pass at the front desk (POST /walk-ins); absent: not sold there
          walkInAmount: z.int().min(1).max(Number.MAX_SAFE_INTEGER).nullable().optional(),
          graceSeconds: z
            .int()
            .min(0)
            .max(90 * 86_400)
            .optional(),
        }),
        response: { ...errorResponses, 200: PlanAnswer, 201: PlanAnswer },
      },
    },
    async (req, reply) => {
      const cid = cidOf(req);
      const scope = who(req).sites;
      const idTaken = () => reply.status(409).send(idUnavailableBody(cid));
      // the site first, then the id: another site's plan of that id is neither shown nor confirmed (no answer reveals another site's row)
      const hidden = await hiddenReference(ctx.db, scope, [['site', req.body.siteId]]);
      if (hidden !== null) return reply.status(404).send(notFoundBody(hidden, cid));
      if (await heldElsewhere(ctx.db, scope, 'plan', req.body.id)) return idTaken();
      const o = await ctx.cloud.createPlan(defined({ ...req.body, siteScope: scope, cid }));
      if (o.status === 'refused' || o.status === 'conflict') return sendProblem(reply, o, cid);
      if (o.status === 'noop' && (await heldElsewhere(ctx.db, scope, 'plan', o.state.id))) return idTaken();
      return sendCreated(reply, statusOf(o, 201), `/plans/${o.state.id}`, answer(o, cid));
    },
  );

  app.get(
    '/plans',
    {
      schema: {
        tags: ['memberships'],
        summary: 'List plans (oldest first) with filters and cursor pagination',
        querystring: z.strictObject({
          siteId: Id.optional(),
          status: z.enum(['active', 'retired']).optional(),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(PlanJson), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      const page = await listPlans(
        ctx.db,
        who(req).sites,
        defined({ siteId: req.query.siteId, status: req.query.status, limit: req.query.limit, cursor }),
      );
      return { items: page.items.map(planJson), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/plans/:planId',
    {
      schema: {
        tags: ['memberships'],
        summary: 'Get a plan',
        params: z.strictObject({ planId: Id }),
        response: { ...errorResponses, 200: PlanJson },
      },
    },
    async (req, reply) => {
      const p = await loadPlan(ctx.db, req.params.planId, who(req).sites);
      if (!p) return reply.status(404).send(problem('PLAN_NOT_FOUND'));
      return planJson(p);
    },
  );

  app.post(
    '/plans/:planId/retire',
    {
      schema: {
        tags: ['memberships'],
        summary:
          'Retire a plan: no new applications; each membership ends through endMembership(plan_retired) — paying members at period end, applications rejected',
        params: z.strictObject({ planId: Id }),
        response: {
          ...errorResponses,
          200: PlanAnswer.extend({ ended: z.array(z.string()), pending: z.array(z.string()) }),
        },
      },
    },
    async (req, reply) => {
      const cid = cidOf(req);
      const p = who(req);
      const o = await ctx.cloud.retirePlan({ planId: req.params.planId, actor: `token:${p.tokenId}`, siteScope: p.sites, cid });
      if (o.status === 'refused' || o.status === 'conflict') return sendProblem(reply, o, cid);
      return { ...answer(o, cid), ended: [...o.ended], pending: [...o.pending] };
    },
  );
}
