import { z } from 'zod';
import { pageOf, parseRows, type Page, type PageQuery } from '@tobira/shared';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, timePageParams, type SiteScope } from './scope.js';

/**
 * What the doors reported: the `audit` table (access events, one row per
 * event id) and `alarms`. Written by the uplink inbox in the transaction that
 * dedupes the message; read by the programmatic API and the admin API.
 */

const AuditRow = z
  .object({
    event_id: z.string(),
    gateway_id: z.string(),
    seq: Int8,
    lock_id: z.string(),
    door_id: z.string().nullable(),
    at: Int8,
    allowed: z.boolean(),
    code: z.string(),
    key_id: z.string().nullable(),
    key_version: Int8.nullable(),
    person_id: z.string().nullable(),
    credential_type: z.string().nullable(),
    command_id: z.string().nullable(),
    cid: z.string(),
    received_at: Int8,
    /** 0020: a remote unlock's supervisor and reason (jsonb); null otherwise. */
    staff_by: z.object({ accountId: z.string(), name: z.string(), reason: z.string() }).nullable().optional(),
  })
  .transform((r) => ({
    eventId: r.event_id,
    gatewayId: r.gateway_id,
    seq: r.seq,
    lockId: r.lock_id,
    doorId: r.door_id,
    at: r.at,
    allowed: r.allowed,
    code: r.code,
    keyId: r.key_id,
    keyVersion: r.key_version,
    personId: r.person_id,
    credentialType: r.credential_type,
    commandId: r.command_id,
    cid: r.cid,
    receivedAt: r.received_at,
    by: r.staff_by ?? null,
  }));
/** An access event as the `audit` table stores it; its fields are the row schema's. */
export type StoredAccessEvent = Readonly<z.output<typeof AuditRow>>;

export interface AuditQuery {
  readonly gatewayId?: string;
  readonly personId?: string;
  readonly keyId?: string;
  readonly limit?: number;
}

export async function listAudit(q: Queryable, f: AuditQuery): Promise<StoredAccessEvent[]> {
  const r = await q.query(
    `SELECT * FROM audit WHERE ($1::text IS NULL OR gateway_id = $1) AND ($2::text IS NULL OR person_id = $2) AND ($3::text IS NULL OR key_id = $3)
      ORDER BY at, seq LIMIT $4`,
    [f.gatewayId ?? null, f.personId ?? null, f.keyId ?? null, f.limit ?? 500],
  );
  return parseRows('audit', AuditRow, r.rows);
}

/** `from` is inclusive, `to` exclusive (ms); the sort key is (at, event_id). */
export type EventFilter = PageQuery<
  { siteId: string; gatewayId: string; doorId: string; personId: string; keyId: string; code: string; from: number; to: number },
  [number, string]
>;

/** An access event as the admin API shows it: with its site, without the uplink's seq and command id. */
export type AccessEventView = Omit<StoredAccessEvent, 'seq' | 'commandId'> & { readonly siteId: string };

const EventRow = z.intersection(
  AuditRow,
  z.object({ site_id: z.string() }).transform((r) => ({ siteId: r.site_id })),
);

/** Access events oldest first, keyset-paginated on (at, event_id); `to` is exclusive. */
export async function listEvents(q: Queryable, scope: SiteScope, f: EventFilter): Promise<Page<AccessEventView>> {
  const r = await q.query(
    `SELECT a.*, g.site_id FROM audit a JOIN gateways g ON g.id = a.gateway_id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) AND ($3::text IS NULL OR a.gateway_id = $3)
        AND ($4::text IS NULL OR a.door_id = $4) AND ($5::text IS NULL OR a.person_id = $5) AND ($6::text IS NULL OR a.key_id = $6)
        AND ($7::text IS NULL OR a.code = $7) AND ($8::bigint IS NULL OR a.at >= $8) AND ($9::bigint IS NULL OR a.at < $9)
        AND ($10::bigint IS NULL OR (a.at, a.event_id::text) > ($10::bigint, $11::text))
      ORDER BY a.at, a.event_id::text LIMIT $12`,
    [
      scopeParam(scope),
      f.siteId ?? null,
      f.gatewayId ?? null,
      f.doorId ?? null,
      f.personId ?? null,
      f.keyId ?? null,
      f.code ?? null,
      ...timePageParams(f),
    ],
  );
  const rows = parseRows('audit', EventRow, r.rows).map(({ seq: _seq, commandId: _commandId, ...event }): AccessEventView => event);
  return pageOf(rows, f.limit, (e) => [e.at, e.eventId]);
}

/** What the uplink inbox records: the stored event and the jti of the access.event message that carried it. */
export interface AccessEventRecord extends Omit<StoredAccessEvent, 'by'> {
  /** A remote unlock's supervisor and reason (the wire's optional `by`). */
  readonly by?: { readonly accountId: string; readonly name: string; readonly reason: string } | undefined;
  readonly jti: string;
  /** The gateway's copy of the holder: the fallback when the cloud has no key by that id at that gateway. */
  readonly personId: string | null;
}

/** Records an access event once per event id: true when inserted, false for a duplicate. */
/**
 * Whether an access event names a door or a key that is not the reporting gateway's: a gateway speaks
 * only for its own doors, so such a report is forged or misaddressed (a key the cloud no longer has is
 * not counted: its own gateway may still report it).
 */
export async function namesAnotherGateway(q: Queryable, gatewayId: string, doorId: string | null, keyId: string | null): Promise<boolean> {
  const r = await q.query<{ n: string }>(
    `SELECT (SELECT count(*) FROM doors WHERE id = $2 AND gateway_id <> $1)
          + (SELECT count(*) FROM keys WHERE id = $3 AND gateway_id <> $1) AS n`,
    [gatewayId, doorId, keyId],
  );
  return Number(r.rows[0]?.n ?? 0) > 0;
}

export async function insertAccessEvent(q: Queryable, e: AccessEventRecord): Promise<boolean> {
  const r = await q.query(
    `INSERT INTO audit (event_id, gateway_id, seq, jti, lock_id, door_id, at, allowed, code, key_id, key_version, person_id, credential_type, command_id, cid, received_at, staff_by)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,
             -- the cloud's own record names the holder; the gateway's copy is the fallback
             COALESCE((SELECT person_id FROM keys WHERE id = $10 AND gateway_id = $2), $12),
             $13,$14,$15,$16,$17::jsonb) ON CONFLICT (event_id) DO NOTHING`,
    [
      e.eventId,
      e.gatewayId,
      e.seq,
      e.jti,
      e.lockId,
      e.doorId,
      e.at,
      e.allowed,
      e.code,
      e.keyId,
      e.keyVersion,
      e.personId,
      e.credentialType,
      e.commandId,
      e.cid,
      e.receivedAt,
      e.by === undefined ? null : JSON.stringify(e.by),
    ],
  );
  return r.rowCount === 1;
}

export interface AlarmRecord {
  readonly alarmId: string;
  readonly gatewayId: string;
  readonly lockId: string;
  readonly doorId: string | null;
  readonly kind: string;
  readonly at: number;
  readonly cid: string;
  readonly receivedAt: number;
}

/** Records an alarm once per alarm id: true when inserted, false for a duplicate. */
export async function insertAlarm(q: Queryable, a: AlarmRecord): Promise<boolean> {
  const r = await q.query(
    `INSERT INTO alarms (alarm_id, gateway_id, lock_id, door_id, kind, at, cid, received_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (alarm_id) DO NOTHING`,
    [a.alarmId, a.gatewayId, a.lockId, a.doorId, a.kind, a.at, a.cid, a.receivedAt],
  );
  return r.rowCount === 1;
}
