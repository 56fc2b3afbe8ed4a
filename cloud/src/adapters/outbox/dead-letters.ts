import type { Queryable } from '../db/db.js';

export interface DeadLetter {
  readonly id: number;
  readonly gatewayId: string;
  readonly seq: number;
  readonly jti: string;
  readonly type: string;
  readonly keyId: string | null;
  readonly keyVersion: number | null;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly cid: string;
  readonly createdAt: number;
}

export async function listDeadLetters(q: Queryable, opts: { gatewayId?: string; limit?: number } = {}): Promise<DeadLetter[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT id, gateway_id, seq, jti, type, key_id, key_version, attempts, last_error, cid, created_at FROM outbox
      WHERE status = 'dead' AND ($1::text IS NULL OR gateway_id = $1) ORDER BY gateway_id, seq LIMIT $2`,
    [opts.gatewayId ?? null, opts.limit ?? 100],
  );
  return r.rows.map(deadLetterFromRow);
}

/** A dead `outbox` row as the code sees it (one mapping for every reader). */
export function deadLetterFromRow(x: Record<string, unknown>): DeadLetter {
  return {
    id: x.id as number,
    gatewayId: x.gateway_id as string,
    seq: x.seq as number,
    jti: x.jti as string,
    type: x.type as string,
    keyId: (x.key_id as string | null) ?? null,
    keyVersion: (x.key_version as number | null) ?? null,
    attempts: x.attempts as number,
    lastError: (x.last_error as string | null) ?? null,
    cid: x.cid as string,
    createdAt: x.created_at as number,
  };
}

/** Operator retry: a dead row goes back to pending with its attempts reset. 1 = retried, 0 = no such dead row. */
export async function retryDeadLetter(q: Queryable, id: number, now: number): Promise<number> {
  const r = await q.query(`UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = $2 WHERE id = $1 AND status = 'dead'`, [id, now]);
  return r.rowCount;
}
