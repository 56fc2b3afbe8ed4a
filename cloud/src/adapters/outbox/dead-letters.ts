import { z } from 'zod';
import { parseRows } from '@tobira/shared';
import type { Queryable } from '../db/db.js';
import { OutboxRowCore, outboxCore, type OutboxCore } from '../db/outbox-reads.js';
import { scopeParam, type SiteScope } from '../db/scope.js';

/** A dead `outbox` row: the dispatcher gave up on it; an operator retries it. */
export interface DeadLetter extends OutboxCore {
  readonly siteId: string;
}

const DeadLetterRow = OutboxRowCore.extend({ site_id: z.string() }).transform((r): DeadLetter => ({ ...outboxCore(r), siteId: r.site_id }));

export interface DeadLetterFilter {
  readonly siteId?: string | undefined;
  readonly gatewayId?: string | undefined;
  readonly limit?: number | undefined;
}

/** Dead rows by gateway and seq, within the scope (default: every site). */
export async function listDeadLetters(q: Queryable, f: DeadLetterFilter = {}, scope: SiteScope = null): Promise<DeadLetter[]> {
  const r = await q.query(
    `SELECT o.id, g.site_id, o.gateway_id, o.seq, o.jti, o.type, o.key_id, o.key_version, o.attempts, o.last_error, o.cid, o.created_at
       FROM outbox o JOIN gateways g ON g.id = o.gateway_id
      WHERE o.status = 'dead' AND ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2)
        AND ($3::text IS NULL OR o.gateway_id = $3) ORDER BY o.gateway_id, o.seq LIMIT $4`,
    [scopeParam(scope), f.siteId ?? null, f.gatewayId ?? null, f.limit ?? 100],
  );
  return parseRows('outbox', DeadLetterRow, r.rows);
}

/** True when the outbox row exists and belongs to a site of the scope (any status). */
export async function outboxRowVisible(q: Queryable, scope: SiteScope, id: number): Promise<boolean> {
  const r = await q.query(
    'SELECT 1 FROM outbox o JOIN gateways g ON g.id = o.gateway_id WHERE o.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))',
    [scopeParam(scope), id],
  );
  return r.rowCount > 0;
}

/** Operator retry: a dead row goes back to pending with its attempts reset. 1 = retried, 0 = no such dead row. */
export async function retryDeadLetter(q: Queryable, id: number, now: number): Promise<number> {
  const r = await q.query(`UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = $2 WHERE id = $1 AND status = 'dead'`, [
    id,
    now,
  ]);
  return r.rowCount;
}
