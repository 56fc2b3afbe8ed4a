import type { Jwks } from '@tobira/shared';
import { z } from 'zod';
import { cidOf, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { getGateway, listGateways } from '../../adapters/db/gateways.js';
import { BrokerLogin, Gateway, Id, OutcomeStatus, Problem, Provisioning, PublicJwk, Slug, errorResponses } from '../schemas.js';
import { heldElsewhere, hiddenReference, idUnavailable, notFound } from '../scope-guard.js';

const RegisterGateway = z.strictObject({ gatewayId: Slug, siteId: Id, publicJwk: PublicJwk });

const UplinkKeyRotation = z.object({
  rotationId: z.string(),
  gatewayId: z.string(),
  status: z
    .enum(['requested', 'proposed', 'active', 'failed'])
    .describe('requested → proposed (new key accepted, activate queued) → active (old key retired); failed: a bad proposal'),
  oldKid: z.string(),
  newKid: z.string().nullable(),
  code: z.string().nullable().describe('why it failed (UPLINK_KEY_BAD_PROOF, UPLINK_KEY_KID_TAKEN)'),
  requestedBy: z.string(),
  rotateSeq: z.int().describe("the uplink_key.rotate message's seq at the gateway"),
  activateSeq: z.int().nullable(),
  requestedAt: z.int(),
  proposedAt: z.int().nullable(),
  settledAt: z.int().nullable(),
});

/** Gateways: registration returns the provisioning data once (pepper, cloud JWKS, topics, broker). */
export function gatewaysRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/gateways',
    {
      config: { secretAnswer: true },
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
        const scope = who(req).sites;
        // the site first, then the id: another site's gateway of that id is neither shown nor confirmed (no answer reveals another site's row)
        const hidden = await hiddenReference(db, scope, [['site', req.body.siteId]]);
        if (hidden !== null) return notFound(hidden, cidOf(req));
        if (await heldElsewhere(db, scope, 'gateway', req.body.gatewayId)) return idUnavailable(cidOf(req));
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
      config: { secretAnswer: true },
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

  app.post(
    '/gateways/:gatewayId/uplink-key/rotate',
    {
      schema: {
        tags: ['gateways'],
        summary:
          "Rotate the gateway's own uplink signing key: queues a signed uplink_key.rotate; 409 UPLINK_KEY_ROTATION_IN_PROGRESS while one is open",
        params: z.strictObject({ gatewayId: Slug }),
        response: {
          ...errorResponses,
          202: z.object({ status: OutcomeStatus, code: z.string(), cid: z.string(), rotation: UplinkKeyRotation }),
          409: z.object({ status: OutcomeStatus, code: z.string(), cid: z.string(), rotation: UplinkKeyRotation }),
        },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        // a gateway outside the token's sites is refused as not found (404) by the verb
        const p = who(req);
        const o = await ctx.cloud.rotateUplinkKey({ gatewayId: req.params.gatewayId, scope: p.sites, by: p.name, cid: cidOf(req) }, { db });
        if (o.status === 'refused') return { statusCode: statusOf(o), body: problem(o.code, o.detail) };
        const rotation = o.status === 'conflict' ? o.current : o.state;
        return { statusCode: statusOf(o, 202), body: { status: o.status, code: o.code, cid: o.cid, rotation } };
      }),
  );

  app.get(
    '/gateways/:gatewayId/uplink-key/rotations',
    {
      schema: {
        tags: ['gateways'],
        summary: "The gateway's uplink-key rotations, newest first (20)",
        params: z.strictObject({ gatewayId: Slug }),
        response: { ...errorResponses, 200: z.object({ items: z.array(UplinkKeyRotation) }) },
      },
    },
    async (req, reply) => {
      const items = await ctx.cloud.listUplinkKeyRotations(req.params.gatewayId, who(req).sites);
      return items ? { items } : reply.status(404).send(problem('GATEWAY_NOT_FOUND'));
    },
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
