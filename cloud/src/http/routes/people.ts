import { z } from 'zod';
import { idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { getPerson, getSite, listPeople, recordPersonSite } from '../queries.js';
import { Id, OutcomeStatus, Person, Problem, errorResponses } from '../schemas.js';

const CreatePerson = z.strictObject({ id: Id.optional(), name: z.string().min(1).max(200), siteId: Id.describe('the site the person is created for (scoping)') });

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
      idempotent(ctx, req, reply, async (derive) => {
        if (!(await getSite(ctx.db, who(req).sites, req.body.siteId))) return { statusCode: 404, body: problem('SITE_NOT_FOUND') };
        const id = req.body.id ?? derive('person');
        const o = await ctx.cloud.createPerson(id === undefined ? { name: req.body.name } : { id, name: req.body.name });
        if (o.status === 'applied') {
          await recordPersonSite(ctx.db, o.state.id, req.body.siteId);
          return { statusCode: 201, body: { status: o.status, code: o.code, person: { ...o.state, sites: [req.body.siteId] } } };
        }
        // our own effect, committed by an earlier attempt under this Idempotency-Key whose answer was lost
        if (o.status === 'refused' && o.code === 'ALREADY_EXISTS' && req.body.id === undefined && id !== undefined) {
          await recordPersonSite(ctx.db, id, req.body.siteId);
          const person = await getPerson(ctx.db, null, id);
          if (person) return { statusCode: 201, body: { status: 'applied', code: 'MESSAGE_APPLIED', person } };
        }
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
