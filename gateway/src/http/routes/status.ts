import type { FastifyInstance } from 'fastify';
import type { HttpDeps } from '../context.js';
import { NoQuery, query } from '../query.js';

/** GET /staff/status: the site's sync state, links, counts and disk headroom (app/staff-status.ts). */
export async function statusRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.get('/staff/status', async (req) => {
    query(NoQuery, req);
    return deps.staff.status();
  });
}
