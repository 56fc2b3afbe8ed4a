import { z } from 'zod';
import { parseRow, parseRows } from '@tobira/shared';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * Setup data: `sites`, `doors`, `people` (with `api_person_sites`, the site a
 * person was created for). Inserts judge a taken id by rows affected; reads
 * take the caller's site scope.
 */

// ---------------------------------------------------------------- sites

export interface SiteRecord {
  readonly id: string;
  readonly name: string;
  readonly timeZone: string;
  readonly offlineGraceSeconds: number;
  readonly createdAt: number;
}
const SiteRow = z
  .object({ id: z.string(), name: z.string(), time_zone: z.string(), offline_grace_seconds: z.number().int(), created_at: Int8 })
  .transform((r): SiteRecord => ({
    id: r.id,
    name: r.name,
    timeZone: r.time_zone,
    offlineGraceSeconds: r.offline_grace_seconds,
    createdAt: r.created_at,
  }));

/** Inserts a site; false when the id is taken. */
export async function insertSite(q: Queryable, s: SiteRecord): Promise<boolean> {
  const r = await q.query(
    'INSERT INTO sites (id, name, time_zone, offline_grace_seconds, created_at) VALUES ($1,$2,$3,$4,$5) ON CONFLICT (id) DO NOTHING',
    [s.id, s.name, s.timeZone, s.offlineGraceSeconds, s.createdAt],
  );
  return r.rowCount === 1;
}

export async function listSites(q: Queryable, scope: SiteScope): Promise<SiteRecord[]> {
  const r = await q.query('SELECT * FROM sites WHERE ($1::text[] IS NULL OR id = ANY($1)) ORDER BY id LIMIT 1000', [scopeParam(scope)]);
  return parseRows('sites', SiteRow, r.rows);
}

/** A site visible to the scope (default: any), or null. */
export async function getSite(q: Queryable, scope: SiteScope, id: string): Promise<SiteRecord | null> {
  const r = await q.query('SELECT * FROM sites WHERE id = $2 AND ($1::text[] IS NULL OR id = ANY($1))', [scopeParam(scope), id]);
  return r.rows[0] === undefined ? null : parseRow('sites', SiteRow, r.rows[0]);
}

// ---------------------------------------------------------------- doors

export interface DoorRecord {
  readonly id: string;
  readonly siteId: string;
  readonly gatewayId: string;
  readonly name: string;
  readonly createdAt: number;
}
const DoorRow = z
  .object({ id: z.string(), site_id: z.string(), gateway_id: z.string(), name: z.string(), created_at: Int8 })
  .transform((r): DoorRecord => ({ id: r.id, siteId: r.site_id, gatewayId: r.gateway_id, name: r.name, createdAt: r.created_at }));

/** Inserts a door; false when the id is taken. */
export async function insertDoor(q: Queryable, d: DoorRecord): Promise<boolean> {
  const r = await q.query(
    'INSERT INTO doors (id, site_id, gateway_id, name, created_at) VALUES ($1,$2,$3,$4,$5) ON CONFLICT (id) DO NOTHING',
    [d.id, d.siteId, d.gatewayId, d.name, d.createdAt],
  );
  return r.rowCount === 1;
}

export async function listDoors(
  q: Queryable,
  scope: SiteScope,
  f: { siteId?: string | undefined; gatewayId?: string | undefined },
): Promise<DoorRecord[]> {
  const r = await q.query(
    `SELECT * FROM doors WHERE ($1::text[] IS NULL OR site_id = ANY($1)) AND ($2::text IS NULL OR site_id = $2)
      AND ($3::text IS NULL OR gateway_id = $3) ORDER BY id LIMIT 1000`,
    [scopeParam(scope), f.siteId ?? null, f.gatewayId ?? null],
  );
  return parseRows('doors', DoorRow, r.rows);
}

export async function getDoor(q: Queryable, scope: SiteScope, id: string): Promise<DoorRecord | null> {
  const r = await q.query('SELECT * FROM doors WHERE id = $2 AND ($1::text[] IS NULL OR site_id = ANY($1))', [scopeParam(scope), id]);
  return r.rows[0] === undefined ? null : parseRow('doors', DoorRow, r.rows[0]);
}

