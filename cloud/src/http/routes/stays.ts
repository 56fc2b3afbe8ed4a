import { createHash } from 'node:crypto';
import type { OutcomeCode } from '@tobira/shared';
import { z } from 'zod';
import { listPaymentsOfStay, listRefundsOfPayment, type Refund } from '../../adapters/db/payments.js';
import { listStays, loadStay } from '../../adapters/db/stays.js';
import type { StayView } from '../../app/stays.js';
import { CANCEL_REASONS } from '../../domain/cancellation-policy.js';
import type { Payment } from '../../domain/payments.js';
import { STAY_STATUSES } from '../../domain/stay-states.js';
import type { Stay } from '../../domain/stays.js';
import {
  cidOf,
  defined,
  idempotent,
  oneAtATime,
  problem,
  statusOf,
  who,
  type Answer,
  type Api,
  type Ctx,
  type OutcomeLike,
} from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, Problem, errorResponses } from '../schemas.js';
import { hiddenReference, notFound } from '../scope-guard.js';

const IsoDate = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'YYYY-MM-DD (site-local date)');
const Money = z.int().nonnegative().max(Number.MAX_SAFE_INTEGER);

export const StayJson = z.object({
  id: z.string(),
  siteId: z.string(),
  roomId: z.string(),
  personId: z.string(),
  checkIn: z.string(),
  checkOut: z.string(),
  nights: z.array(z.string()),
  amount: z.int(),
  currency: z.string(),
  deposit: z.int(),
  status: z.enum(STAY_STATUSES),
  version: z.int(),
  holdUntil: z.int(),
  keyId: z.string().nullable(),
  cancelReason: z.enum(CANCEL_REASONS).nullable(),
  membershipId: z.string().nullable(),
  lastCode: z.string(),
  createdAt: z.int(),
  updatedAt: z.int(),
});
export const PaymentJson = z.object({
  id: z.string(),
  purpose: z.enum(['stay_balance', 'stay_deposit']),
  amount: z.int(),
  currency: z.string(),
  status: z.string(),
  intentId: z.string().nullable(),
  /** What the guest's browser confirms the PaymentIntent with (Stripe.js); never a proof of payment. */
  clientSecret: z.string().nullable(),
  amountReceived: z.int(),
  amountRefunded: z.int(),
});
const RefundJson = z.object({
  id: z.string(),
  amount: z.int(),
  currency: z.string(),
  status: z.enum(['pending', 'succeeded', 'failed']),
  /** `tobira`: made by a verb here; `stripe`: made in Stripe directly (the dashboard, support) and recorded from it */
  source: z.enum(['tobira', 'stripe']),
  stripeRefundId: z.string().nullable(),
  attempts: z.int(),
  lastError: z.string().nullable(),
  createdAt: z.int(),
  updatedAt: z.int(),
});
const refundJson = ({ paymentId: _p, idempotencyKey: _k, cid: _c, ...r }: Refund) => r;
const StayViewJson = z.object({ stay: StayJson, payments: z.array(PaymentJson), payment: PaymentJson.nullable() });
const StayAnswer = StayViewJson.extend({ status: OutcomeStatus, code: z.string(), cid: z.string() });
const StayConflict = Problem.extend({ stay: StayJson.optional() });

// the guest credential's digest stays in the database: an answer says nothing about the credential
const stayJson = ({ cid: _cid, guestCredential: _credential, nights, membershipId, ...s }: Stay) => ({
  ...s,
  nights: [...nights],
  membershipId: membershipId ?? null,
});
const paymentJson = (p: Payment) => ({
  id: p.id,
  purpose: p.purpose,
  amount: p.amount,
  currency: p.currency,
  status: p.status,
  intentId: p.intentId,
  clientSecret: p.clientSecret,
  amountReceived: p.amountReceived,
  amountRefunded: p.amountRefunded,
});
/** `payment` is the one the guest pays now: the deposit while it is unpaid, else the balance. */
export const viewJson = (v: StayView) => {
  const payments = v.payments.map(paymentJson);
  const payment = payments.find((p) => p.amountReceived === 0 && p.status === 'requires_payment') ?? payments[0] ?? null;
  return { stay: stayJson(v.stay), payments, payment };
};

