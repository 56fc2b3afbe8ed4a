import { z } from 'zod';
import type { Queryable } from '../adapters/db/db.js';
import { deadLetterFromRow } from '../adapters/outbox/dead-letters.js';
import { auditEntryFromRow } from '../app/reads.js';

/**
 * Reads of the admin API, each scoped to the caller's sites in SQL
 * (`$1::text[] IS NULL OR site_id = ANY($1)`; NULL = every site). A row of
 * another site is simply not found, so the route answers 404, never 403.
 */
export type Scope = readonly string[] | null;
const sc = (s: Scope): string[] | null => (s === null ? null : [...s]);

// ---------------------------------------------------------------- cursors

/** Opaque keyset cursor: base64url JSON of the last row's sort key. */
export const encodeCursor = (k: readonly [number, string]): string => Buffer.from(JSON.stringify(k)).toString('base64url');
const CursorKey = z.tuple([z.int().nonnegative(), z.string().min(1).max(200).refine((x) => !x.includes('\u0000'))]);
export function decodeCursor(c: string | undefined): [number, string] | null | 'bad' {
  if (c === undefined) return null;
  try {
    const r = CursorKey.safeParse(JSON.parse(Buffer.from(c, 'base64url').toString('utf8')));
    return r.success ? r.data : 'bad';
  } catch {
    return 'bad';
  }
}

function page<T>(rows: T[], limit: number, key: (r: T) => [number, string]): { items: T[]; nextCursor: string | null } {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, nextCursor: rows.length > limit && last !== undefined ? encodeCursor(key(last)) : null };
}

// ---------------------------------------------------------------- setup data

export interface SiteRow {
  id: string;
  name: string;
  timeZone: string;
  offlineGraceSeconds: number;
  createdAt: number;
}
const site = (x: Record<string, unknown>): SiteRow => ({
  id: x.id as string,
  name: x.name as string,
  timeZone: x.time_zone as string,
  offlineGraceSeconds: x.offline_grace_seconds as number,
  createdAt: x.created_at as number,
});

export async function listSites(q: Queryable, s: Scope): Promise<SiteRow[]> {
  const r = await q.query<Record<string, unknown>>('SELECT * FROM sites WHERE ($1::text[] IS NULL OR id = ANY($1)) ORDER BY id LIMIT 1000', [sc(s)]);
  return r.rows.map(site);
}
export async function getSite(q: Queryable, s: Scope, id: string): Promise<SiteRow | null> {
  const r = await q.query<Record<string, unknown>>('SELECT * FROM sites WHERE id = $2 AND ($1::text[] IS NULL OR id = ANY($1))', [sc(s), id]);
  return r.rows[0] ? site(r.rows[0]) : null;
}

export interface GatewayRow {
  id: string;
  siteId: string;
  online: boolean | null;
  lastStatusAt: number | null;
  createdAt: number;
  clockSkewMs: number | null;
  clockSkewAt: number | null;
  lastSeq: number;
  deadLetters: number;
}
const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const gateway = (x: Record<string, unknown>): GatewayRow => ({
  id: x.id as string,
  siteId: x.site_id as string,
  online: (x.online as boolean | null) ?? null,
  lastStatusAt: (x.last_status_at as number | null) ?? null,
  createdAt: x.created_at as number,
  clockSkewMs: num(x.clock_skew_ms),
  clockSkewAt: num(x.clock_skew_at),
  lastSeq: num(x.last_seq) ?? 0,
  deadLetters: num(x.dead_letters) ?? 0,
});
const GATEWAY_COLUMNS = `g.id, g.site_id, g.online, g.last_status_at, g.created_at, g.clock_skew_ms, g.clock_skew_at,
  COALESCE((SELECT last_seq FROM gateway_seq s WHERE s.gateway_id = g.id), 0) AS last_seq,
  (SELECT count(*) FROM outbox o WHERE o.gateway_id = g.id AND o.status = 'dead') AS dead_letters`;