// ---------------------------------------------------------------- people

export interface PersonRecord {
  readonly id: string;
  readonly name: string;
  readonly sites: string[];
  readonly createdAt: number;
}
const PersonRow = z
  .object({ id: z.string(), name: z.string(), sites: z.array(z.string()).nullable(), created_at: Int8 })
  .transform((r): PersonRecord => ({ id: r.id, name: r.name, sites: r.sites ?? [], createdAt: r.created_at }));

/** A person is visible to a site scope when created for one of its sites, or holding a key at one of them. */
const PERSON_VISIBLE = `($1::text[] IS NULL
   OR EXISTS (SELECT 1 FROM api_person_sites ps WHERE ps.person_id = p.id AND ps.site_id = ANY($1))
   OR EXISTS (SELECT 1 FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = p.id AND g.site_id = ANY($1)))`;
/**
 * The sites a person belongs to (created for, or holding a key at), only
 * those of the scope ($1): a person two sites share shows each of them only
 * its own, never which other site knows the person.
 */
const PERSON_COLS = `p.id, p.name, p.created_at,
  ARRAY(SELECT s.site_id FROM (
          SELECT ps.site_id FROM api_person_sites ps WHERE ps.person_id = p.id
          UNION SELECT g.site_id FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = p.id) s
        WHERE $1::text[] IS NULL OR s.site_id = ANY($1) ORDER BY s.site_id) AS sites`;

/** Inserts a person; false when the id is taken. */
export async function insertPerson(q: Queryable, p: { id: string; name: string; createdAt: number }): Promise<boolean> {
  const r = await q.query('INSERT INTO people (id, name, created_at) VALUES ($1,$2,$3) ON CONFLICT (id) DO NOTHING', [
    p.id,
    p.name,
    p.createdAt,
  ]);
  return r.rowCount === 1;
}

export async function getPerson(q: Queryable, scope: SiteScope, id: string): Promise<PersonRecord | null> {
  const r = await q.query(`SELECT ${PERSON_COLS} FROM people p WHERE p.id = $2 AND ${PERSON_VISIBLE}`, [scopeParam(scope), id]);
  return r.rows[0] === undefined ? null : parseRow('people', PersonRow, r.rows[0]);
}

export async function listPeople(q: Queryable, scope: SiteScope, f: { siteId?: string | undefined }): Promise<PersonRecord[]> {
  const r = await q.query(
    // the siteId filter counts only the scope's sites: naming another site lists none (not its people the caller shares)
    `SELECT ${PERSON_COLS} FROM people p WHERE ${PERSON_VISIBLE}
      AND ($2::text IS NULL OR ($1::text[] IS NULL OR $2 = ANY($1)) AND (EXISTS (SELECT 1 FROM api_person_sites ps WHERE ps.person_id = p.id AND ps.site_id = $2)
        OR EXISTS (SELECT 1 FROM keys k JOIN gateways g ON g.id = k.gateway_id WHERE k.person_id = p.id AND g.site_id = $2)))
      ORDER BY p.id LIMIT 1000`,
    [scopeParam(scope), f.siteId ?? null],
  );
  return parseRows('people', PersonRow, r.rows);
}

/**
 * Holds a person's row for the rest of the transaction: a key being issued
 * for the person (which holds it too, `loadBlock`) commits first, so the
 * sites the person belongs to, read next, include its gateway's.
 */
export async function lockPerson(q: Queryable, personId: string): Promise<void> {
  await q.query('SELECT 1 FROM people WHERE id = $1 FOR UPDATE', [personId]);
}

/** Records the site a person was created for (the admin API scopes people by it). */
export async function recordPersonSite(q: Queryable, personId: string, siteId: string): Promise<void> {
  await q.query('INSERT INTO api_person_sites (person_id, site_id) VALUES ($1,$2) ON CONFLICT DO NOTHING', [personId, siteId]);
}
