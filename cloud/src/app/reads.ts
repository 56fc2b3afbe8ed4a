import type { Queryable } from '../adapters/db/db.js';

export interface AuditQuery {
  readonly gatewayId?: string;
  readonly personId?: string;
  readonly keyId?: string;
  readonly limit?: number;
}

export interface AuditEntry {
  readonly eventId: string;
  readonly gatewayId: string;
  readonly seq: number;
  readonly lockId: string;
  readonly doorId: string | null;
  readonly at: number;
  readonly allowed: boolean;
  readonly code: string;
  readonly keyId: string | null;
  readonly keyVersion: number | null;
  readonly personId: string | null;
  readonly credentialType: string | null;
  readonly commandId: string | null;
  readonly cid: string;
  readonly receivedAt: number;
}

export async function listAudit(q: Queryable, f: AuditQuery): Promise<AuditEntry[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT * FROM audit WHERE ($1::text IS NULL OR gateway_id = $1) AND ($2::text IS NULL OR person_id = $2) AND ($3::text IS NULL OR key_id = $3)
      ORDER BY at, seq LIMIT $4`,
    [f.gatewayId ?? null, f.personId ?? null, f.keyId ?? null, f.limit ?? 500],
  );
  return r.rows.map(auditEntryFromRow);
}

/** An `audit` row as the code sees it (one mapping for every reader of the table). */
export function auditEntryFromRow(x: Record<string, unknown>): AuditEntry {
  return {
    eventId: x.event_id as string,
    gatewayId: x.gateway_id as string,
    seq: x.seq as number,
    lockId: x.lock_id as string,
    doorId: (x.door_id as string | null) ?? null,
    at: x.at as number,
    allowed: x.allowed as boolean,
    code: x.code as string,
    keyId: (x.key_id as string | null) ?? null,
    keyVersion: (x.key_version as number | null) ?? null,
    personId: (x.person_id as string | null) ?? null,
    credentialType: (x.credential_type as string | null) ?? null,
    commandId: (x.command_id as string | null) ?? null,
    cid: x.cid as string,
    receivedAt: x.received_at as number,
  };
}

export interface RejectedUplink {
  readonly id: number;
  readonly gatewayId: string | null;
  readonly topic: string;
  readonly code: string;
  readonly detail: string;
  readonly at: number;
}

export async function listRejectedUplinks(q: Queryable, f: { gatewayId?: string; limit?: number }): Promise<RejectedUplink[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT id, gateway_id, topic, code, detail, at FROM rejected_uplinks WHERE ($1::text IS NULL OR gateway_id = $1) ORDER BY id LIMIT $2`,
    [f.gatewayId ?? null, f.limit ?? 500],
  );
  return r.rows.map((x) => ({
    id: x.id as number,
    gatewayId: (x.gateway_id as string | null) ?? null,
    topic: x.topic as string,
    code: x.code as string,
    detail: x.detail as string,
    at: x.at as number,
  }));
}

/** Missing uplink seqs of a gateway, as ranges between the purge floor and the highest seq seen (late arrivals fill them). */
export async function listUplinkGaps(q: Queryable, gatewayId: string): Promise<{ fromSeq: number; toSeq: number }[]> {
  const r = await q.query<{ from_seq: number; to_seq: number }>(
    `SELECT seq + 1 AS from_seq, next - 1 AS to_seq FROM (
        SELECT seq, lead(seq) OVER (ORDER BY seq) AS next FROM (
          SELECT COALESCE((SELECT floor FROM uplink_seq WHERE gateway_id = $1), 0) AS seq
          UNION ALL SELECT seq FROM uplink_inbox WHERE gateway_id = $1 AND seq IS NOT NULL
            AND seq > COALESCE((SELECT floor FROM uplink_seq WHERE gateway_id = $1), 0)) a) s
      WHERE next > seq + 1 ORDER BY seq`,
    [gatewayId],
  );
  return r.rows.map((x) => ({ fromSeq: x.from_seq, toSeq: x.to_seq }));
}

export interface OutboxEntry {
  readonly id: number;
  readonly seq: number;
  readonly jti: string;
  readonly type: string;
  readonly keyId: string | null;
  readonly keyVersion: number | null;
  readonly status: 'pending' | 'sending' | 'sent' | 'dead';
  readonly attempts: number;
  readonly cid: string;
}

export async function listOutbox(q: Queryable, gatewayId: string): Promise<OutboxEntry[]> {
  const r = await q.query<Record<string, unknown>>(
    'SELECT id, seq, jti, type, key_id, key_version, status, attempts, cid FROM outbox WHERE gateway_id = $1 ORDER BY seq',
    [gatewayId],
  );
  return r.rows.map((x) => ({
    id: x.id as number,
    seq: x.seq as number,
    jti: x.jti as string,
    type: x.type as string,
    keyId: (x.key_id as string | null) ?? null,
    keyVersion: (x.key_version as number | null) ?? null,
    status: x.status as OutboxEntry['status'],
    attempts: x.attempts as number,
    cid: x.cid as string,
  }));
}

export async function listKeyDeliveries(q: Queryable, keyId: string): Promise<(OutboxEntry & { gatewayId: string; lastError: string | null })[]> {
  const r = await q.query<Record<string, unknown>>(
    'SELECT id, gateway_id, seq, jti, type, key_id, key_version, status, attempts, cid, last_error FROM outbox WHERE key_id = $1 ORDER BY key_version',
    [keyId],
  );
  return r.rows.map((x) => ({
    id: x.id as number,
    gatewayId: x.gateway_id as string,
    seq: x.seq as number,
    jti: x.jti as string,
    type: x.type as string,
    keyId: (x.key_id as string | null) ?? null,
    keyVersion: (x.key_version as number | null) ?? null,
    status: x.status as OutboxEntry['status'],
    attempts: x.attempts as number,
    cid: x.cid as string,
    lastError: (x.last_error as string | null) ?? null,
  }));
}