export async function listGateways(q: Queryable, s: Scope, f: { siteId?: string | undefined }): Promise<GatewayRow[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT ${GATEWAY_COLUMNS} FROM gateways g
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) ORDER BY g.id LIMIT 1000`,
    [sc(s), f.siteId ?? null],
  );
  return r.rows.map(gateway);
}
export async function getGateway(q: Queryable, s: Scope, id: string): Promise<GatewayRow | null> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT ${GATEWAY_COLUMNS} FROM gateways g WHERE g.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))`,
    [sc(s), id],
  );
  return r.rows[0] ? gateway(r.rows[0]) : null;
}

export interface DoorRow {
  id: string;
  siteId: string;
  gatewayId: string;
  name: string;
  createdAt: number;
}
const door = (x: Record<string, unknown>): DoorRow => ({
  id: x.id as string,
  siteId: x.site_id as string,
  gatewayId: x.gateway_id as string,
  name: x.name as string,
  createdAt: x.created_at as number,
});
export async function listDoors(q: Queryable, s: Scope, f: { siteId?: string | undefined; gatewayId?: string | undefined }): Promise<DoorRow[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT * FROM doors WHERE ($1::text[] IS NULL OR site_id = ANY($1)) AND ($2::text IS NULL OR site_id = $2)
      AND ($3::text IS NULL OR gateway_id = $3) ORDER BY id LIMIT 1000`,
    [sc(s), f.siteId ?? null, f.gatewayId ?? null],
  );
  return r.rows.map(door);
}
export async function getDoor(q: Queryable, s: Scope, id: string): Promise<DoorRow | null> {
  const r = await q.query<Record<string, unknown>>('SELECT * FROM doors WHERE id = $2 AND ($1::text[] IS NULL OR site_id = ANY($1))', [sc(s), id]);
  return r.rows[0] ? door(r.rows[0]) : null;
}
/** The ids among `ids` that are doors the scope may see. */
export async function visibleDoors(q: Queryable, s: Scope, ids: readonly string[]): Promise<Set<string>> {
  const r = await q.query<{ id: string }>('SELECT id FROM doors WHERE id = ANY($2::text[]) AND ($1::text[] IS NULL OR site_id = ANY($1))', [sc(s), [...ids]]);
  return new Set(r.rows.map((x) => x.id));
}

export interface PersonRow {
  id: string;
  name: string;
  sites: string[];
  createdAt: number;
}
/** A person is visible to a site scope when created for one of its sites, or holding a key at one of them. */
const PERSON_VISIBLE = `($1::text[] IS NULL
   OR EXISTS (SELECT 1 FROM api_person_sites ps WHERE ps.person_id = p.id AND ps.site_id = ANY($1))
   OR EXISTS (SELECT 1 FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = p.id AND g.site_id = ANY($1)))`;
const person = (x: Record<string, unknown>): PersonRow => ({
  id: x.id as string,
  name: x.name as string,
  sites: (x.sites as string[] | null) ?? [],
  createdAt: x.created_at as number,
});
const PERSON_COLS = `p.id, p.name, p.created_at,
  ARRAY(SELECT ps.site_id FROM api_person_sites ps WHERE ps.person_id = p.id ORDER BY ps.site_id) AS sites`;
export async function getPerson(q: Queryable, s: Scope, id: string): Promise<PersonRow | null> {
  const r = await q.query<Record<string, unknown>>(`SELECT ${PERSON_COLS} FROM people p WHERE p.id = $2 AND ${PERSON_VISIBLE}`, [sc(s), id]);
  return r.rows[0] ? person(r.rows[0]) : null;
}
export async function listPeople(q: Queryable, s: Scope, f: { siteId?: string | undefined }): Promise<PersonRow[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT ${PERSON_COLS} FROM people p WHERE ${PERSON_VISIBLE}
      AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM api_person_sites ps WHERE ps.person_id = p.id AND ps.site_id = $2)
        OR EXISTS (SELECT 1 FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = p.id AND g.site_id = $2))
      ORDER BY p.id LIMIT 1000`,
    [sc(s), f.siteId ?? null],
  );
  return r.rows.map(person);
}
export async function recordPersonSite(q: Queryable, personId: string, siteId: string): Promise<void> {
  await q.query('INSERT INTO api_person_sites (person_id, site_id) VALUES ($1,$2) ON CONFLICT DO NOTHING', [personId, siteId]);
}

