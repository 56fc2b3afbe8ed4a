import type { CorrelationId } from '@tobira/shared';
import { z } from 'zod';
import type { Queryable } from '../../adapters/db/db.js';
import { defined, idempotent, problem, statusOf, who, cidOf, type Api, type Ctx } from '../context.js';
import type { ApiCode } from '../codes.js';
import { decodeCursor, getGateway, getKey, getPerson, listKeyDeliveries, listKeys, visibleDoors, type DeliveryRow, type KeyRow, type Scope } from '../queries.js';
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
  errorResponses,
} from '../schemas.js';

type Notice = { code: string; message: string };

/**
 * A key as the API shows it: the key, the delivery status of its latest
 * command (pending → succeeded / failed, in the manner of an action attempt)
 * and its errors and warnings.
 */
async function view(db: Queryable, scope: Scope, keyId: string) {
  const key = await getKey(db, scope, keyId);
  if (!key) return null;
  const deliveries = await listKeyDeliveries(db, keyId);
  const gw = await getGateway(db, null, key.gatewayId);
  return { key, ...deliveryOf(key, deliveries, gw?.online ?? null), deliveries };
}

export function deliveryOf(key: KeyRow, deliveries: readonly DeliveryRow[], gatewayOnline: boolean | null) {
  const errors: Notice[] = [];
  const warnings: Notice[] = [];
  const latest = deliveries.filter((d) => d.keyVersion === key.version);
  for (const d of latest) {
    if (d.status === 'dead') errors.push({ code: 'DELIVERY_DEAD_LETTERED' satisfies ApiCode, message: `outbox row ${d.outboxId}: ${d.lastError ?? 'gave up'}; retry with POST /dead-letters/${d.outboxId}/retry` });
    else if (d.status !== 'sent' && d.lastError) warnings.push({ code: 'DELIVERY_RETRYING' satisfies ApiCode, message: `attempt ${d.attempts}: ${d.lastError}` });
  }
  if (key.status === 'failed') errors.push({ code: key.lastCode, message: 'the gateway rejected the grant' });
  const pending = key.status === 'issuing' || key.status === 'revoking';
  if (pending && gatewayOnline === false) warnings.push({ code: 'GATEWAY_OFFLINE' satisfies ApiCode, message: `gateway ${key.gatewayId} is offline; delivery waits for it` });
  const delivery: 'pending' | 'succeeded' | 'failed' = key.status === 'failed' || errors.length > 0 ? 'failed' : pending ? 'pending' : 'succeeded';
  return { delivery, errors, warnings };
}

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
        const scope = who(req).sites;
        const cid = cidOf(req);
        if (!(await getPerson(db, scope, req.body.personId))) return { statusCode: 404, body: { ...problem('PERSON_NOT_FOUND'), cid } };
        const seen = await visibleDoors(db, scope, req.body.doors);
        const missing = req.body.doors.filter((d) => !seen.has(d));
        if (missing.length > 0) return { statusCode: 404, body: { ...problem('DOOR_NOT_FOUND', missing.join(',')), cid } };
        const o = await ctx.cloud.issueKey(defined({ ...req.body, cid }), { db });
        if (o.status === 'refused') return { statusCode: statusOf(o), body: { ...problem(o.code, o.detail), cid } };
        const v = await view(db, scope, o.status === 'conflict' ? o.current.id : o.state.id);
        if (!v) return { statusCode: 404, body: { ...problem('KEY_NOT_FOUND'), cid } };
        if (o.status === 'conflict') return { statusCode: 409, body: { status: o.status, code: o.code, cid, key: v.key } };
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
        const scope = who(req).sites;
        const cid = cidOf(req);
        const ifMatch = req.headers['if-match'];
        const m = ifMatch === undefined ? undefined : IfMatch.exec(ifMatch);
        if (m === null) return { statusCode: 400, body: { ...problem('BAD_REQUEST', 'If-Match: "<revision>"'), cid } };
        if (!(await getKey(db, scope, req.params.keyId))) return { statusCode: 404, body: { ...problem('KEY_NOT_FOUND'), cid } };
        const expectedRevision = m ? Number(m[1]) : undefined;
        const o = await ctx.cloud.revokeKey(defined({ keyId: req.params.keyId, reason: req.body.reason, cid: cid as CorrelationId, expectedRevision }), { db });
        if (o.status === 'refused') return { statusCode: statusOf(o), body: { ...problem(o.code, o.detail), cid } };
        const v = await view(db, scope, req.params.keyId);
        if (!v) return { statusCode: 404, body: { ...problem('KEY_NOT_FOUND'), cid } };
        if (o.status === 'conflict') {
          return { statusCode: expectedRevision === undefined ? 409 : 412, body: { status: o.status, code: o.code, cid, key: v.key }, headers: { etag: `"${v.key.revision}"` } };
        }
        return { statusCode: o.status === 'applied' ? 202 : 200, body: { status: o.status, code: o.code, cid, ...v }, headers: { etag: `"${v.key.revision}"` } };
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
      const v = await view(ctx.db, who(req).sites, req.params.keyId);
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
      const cursor = decodeCursor(req.query.cursor);
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
      if (!(await getKey(ctx.db, who(req).sites, req.params.keyId))) return reply.status(404).send(problem('KEY_NOT_FOUND'));
      const r = await ctx.db.query<Record<string, unknown>>(
        'SELECT version, revision, event, from_status, to_status, reason, code, cid, verb, at FROM key_history WHERE key_id = $1 ORDER BY revision',
        [req.params.keyId],
      );
      return {
        items: r.rows.map((x) => ({
          version: x.version as number,
          revision: x.revision as number,
          event: x.event as string,
          fromStatus: (x.from_status as string | null) ?? null,
          toStatus: x.to_status as string,
          reason: (x.reason as string | null) ?? null,
          code: x.code as string,
          cid: x.cid as string,
          verb: x.verb as string,
          at: x.at as number,
        })),
      };
    },
  );
}
