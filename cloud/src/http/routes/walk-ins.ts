import { createHash } from 'node:crypto';
import { decodeCursor } from '@tobira/shared';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { listBlocks, listWalkInRefunds, listWalkIns, loadWalkIn } from '../../adapters/db/walk-ins.js';
import type { WalkInResult } from '../../app/walk-ins.js';
import { CANCEL_REASONS } from '../../domain/cancellation-policy.js';
import { WALK_IN_STATUSES, type WalkIn } from '../../domain/walk-ins.js';
import { cidOf, defined, oneAtATime, problem, statusOf, who, type Answer, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, Problem, TimeIdCursor, errorResponses } from '../schemas.js';
import { heldElsewhere, hiddenReference, idUnavailable, notFound, notFoundBody } from '../scope-guard.js';

export const WalkInJson = z.object({
  id: z.string(),
  siteId: z.string(),
  planId: z.string(),
  personId: z.string(),
  day: z.string(),
  quotaMonth: z.string().nullable(),
  quotaReturned: z.boolean(),
  walkInStatus: z.enum(WALK_IN_STATUSES),
  version: z.int(),
  amount: z.int(),
  currency: z.string(),
  intentId: z.string().nullable(),
  /** what the desk terminal confirms the PaymentIntent with (Stripe.js); never a proof of payment */
  clientSecret: z.string().nullable(),
  amountReceived: z.int(),
  holdUntil: z.int(),
  keyId: z.string().nullable(),
  cancelReason: z.enum(CANCEL_REASONS).nullable(),
  lastCode: z.string(),
  createdAt: z.int(),
  updatedAt: z.int(),
});
/** One walk-in with every refund of its money as Stripe holds it: the desk's (`tobira`) and any made in Stripe directly (`stripe`). */
const WalkInWithRefunds = WalkInJson.extend({
  refunds: z.array(
    z.object({
      stripeRefundId: z.string().nullable(),
      amount: z.int(),
      currency: z.string(),
      status: z.enum(['pending', 'succeeded', 'failed']),
      source: z.enum(['tobira', 'stripe']),
      createdAt: z.int(),
    }),
  ),
});
// the credential digest and the idempotency key stay in the database
const walkInJson = (w: WalkIn) => ({
  id: w.id,
  siteId: w.siteId,
  planId: w.planId,
  personId: w.personId,
  day: w.day,
  quotaMonth: w.quotaMonth,
  quotaReturned: w.quotaReturned,
  walkInStatus: w.status,
  version: w.version,
  amount: w.amount,
  currency: w.currency,
  intentId: w.intentId,
  clientSecret: w.clientSecret,
  amountReceived: w.amountReceived,
  holdUntil: w.holdUntil,
  keyId: w.keyId,
  cancelReason: w.cancelReason,
  lastCode: w.lastCode,
  createdAt: w.createdAt,
  updatedAt: w.updatedAt,
});
const WalkInAnswer = WalkInJson.extend({ status: OutcomeStatus, code: z.string(), cid: z.string() });
const WalkInConflict = Problem.extend({ walkIn: WalkInJson.optional() });
const BlockJson = z.object({ siteId: z.string(), personId: z.string(), reason: z.string(), blockedBy: z.string(), blockedAt: z.int() });
const Month = z.string().regex(/^\d{4}-(0[1-9]|1[0-2])$/, 'YYYY-MM (the site calendar)');

function answerOf(o: WalkInResult, appliedAs: 200 | 202): Answer {
  if (o.status === 'refused') {
    const code = o.code === 'BILLING_NOT_CONFIGURED' ? 503 : statusOf(o);
    return { statusCode: code, headers: code === 503 ? { 'retry-after': '5' } : {}, body: { ...problem(o.code, o.detail), cid: o.cid } };
  }
  if (o.status === 'conflict')
    return { statusCode: 409, body: { ...problem(o.code, undefined, 'conflict'), cid: o.cid, walkIn: walkInJson(o.current) } };
  return {
    statusCode: statusOf(o, appliedAs),
    headers: { location: `/walk-ins/${o.state.id}` },
    body: { ...walkInJson(o.state), status: o.status, code: o.code, cid: o.cid },
  };
}