// ---------------------------------------------------------------- keys

export interface KeyRow {
  id: string;
  siteId: string;
  personId: string;
  gatewayId: string;
  credentialType: string;
  doors: string[];
  validFrom: number;
  validUntil: number;
  schedule: unknown;
  offlineCapable: boolean;
  offlineMaxSeconds: number | null;
  version: number;
  revision: number;
  status: string;
  revokeReason: string | null;
  lastCode: string;
  cid: string;
  createdAt: number;
  updatedAt: number;
}
const keyRow = (x: Record<string, unknown>): KeyRow => ({
  id: x.id as string,
  siteId: x.site_id as string,
  personId: x.person_id as string,
  gatewayId: x.gateway_id as string,
  credentialType: x.credential_type as string,
  doors: x.doors as string[],
  validFrom: x.valid_from as number,
  validUntil: x.valid_until as number,
  schedule: x.schedule ?? null,
  offlineCapable: x.offline_capable as boolean,
  offlineMaxSeconds: (x.offline_max_seconds as number | null) ?? null,
  version: x.version as number,
  revision: x.revision as number,
  status: x.status as string,
  revokeReason: (x.revoke_reason as string | null) ?? null,
  lastCode: x.last_code as string,
  cid: x.cid as string,
  createdAt: x.created_at as number,
  updatedAt: x.updated_at as number,
});
const KEY_COLS = `k.id, g.site_id, k.person_id, k.gateway_id, k.credential_type, k.doors, k.valid_from, k.valid_until, k.schedule,
  k.offline_capable, k.offline_max_seconds, k.version, k.revision, k.status, k.revoke_reason, k.last_code, k.cid, k.created_at, k.updated_at`;

export async function getKey(q: Queryable, s: Scope, id: string): Promise<KeyRow | null> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT ${KEY_COLS} FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))`,
    [sc(s), id],
  );
  return r.rows[0] ? keyRow(r.rows[0]) : null;
}

export interface KeyFilter {
  siteId?: string | undefined;
  personId?: string | undefined;
  gatewayId?: string | undefined;
  status?: string | undefined;
  cursor: [number, string] | null;
  limit: number;
}
/** Keys newest last, keyset-paginated on (created_at, id). */
export async function listKeys(q: Queryable, s: Scope, f: KeyFilter) {
  const r = await q.query<Record<string, unknown>>(
    `SELECT ${KEY_COLS} FROM keys k JOIN gateways g ON g.id = k.gateway_id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) AND ($3::text IS NULL OR k.person_id = $3)
        AND ($4::text IS NULL OR k.gateway_id = $4) AND ($5::text IS NULL OR k.status = $5)
        AND ($6::bigint IS NULL OR (k.created_at, k.id) > ($6::bigint, $7::text))
      ORDER BY k.created_at, k.id LIMIT $8`,
    [sc(s), f.siteId ?? null, f.personId ?? null, f.gatewayId ?? null, f.status ?? null, f.cursor?.[0] ?? null, f.cursor?.[1] ?? null, f.limit + 1],
  );
  return page(r.rows.map(keyRow), f.limit, (k) => [k.createdAt, k.id]);
}

export interface DeliveryRow {
  outboxId: number;
  gatewayId: string;
  seq: number;
  type: string;
  keyVersion: number | null;
  status: 'pending' | 'sending' | 'sent' | 'dead';
  attempts: number;
  lastError: string | null;
  cid: string;
  createdAt: number;
  sentAt: number | null;
}
/** Outbox rows of one key (visible keys only: call after getKey). */
export async function listKeyDeliveries(q: Queryable, keyId: string): Promise<DeliveryRow[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT id, gateway_id, seq, type, key_version, status, attempts, last_error, cid, created_at, sent_at FROM outbox WHERE key_id = $1 ORDER BY seq`,
    [keyId],
  );
  return r.rows.map((x) => ({
    outboxId: x.id as number,
    gatewayId: x.gateway_id as string,
    seq: x.seq as number,
    type: x.type as string,
    keyVersion: (x.key_version as number | null) ?? null,
    status: x.status as DeliveryRow['status'],
    attempts: x.attempts as number,
    lastError: (x.last_error as string | null) ?? null,
    cid: x.cid as string,
    createdAt: x.created_at as number,
    sentAt: (x.sent_at as number | null) ?? null,
  }));
}

