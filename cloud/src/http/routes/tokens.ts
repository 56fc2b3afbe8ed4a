import { z } from 'zod';
import { idempotent, problem, who, type Api, type Ctx } from '../context.js';
import { CreateTokenInput, Role, RotateTokenInput, TokenState } from '../../domain/tokens.js';
import { createApiToken, listApiTokens, revokeApiToken, rotateApiToken } from '../../adapters/db/tokens.js';
import { OutcomeStatus, Problem, errorResponses } from '../schemas.js';
import { withinSites } from '../tokens.js';

const Expiry = z.int().nullable().describe('epoch ms from which the token is refused (401 TOKEN_EXPIRED); null: never');
const TokenOut = z.object({
  id: z.string(),
  name: z.string(),
  role: Role,
  sites: z.array(z.string()).nullable(),
  createdAt: z.int(),
  revokedAt: z.int().nullable(),
  expiresAt: Expiry,
  lastUsedAt: z.int().nullable().describe('last authenticated request, to the minute; null: never used'),
  rotatedTo: z.string().nullable().describe('the successor made by rotating this token'),
  rotatedFrom: z.string().nullable().describe('the token this one was rotated from'),
  state: TokenState.describe('revoked > expired > expiring (within 7 days) > active'),
});
const NewTokenOut = z.object({
  status: OutcomeStatus,
  code: z.string(),
  token: z.string().describe('the clear token: shown once, only its hash is stored'),
  id: z.string(),
  name: z.string(),
  role: Role,
  sites: z.array(z.string()).nullable(),
  expiresAt: Expiry,
});

/**
 * API tokens. The clear token is in the creation (or rotation) answer and
 * nowhere else. Creating, listing and revoking are admin only; rotating is
 * "self or admin": any token may rotate itself (auditors included: it grants
 * nothing new), an admin any token.
 */
export function tokensRoutes(app: Api, ctx: Ctx): void {
  const lifetime = { defaultTtlMs: ctx.config.tokenDefaultTtlMs };

  app.post(
    '/api-tokens',
    {
      config: { adminOnly: true, scopedAdmin: true, secretAnswer: true },
      schema: {
        tags: ['api tokens'],
        summary: 'Create an API token; the clear token is shown once',
        body: CreateTokenInput,
        response: { ...errorResponses, 201: NewTokenOut },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        if ((req.body.sites ?? null) === null && req.body.role !== 'admin')
          return { statusCode: 422, body: problem('INVALID_REQUEST', 'only admin tokens may cover every site') };
        // an admin of some sites makes tokens of those sites only: never one that reaches further than itself
        if (!withinSites(req.body.sites ?? null, who(req).sites))
          return { statusCode: 403, body: problem('FORBIDDEN_ROLE', 'a site-scoped admin makes tokens of its own sites only') };
        const t = await createApiToken(db, req.body, ctx.clock.now(), lifetime);
        return { statusCode: 201, body: { status: 'applied', code: 'MESSAGE_APPLIED', ...t } };
      }),
  );

  app.get(
    '/api-tokens',
    {
      config: { adminOnly: true, scopedAdmin: true },
      schema: {
        tags: ['api tokens'],
        summary: 'List API tokens (never the tokens themselves); an admin of some sites sees the tokens of those sites',
        response: { ...errorResponses, 200: z.object({ items: z.array(TokenOut) }) },
      },
    },
    async (req) => ({ items: (await listApiTokens(ctx.db, ctx.clock.now())).filter((t) => withinSites(t.sites, who(req).sites)) }),
  );

  app.get(
    '/api-tokens/self',
    {
      schema: {
        tags: ['api tokens'],
        summary: 'The calling token itself (any role): its expiry and state, so a property system can rotate in time',
        response: { ...errorResponses, 200: z.object({ token: TokenOut }) },
      },
    },
    async (req) => {
      const [token] = await listApiTokens(ctx.db, ctx.clock.now(), who(req).tokenId);
      if (!token) throw new Error('the authenticated token has no row');
      return { token };
    },
  );

  app.post(
    '/api-tokens/:id/revoke',
    {
      config: { adminOnly: true, scopedAdmin: true },
      schema: {
        tags: ['api tokens'],
        summary: 'Revoke an API token',
        params: z.strictObject({ id: z.string().min(1).max(64) }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        // a token outside a site-scoped admin's sites is not found, as one that does not exist
        const [target] = await listApiTokens(db, ctx.clock.now(), req.params.id);
        if (target === undefined || !withinSites(target.sites, who(req).sites))
          return { statusCode: 404, body: problem('TOKEN_NOT_FOUND') };
        return (await revokeApiToken(db, req.params.id, ctx.clock.now()))
          ? { statusCode: 200, body: { status: 'applied', code: 'MESSAGE_APPLIED' } }
          : { statusCode: 404, body: problem('TOKEN_NOT_FOUND') };
      }),
  );

  app.post(
    '/api-tokens/:id/rotate',
    {
      // not adminOnly, and open to auditors: the handler enforces "self or admin"
      config: { selfService: true, secretAnswer: true },
      schema: {
        tags: ['api tokens'],
        summary: 'Rotate an API token (admin: any; any token: itself); the new clear token is shown once',
        description:
          'A new token with the same name, role and sites. The old one keeps working until now + graceSeconds (default 3600; 0 revokes it now; ' +
          'an earlier expiry is never extended). A non-admin naming another token gets 404 TOKEN_NOT_FOUND.',
        params: z.strictObject({ id: z.string().min(1).max(64) }),
        body: RotateTokenInput.nullish().describe('optional; {} or no body: the defaults'),
        response: {
          ...errorResponses,
          201: NewTokenOut.extend({
            rotatedFrom: z
              .object({ id: z.string(), expiresAt: Expiry, revokedAt: z.int().nullable() })
              .describe('the old token after the rotation'),
          }),
          422: Problem.describe('TOKEN_REVOKED, TOKEN_EXPIRED, TOKEN_ALREADY_ROTATED, or IDEMPOTENCY_KEY_REUSED'),
        },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const p = who(req);
        // never confirm that another token exists
        if (p.role !== 'admin' && p.tokenId !== req.params.id) return { statusCode: 404, body: problem('TOKEN_NOT_FOUND') };
        if (p.tokenId !== req.params.id) {
          const [target] = await listApiTokens(db, ctx.clock.now(), req.params.id);
          if (target === undefined || !withinSites(target.sites, p.sites)) return { statusCode: 404, body: problem('TOKEN_NOT_FOUND') };
        }
        // only an admin may give a token more life than its admin gave it: a rotation by the token itself is capped at its expiry
        const o = await rotateApiToken(db, req.params.id, req.body ?? {}, ctx.clock.now(), { ...lifetime, mayExtend: p.role === 'admin' });
        if (o.status === 'refused') return { statusCode: o.code === 'TOKEN_NOT_FOUND' ? 404 : 422, body: problem(o.code, o.detail) };
        req.log.info(
          { rotatedFrom: o.previous.id, rotatedTo: o.token.id, oldExpiresAt: o.previous.expiresAt, oldRevokedAt: o.previous.revokedAt },
          'api token rotated',
        );
        return { statusCode: 201, body: { status: o.status, code: o.code, ...o.token, rotatedFrom: o.previous } };
      }),
  );
}
