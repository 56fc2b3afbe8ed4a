import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { TimeIdCursor } from '../../adapters/sqlite/staff-queries.js';
import type { HttpDeps } from '../context.js';
import { Id, TimePage, cursorOf, query } from '../query.js';

const TimeQuery = z.strictObject(TimePage);
const RejectedQuery = z.strictObject({
  cid: z
    .string()
    .regex(/^[A-Za-z0-9_.:-]{1,128}$/)
    .optional(),
  ...TimePage,
});
const RefusalQuery = z.strictObject({ lock: Id.optional(), origin: z.enum(['gateway', 'lock']).optional(), ...TimePage });

/** What went wrong, for operators: failed inbox rows, rejected downlinks, lock refusals (newest first, keyset-paginated). */
export async function diagnosticsRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  staff.get('/staff/inbox/failed', async (req) => {
    const q = query(TimeQuery, req);
    return deps.staff.failedInbox({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
  });

  staff.get('/staff/rejected', async (req) => {
    const q = query(RejectedQuery, req);
    return deps.staff.rejected({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
  });

  staff.get('/staff/lock-refusals', async (req) => {
    const q = query(RefusalQuery, req);
    return deps.staff.lockRefusals({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
  });
}
