import { z } from 'zod';
import { defined, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { getPerson, listPeople } from '../../adapters/db/registry.js';
import { Id, OutcomeStatus, Person, Problem, errorResponses } from '../schemas.js';
import { heldElsewhere, hiddenReference, idUnavailable, notFound } from '../scope-guard.js';

const CreatePerson = z.strictObject({
  id: Id.optional(),
  name: z.string().min(1).max(200),
  siteId: Id.describe('the site the person is created for (scoping)'),
});

/** People: global in the core; the API records the site a person was created for and scopes by it. */
export function peopleRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/people',
    {
      schema: {
        tags: ['people'],
        summary: 'Create a person (key holder) for a site',
        body: CreatePerson,
        response: { ...errorResponses, 200: Problem, 201: z.object({ status: OutcomeStatus, code: z.string(), person: Person }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const scope = who(req).sites;
        // the site first, then the id: another site's person of that id is neither shown nor confirmed (no answer reveals another site's row)
        const hidden = await hiddenReference(db, scope, [['site', req.body.siteId]]);
        if (hidden !== null) return notFound(hidden);
        if (await heldElsewhere(db, scope, 'person', req.body.id)) return idUnavailable();
        const o = await ctx.cloud.createPerson(defined({ ...req.body, siteScope: scope }), { db });
        if (o.status === 'applied')
          return { statusCode: 201, body: { status: o.status, code: o.code, person: { ...o.state, sites: [req.body.siteId] } } };
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );

  app.get(
    '/people',
    {
      schema: {
        tags: ['people'],
        summary: 'List people visible to the token (created for, or holding a key at, one of its sites)',
        querystring: z.strictObject({ siteId: Id.optional() }),
        response: { ...errorResponses, 200: z.object({ items: z.array(Person) }) },
      },
    },
    async (req) => ({ items: await listPeople(ctx.db, who(req).sites, req.query) }),
  );

  app.get(
    '/people/:personId',
    {
      schema: {
        tags: ['people'],
        summary: 'Get a person',
        params: z.strictObject({ personId: Id }),
        response: { ...errorResponses, 200: z.object({ person: Person }) },
      },
    },
    async (req, reply) => {
      const person = await getPerson(ctx.db, who(req).sites, req.params.personId);
      return person ? { person } : reply.status(404).send(problem('PERSON_NOT_FOUND'));
    },
  );
}
