import { decodeCursor } from '@tobira/shared';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { listMemberships, loadMembership } from '../../adapters/db/memberships.js';
import type { MembershipResult } from '../../app/memberships.js';
import { END_REASONS, MEMBERSHIP_STATUSES } from '../../domain/membership-states.js';
import type { Membership } from '../../domain/memberships.js';
import { cidOf, defined, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, Problem, TimeIdCursor, errorResponses } from '../schemas.js';
import { heldElsewhere, hiddenReference, idUnavailableBody, notFoundBody } from '../scope-guard.js';

export const MembershipJson = z.object({
  id: z.string(),
  siteId: z.string(),
  planId: z.string(),
  personId: z.string(),
  membershipStatus: z.enum(MEMBERSHIP_STATUSES),
  version: z.int(),
  approvedAt: z.int().nullable(),
  approvedBy: z.string().nullable(),
  subscriptionId: z.string().nullable(),
  /** the first invoice, open until the member pays it */
  firstInvoiceId: z.string().nullable(),
  currentPeriodEnd: z.int().nullable(),
  cancelAtPeriodEnd: z.boolean(),
  pastDueSince: z.int().nullable(),
  suspended: z.boolean(),
  keyId: z.string().nullable(),
  endReason: z.enum(END_REASONS).nullable(),
  endedBy: z.string().nullable(),
  endNote: z.string().nullable(),
  endedAt: z.int().nullable(),
  /** a billing stop Stripe gave no answer to, until it is read back from Stripe (`MEMBERSHIP_END_PENDING`) */
  billingStopPending: z.enum(['cancel_now', 'cancel_at_period_end']).nullable(),
  lastCode: z.string(),
  createdAt: z.int(),
  updatedAt: z.int(),
});
// the credential digest, the idempotency key and the Stripe customer stay in the database
const membershipJson = (m: Membership) => ({
  id: m.id,
  siteId: m.siteId,
  planId: m.planId,
  personId: m.personId,
  membershipStatus: m.status,
  version: m.version,
  approvedAt: m.approvedAt,
  approvedBy: m.approvedBy,
  subscriptionId: m.subscriptionId,
  firstInvoiceId: m.firstInvoiceId,
  currentPeriodEnd: m.currentPeriodEnd,
  cancelAtPeriodEnd: m.cancelAtPeriodEnd,
  pastDueSince: m.pastDueSince,
  suspended: m.suspended,
  keyId: m.keyId,
  endReason: m.endReason,
  endedBy: m.endedBy,
  endNote: m.endNote,
  endedAt: m.endedAt,
  billingStopPending: m.billingStopPending,
  lastCode: m.lastCode,
  createdAt: m.createdAt,
  updatedAt: m.updatedAt,
});
const Notices = z.array(z.object({ notice: z.string(), dedupeKey: z.string() }));
const MembershipAnswer = MembershipJson.extend({ status: OutcomeStatus, code: z.string(), cid: z.string(), notices: Notices });
const MembershipConflict = Problem.extend({ membership: MembershipJson.optional() });
const Expected = z.int().min(1).optional();

function send(reply: FastifyReply, o: MembershipResult, appliedAs: 200 | 201 = 200): FastifyReply {
  const notices = o.notices.map((n) => ({ notice: n.notice, dedupeKey: n.dedupeKey }));
  // without Stripe the dependency is missing, as when it is down: 503 either way
  if (o.status === 'refused')
    return reply.status(o.code === 'BILLING_NOT_CONFIGURED' ? 503 : statusOf(o)).send({ ...problem(o.code, o.detail), cid: o.cid });
  if (o.status === 'conflict')
    return reply.status(409).send({ ...problem(o.code, undefined, 'conflict'), cid: o.cid, membership: membershipJson(o.current) });
  // accepted, not done: the end waits on what Stripe did (a stop it gave no answer to)
  const status = o.status === 'applied' && o.code === 'MEMBERSHIP_END_PENDING' ? 202 : statusOf(o, appliedAs);
  return reply.status(status).send({ ...membershipJson(o.state), status: o.status, code: o.code, cid: o.cid, notices });
}

/**
 * Memberships (docs/memberships.md): apply, approve (the
 * checkout starts in Stripe), reject, self-cancel on behalf of the member,
 * force-cancel (staff, with a note), list, get. Every ending goes through
 * the one verb endMembership; billing stops in Stripe before the local
 * write, so Stripe unreachable is 503 BILLING_UNAVAILABLE with nothing
 * changed. Each verb is idempotent by itself (a repeat is a noop), so these
 * routes need no Idempotency-Key (they call Stripe between transactions).
 */
