import { MOBILE_TOKEN_MAX_TTL_SECONDS } from '@tobira/shared';
import { z } from 'zod';
import { cidOf, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { Id, OutcomeStatus, errorResponses } from '../schemas.js';

const MobileTokenBody = z.strictObject({
  ttlSeconds: z
    .int()
    .min(30)
    .max(MOBILE_TOKEN_MAX_TTL_SECONDS)
    .optional()
    .describe('how long the token lives, in seconds (default 300, at most 3600); never past the key validUntil'),
});
const MobileTokenAnswer = z.object({
  status: OutcomeStatus,
  code: z.string(),
  cid: z.string(),
  token: z.string().describe('compact JWS (typ tobira-mobile+jwt) for the phone; the lock relays it as a `mobile_token` credential'),
  keyId: z.string(),
  personId: z.string(),
  gatewayId: z.string().describe('the only gateway (site) that accepts it'),
  expiresAt: z.int().describe('epoch milliseconds'),
  kid: z.string().describe('the cloud signing key it is signed with (in the JWKS the gateway trusts)'),
});

/**
 * Mobile credential: a short-lived token signed by the cloud for a
 * mobile key's phone, checked offline by the key's gateway. Not idempotent on
 * purpose: each call signs a new token, and none is stored (a stored answer
 * would hand the same token out again).
 */
export function mobileTokensRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/keys/:keyId/mobile-token',
    {
      config: { secretAnswer: true },
      schema: {
        tags: ['keys'],
        summary: "Sign a short-lived mobile token for a mobile key's phone, bound to the key, its person and its gateway",
        params: z.strictObject({ keyId: Id }),
        body: MobileTokenBody,
        response: { ...errorResponses, 201: MobileTokenAnswer },
      },
    },
    async (req, reply) => {
      const cid = cidOf(req);
      const o = await ctx.cloud.issueMobileToken({
        keyId: req.params.keyId,
        siteScope: who(req).sites,
        cid,
        ...(req.body.ttlSeconds === undefined ? {} : { ttlSeconds: req.body.ttlSeconds }),
      });
      if (o.status !== 'applied') return reply.status(statusOf(o) as 404 | 422).send({ ...problem(o.code, o.detail), cid });
      return reply.status(201).header('cache-control', 'no-store').send(o);
    },
  );
}