function send(reply: FastifyReply, o: WalkInResult, appliedAs: 200 | 202 = 200): FastifyReply {
  if (o.status === 'refused') {
    const code = o.code === 'BILLING_NOT_CONFIGURED' ? 503 : statusOf(o);
    return reply
      .status(code)
      .headers(code === 503 ? { 'retry-after': '5' } : {})
      .send({ ...problem(o.code, o.detail), cid: o.cid });
  }
  if (o.status === 'conflict')
    return reply.status(409).send({ ...problem(o.code, undefined, 'conflict'), cid: o.cid, walkIn: walkInJson(o.current) });
  return reply
    .status(statusOf(o, appliedAs))
    .header('location', `/walk-ins/${o.state.id}`)
    .send({ ...walkInJson(o.state), status: o.status, code: o.code, cid: o.cid });
}

/**
 * The front desk (docs/memberships.md "Check-in gates"): walk-ins
 * (gates, quota, payment through the intent factory, then the key), cancel,
 * list, get; people blocked at a site; a plan's quota uses. A gate's refusal
 * is 422 with its code; Stripe down is 503 BILLING_UNAVAILABLE. A walk-in
 * names its id, so a repeat is the domain's noop (no Idempotency-Key needed:
 * it calls Stripe between transactions).
 */
/** A block or unblock outcome: 404 for an unknown site or person, 422 for another refusal, else 200 with the row. */
function sendBlockOutcome(
  reply: FastifyReply,
  o: Awaited<ReturnType<Ctx['cloud']['blockPerson']>> | Awaited<ReturnType<Ctx['cloud']['unblockPerson']>>,
): FastifyReply {
  if (o.status === 'refused' || o.status === 'conflict')
    return reply
      .status(o.code.endsWith('_NOT_FOUND') ? 404 : 422)
      .send({ ...problem(o.code, o.status === 'refused' ? o.detail : undefined), cid: o.cid });
  return reply.status(200).send({ ...o.state, status: o.status, code: o.code, cid: o.cid });
}

