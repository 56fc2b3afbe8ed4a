import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { HttpDeps } from '../context.js';
import { Cursor, Limit, cursorOf, query } from '../query.js';

const KeyQuery = z.strictObject({
  q: z.string().trim().min(1).max(64).optional(),
  status: z.enum(['active', 'revoked']).optional(),
  cursor: Cursor.optional(),
  limit: Limit,
});
const KeyCursor = z.tuple([z.string().min(1).max(128)]);

/** GET /staff/keys: the keys the gateway holds (person, doors, validity, schedule, status, version), searchable; never the credential. */
export async function keysRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.get('/staff/keys', async (req) => {
    const q = query(KeyQuery, req);
    return deps.staff.keys({ ...q, cursor: cursorOf(KeyCursor, q.cursor) });
  });
}
