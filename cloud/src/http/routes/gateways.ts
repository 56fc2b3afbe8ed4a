import type { Jwks } from '@tobira/shared';
import { z } from 'zod';
import { cidOf, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { getGateway, listGateways } from '../../adapters/db/gateways.js';
import { BrokerLogin, Gateway, Id, OutcomeStatus, Problem, Provisioning, PublicJwk, Slug, errorResponses } from '../schemas.js';

const RegisterGateway = z.strictObject({ gatewayId: Slug, siteId: Id, publicJwk: PublicJwk });

/** Gateways: registration returns the provisioning data once (pepper, cloud JWKS, topics, broker). */
export function gatewaysRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/gateways',
    {
      schema: {
        tags: ['gateways'],
        summary: "Register a gateway with its Ed25519 public JWK; answers the gateway's provisioning data",
        body: RegisterGateway,
        response: {
          ...errorResponses,
          200: Problem,
          201: z.object({ status: OutcomeStatus, code: z.string(), provisioning: Provisioning }),
        },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const jwk = req.body.publicJwk as unknown as Jwks['keys'][number];
        const o = await ctx.cloud.registerGateway(
          { gatewayId: req.body.gatewayId, siteId: req.body.siteId, publicJwk: jwk, cid: cidOf(req), siteScope: who(req).sites },
          { db },
        );
        if (o.status === 'applied') {
          const { mqtt, ...provisioning } = o.state;
          const broker = { url: ctx.config.gatewayBrokerUrl, username: mqtt?.username ?? null, password: mqtt?.password ?? null };
          return { statusCode: 201, body: { status: o.status, code: o.code, provisioning: { ...provisioning, broker } } };
        }
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );

  app.post(
    '/gateways/:gatewayId/broker-credentials',
    {
      schema: {
        tags: ['gateways'],
        summary: 'Give a gateway a new cloud broker password (the old one no longer logs in); answers the new login once',
        params: z.strictObject({ gatewayId: Slug }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string(), ...BrokerLogin.shape }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        // a gateway outside the token's sites is refused as not found (404) by the verb
        const o = await ctx.cloud.rotateGatewayBrokerCredentials(
          { gatewayId: req.params.gatewayId, cid: cidOf(req), siteScope: who(req).sites },
          { db },
        );
        if (o.status === 'applied') {
          const broker = { url: ctx.config.gatewayBrokerUrl, username: o.state.mqtt.username, password: o.state.mqtt.password };
          return { statusCode: 200, body: { status: o.status, code: o.code, gatewayId: o.state.gatewayId, broker } };
        }
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );

  app.get(
    '/gateways',
    {
      schema: {
        tags: ['gateways'],
        summary: 'List gateways',
        querystring: z.strictObject({ siteId: Id.optional() }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Gateway) }) },
      },
    },
    async (req) => ({ items: await listGateways(ctx.db, who(req).sites, req.query) }),
  );

  app.get(
    '/gateways/:gatewayId',
    {
      schema: {
        tags: ['gateways'],
        summary: 'Get a gateway (presence: online null = never heard)',
        params: z.strictObject({ gatewayId: Slug }),
        response: { ...errorResponses, 200: z.object({ gateway: Gateway }) },
      },
    },
    async (req, reply) => {
      const gateway = await getGateway(ctx.db, who(req).sites, req.params.gatewayId);
      return gateway ? { gateway } : reply.status(404).send(problem('GATEWAY_NOT_FOUND'));
    },
  );
}