export function walkInsRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/walk-ins',
    {
      schema: {
        tags: ['check-in'],
        summary:
          'A walk-in day pass at the front desk: the check-in gates (GUEST_BLOCKED, PLAN_NOT_IN_CONFIG, WALK_IN_NOT_ALLOWED, MEMBERS_ONLY_PLAN, QUOTA_EXHAUSTED), one quota use, then the PaymentIntent (purpose walk_in); 202 pending with clientSecret, the key issued once paid',
        body: z.strictObject({
          id: Id.optional(),
          siteId: Id,
          planId: Id,
          personId: Id,
          // the PIN or card the desk gives the guest; kept only as a digest, never answered back
          credential: z.strictObject({ type: z.enum(['pin', 'card']), value: z.string().min(1).max(256) }),
        }),
        response: { ...errorResponses, 200: WalkInAnswer, 202: WalkInAnswer, 409: WalkInConflict },
      },
    },
    (req, reply) =>
      // one request per Idempotency-Key at a time (a concurrent repeat is 409 IDEMPOTENCY_IN_PROGRESS); without an
      // `id` the key names the walk-in (token + key → id), so a repeat is the domain's noop with the same intent
      oneAtATime(ctx, req, reply, async () => {
        const { id, ...body } = req.body;
        const scope = who(req).sites;
        const cid = cidOf(req);
        // every row the request names is checked against the caller's sites (the gates read the plan and
        // the person unscoped), and a walk-in id another site holds is neither shown nor confirmed
        const hidden = await hiddenReference(ctx.db, scope, [
          ['site', body.siteId],
          ['plan', body.planId],
          ['person', body.personId],
        ]);
        if (hidden !== null) return notFound(hidden, cid);
        if (await heldElsewhere(ctx.db, scope, 'walkIn', id)) return idUnavailable(cid);
        const key = req.headers['idempotency-key'];
        const walkInId =
          id ??
          (typeof key === 'string'
            ? `wi_${createHash('sha256')
                .update(`${who(req).tokenId}\n${key}`)
                .digest('base64url')
                .slice(0, 32)}`
            : undefined);
        const o = await ctx.cloud.createWalkIn(defined({ ...body, walkInId, siteScope: scope, cid }));
        // without an `id` the key named the walk-in, so another sale under it is the key reused (as for a booking)
        if (id === undefined && o.status === 'conflict' && o.code === 'WALK_IN_ALREADY_EXISTS')
          return { statusCode: 422, body: { ...problem('IDEMPOTENCY_KEY_REUSED', 'this Idempotency-Key sold another walk-in'), cid } };
        if (o.status !== 'refused' && (await heldElsewhere(ctx.db, scope, 'walkIn', o.status === 'conflict' ? o.current.id : o.state.id)))
          return idUnavailable(cid);
        return answerOf(o, 202);
      }),
  );

  app.get(
    '/walk-ins',
    {
      schema: {
        tags: ['check-in'],
        summary: "List walk-ins (oldest first) with filters and cursor pagination, within the token's sites",
        querystring: z.strictObject({
          siteId: Id.optional(),
          personId: Id.optional(),
          status: z.enum(WALK_IN_STATUSES).optional(),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(WalkInJson), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      const { cursor: _c, ...q } = req.query;
      const page = await listWalkIns(ctx.db, who(req).sites, defined({ ...q, cursor }));
      return { items: page.items.map(walkInJson), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/walk-ins/:walkInId',
    {
      schema: {
        tags: ['check-in'],
        summary: 'Get a walk-in (the desk polls it until walkInStatus is paid) with every refund of its money as Stripe holds it',
        params: z.strictObject({ walkInId: Id }),
        response: { ...errorResponses, 200: WalkInWithRefunds },
      },
    },
    async (req, reply) => {
      const w = await loadWalkIn(ctx.db, req.params.walkInId, who(req).sites);
      if (!w) return reply.status(404).send(problem('WALK_IN_NOT_FOUND'));
      return { ...walkInJson(w), refunds: await listWalkInRefunds(ctx.db, w.id) };
    },
  );

  app.post(
    '/walk-ins/:walkInId/cancel',
    {
      schema: {
        tags: ['check-in'],
        summary:
          "Cancel a paid walk-in: its key is revoked now; its quota use goes back to the month it was used in when the site's cancellation policy says so (quotaReturn)",
        params: z.strictObject({ walkInId: Id }),
        // payment_refunded is Stripe's word (the money went back there), never a caller's
        body: z.strictObject({ reason: z.enum(CANCEL_REASONS).exclude(['payment_refunded']) }),
        response: { ...errorResponses, 200: WalkInAnswer, 409: WalkInConflict },
      },
    },
    async (req, reply) => {
      const o = await ctx.cloud.cancelWalkIn({
        walkInId: req.params.walkInId,
        reason: req.body.reason,
        siteScope: who(req).sites,
        cid: cidOf(req),
      });
      return send(reply, o);
    },
  );

  app.get(
    '/sites/:siteId/blocked-people',
    {
      schema: {
        tags: ['check-in'],
        summary: 'The people a site has blocked (their check-ins are refused GUEST_BLOCKED)',
        params: z.strictObject({ siteId: Id }),
        response: { ...errorResponses, 200: z.object({ items: z.array(BlockJson) }) },
      },
    },
    async (req, reply) => {
      const scope = who(req).sites;
      if (scope !== null && !scope.includes(req.params.siteId)) return reply.status(404).send(problem('SITE_NOT_FOUND'));
      return { items: await listBlocks(ctx.db, req.params.siteId) };
    },
  );

  app.put(
    '/sites/:siteId/blocked-people/:personId',
    {
      schema: {
        tags: ['check-in'],
        summary:
          'Block a person at a site: their bookings, walk-ins, key issues and check-ins there are refused GUEST_BLOCKED and their live keys at the site revoked (person_blocked, keysRevoked says how many); 200 noop when already blocked',
        params: z.strictObject({ siteId: Id, personId: Id }),
        body: z.strictObject({ reason: z.string().min(1).max(1000) }),
        response: {
          ...errorResponses,
          200: BlockJson.extend({ keysRevoked: z.int().min(0), status: OutcomeStatus, code: z.string(), cid: z.string() }),
        },
      },
    },
    async (req, reply) => {
      const p = who(req);
      // a person the caller's sites cannot see is not found, whether or not it exists elsewhere
      const hidden = await hiddenReference(ctx.db, p.sites, [
        ['site', req.params.siteId],
        ['person', req.params.personId],
      ]);
      if (hidden !== null) return reply.status(404).send(notFoundBody(hidden, cidOf(req)));
      const o = await ctx.cloud.blockPerson({
        siteId: req.params.siteId,
        personId: req.params.personId,
        reason: req.body.reason,
        actor: `token:${p.tokenId}`,
        siteScope: p.sites,
        cid: cidOf(req),
      });
      return sendBlockOutcome(reply, o);
    },
  );

  app.delete(
    '/sites/:siteId/blocked-people/:personId',
    {
      schema: {
        tags: ['check-in'],
        summary:
          'Lift the block on a person at a site: each membership of theirs there that gives door access gets a fresh key with the same credential (keysIssued says how many; stays and walk-ins are the desk’s to decide again); 200 noop PERSON_NOT_BLOCKED when there was none',
        params: z.strictObject({ siteId: Id, personId: Id }),
        response: {
          ...errorResponses,
          200: z.object({
            siteId: z.string(),
            personId: z.string(),
            keysIssued: z.number().int(),
            status: OutcomeStatus,
            code: z.string(),
            cid: z.string(),
          }),
        },
      },
    },
    async (req, reply) => {
      const p = who(req);
      // a person the caller's sites cannot see is not found, whether or not it exists elsewhere
      const hidden = await hiddenReference(ctx.db, p.sites, [
        ['site', req.params.siteId],
        ['person', req.params.personId],
      ]);
      if (hidden !== null) return reply.status(404).send(notFoundBody(hidden, cidOf(req)));
      const o = await ctx.cloud.unblockPerson({
        siteId: req.params.siteId,
        personId: req.params.personId,
        actor: `token:${p.tokenId}`,
        siteScope: p.sites,
        cid: cidOf(req),
      });
      return sendBlockOutcome(reply, o);
    },
  );

  app.get(
    '/plans/:planId/quota',
    {
      schema: {
        tags: ['check-in'],
        summary: "A plan's monthly quota uses per person and month (the site's calendar month), newest month first",
        params: z.strictObject({ planId: Id }),
        querystring: z.strictObject({ personId: Id.optional(), month: Month.optional() }),
        response: {
          ...errorResponses,
          200: z.object({
            planId: z.string(),
            monthlyEntryQuota: z.int().nullable(),
            currentMonth: z.string(),
            items: z.array(z.object({ personId: z.string(), month: z.string(), quota: z.int(), used: z.int(), left: z.int() })),
          }),
        },
      },
    },
    async (req, reply) => {
      const v = await ctx.cloud.quotaView(
        defined({ planId: req.params.planId, personId: req.query.personId, month: req.query.month, siteScope: who(req).sites }),
      );
      if (!v) return reply.status(404).send(problem('PLAN_NOT_FOUND'));
      return {
        planId: v.plan.id,
        monthlyEntryQuota: v.plan.monthlyEntryQuota,
        currentMonth: v.currentMonth,
        items: v.usage.map((u) => ({ personId: u.personId, month: u.month, quota: u.quota, used: u.used, left: u.quota - u.used })),
      };
    },
  );
}
