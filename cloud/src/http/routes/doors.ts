import { z } from 'zod';
import { defined, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { getDoor, listDoors } from '../../adapters/db/registry.js';
import { Door, Id, OutcomeStatus, Problem, Slug, errorResponses } from '../schemas.js';
import { heldElsewhere, hiddenReference, idUnavailable, notFound } from '../scope-guard.js';

const CreateDoor = z.strictObject({ id: Id.optional(), gatewayId: Slug, name: z.string().min(1).max(200) });

/** Doors: each behind one gateway of a site the caller may see. */
export function doorsRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/doors',
    {
      schema: {
        tags: ['doors'],
        summary: 'Create a door behind a gateway',
        body: CreateDoor,
        response: { ...errorResponses, 200: Problem, 201: z.object({ status: OutcomeStatus, code: z.string(), door: Door }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        // a gateway outside the token's sites is refused as not found (404) by the verb
        const scope = who(req).sites;
        // the gateway first, then the id: another site's door of that id is neither shown nor confirmed (no answer reveals another site's row)
        const hidden = await hiddenReference(db, scope, [['gateway', req.body.gatewayId]]);
        if (hidden !== null) return notFound(hidden);
        if (await heldElsewhere(db, scope, 'door', req.body.id)) return idUnavailable();
        const o = await ctx.cloud.createDoor(defined({ ...req.body, siteScope: scope }), { db });
        if (o.status === 'applied') return { statusCode: 201, body: { status: o.status, code: o.code, door: o.state } };
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );

  app.get(
    '/doors',
    {
      schema: {
        tags: ['doors'],
        summary: 'List doors',
        querystring: z.strictObject({ siteId: Id.optional(), gatewayId: Slug.optional() }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Door) }) },
      },
    },
    async (req) => ({ items: await listDoors(ctx.db, who(req).sites, req.query) }),
  );

  app.get(
    '/doors/:doorId',
    {
      schema: {
        tags: ['doors'],
        summary: 'Get a door',
        params: z.strictObject({ doorId: Id }),
        response: { ...errorResponses, 200: z.object({ door: Door }) },
      },
    },
    async (req, reply) => {
      const door = await getDoor(ctx.db, who(req).sites, req.params.doorId);
      return door ? { door } : reply.status(404).send(problem('DOOR_NOT_FOUND'));
    },
  );
}
