import { z } from 'zod';
import { idempotent, problem, type Api, type Ctx } from '../context.js';
import { CreateTokenInput, Role, createApiToken, revokeApiToken } from '../tokens.js';
import { OutcomeStatus, errorResponses } from '../schemas.js';

const TokenOut = z.object({ id: z.string(), name: z.string(), role: Role, sites: z.array(z.string()).nullable(), createdAt: z.int(), revokedAt: z.int().nullable() });

/** API tokens (admin only). The clear token is in the creation answer and nowhere else. */
export function tokensRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/api-tokens',
    {
      config: { adminOnly: true },
      schema: {
        tags: ['api tokens'],
        summary: 'Create an API token; the clear token is shown once',
        body: CreateTokenInput,
        response: {
          ...errorResponses,
          201: z.object({ status: OutcomeStatus, code: z.string(), token: z.string(), id: z.string(), role: Role, sites: z.array(z.string()).nullable() }),
        },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async () => {
        if ((req.body.sites ?? null) === null && req.body.role !== 'admin') return { statusCode: 422, body: problem('INVALID_REQUEST', 'only admin tokens may cover every site') };
        const t = await createApiToken(ctx.db, req.body, ctx.clock.now());
        return { statusCode: 201, body: { status: 'applied', code: 'MESSAGE_APPLIED', ...t } };
      }),
  );

  app.get(
    '/api-tokens',
    { config: { adminOnly: true }, schema: { tags: ['api tokens'], summary: 'List API tokens (never the tokens themselves)', response: { ...errorResponses, 200: z.object({ items: z.array(TokenOut) }) } } },
    async () => {
      const r = await ctx.db.query<Record<string, unknown>>('SELECT id, name, role, sites, created_at, revoked_at FROM api_tokens ORDER BY created_at, id');
      return {
        items: r.rows.map((x) => ({
          id: x.id as string,
          name: x.name as string,
          role: x.role as Role,
          sites: (x.sites as string[] | null) ?? null,
          createdAt: x.created_at as number,
          revokedAt: (x.revoked_at as number | null) ?? null,
        })),
      };
    },
  );

  app.post(
    '/api-tokens/:id/revoke',
    {
      config: { adminOnly: true },
      schema: {
        tags: ['api tokens'],
        summary: 'Revoke an API token',
        params: z.strictObject({ id: z.string().min(1).max(64) }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async () =>
        (await revokeApiToken(ctx.db, req.params.id, ctx.clock.now()))
          ? { statusCode: 200, body: { status: 'applied', code: 'MESSAGE_APPLIED' } }
          : { statusCode: 404, body: problem('TOKEN_NOT_FOUND') },
      ),
  );
}
