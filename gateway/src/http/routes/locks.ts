import type { FastifyInstance } from 'fastify';
import type { HttpDeps } from '../context.js';
import { NoQuery, query } from '../query.js';

/** GET /staff/locks: every lock the gateway knows, with state, lockout and open alarms (one page). */
export async function locksRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.get('/staff/locks', async (req) => {
    query(NoQuery, req);
    return { items: deps.staff.locks(), nextCursor: null };
  });
}
