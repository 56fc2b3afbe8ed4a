import { newMessageId, type MessageId } from '@tobira/shared';
import type { Queryable } from '../db/db.js';

export const OUTBOX_CHANNEL = 'tobira_outbox';

export interface OutboxDraft {
  readonly gatewayId: string;
  readonly type: 'key.grant' | 'key.revoke' | 'keyset.update' | 'site.mode' | 'uplink_key.rotate' | 'uplink_key.activate';
  readonly keyId: string | null;
  readonly keyVersion: number | null;
  readonly body: unknown;
  readonly cid: string;
}

/** A row queued whose seq is taken at the commit (`enqueueAtCommit`): all but the seq, which is unknown inside its transaction. */
export interface Queued {
  /** The row's id and creation time: with the rest, what a read of the pending row gives back (the key view built without one). */
  readonly id: number;
  readonly createdAt: number;
  readonly cid: string;
  readonly gatewayId: string;
  readonly jti: MessageId;
  readonly type: OutboxDraft['type'];
}

/** A row queued with its seq (`enqueue`). */
export interface Enqueued extends Queued {
  readonly seq: number;
}

/**
 * Writes one outbox row inside the caller's transaction. Guarantee: the row
 * commits or rolls back with the state change, and its `seq` is the gateway's
 * next one with no gap (the counter row stays locked until commit; a rollback
 * undoes the increment). The NOTIFY is delivered only on commit.
 * One statement (one round trip): the counter row's lock serialises every
 * transaction that writes to this gateway until it commits, so the time
 * between taking the seq and the commit bounds one gateway's write rate
 * (docs/performance.md). For callers that need the seq in the transaction
 * (a mode request records it); the others use `enqueueAtCommit`.
 */
export async function enqueue(tx: Queryable, d: OutboxDraft, now: number): Promise<Enqueued> {
  const jti = newMessageId();
  const r = await tx.query<{ id: number | string; seq: number | string }>(
    `WITH s AS (UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq),
          o AS (INSERT INTO outbox (gateway_id, seq, jti, type, key_id, key_version, body, cid, status, attempts, next_attempt_at, created_at)
                SELECT $1, s.last_seq, $2, $3, $4, $5, $6::jsonb, $7, 'pending', 0, $8, $8 FROM s
                RETURNING id, seq)
     SELECT o.id, o.seq, pg_notify($9, $1) FROM o`,
    [d.gatewayId, jti, d.type, d.keyId, d.keyVersion, JSON.stringify(d.body), d.cid, now, OUTBOX_CHANNEL],
  );
  const row = r.rows[0];
  if (row === undefined) throw new Error(`no seq counter for gateway ${d.gatewayId}`);
  return { id: Number(row.id), createdAt: now, cid: d.cid, gatewayId: d.gatewayId, seq: Number(row.seq), jti, type: d.type };
}

/**
 * Writes one outbox row inside the caller's transaction; the row takes the
 * gateway's next seq when the transaction commits (migration 0028's deferred
 * trigger). Guarantee: as `enqueue`'s (the row and its seq commit or roll back
 * with the state change; no gap; seqs in commit order; one transaction's rows
 * in the order they were queued, after any it queued with `enqueue`), but the
 * counter row is locked only through the commit itself, not through the
 * round trips between this insert and the commit: one gateway's issues no
 * longer wait on each other's clients.
 */
export async function enqueueAtCommit(tx: Queryable, d: OutboxDraft, now: number): Promise<Queued> {
  const jti = newMessageId();
  const r = await tx.query<{ id: number | string }>(
    `WITH o AS (INSERT INTO outbox (gateway_id, seq, jti, type, key_id, key_version, body, cid, status, attempts, next_attempt_at, created_at)
                VALUES ($1, NULL, $2, $3, $4, $5, $6::jsonb, $7, 'pending', 0, $8, $8)
                RETURNING id)
     SELECT o.id, pg_notify($9, $1) FROM o`,
    [d.gatewayId, jti, d.type, d.keyId, d.keyVersion, JSON.stringify(d.body), d.cid, now, OUTBOX_CHANNEL],
  );
  const row = r.rows[0];
  if (row === undefined) throw new Error(`outbox row for gateway ${d.gatewayId} not written`);
  return { id: Number(row.id), createdAt: now, cid: d.cid, gatewayId: d.gatewayId, jti, type: d.type };
}