/** Outcome → HTTP status for stays: a night clash is 409, a payment provider that cannot be used 503. */
function stayStatusOf(o: OutcomeLike, appliedAs: 200 | 202): number {
  if (o.status === 'refused' && o.code === 'ROOM_UNAVAILABLE') return 409;
  if (o.status === 'refused' && (o.code === 'BILLING_UNAVAILABLE' || o.code === 'BILLING_NOT_CONFIGURED')) return 503;
  return statusOf(o, appliedAs);
}

type StayOutcomeAnswer =
  | { status: 'applied' | 'noop'; code: OutcomeCode; state: StayView }
  | { status: 'conflict'; code: OutcomeCode; current: StayView }
  | { status: 'refused'; code: OutcomeCode; detail?: string };

function answerOf(o: StayOutcomeAnswer, cid: string, appliedAs: 200 | 202): Answer {
  const statusCode = stayStatusOf(o, appliedAs);
  if (o.status === 'refused') {
    return { statusCode, body: { ...problem(o.code, o.detail), cid }, ...(statusCode === 503 ? { headers: { 'retry-after': '5' } } : {}) };
  }
  if (o.status === 'conflict') return { statusCode, body: { status: 'conflict', code: o.code, cid, stay: stayJson(o.current.stay) } };
  return {
    statusCode,
    body: { status: o.status, code: o.code, cid, ...viewJson(o.state) },
    headers: { location: `/stays/${o.state.stay.id}` },
  };
}

/**
 * Stays (docs/payments.md): book (202 with the stay pending and
 * the PaymentIntent's client secret), list, get, cancel (the key is revoked
 * at once, the refund queued), check out. Site scoping by token as for keys.
 */
