import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { TimeIdCursor } from '../../adapters/sqlite/staff-queries.js';
import type { HttpDeps } from '../context.js';
import { Bool, Id, TimePage, cursorOf, query } from '../query.js';

const AccessQuery = z.strictObject({ door: Id.optional(), lock: Id.optional(), allowed: Bool.optional(), ...TimePage });

/** GET /staff/access-events: door decisions, newest first, keyset-paginated. */
export async function accessRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.get('/staff/access-events', async (req) => {
    const q = query(AccessQuery, req);
    return deps.staff.accessEvents({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
  });
}