export function membershipsRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/memberships',
    {
      schema: {
        tags: ['memberships'],
        summary: "Apply for a membership of a plan (applied, under review); the member's credential is kept only as a digest",
        body: z.strictObject({
          id: Id.optional(),
          planId: Id,
          personId: Id,
          credential: z.strictObject({ type: z.enum(['pin', 'card']), value: z.string().min(1).max(256) }).optional(),
        }),
        response: { ...errorResponses, 200: MembershipAnswer, 201: MembershipAnswer, 409: MembershipConflict },
      },
    },
    async (req, reply) => {
      const cid = cidOf(req);
      const { id, ...body } = req.body;
      const scope = who(req).sites;
      // every row the request names is checked against the caller's sites, and an id another site holds is neither shown nor confirmed
      const hidden = await hiddenReference(ctx.db, scope, [
        ['plan', body.planId],
        ['person', body.personId],
      ]);
      if (hidden !== null) return reply.status(404).send(notFoundBody(hidden, cid));
      if (await heldElsewhere(ctx.db, scope, 'membership', id)) return reply.status(409).send(idUnavailableBody(cid));
      const o = await ctx.cloud.applyMembership(defined({ ...body, membershipId: id, siteScope: scope, cid }));
      if (o.status !== 'refused' && (await heldElsewhere(ctx.db, scope, 'membership', o.status === 'conflict' ? o.current.id : o.state.id)))
        return reply.status(409).send(idUnavailableBody(cid));
      if (o.status === 'applied') void reply.header('location', `/memberships/${o.state.id}`);
      return send(reply, o, 201);
    },
  );

  app.get(
    '/memberships',
    {
      schema: {
        tags: ['memberships'],
        summary: "List memberships (oldest first) with filters and cursor pagination, within the token's sites",
        querystring: z.strictObject({
          siteId: Id.optional(),
          planId: Id.optional(),
          personId: Id.optional(),
          status: z.enum(MEMBERSHIP_STATUSES).optional(),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(MembershipJson), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      const { cursor: _c, ...q } = req.query;
      const page = await listMemberships(ctx.db, who(req).sites, defined({ ...q, cursor }));
      return { items: page.items.map(membershipJson), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/memberships/:membershipId',
    {
      schema: {
        tags: ['memberships'],
        summary: 'Get a membership',
        params: z.strictObject({ membershipId: Id }),
        response: { ...errorResponses, 200: MembershipJson },
      },
    },
    async (req, reply) => {
      const m = await loadMembership(ctx.db, req.params.membershipId, who(req).sites);
      if (!m) return reply.status(404).send(problem('MEMBERSHIP_NOT_FOUND'));
      return membershipJson(m);
    },
  );

  app.post(
    '/memberships/:membershipId/approve',
    {
      schema: {
        tags: ['memberships'],
        summary:
          "Approve an application: the plan's Price, the member's customer and the subscription are made in Stripe first (503 BILLING_UNAVAILABLE, nothing changed, when it is down); the first invoice is then open",
        params: z.strictObject({ membershipId: Id }),
        response: { ...errorResponses, 200: MembershipAnswer, 409: MembershipConflict },
      },
    },
    async (req, reply) => {
      const p = who(req);
      const o = await ctx.cloud.approveMembership({
        membershipId: req.params.membershipId,
        actor: `token:${p.tokenId}`,
        siteScope: p.sites,
        cid: cidOf(req),
      });
      return send(reply, o);
    },
  );

  app.post(
    '/memberships/:membershipId/reject',
    {
      schema: {
        tags: ['memberships'],
        summary: 'Reject an application under review (endMembership application_rejected); CHECKOUT_IN_PROGRESS once approved',
        params: z.strictObject({ membershipId: Id }),
        body: z.strictObject({ note: z.string().min(1).max(1000).optional(), expectedVersion: Expected }),
        response: { ...errorResponses, 200: MembershipAnswer, 202: MembershipAnswer, 409: MembershipConflict },
      },
    },
    async (req, reply) => {
      const p = who(req);
      const o = await ctx.cloud.endMembership(
        defined({
          membershipId: req.params.membershipId,
          reason: 'application_rejected' as const,
          actor: `token:${p.tokenId}`,
          note: req.body.note,
          expectedVersion: req.body.expectedVersion,
          siteScope: p.sites,
          cid: cidOf(req),
        }),
      );
      return send(reply, o);
    },
  );

  app.post(
    '/memberships/:membershipId/self-cancel',
    {
      schema: {
        tags: ['memberships'],
        summary:
          "Cancel on the member's behalf: the subscription is set to cancel at period end FIRST, then the membership is ending (the key works to the period end)",
        params: z.strictObject({ membershipId: Id }),
        body: z.strictObject({ expectedVersion: Expected }),
        response: { ...errorResponses, 200: MembershipAnswer, 202: MembershipAnswer, 409: MembershipConflict },
      },
    },
    async (req, reply) => {
      const o = await ctx.cloud.selfCancelMembership(
        defined({
          membershipId: req.params.membershipId,
          expectedVersion: req.body.expectedVersion,
          siteScope: who(req).sites,
          cid: cidOf(req),
        }),
      );
      return send(reply, o);
    },
  );

  app.post(
    '/memberships/:membershipId/force-cancel',
    {
      schema: {
        tags: ['memberships'],
        summary:
          'Staff force-cancel, effective now: the subscription is cancelled FIRST, then the membership ends and its key is revoked; refused for an application (APPLICATION_UNDER_REVIEW, CHECKOUT_IN_PROGRESS)',
        params: z.strictObject({ membershipId: Id }),
        body: z.strictObject({ note: z.string().min(1).max(1000), expectedVersion: Expected }),
        response: { ...errorResponses, 200: MembershipAnswer, 202: MembershipAnswer, 409: MembershipConflict },
      },
    },
    async (req, reply) => {
      const p = who(req);
      const o = await ctx.cloud.endMembership(
        defined({
          membershipId: req.params.membershipId,
          reason: 'force_cancel' as const,
          actor: `token:${p.tokenId}`,
          note: req.body.note,
          expectedVersion: req.body.expectedVersion,
          siteScope: p.sites,
          cid: cidOf(req),
        }),
      );
      return send(reply, o);
    },
  );
}
