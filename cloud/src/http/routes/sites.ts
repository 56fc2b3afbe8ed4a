import { CreateSiteInput } from '../../app/inputs.js';
import { z } from 'zod';
import { defined, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { getSite, listSites } from '../../adapters/db/registry.js';
import { Id, OutcomeStatus, Problem, Site, errorResponses } from '../schemas.js';

// the verb's own input schema, with the HTTP layer's id rule
const CreateSite = CreateSiteInput.extend({ id: Id.optional() });

/** Sites: created by admins; listed and read within the caller's sites. */
export function sitesRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/sites',
    {
      config: { adminOnly: true },
      schema: {
        tags: ['sites'],
        summary: 'Create a site (admin)',
        body: CreateSite,
        response: { ...errorResponses, 200: Problem, 201: z.object({ status: OutcomeStatus, code: z.string(), site: Site }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const o = await ctx.cloud.createSite(defined(req.body), { db });
        if (o.status === 'applied') return { statusCode: 201, body: { status: o.status, code: o.code, site: o.state } };
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );

  app.get(
    '/sites',
    {
      schema: {
        tags: ['sites'],
        summary: 'List the sites visible to the token',
        response: { ...errorResponses, 200: z.object({ items: z.array(Site) }) },
      },
    },
    async (req) => ({ items: await listSites(ctx.db, who(req).sites) }),
  );

  app.get(
    '/sites/:siteId',
    {
      schema: {
        tags: ['sites'],
        summary: 'Get a site',
        params: z.strictObject({ siteId: Id }),
        response: { ...errorResponses, 200: z.object({ site: Site }) },
      },
    },
    async (req, reply) => {
      const site = await getSite(ctx.db, who(req).sites, req.params.siteId);
      return site ? { site } : reply.status(404).send(problem('SITE_NOT_FOUND'));
    },
  );
}
