import { z } from 'zod';
import { idempotent, problem, who, type Api, type Ctx } from '../context.js';
import { getSite } from '../../adapters/db/registry.js';
import { Id, OutcomeStatus, errorResponses } from '../schemas.js';
import { checkWebhookUrl } from '../../adapters/webhooks/egress.js';
import { createWebhook, disableWebhook, findWebhook, listDeliveries, listWebhooks } from '../../adapters/webhooks/endpoints.js';
import { WEBHOOK_EVENTS } from '../../adapters/webhooks/events.js';

const Webhook = z.object({
  id: z.string(),
  siteId: z.string(),
  url: z.string(),
  events: z.array(z.string()),
  enabled: z.boolean(),
  createdAt: z.int(),
});
// any URL parses here; which ones may be used is the SSRF guard's answer (egress.ts, 422)
const Url = z
  .string()
  .max(2000)
  .refine((u) => URL.canParse(u), 'expected a URL');

/** Webhook endpoints per site: key state changes, access events and alarms, HMAC-signed, retried with backoff, every attempt logged. */
export function webhooksRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/webhooks',
    {
      config: { secretAnswer: true },
      schema: {
        tags: ['webhooks'],
        summary: 'Register a webhook endpoint for a site; the signing secret is shown once',
        body: z.strictObject({ siteId: Id, url: Url, events: z.array(z.enum(WEBHOOK_EVENTS)).min(1).max(WEBHOOK_EVENTS.length) }),
        response: { ...errorResponses, 201: z.object({ status: OutcomeStatus, code: z.string(), webhook: Webhook, secret: z.string() }) },
      },
    },
    async (req, reply) => {
      // the SSRF guard (egress.ts) may wait on DNS: checked before the unit, so no transaction stays open meanwhile;
      // its answer depends on the URL alone, so it tells nothing about sites the token cannot see
      const checked = await checkWebhookUrl(req.body.url, { allowPrivateNetworks: ctx.config.webhookAllowPrivateNetworks });
      if (!checked.ok) return reply.status(422).send(problem(checked.code, checked.detail));
      // stored as parsed (scheme and host lower-cased, IP forms canonical): the dispatcher parses the same string again
      const url = checked.url.href;
      return idempotent(ctx, req, reply, async ({ db }) => {
        if (!(await getSite(db, who(req).sites, req.body.siteId))) return { statusCode: 404, body: problem('SITE_NOT_FOUND') };
        const { secret, ...webhook } = await createWebhook(
          db,
          ctx.cloud.secrets,
          { ...req.body, url, events: [...new Set(req.body.events)] },
          ctx.clock.now(),
        );
        return { statusCode: 201, body: { status: 'applied', code: 'MESSAGE_APPLIED', webhook, secret } };
      });
    },
  );

  app.get(
    '/webhooks',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'List webhook endpoints (never their secrets)',
        querystring: z.strictObject({ siteId: Id.optional() }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Webhook) }) },
      },
    },
    async (req) => {
      return { items: await listWebhooks(ctx.db, who(req).sites, req.query.siteId ?? null) };
    },
  );

  app.get(
    '/webhooks/:id/deliveries',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'The delivery log of an endpoint (newest first): every attempt with its HTTP status or error',
        params: z.strictObject({ id: z.string().min(1).max(64) }),
        querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(500).default(100) }),
        response: {
          ...errorResponses,
          200: z.object({
            items: z.array(
              z.object({
                outboxId: z.int(),
                eventId: z.string(),
                type: z.string(),
                attempt: z.int(),
                statusCode: z.int().nullable(),
                error: z.string().nullable(),
                code: z
                  .string()
                  .nullable()
                  .describe(
                    'stable code of a failed attempt (WEBHOOK_HTTP_STATUS, WEBHOOK_REDIRECT_NOT_FOLLOWED, WEBHOOK_ADDRESS_FORBIDDEN, WEBHOOK_TIMEOUT, WEBHOOK_CONNECTION_FAILED, WEBHOOK_SECRET_UNREADABLE); null when delivered',
                  ),
                at: z.int(),
                eventStatus: z.string(),
              }),
            ),
          }),
        },
      },
    },
    async (req, reply) => {
      if (!(await findWebhook(ctx.db, who(req).sites, req.params.id))) return reply.status(404).send(problem('WEBHOOK_NOT_FOUND'));
      return { items: await listDeliveries(ctx.db, req.params.id, req.query.limit) };
    },
  );

  app.post(
    '/webhooks/:id/disable',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'Stop sending new events to an endpoint (events already queued are still delivered)',
        params: z.strictObject({ id: z.string().min(1).max(64) }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        if (!(await findWebhook(db, who(req).sites, req.params.id))) return { statusCode: 404, body: problem('WEBHOOK_NOT_FOUND') };
        return {
          statusCode: 200,
          body: (await disableWebhook(db, req.params.id))
            ? { status: 'applied', code: 'MESSAGE_APPLIED' }
            : { status: 'noop', code: 'WEBHOOK_ALREADY_DISABLED' },
        };
      }),
  );
}