// ---------------------------------------------------------------- access events

export interface EventFilter {
  siteId?: string | undefined;
  gatewayId?: string | undefined;
  doorId?: string | undefined;
  personId?: string | undefined;
  keyId?: string | undefined;
  code?: string | undefined;
  from?: number | undefined;
  to?: number | undefined;
  cursor: [number, string] | null;
  limit: number;
}
export interface EventRow {
  eventId: string;
  siteId: string;
  gatewayId: string;
  lockId: string;
  doorId: string | null;
  at: number;
  allowed: boolean;
  code: string;
  keyId: string | null;
  keyVersion: number | null;
  personId: string | null;
  credentialType: string | null;
  cid: string;
  receivedAt: number;
}
/** Access events oldest first, keyset-paginated on (at, event_id); `to` is exclusive. */
export async function listEvents(q: Queryable, s: Scope, f: EventFilter) {
  const r = await q.query<Record<string, unknown>>(
    `SELECT a.*, g.site_id FROM audit a JOIN gateways g ON g.id = a.gateway_id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) AND ($3::text IS NULL OR a.gateway_id = $3)
        AND ($4::text IS NULL OR a.door_id = $4) AND ($5::text IS NULL OR a.person_id = $5) AND ($6::text IS NULL OR a.key_id = $6)
        AND ($7::text IS NULL OR a.code = $7) AND ($8::bigint IS NULL OR a.at >= $8) AND ($9::bigint IS NULL OR a.at < $9)
        AND ($10::bigint IS NULL OR (a.at, a.event_id::text) > ($10::bigint, $11::text))
      ORDER BY a.at, a.event_id::text LIMIT $12`,
    [
      sc(s),
      f.siteId ?? null,
      f.gatewayId ?? null,
      f.doorId ?? null,
      f.personId ?? null,
      f.keyId ?? null,
      f.code ?? null,
      f.from ?? null,
      f.to ?? null,
      f.cursor?.[0] ?? null,
      f.cursor?.[1] ?? null,
      f.limit + 1,
    ],
  );
  const rows: EventRow[] = r.rows.map((x) => {
    const { seq: _seq, commandId: _commandId, ...event } = auditEntryFromRow(x);
    return { ...event, siteId: x.site_id as string };
  });
  return page(rows, f.limit, (e) => [e.at, e.eventId]);
}

// ---------------------------------------------------------------- dead letters

export interface DeadLetterRow {
  id: number;
  siteId: string;
  gatewayId: string;
  seq: number;
  type: string;
  keyId: string | null;
  keyVersion: number | null;
  attempts: number;
  lastError: string | null;
  cid: string;
  createdAt: number;
}
export async function listDeadLetters(q: Queryable, s: Scope, f: { siteId?: string | undefined; gatewayId?: string | undefined; limit: number }): Promise<DeadLetterRow[]> {
  const r = await q.query<Record<string, unknown>>(
    `SELECT o.id, g.site_id, o.gateway_id, o.seq, o.type, o.key_id, o.key_version, o.attempts, o.last_error, o.cid, o.created_at
       FROM outbox o JOIN gateways g ON g.id = o.gateway_id
      WHERE o.status = 'dead' AND ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2)
        AND ($3::text IS NULL OR o.gateway_id = $3) ORDER BY o.gateway_id, o.seq LIMIT $4`,
    [sc(s), f.siteId ?? null, f.gatewayId ?? null, f.limit],
  );
  return r.rows.map((x) => {
    const { jti: _jti, ...dead } = deadLetterFromRow(x);
    return { ...dead, siteId: x.site_id as string };
  });
}
/** True when the outbox row exists and belongs to a site of the scope (any status). */
export async function outboxRowVisible(q: Queryable, s: Scope, id: number): Promise<boolean> {
  const r = await q.query('SELECT 1 FROM outbox o JOIN gateways g ON g.id = o.gateway_id WHERE o.id = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))', [sc(s), id]);
  return r.rowCount > 0;
}
