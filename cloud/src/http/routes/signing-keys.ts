import { z } from 'zod';
import { cidOf, idempotent, problem, statusOf, type Api, type Ctx } from '../context.js';
import { OutcomeStatus, errorResponses } from '../schemas.js';
import type { VerbOptions } from '../../app/port.js';

const Kid = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/);
const KidParams = z.strictObject({ kid: Kid });

const SigningKey = z.object({
  kid: z.string(),
  status: z.enum(['staged', 'published', 'signing', 'previous', 'retired']),
  notBefore: z.int().nullable().describe('when it was published (ms)'),
  retireAfter: z.int().nullable().describe('announced when it stopped signing; the retire time once retired (ms)'),
  resignedAt: z.int().nullable().describe('when live grants were last re-sent since it stopped signing (ms)'),
  loaded: z.boolean().describe('this cloud process holds its private part (CLOUD_SIGNING_JWK)'),
  deliveries: z.array(
    z
      .object({ step: z.enum(['publish', 'retire']), queued: z.int(), applied: z.int(), refused: z.int() })
      .describe('keyset.update per gateway: queued, applied (acked), refused'),
  ),
});
const StepAnswer = z.object({ status: OutcomeStatus, code: z.string(), key: SigningKey, queued: z.int() });

/** A published public key as the JWKS shows it: never a private part. */
const PublicKey = z
  .object({
    kty: z.literal('OKP'),
    crv: z.literal('Ed25519'),
    x: z.string(),
    kid: z.string(),
    use: z.literal('sig'),
    alg: z.literal('EdDSA'),
    nbf: z.int().optional().describe('published at (seconds since the epoch)'),
    retire_after: z.int().optional().describe('announced retirement (seconds); the key stops being trusted when retired'),
  })
  .strict();

/**
 * Signing-key rotation (docs/operations.md): the public JWKS
 * (no token) and the admin-only steps publish → switch → re-sign → retire.
 */
export function signingKeysRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/.well-known/jwks.json',
    {
      config: { public: true },
      schema: {
        tags: ['signing keys'],
        summary: "The cloud's published signing keys (JWKS): public parts only, with kid, use, nbf and retire_after",
        security: [],
        response: { 200: z.object({ keys: z.array(PublicKey) }) },
      },
    },
    async (_req, reply) => {
      void reply.header('cache-control', 'public, max-age=300');
      return { keys: ctx.cloud.jwks.keys.map((k) => PublicKey.parse(k)) };
    },
  );

  app.get(
    '/signing-keys',
    {
      config: { adminOnly: true },
      schema: {
        tags: ['signing keys'],
        summary: 'List the cloud signing keys: where each is in its rotation, and its keyset.update deliveries',
        response: { ...errorResponses, 200: z.object({ items: z.array(SigningKey) }) },
      },
    },
    async () => ({ items: await ctx.cloud.listSigningKeys() }),
  );

  const step = (
    path: string,
    summary: string,
    run: (
      kid: string,
      body: { retireAfterSeconds?: number | undefined },
      cid: ReturnType<typeof cidOf>,
      o: VerbOptions,
    ) => ReturnType<Ctx['cloud']['publishSigningKey']>,
  ) =>
    app.post(
      path,
      {
        config: { adminOnly: true },
        schema: {
          tags: ['signing keys'],
          summary,
          params: KidParams,
          body: z
            .strictObject({
              retireAfterSeconds: z
                .int()
                .min(0)
                .max(365 * 86_400)
                .optional(),
            })
            // no body at all is fine (Fastify hands the schema null then)
            .nullish(),
          response: { ...errorResponses, 200: StepAnswer },
        },
      },
      (req, reply) =>
        // in the idempotency unit's transaction: the step and its stored answer commit together
        idempotent(ctx, req, reply, async ({ db }) => {
          const o = await run(req.params.kid, req.body ?? {}, cidOf(req), { db });
          if (o.status === 'applied' || o.status === 'noop')
            return { statusCode: 200, body: { status: o.status, code: o.code, key: o.state.key, queued: o.state.queued } };
          return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
        }),
    );

  step(
    '/signing-keys/:kid/publish',
    'Publish a staged key: JWKS, and a keyset.update adding it for every gateway that has not applied it',
    (kid, _b, cid, o) => ctx.cloud.publishSigningKey({ kid, cid }, o),
  );
  step(
    '/signing-keys/:kid/switch',
    'Sign with this key from now on (refused SIGNING_KEY_NOT_DELIVERED until every gateway applied its publish)',
    (kid, b, cid, o) =>
      ctx.cloud.switchSigningKey(
        { kid, cid, ...(b.retireAfterSeconds !== undefined ? { retireAfterSeconds: b.retireAfterSeconds } : {}) },
        o,
      ),
  );
  step(
    '/signing-keys/:kid/retire',
    'Retire a previous signer: a keyset.update retiring it for every gateway (after the re-sign step)',
    (kid, _b, cid, o) => ctx.cloud.retireSigningKey({ kid, cid }, o),
  );

  app.post(
    '/signing-keys/resign',
    {
      config: { adminOnly: true },
      schema: {
        tags: ['signing keys'],
        summary: 'Queue every live grant again, signed by the current signing key (the step before retiring the old one)',
        response: { ...errorResponses, 200: StepAnswer },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const o = await ctx.cloud.resignLiveGrants({ cid: cidOf(req) }, { db });
        if (o.status === 'applied' || o.status === 'noop')
          return { statusCode: 200, body: { status: o.status, code: o.code, key: o.state.key, queued: o.state.queued } };
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );
}
