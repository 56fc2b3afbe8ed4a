import { SiteMode } from '@tobira/shared';
import { z } from 'zod';
import { FAIL_CLOSED_REASONS, getGatewayHealth } from '../../adapters/db/gateways.js';
import { problem, who, type Api, type Ctx } from '../context.js';
import { Slug, errorResponses } from '../schemas.js';

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
      const gatewayNow = now + (h.clockSkewMs ?? 0);
      return {
        health: {
          ...h,
          leaseLeftMs: h.leaseExpiresAt === null ? null : Math.max(0, h.leaseExpiresAt - gatewayNow),
          seqLag: h.appliedSeq === null ? null : h.lastSeq - h.appliedSeq,
          failingClosed: h.lastStatusAt === null ? null : h.failClosedReason !== null,
        },
      };
    },
  );
}
