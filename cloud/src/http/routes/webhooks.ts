import { z } from 'zod';
import type { Queryable } from '../../adapters/db/db.js';
import { idempotent, problem, who, type Api, type Ctx } from '../context.js';
import { getSite } from '../../adapters/db/registry.js';
import { Id, OutcomeStatus, errorResponses } from '../schemas.js';
import { checkWebhookUrl } from '../egress.js';
import { WEBHOOK_EVENTS, createWebhook } from '../webhooks.js';

const Webhook = z.object({ id: z.string(), siteId: z.string(), url: z.string(), events: z.array(z.string()), enabled: z.boolean(), createdAt: z.int() });
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
        const { secret, ...webhook } = await createWebhook(db, { ...req.body, url, events: [...new Set(req.body.events)] }, ctx.clock.now());
        return { statusCode: 201, body: { status: 'applied', code: 'MESSAGE_APPLIED', webhook, secret } };
      });
    },
  );

  const visible = async (scope: readonly string[] | null, id: string, db: Queryable = ctx.db) =>
    (
      await db.query<Record<string, unknown>>(
        'SELECT id, site_id, url, events, enabled, created_at FROM webhook_endpoints WHERE id = $2 AND ($1::text[] IS NULL OR site_id = ANY($1))',
        [scope === null ? null : [...scope], id],
      )
    ).rows[0];
  const toWebhook = (x: Record<string, unknown>) => ({
    id: x.id as string,
    siteId: x.site_id as string,
    url: x.url as string,
    events: x.events as string[],
    enabled: x.enabled as boolean,
    createdAt: x.created_at as number,
  });

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
      const s = who(req).sites;
      const r = await ctx.db.query<Record<string, unknown>>(
        `SELECT id, site_id, url, events, enabled, created_at FROM webhook_endpoints
          WHERE ($1::text[] IS NULL OR site_id = ANY($1)) AND ($2::text IS NULL OR site_id = $2) ORDER BY created_at, id LIMIT 1000`,
        [s === null ? null : [...s], req.query.siteId ?? null],
      );
      return { items: r.rows.map(toWebhook) };
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
                code: z.string().nullable().describe('stable code of a failed attempt (WEBHOOK_HTTP_STATUS, WEBHOOK_REDIRECT_NOT_FOLLOWED, WEBHOOK_ADDRESS_FORBIDDEN, WEBHOOK_TIMEOUT, WEBHOOK_CONNECTION_FAILED); null when delivered'),
                at: z.int(),
                eventStatus: z.string(),
              }),
            ),
          }),
        },
      },
    },
    async (req, reply) => {
      if (!(await visible(who(req).sites, req.params.id))) return reply.status(404).send(problem('WEBHOOK_NOT_FOUND'));
      const r = await ctx.db.query<Record<string, unknown>>(
        `SELECT d.outbox_id, o.event_id, o.type, d.attempt, d.status_code, d.error, d.code, d.at, o.status FROM webhook_deliveries d
           JOIN webhook_outbox o ON o.id = d.outbox_id WHERE d.endpoint_id = $1 ORDER BY d.id DESC LIMIT $2`,
        [req.params.id, req.query.limit],
      );
      return {
        items: r.rows.map((x) => ({
          outboxId: x.outbox_id as number,
          eventId: x.event_id as string,
          type: x.type as string,
          attempt: x.attempt as number,
          statusCode: (x.status_code as number | null) ?? null,
          error: (x.error as string | null) ?? null,
          code: (x.code as string | null) ?? null,
          at: x.at as number,
          eventStatus: x.status as string,
        })),
      };
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
        if (!(await visible(who(req).sites, req.params.id, db))) return { statusCode: 404, body: problem('WEBHOOK_NOT_FOUND') };
        const r = await db.query('UPDATE webhook_endpoints SET enabled = false WHERE id = $1 AND enabled', [req.params.id]);
        return { statusCode: 200, body: r.rowCount === 1 ? { status: 'applied', code: 'MESSAGE_APPLIED' } : { status: 'noop', code: 'WEBHOOK_ALREADY_DISABLED' } };
      }),
  );
}
