import { z } from 'zod';
import { parseRows } from '@tobira/shared';
import { OUTBOX_STATUSES, type OutboxStatus } from '../outbox/states.js';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';

/**
 * Reads of the `outbox` table for people (the programmatic API, the admin
 * API's key view) and for the resync replay. The dispatcher's own verbs
 * (claim, mark, fail, renew, purge) stay in adapters/outbox/, one per module.
 */

/**
 * The columns of an outbox row that every read of it names (people's view
 * here, the dead-letter list in adapters/outbox/dead-letters.ts), and the
 * fields they become: one list, extended by each read.
 */
export const OutboxRowCore = z.object({
  id: Int8,
  gateway_id: z.string(),
  seq: Int8,
  jti: z.string(),
  type: z.string(),
  key_id: z.string().nullable(),
  key_version: Int8.nullable(),
  attempts: z.number().int(),
  last_error: z.string().nullable(),
  cid: z.string(),
  created_at: Int8,
});
export const outboxCore = (r: z.infer<typeof OutboxRowCore>) => ({
  id: r.id,
  gatewayId: r.gateway_id,
  seq: r.seq,
  jti: r.jti,
  type: r.type,
  keyId: r.key_id,
  keyVersion: r.key_version,
  attempts: r.attempts,
  lastError: r.last_error,
  cid: r.cid,
  createdAt: r.created_at,
});
export type OutboxCore = Readonly<ReturnType<typeof outboxCore>>;

export interface OutboxEntry extends OutboxCore {
  readonly status: OutboxStatus;
  readonly sentAt: number | null;
}

const COLUMNS = 'id, gateway_id, seq, jti, type, key_id, key_version, status, attempts, last_error, cid, created_at, sent_at';
const OutboxRow = OutboxRowCore.extend({ status: z.enum(OUTBOX_STATUSES), sent_at: Int8.nullable() }).transform((r): OutboxEntry => ({
  ...outboxCore(r),
  status: r.status,
  sentAt: r.sent_at,
}));

/** Every outbox row of a gateway, in seq order. */
export async function listOutbox(q: Queryable, gatewayId: string): Promise<OutboxEntry[]> {
  const r = await q.query(`SELECT ${COLUMNS} FROM outbox WHERE gateway_id = $1 ORDER BY seq`, [gatewayId]);
  return parseRows('outbox', OutboxRow, r.rows);
}

/** A key's outbox row; its seq is null inside the transaction that queued it (taken at the commit, enqueueAtCommit). */
export type KeyDelivery = Omit<OutboxEntry, 'seq'> & { readonly seq: number | null };
const KeyDeliveryRow = OutboxRowCore.extend({ seq: Int8.nullable(), status: z.enum(OUTBOX_STATUSES), sent_at: Int8.nullable() }).transform(
  // outboxCore's seq is a committed row's; this row's own (null or not) replaces it
  (r): KeyDelivery => ({ ...outboxCore({ ...r, seq: 0 }), seq: r.seq, status: r.status, sentAt: r.sent_at }),
);

/**
 * The outbox rows of one key (its grant and revoke commands), in seq order
 * (the row its own transaction queued, if any, last). Callers check the key
 * is visible first.
 */
export async function listKeyDeliveries(q: Queryable, keyId: string): Promise<KeyDelivery[]> {
  const r = await q.query(`SELECT ${COLUMNS} FROM outbox WHERE key_id = $1 ORDER BY seq NULLS LAST, id`, [keyId]);
  return parseRows('outbox', KeyDeliveryRow, r.rows);
}

/** A row as the resync replay sends it again (same jti and seq, freshly signed). */
export interface ReplayRow {
  readonly seq: number;
  readonly jti: string;
  readonly type: 'key.grant' | 'key.revoke' | 'keyset.update' | 'site.mode' | 'uplink_key.rotate' | 'uplink_key.activate';
  readonly body: unknown;
  readonly cid: string;
}
const ReplayRowSchema = z.object({
  seq: Int8,
  jti: z.string(),
  type: z.enum(['key.grant', 'key.revoke', 'keyset.update', 'site.mode', 'uplink_key.rotate', 'uplink_key.activate']),
  body: z.unknown(),
  cid: z.string(),
});

/** The rows of a gateway with fromSeq < seq <= toSeq, whatever their status (pending and dead ones too), in seq order. */
export async function outboxRowsBetween(q: Queryable, gatewayId: string, fromSeq: number, toSeq: number): Promise<ReplayRow[]> {
  const r = await q.query('SELECT seq, jti, type, body, cid FROM outbox WHERE gateway_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq', [
    gatewayId,
    fromSeq,
    toSeq,
  ]);
  return parseRows('outbox', ReplayRowSchema, r.rows);
}
