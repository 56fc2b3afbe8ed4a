import { SiteMode, decodeCursor } from '@tobira/shared';
import { z } from 'zod';
import {
  FAIL_CLOSED_REASONS,
  getGatewayHealth,
  listGatewayHealth,
  type GatewayHealth as HealthRecord,
} from '../../adapters/db/gateways.js';
import { problem, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, Slug, errorResponses } from '../schemas.js';

const GatewayHealth = z.object({
  gatewayId: z.string(),
  siteId: z.string(),
  online: z.boolean().nullable().describe('presence (its retained last will): null = never heard'),
  presenceAt: z.int().nullable(),
  lastStatusAt: z.int().nullable().describe('when the cloud received its last status report; null = none yet'),
  mode: SiteMode.nullable(),
  leaseExpiresAt: z.int().nullable().describe("its freshness lease as its last status reported it (the gateway's clock)"),
  leaseLeftMs: z
    .int()
    .nullable()
    .describe('leaseExpiresAt minus now on the gateway clock (now + clockSkewMs), 0 when run out; a heartbeat since may have extended it'),
  appliedSeq: z.int().nullable().describe('the last downlink seq it applied, as reported'),
  lastSeq: z.int().describe('the last downlink seq the cloud handed out to it'),
  seqLag: z.int().nullable().describe('lastSeq - appliedSeq: downlinks it has not applied yet (as of its report)'),
  outboxDepth: z.int().nullable().describe('its uplinks not yet acknowledged by the cloud, as reported'),
  clockSkewMs: z.int().nullable(),
  clockSkewAt: z.int().nullable(),
  deadLetters: z.int().describe('its downlinks the dispatcher gave up on (GET /dead-letters)'),
  pendingDownlinks: z.int().describe('its downlinks waiting in the cloud outbox'),
  failingClosed: z.boolean().nullable().describe('it denies ordinary keys (CLOUD_STALE); null = no status report yet'),
  failClosedReason: z.enum(FAIL_CLOSED_REASONS).nullable(),
});

/**
 * A gateway's health for the operator, apart from `GET /gateways/{id}`: that
 * one is the registry row (and a list item); this one reads the last status
 * report and the outbox and judges whether the site fails closed.
 */
export function gatewayHealthRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/gateways/:gatewayId/health',
    {
      schema: {
        tags: ['gateways'],
        summary: 'Gateway health: presence, lease left, applied vs handed-out seq, outbox depth, clock skew, failing closed and why',
        params: z.strictObject({ gatewayId: Slug }),
        response: { ...errorResponses, 200: z.object({ health: GatewayHealth }) },
      },
    },
    async (req, reply) => {
      const now = ctx.clock.now();
      const h = await getGatewayHealth(ctx.db, who(req).sites, req.params.gatewayId, now);
      if (!h) return reply.status(404).send(problem('GATEWAY_NOT_FOUND'));
      return { health: view(h, now) };
    },
  );

  app.get(
    '/gateway-health',
    {
      schema: {
        tags: ['gateways'],
        summary: "Every gateway's health (the fleet view), by site and failing closed, ordered by gateway id; cursor pagination",
        querystring: z.strictObject({
          siteId: Id.optional(),
          failingClosed: z
            .enum(['true', 'false'])
            .optional()
            .describe('true: only those failing closed; false: only those that reported and do not'),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(GatewayHealth), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(IdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      const now = ctx.clock.now();
      const page = await listGatewayHealth(
        ctx.db,
        who(req).sites,
        {
          siteId: req.query.siteId,
          failingClosed: req.query.failingClosed === undefined ? undefined : req.query.failingClosed === 'true',
          after: cursor?.[0] ?? null,
          limit: req.query.limit,
        },
        now,
      );
      return { items: page.items.map((h) => view(h, now)), nextCursor: page.nextCursor };
    },
  );
}

/** The last row's gateway id. */
const IdCursor = z.tuple([z.string().min(1)]);

/** The stored health and what is judged from it now: the lease left on the gateway's clock, the seq lag, failing closed. */
function view(h: HealthRecord, now: number) {
  const gatewayNow = now + (h.clockSkewMs ?? 0);
  return {
    ...h,
    leaseLeftMs: h.leaseExpiresAt === null ? null : Math.max(0, h.leaseExpiresAt - gatewayNow),
    seqLag: h.appliedSeq === null ? null : h.lastSeq - h.appliedSeq,
    failingClosed: h.lastStatusAt === null ? null : h.failClosedReason !== null,
  };
}
