import type { Queryable } from '../db/db.js';

export interface ClaimedRow {
  readonly id: number;
  readonly gatewayId: string;
  readonly seq: number;
  readonly jti: string;
  readonly type: 'key.grant' | 'key.revoke';
  readonly body: unknown;
  readonly cid: string;
  readonly attempts: number;
  readonly leaseToken: string;
}

/**
 * Claim: takes up to `limit` due rows — pending rows whose next attempt is
 * due, and `sending` rows whose lease ran out (their holder died or stalled) —
 * with `FOR UPDATE SKIP LOCKED`, so replicas never claim the same row at once,
 * and stamps them with this claim's lease token. Rows are chosen by status,
 * never by an id cursor. Guarantee: while a lease holds, nobody else claims
 * the row; after it runs out, someone may (at-least-once delivery).
 */
export async function claim(q: Queryable, opts: { token: string; now: number; leaseMs: number; limit: number }): Promise<ClaimedRow[]> {
  const r = await q.query<{
    id: number;
    gateway_id: string;
    seq: number;
    jti: string;
    type: ClaimedRow['type'];
    body: unknown;
    cid: string;
    attempts: number;
  }>(
    `UPDATE outbox o
        SET status = 'sending', lease_token = $1, lease_until = $2 + $3, attempts = o.attempts + 1
       FROM (SELECT id FROM outbox
              WHERE (status = 'pending' AND next_attempt_at <= $2) OR (status = 'sending' AND lease_until <= $2)
              ORDER BY gateway_id, seq
              LIMIT $4
              FOR UPDATE SKIP LOCKED) c
      WHERE o.id = c.id
      RETURNING o.id, o.gateway_id, o.seq, o.jti, o.type, o.body, o.cid, o.attempts`,
    [opts.token, opts.now, opts.leaseMs, opts.limit],
  );
  return r.rows
    .map((x) => ({
      id: x.id,
      gatewayId: x.gateway_id,
      seq: x.seq,
      jti: x.jti,
      type: x.type,
      body: x.body,
      cid: x.cid,
      attempts: x.attempts,
      leaseToken: opts.token,
    }))
    .sort((a, b) => (a.gatewayId === b.gatewayId ? a.seq - b.seq : a.gatewayId < b.gatewayId ? -1 : 1));
}
