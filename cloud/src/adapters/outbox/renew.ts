import type { Queryable } from '../db/db.js';
import { ASYNC_COMMIT } from './async-commit.js';

/**
 * Renew: pushes the lease of the rows of one claim that are not published
 * yet to `now + leaseMs`, before the dispatcher publishes the next of them.
 * A claim's lease is taken for a whole batch, and a slow broker can make a
 * batch outlast it; renewing row by row keeps the rest of the batch out of
 * another replica's claim for as long as this dispatcher is making progress.
 * Judged by rows affected: only rows still holding this claim's token are
 * renewed and returned; a row missing from the answer was claimed by someone
 * else after its lease ran out (this dispatcher stalled for longer than a
 * lease) and must not be published by this one.
 */
export async function renewLease(q: Queryable, ids: readonly number[], token: string, now: number, leaseMs: number): Promise<Set<number>> {
  if (ids.length === 0) return new Set();
  const r = await q.query<{ id: number }>(
    `UPDATE outbox SET lease_until = $3::bigint + $4::bigint
       FROM ${ASYNC_COMMIT}
      WHERE id = ANY($1::bigint[]) AND lease_token = $2 AND status = 'sending'
      RETURNING id`,
    [ids, token, now, leaseMs],
  );
  return new Set(r.rows.map((x) => x.id));
}
