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

export interface Enqueued {
  readonly gatewayId: string;
  readonly seq: number;
  readonly jti: MessageId;
  readonly type: OutboxDraft['type'];
}

/**
 * Writes one outbox row inside the caller's transaction. Guarantee: the row
 * commits or rolls back with the state change, and its `seq` is the gateway's
 * next one with no gap (the counter row stays locked until commit; a rollback
 * undoes the increment). The NOTIFY is delivered only on commit.
 */
export async function enqueue(tx: Queryable, d: OutboxDraft, now: number): Promise<Enqueued> {
  const s = await tx.query<{ last_seq: number }>(
    'UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq',
    [d.gatewayId],
  );
  const seq = s.rows[0]?.last_seq;
  if (seq === undefined) throw new Error(`no seq counter for gateway ${d.gatewayId}`);
  const jti = newMessageId();
  await tx.query(
    `INSERT INTO outbox (gateway_id, seq, jti, type, key_id, key_version, body, cid, status, attempts, next_attempt_at, created_at)
     VALUES ($1,$2,$3,$4,$5,$6,$7::jsonb,$8,'pending',0,$9,$9)`,
    [d.gatewayId, seq, jti, d.type, d.keyId, d.keyVersion, JSON.stringify(d.body), d.cid, now],
  );
  await tx.query('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, d.gatewayId]);
  return { gatewayId: d.gatewayId, seq, jti, type: d.type };
}
