import { Schedule, SiteMode } from '@tobira/shared';
import { z } from 'zod';
import { cidOf, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { Id, errorResponses } from '../schemas.js';

const ModeBody = z
  .strictObject({
    mode: SiteMode.optional().describe(
      'the site mode to set: lockdown refuses every key but offline-capable staff keys; absent: unchanged',
    ),
    passage: z
      .strictObject({
        doorIds: z.array(Id).min(1).max(256).optional().describe('absent: every door of the site(s)'),
        schedule: Schedule.nullable().describe('the week-day windows (site time) the doors are held unlocked; null clears passage'),
      })
      .optional()
      .describe('passage mode for doors; absent: unchanged'),
    reason: z.string().trim().min(1).max(200).optional(),
  })
  .describe('at least one of mode and passage');

const GatewayRequest = z.object({
  gatewayId: z.string(),
  siteId: z.string(),
  seq: z.int().describe("the site.mode message's seq at its gateway"),
  passage: z.array(z.object({ doorId: z.string(), schedule: Schedule.nullable() })),
  status: z.enum(['pending', 'applied', 'refused']).describe('pending until this gateway acks the signed site.mode'),
  code: z.string().nullable().describe("the gateway's ack code (MODE_APPLIED, MODE_UNCHANGED, ...)"),
  settledAt: z.int().nullable(),
});
const ModeRequest = z.object({
  requestId: z.uuid(),
  status: z.enum(['pending', 'applied', 'refused']).describe('pending until every gateway confirmed; refused if one refused'),
  mode: SiteMode.nullable(),
  requestedBy: z.string().describe('the API token that asked (shown in the staff UI as the origin)'),
  reason: z.string().nullable(),
  requestedAt: z.int(),
  gateways: z.array(GatewayRequest),
});
const SiteParam = z.object({ siteId: Id.optional() });
const ModeAnswer = z.object({ status: z.literal('applied'), code: z.string(), cid: z.string(), request: ModeRequest });

/**
 * Operating modes from the cloud (docs/api.md "Modes"): lockdown and passage
 * for one site or every site in the token's scope, delivered to each gateway
 * as a signed site.mode through the outbox; the request is `pending` until
 * the gateways confirm.
 */
export function modesRoutes(app: Api, ctx: Ctx): void {
  const post = (path: '/sites/:siteId/mode' | '/modes', summary: string) =>
    app.post(
      path,
      {
        schema: {
          tags: ['modes'],
          summary,
          ...(path === '/modes' ? {} : { params: z.strictObject({ siteId: Id }) }),
          body: ModeBody,
          response: { ...errorResponses, 202: ModeAnswer },
        },
      },
      (req, reply) =>
        idempotent(ctx, req, reply, async ({ db }) => {
          const cid = cidOf(req);
          const p = who(req);
          const params = SiteParam.parse(req.params ?? {});
          const b = req.body;
          const o = await ctx.cloud.requestMode(
            {
              scope: p.sites,
              siteId: params.siteId ?? null,
              mode: b.mode ?? null,
              passage: b.passage === undefined ? null : { doorIds: b.passage.doorIds ?? null, schedule: b.passage.schedule },
              by: p.name,
              reason: b.reason ?? null,
              cid,
            },
            { db },
          );
          if (o.status !== 'applied')
            return { statusCode: statusOf(o), body: { ...problem(o.code, 'detail' in o ? o.detail : undefined), cid } };
          req.log.warn(
            { code: o.code, requestId: o.state.requestId, mode: b.mode, passage: b.passage !== undefined },
            'mode request queued',
          );
          return {
            statusCode: 202,
            body: { status: 'applied', code: o.code, cid, request: o.state },
            headers: { location: `/mode-requests/${o.state.requestId}` },
          };
        }),
    );
  post('/sites/:siteId/mode', "Set lockdown and/or passage at one site's gateways; 202, pending until each gateway confirms");
  post('/modes', 'Set lockdown and/or passage at every site in the token scope; 202, pending until each gateway confirms');

  app.get(
    '/mode-requests/:requestId',
    {
      schema: {
        tags: ['modes'],
        summary: 'A mode request and its delivery status per gateway (pending / applied / refused)',
        params: z.strictObject({ requestId: z.uuid() }),
        response: { ...errorResponses, 200: ModeRequest },
      },
    },
    async (req, reply) => {
      const v = await ctx.cloud.getModeRequest(req.params.requestId, who(req).sites);
      if (v === null) return reply.status(404).send(problem('MODE_REQUEST_NOT_FOUND'));
      return v;
    },
  );

  app.get(
    '/sites/:siteId/mode-requests',
    {
      schema: {
        tags: ['modes'],
        summary: "A site's newest mode requests (newest first, at most 20)",
        params: z.strictObject({ siteId: Id }),
        response: { ...errorResponses, 200: z.object({ items: z.array(ModeRequest) }) },
      },
    },
    async (req, reply) => {
      const items = await ctx.cloud.listSiteModeRequests(req.params.siteId, who(req).sites);
      if (items === null) return reply.status(404).send(problem('SITE_NOT_FOUND'));
      return { items };
    },
  );
}
