import { z } from 'zod';
import { cidOf, problem, type Api, type Ctx } from '../context.js';
import { Problem } from '../schemas.js';

const Received = z.object({ received: z.literal(true), status: z.enum(['stored', 'duplicate']), eventId: z.string(), cid: z.string() });

/**
 * `POST /webhooks/stripe` (no bearer token: Stripe signs it). The body is
 * kept as the raw bytes (a content-type parser scoped to this plugin), since
 * `Stripe-Signature` is over exactly those bytes: a re-serialized body fails.
 * A verified event is stored in the inbox in one transaction and answered
 * 200 (a duplicate too); the billing worker processes it. A bad signature,
 * a stale timestamp or a body that is not an event is 400 with a code, and
 * nothing changes.
 */
export function stripeWebhookRoutes(app: Api, ctx: Ctx): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.post(
    '/webhooks/stripe',
    {
      config: { public: true },
      schema: {
        tags: ['stays'],
        summary: 'Stripe webhook endpoint: verified on the raw body, stored, answered 200; processed by the billing worker',
        headers: z.object({ 'stripe-signature': z.string().max(4096).optional() }),
        response: { 200: Received, 400: Problem, 503: Problem },
      },
    },
    async (req, reply) => {
      const cid = cidOf(req);
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      const r = await ctx.cloud.receiveStripeWebhook(raw, req.headers['stripe-signature'], cid);
      if (r.status === 'refused') {
        const status = r.code === 'BILLING_NOT_CONFIGURED' ? 503 : 400;
        return reply.status(status).send({ ...problem(r.code, r.detail), cid });
      }
      return reply.status(200).send({ received: true, status: r.status, eventId: r.eventId, cid });
    },
  );
}
