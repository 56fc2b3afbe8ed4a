import { z } from 'zod';
import { CorrelationId, CredentialType, DoorId, GatewayId, KeyId, PersonId, RevokeReason, Schedule } from '@tobira/shared';
import { KEY_STATUSES, type KeyEvent, type KeyStatus } from '../../domain/key-states.js';
import type { EntryKey } from '../../domain/keys.js';
import { CorruptRow, type Queryable } from './db.js';

/** Rows read back are validated like any other boundary input: a bad row is CorruptRow, never a half-built key. */
const KeyRow = z.object({
  id: KeyId,
  person_id: PersonId,
  gateway_id: GatewayId,
  credential_type: CredentialType,
  credential_digest: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
  doors: z.array(DoorId).min(1),
  valid_from: z.number().int(),
  valid_until: z.number().int(),
  schedule: Schedule.nullable(),
  offline_capable: z.boolean(),
  offline_max_seconds: z.number().int().positive().nullable(),
  version: z.number().int().positive(),
  revision: z.number().int().positive(),
  status: z.enum(KEY_STATUSES),
  revoke_reason: RevokeReason.nullable(),
  last_code: z.string(),
  cid: CorrelationId,
  created_at: z.number().int(),
  updated_at: z.number().int(),
});

export function keyFromRow(row: unknown): EntryKey {
  const p = KeyRow.safeParse(row);
  if (!p.success) throw new CorruptRow('keys', p.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
  const r = p.data;
  return {
    id: r.id,
    personId: r.person_id,
    gatewayId: r.gateway_id,
    credential: { type: r.credential_type, digest: r.credential_digest },
    doors: r.doors,
    validFrom: r.valid_from,
    validUntil: r.valid_until,
    schedule: r.schedule,
    offlineCapable: r.offline_capable,
    offlineMaxSeconds: r.offline_max_seconds,
    version: r.version,
    revision: r.revision,
    status: r.status,
    revokeReason: r.revoke_reason,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export async function loadKey(q: Queryable, id: string): Promise<EntryKey | null> {
  const r = await q.query('SELECT * FROM keys WHERE id = $1', [id]);
  return r.rows[0] === undefined ? null : keyFromRow(r.rows[0]);
}

/** Insert of a new key; 0 rows means the id already exists (judged by rowCount, not by an exception). */
export async function insertKey(q: Queryable, k: EntryKey): Promise<number> {
  const r = await q.query(
    `INSERT INTO keys (id, person_id, gateway_id, credential_type, credential_digest, doors, valid_from, valid_until,
       schedule, offline_capable, version, revision, status, revoke_reason, last_code, cid, created_at, updated_at, offline_max_seconds)
     VALUES ($1,$2,$3,$4,$5,$6::jsonb,$7,$8,$9::jsonb,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)
     ON CONFLICT (id) DO NOTHING`,
    [
      k.id, k.personId, k.gatewayId, k.credential.type, k.credential.digest, JSON.stringify(k.doors), k.validFrom, k.validUntil,
      k.schedule === null ? null : JSON.stringify(k.schedule), k.offlineCapable, k.version, k.revision, k.status, k.revokeReason,
      k.lastCode, k.cid, k.createdAt, k.updatedAt, k.offlineMaxSeconds,
    ],
  );
  return r.rowCount;
}

/** Compare-and-set on the row revision: 1 row = we won, 0 rows = someone changed the key first. */
export async function casKey(q: Queryable, k: EntryKey, expectedRevision: number): Promise<number> {
  const r = await q.query(
    `UPDATE keys SET status = $3, version = $4, revision = $5, revoke_reason = $6, last_code = $7, cid = $8, updated_at = $9
     WHERE id = $1 AND revision = $2`,
    [k.id, expectedRevision, k.status, k.version, k.revision, k.revokeReason, k.lastCode, k.cid, k.updatedAt],
  );
  return r.rowCount;
}

export interface HistoryRow {
  readonly keyId: string;
  readonly version: number;
  readonly revision: number;
  readonly event: KeyEvent;
  readonly fromStatus: KeyStatus | null;
  readonly toStatus: KeyStatus;
  readonly reason: string | null;
  readonly code: string;
  readonly cid: string;
  readonly verb: string;
  readonly detail: Record<string, unknown> | null;
  readonly at: number;
}

export async function appendHistory(q: Queryable, h: HistoryRow): Promise<void> {
  await q.query(
    `INSERT INTO key_history (key_id, version, revision, event, from_status, to_status, reason, code, cid, verb, detail, at)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11::jsonb,$12)`,
    [h.keyId, h.version, h.revision, h.event, h.fromStatus, h.toStatus, h.reason, h.code, h.cid, h.verb, h.detail === null ? null : JSON.stringify(h.detail), h.at],
  );
}

export async function listHistory(q: Queryable, keyId: string): Promise<HistoryRow[]> {
  const r = await q.query<Record<string, unknown>>('SELECT * FROM key_history WHERE key_id = $1 ORDER BY revision', [keyId]);
  return r.rows.map((row) => ({
    keyId: row.key_id as string,
    version: row.version as number,
    revision: row.revision as number,
    event: row.event as KeyEvent,
    fromStatus: (row.from_status as KeyStatus | null) ?? null,
    toStatus: row.to_status as KeyStatus,
    reason: (row.reason as string | null) ?? null,
    code: row.code as string,
    cid: row.cid as string,
    verb: row.verb as string,
    detail: (row.detail as Record<string, unknown> | null) ?? null,
    at: row.at as number,
  }));
}

/** Sets the transaction-local marker the keys trigger checks (I4). */
export async function enterVerb(q: Queryable, verb: string): Promise<void> {
  await q.query("SELECT set_config('tobira.verb', $1, true)", [verb]);
}
