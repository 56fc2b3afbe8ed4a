import type { Queryable } from '../db/db.js';
import { ASYNC_COMMIT } from './async-commit.js';

export interface ClaimedRow {
  readonly id: number;
  readonly gatewayId: string;
  readonly seq: number;
  readonly jti: string;
  readonly type: 'key.grant' | 'key.revoke' | 'keyset.update' | 'site.mode' | 'uplink_key.rotate' | 'uplink_key.activate';
  readonly body: unknown;
  readonly cid: string;
  readonly attempts: number;
  readonly leaseToken: string;
  /** When the row was committed (the dispatch lag metric). */
  readonly createdAt: number;
}

/** Advisory lock namespace of the per-gateway claim (the second key is hashtext(gateway_id)). */
export const CLAIM_LOCK_NAMESPACE = 0x70b1;

/** A row is due: pending and its next attempt has come, or sending and its lease ran out. */
const DUE = `((status = 'pending' AND next_attempt_at <= $1) OR (status = 'sending' AND lease_until <= $1))`;

/**
 * Claim, ordered per gateway (claim by gateway). Must run inside one
 * transaction (`db.transaction`); it takes two statements (the first does
 * steps 1 and 2):
 *
 * 1. the gateways whose **lowest open row** (pending or sending) is due: a
 *    gateway whose first open row is still leased to someone or waiting out
 *    its backoff is not a candidate at all, so nothing after it can go first;
 * 2. a transaction-scoped advisory lock per candidate gateway
 *    (`pg_try_advisory_xact_lock`, not waiting): replicas claiming at once
 *    never both look at one gateway; a gateway another replica is claiming
 *    right now is skipped (that replica takes it);
 * 3. for the locked gateways, in a fresh statement (so it sees what the
 *    previous holder of the lock committed), the run of due rows from the
 *    gateway's lowest open seq up to its first row that is not due, in seq
 *    order, at most `limit` rows in all; they become `sending` under this
 *    claim's lease token, with the attempt counted.
 *
 * Guarantee: a claim holds a gap-free prefix of each of its gateways' open
 * rows, and no other claim holds any open row of those gateways while its
 * lease holds; so, with the dispatcher publishing a claim's rows in seq order
 * and stopping a gateway at its first row that does not go out (fail.ts
 * `releaseUnspent`), seq N+1 is never published before N, whatever the
 * number of replicas. A dead row is not open: the rows after it go, and the
 * gateway's resync replays it. While a lease holds nobody else claims the
 * row; after it runs out someone may (at-least-once delivery). Rows are
 * chosen by status, never by an id cursor.
 */
export async function claim(q: Queryable, opts: { token: string; now: number; leaseMs: number; limit: number }): Promise<ClaimedRow[]> {
  // the candidates and their locks in one statement: the CTE is computed first (MATERIALIZED, and the
  // lock function is volatile), so a lock is tried only for a candidate, in gateway order; the claim
  // commits without waiting for its flush (async-commit.ts)
  const locked = await q.query<{ g: string }>(
    `WITH candidates AS MATERIALIZED (
        SELECT gateway_id FROM (
          SELECT DISTINCT ON (gateway_id) gateway_id, ${DUE} AS due
            FROM outbox WHERE status IN ('pending', 'sending')
           ORDER BY gateway_id, seq) f
         WHERE due ORDER BY gateway_id LIMIT $2)
     SELECT gateway_id AS g FROM candidates, ${ASYNC_COMMIT} WHERE pg_try_advisory_xact_lock($3::int, hashtext(gateway_id))`,
    [opts.now, opts.limit, CLAIM_LOCK_NAMESPACE],
  );
  if (locked.rows.length === 0) return [];
  const r = await q.query<{
    id: number;
    gateway_id: string;
    seq: number;
    jti: string;
    type: ClaimedRow['type'];
    body: unknown;
    cid: string;
    attempts: number;
    created_at: number | string;
  }>(
    `WITH open AS (
        SELECT id, gateway_id, seq, ${DUE} AS due
          FROM outbox WHERE gateway_id = ANY($5::text[]) AND status IN ('pending', 'sending')
     ), blocked AS (
        SELECT gateway_id, min(seq) AS seq FROM open WHERE NOT due GROUP BY gateway_id
     ), pick AS (
        SELECT o.id FROM open o LEFT JOIN blocked b ON b.gateway_id = o.gateway_id
         WHERE o.due AND (b.seq IS NULL OR o.seq < b.seq)
         ORDER BY o.gateway_id, o.seq
         LIMIT $4
     )
     UPDATE outbox o
        SET status = 'sending', lease_token = $2, lease_until = $1 + $3, attempts = o.attempts + 1
       FROM pick
      WHERE o.id = pick.id AND ((o.status = 'pending' AND o.next_attempt_at <= $1) OR (o.status = 'sending' AND o.lease_until <= $1))
      RETURNING o.id, o.gateway_id, o.seq, o.jti, o.type, o.body, o.cid, o.attempts, o.created_at`,
    [opts.now, opts.token, opts.leaseMs, opts.limit, locked.rows.map((x) => x.g)],
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
      createdAt: Number(x.created_at),
    }))
    .sort((a, b) => (a.gatewayId === b.gatewayId ? a.seq - b.seq : a.gatewayId < b.gatewayId ? -1 : 1));
}