export function staysRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/stays',
    {
      schema: {
        tags: ['stays'],
        summary:
          'Book a stay; Idempotency-Key required (the same key answers the same stay and the same PaymentIntent). 202 pending with payment.clientSecret',
        headers: z.object({ 'idempotency-key': z.string().regex(/^[A-Za-z0-9_.:-]{1,200}$/) }),
        body: z.strictObject({
          personId: Id,
          roomId: Id,
          checkIn: IsoDate,
          checkOut: IsoDate,
          amount: Money,
          currency: z.string().regex(/^[a-z]{3}$/),
          deposit: Money.optional(),
          // the guest's PIN or card, told to the guest by the caller; kept only as a digest, never answered back
          credential: z.strictObject({ type: z.enum(['pin', 'card']), value: z.string().min(1).max(256) }).optional(),
          // a members' booking: the guest's membership (refused MEMBERS_ONLY_PLAN unless it gives access now); its end cancels the stay
          membershipId: Id.optional(),
        }),
        response: { ...errorResponses, 200: StayAnswer, 202: StayAnswer, 409: StayConflict },
      },
    },
    (req, reply) =>
      // The booking calls Stripe between its own transactions, so it cannot sit inside the generic
      // idempotent unit: the key names the stay instead (token + key → stay id), and a repeat is the
      // domain's noop with the same stay and the same intent, even after a crash. One request per key
      // runs at a time (a concurrent repeat is 409 IDEMPOTENCY_IN_PROGRESS).
      oneAtATime(ctx, req, reply, async () => {
        const p = who(req);
        const cid = cidOf(req);
        const stayId = `st_${createHash('sha256').update(`${p.tokenId}\n${req.headers['idempotency-key']}`).digest('base64url').slice(0, 32)}`;
        // every row the booking names is checked against the caller's sites: the guest above all, whose
        // record (and contact) a paid stay would otherwise open to the booking site
        const hidden = await hiddenReference(ctx.db, p.sites, [
          ['room', req.body.roomId],
          ['person', req.body.personId],
          ['membership', req.body.membershipId],
        ]);
        if (hidden !== null) return notFound(hidden, cid);
        const o = await ctx.cloud.bookStay(defined({ ...req.body, stayId, siteScope: p.sites, cid }));
        if (o.status === 'conflict' && o.code === 'STAY_ALREADY_EXISTS') {
          return { statusCode: 422, body: { ...problem('IDEMPOTENCY_KEY_REUSED', 'this Idempotency-Key booked another stay'), cid } };
        }
        return answerOf(o, cid, 202);
      }),
  );

  app.get(
    '/stays',
    {
      schema: {
        tags: ['stays'],
        summary: 'List stays (oldest first) with filters and cursor pagination',
        querystring: z.strictObject({
          siteId: Id.optional(),
          status: z.enum(STAY_STATUSES).optional(),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(StayJson), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const scope = who(req).sites;
      const { siteId } = req.query;
      if (siteId !== undefined && scope !== null && !scope.includes(siteId)) return { items: [], nextCursor: null };
      const siteIds = siteId !== undefined ? [siteId] : (scope ?? undefined);
      const page = await listStays(
        ctx.db,
        defined({ siteIds, status: req.query.status, limit: req.query.limit, cursor: req.query.cursor }),
      );
      if (page === 'bad_cursor') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      return { items: page.items.map(stayJson), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/stays/:stayId',
    {
      schema: {
        tags: ['stays'],
        summary: 'Get a stay with its payments (the ledger)',
        params: z.strictObject({ stayId: Id }),
        response: { ...errorResponses, 200: StayViewJson },
      },
    },
    async (req, reply) => {
      const scope = who(req).sites;
      const stay = await loadStay(ctx.db, req.params.stayId);
      if (!stay || (scope !== null && !scope.includes(stay.siteId))) return reply.status(404).send(problem('STAY_NOT_FOUND'));
      return viewJson({ stay, payments: await listPaymentsOfStay(ctx.db, stay.id) });
    },
  );

  app.get(
    '/stays/:stayId/payments',
    {
      schema: {
        tags: ['stays'],
        summary: "A stay's payments, each with its refunds (the ledger an operator reconciles)",
        params: z.strictObject({ stayId: Id }),
        response: {
          ...errorResponses,
          200: z.object({ items: z.array(PaymentJson.extend({ lastCode: z.string(), refunds: z.array(RefundJson) })) }),
        },
      },
    },
    async (req, reply) => {
      const scope = who(req).sites;
      const stay = await loadStay(ctx.db, req.params.stayId);
      if (!stay || (scope !== null && !scope.includes(stay.siteId))) return reply.status(404).send(problem('STAY_NOT_FOUND'));
      const payments = await listPaymentsOfStay(ctx.db, stay.id);
      const items = [];
      for (const p of payments) {
        items.push({ ...paymentJson(p), lastCode: p.lastCode, refunds: (await listRefundsOfPayment(ctx.db, p.id)).map(refundJson) });
      }
      return { items };
    },
  );

  app.post(
    '/stays/:stayId/cancel',
    {
      schema: {
        tags: ['stays'],
        summary:
          "Cancel a pending, confirmed or checked-in stay: its key is revoked at once, the nights released, a pending stay's intents cancelled, the policy's refund queued (made once)",
        params: z.strictObject({ stayId: Id }),
        // payment_refunded is Stripe's word (the money went back there), never a caller's
        body: z.strictObject({ reason: z.enum(CANCEL_REASONS).exclude(['payment_refunded']) }),
        response: { ...errorResponses, 200: StayAnswer, 202: StayAnswer, 409: StayConflict },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const o = await ctx.cloud.cancelStay(
          { stayId: req.params.stayId, reason: req.body.reason, siteScope: who(req).sites, cid },
          { db },
        );
        return answerOf(o, cid, 202);
      }),
  );

  app.post(
    '/stays/:stayId/check-in',
    {
      schema: {
        tags: ['stays'],
        summary: 'Check a guest in (confirmed → checked_in); not before the check-in date at the site',
        params: z.strictObject({ stayId: Id }),
        response: { ...errorResponses, 200: StayAnswer, 202: StayAnswer, 409: StayConflict },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const o = await ctx.cloud.checkInStay({ stayId: req.params.stayId, siteScope: who(req).sites, cid }, { db });
        return answerOf(o, cid, 200);
      }),
  );

  app.post(
    '/stays/:stayId/check-out',
    {
      schema: {
        tags: ['stays'],
        summary: 'Check a guest out: the key ends now, the remaining nights are released',
        params: z.strictObject({ stayId: Id }),
        response: { ...errorResponses, 200: StayAnswer, 202: StayAnswer, 409: StayConflict },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const o = await ctx.cloud.checkOutStay({ stayId: req.params.stayId, siteScope: who(req).sites, cid }, { db });
        return answerOf(o, cid, 202);
      }),
  );
}
