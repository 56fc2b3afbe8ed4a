import { decodeCursor } from '@tobira/shared';
import { z } from 'zod';
import { listHistory, listKeys } from '../../adapters/db/keys.js';
import { getKeyView, issuedKeyView, keyViewOf } from '../../app/key-view.js';
import { defined, idempotent, problem, statusOf, who, cidOf, type Api, type Ctx } from '../context.js';
import { heldElsewhere, idUnavailable } from '../scope-guard.js';
import {
  Cursor,
  Id,
  IssueKeyBody,
  Key,
  KeyStatusEnum,
  KeyView,
  Limit,
  OutcomeStatus,
  Problem,
  RevokeKeyBody,
  Slug,
  TimeIdCursor,
  errorResponses,
} from '../schemas.js';

const KeyAnswer = KeyView.extend({ status: OutcomeStatus, code: z.string(), cid: z.string() });
const KeyConflict = Problem.extend({ key: Key.optional() });
const IfMatch = /^(?:W\/)?"(\d{1,9})"$/;

/** Entry keys: issue (202, the grant is queued for the gateway), revoke (202), read with delivery status, list, history. */
export function keysRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/keys',
    {
      schema: {
        tags: ['keys'],
        summary: 'Issue an entry key; 202 while the grant is on its way to the gateway',
        body: IssueKeyBody,
        response: { ...errorResponses, 200: KeyAnswer, 202: KeyAnswer, 409: KeyConflict },
      },
    },
    async (req, reply) => {
      // An offline-capable key opens while its gateway fails closed (I1's one exception), so only
      // an admin may make one; refused before the Idempotency-Key claim, so nothing is written or stored.
      const role = who(req).role;
      if (req.body.offlineCapable === true && role !== 'admin') {
        req.log.info({ code: 'FORBIDDEN_ROLE', offlineCapable: true }, 'request refused');
        return reply.status(403).send(problem('FORBIDDEN_ROLE', `role ${role} may not issue offline-capable keys`));
      }
      return idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const scope = who(req).sites;
        // another site's key of that id is neither shown nor confirmed (no answer reveals another site's row)
        if (await heldElsewhere(db, scope, 'key', req.body.keyId)) return idUnavailable(cid);
        // the verb refuses a person or door outside the token's sites as not found (404)
        const o = await ctx.cloud.issueKey(defined({ ...req.body, siteScope: scope, cid }), { db });
        if (o.status === 'refused') return { statusCode: statusOf(o), body: { ...problem(o.code, o.detail), cid } };
        // a key of that id another site made after the check above: still nothing of it in the answer
        if (o.status !== 'applied' && (await heldElsewhere(db, scope, 'key', o.status === 'conflict' ? o.current.id : o.state.id)))
          return idUnavailable(cid);
        if (o.status === 'conflict')
          return { statusCode: 409, body: { status: o.status, code: o.code, cid, key: (await keyViewOf(db, o.current)).key } };
        // applied: a new key, its view built from the outcome, not read back
        const v = o.status === 'applied' && o.gateway !== null ? issuedKeyView(o.state, o.emits, o.gateway) : await keyViewOf(db, o.state);
        return {
          statusCode: o.status === 'applied' ? 202 : 200,
          body: { status: o.status, code: o.code, cid, ...v },
          headers: { etag: `"${v.key.revision}"`, location: `/keys/${v.key.id}` },
        };
      });
    },
  );

  app.post(
    '/keys/:keyId/revoke',
    {
      schema: {
        tags: ['keys'],
        summary: 'Revoke a key with a reason; optional If-Match: "<revision>" (412 when stale)',
        params: z.strictObject({ keyId: Id }),
        body: RevokeKeyBody,
        headers: z.object({ 'if-match': z.string().max(40).optional() }),
        response: { ...errorResponses, 200: KeyAnswer, 202: KeyAnswer, 409: KeyConflict, 412: KeyConflict },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const ifMatch = req.headers['if-match'];
        const m = ifMatch === undefined ? undefined : IfMatch.exec(ifMatch);
        if (m === null) return { statusCode: 400, body: { ...problem('BAD_REQUEST', 'If-Match: "<revision>"'), cid } };
        const expectedRevision = m ? Number(m[1]) : undefined;
        // a key outside the token's sites is refused as not found (404) by the verb
        const o = await ctx.cloud.revokeKey(
          defined({ keyId: req.params.keyId, reason: req.body.reason, cid, expectedRevision, siteScope: who(req).sites }),
          { db },
        );
        if (o.status === 'refused') return { statusCode: statusOf(o), body: { ...problem(o.code, o.detail), cid } };
        const v = await keyViewOf(db, o.status === 'conflict' ? o.current : o.state);
        if (o.status === 'conflict') {
          return {
            statusCode: expectedRevision === undefined ? 409 : 412,
            body: { status: o.status, code: o.code, cid, key: v.key },
            headers: { etag: `"${v.key.revision}"` },
          };
        }
        return {
          statusCode: o.status === 'applied' ? 202 : 200,
          body: { status: o.status, code: o.code, cid, ...v },
          headers: { etag: `"${v.key.revision}"` },
        };
      }),
  );

  app.get(
    '/keys/:keyId',
    {
      schema: {
        tags: ['keys'],
        summary: 'Get a key with its delivery status, errors and warnings (ETag = revision)',
        params: z.strictObject({ keyId: Id }),
        response: { ...errorResponses, 200: KeyView },
      },
    },
    async (req, reply) => {
      const v = await getKeyView(ctx.db, who(req).sites, req.params.keyId);
      if (!v) return reply.status(404).send(problem('KEY_NOT_FOUND'));
      return reply.header('etag', `"${v.key.revision}"`).send(v);
    },
  );

  app.get(
    '/keys',
    {
      schema: {
        tags: ['keys'],
        summary: 'List keys (oldest first) with filters and cursor pagination',
        querystring: z.strictObject({
          siteId: Id.optional(),
          personId: Id.optional(),
          gatewayId: Slug.optional(),
          status: KeyStatusEnum.optional(),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Key), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const cursor = decodeCursor(TimeIdCursor, req.query.cursor);
      if (cursor === 'bad') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      return listKeys(ctx.db, who(req).sites, { ...req.query, cursor });
    },
  );

  app.get(
    '/keys/:keyId/history',
    {
      schema: {
        tags: ['keys'],
        summary: 'The append-only history of a key (one row per transition)',
        params: z.strictObject({ keyId: Id }),
        response: {
          ...errorResponses,
          200: z.object({
            items: z.array(
              z.object({
                version: z.int(),
                revision: z.int(),
                event: z.string(),
                fromStatus: z.string().nullable(),
                toStatus: z.string(),
                reason: z.string().nullable(),
                code: z.string(),
                cid: z.string(),
                verb: z.string(),
                at: z.int(),
              }),
            ),
          }),
        },
      },
    },
    async (req, reply) => {
      const scope = who(req).sites;
      const history = await listHistory(ctx.db, req.params.keyId, scope);
      // a key has a history from its first transition on, so none means no such key visible to the token
      if (history.length === 0) return reply.status(404).send(problem('KEY_NOT_FOUND'));
      return { items: history.map(({ keyId: _keyId, detail: _detail, ...h }) => h) };
    },
  );
}
