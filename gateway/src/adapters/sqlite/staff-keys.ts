import { KeyGrant, pageOf, parseRows, type Page, type PageQuery } from '@tobira/shared';
import { z } from 'zod';
import { jsonColumn, prepared, type ReadableDb } from './db.js';

/**
 * The keys on site, for the staff (GET /staff/keys): who can open which doors
 * when, never the credential. The digest is neither selected nor searched:
 * the search looks at the key id, the person id and the door ids only (a
 * search over the grant's JSON would let a caller test digest prefixes).
 */
export interface StaffKey {
  readonly keyId: string;
  readonly version: number;
  /** `active`, or `revoked` (the gateway keeps the revoked key's last grant until a snapshot drops it). */
  readonly status: 'active' | 'revoked';
  /** Where `now` falls in the validity window. */
  readonly validity: 'not_yet_valid' | 'valid' | 'expired';
  readonly personId: string;
  /** The person's display name from the grant (null: the grant has none). */
  readonly personName: string | null;
  readonly credentialType: string;
  readonly doors: readonly string[];
  /** Display names of doors in `doors`, from the grant (a door without one is absent). */
  readonly doorNames: Readonly<Record<string, string>>;
  readonly validFrom: number;
  readonly validUntil: number;
  readonly schedule: KeyGrant['schedule'];
  readonly offlineCapable: boolean;
  readonly updatedAt: number;
}

const Row = z.object({
  key_id: z.string(),
  version: z.int(),
  status: z.enum(['active', 'revoked']),
  updated_at: z.int(),
  grant_json: jsonColumn(KeyGrant),
});

export type KeyFilter = PageQuery<{ q: string; status: 'active' | 'revoked' }, [string]>;

/** The grant's door names, only for doors the grant opens. */
function namesOfDoors(g: KeyGrant): Record<string, string> {
  const out: Record<string, string> = {};
  for (const d of g.doors) {
    const n = g.doorNames?.[d];
    if (n !== undefined) out[d] = n;
  }
  return out;
}

/**
 * The display names the site's grants carry (keys.grant_json): person id and
 * door id to name, the most recently updated grant winning. For the staff
 * views only; an id without a name is absent.
 */
export function siteNames(db: ReadableDb): { persons: Map<string, string>; doors: Map<string, string> } {
  const rows = prepared(
    db,
    `SELECT person_id, json_extract(grant_json, '$.personName') AS person_name,
            json_extract(grant_json, '$.doorNames') AS door_names, json_extract(grant_json, '$.doors') AS doors
       FROM keys WHERE json_extract(grant_json, '$.personName') IS NOT NULL OR json_extract(grant_json, '$.doorNames') IS NOT NULL
      ORDER BY updated_at, key_id`,
  ).all();
  const persons = new Map<string, string>();
  const doors = new Map<string, string>();
  for (const r of parseRows('keys', NamesRow, rows)) {
    if (r.person_name !== null) persons.set(r.person_id, r.person_name);
    if (r.door_names === null) continue;
    const names = r.door_names;
    for (const d of r.doors) {
      const n = names[d];
      if (n !== undefined) doors.set(d, n);
    }
  }
  return { persons, doors };
}

const NamesRow = z.object({
  person_id: z.string(),
  person_name: z.string().nullable(),
  door_names: jsonColumn(z.record(z.string(), z.string())).nullable(),
  doors: jsonColumn(z.array(z.string())),
});

/** Keys by key id, keyset-paginated; `q` matches a key id, person id or door id containing it (without case). */
export function listKeysOnSite(db: ReadableDb, f: KeyFilter, now: number): Page<StaffKey> {
  const like = f.q === undefined ? null : `%${f.q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  const rows = parseRows(
    'keys',
    Row,
    prepared(
      db,
      `SELECT k.key_id, k.version, k.status, k.updated_at, k.grant_json FROM keys k
        WHERE (@status IS NULL OR k.status = @status)
          AND (@q IS NULL OR k.key_id LIKE @q ESCAPE '\\' OR k.person_id LIKE @q ESCAPE '\\'
               OR json_extract(k.grant_json, '$.personName') LIKE @q ESCAPE '\\'
               OR EXISTS (SELECT 1 FROM json_each(k.grant_json, '$.doors') d WHERE d.value LIKE @q ESCAPE '\\'))
          AND (@after IS NULL OR k.key_id > @after)
        ORDER BY k.key_id LIMIT @n`,
    ).all({ status: f.status ?? null, q: like, after: f.cursor?.[0] ?? null, n: f.limit + 1 }),
  );
  const items = rows.map((r): StaffKey => {
    const g = r.grant_json;
    return {
      keyId: r.key_id,
      version: r.version,
      status: r.status,
      validity: now < g.validFrom ? 'not_yet_valid' : now >= g.validUntil ? 'expired' : 'valid',
      personId: g.personId,
      personName: g.personName ?? null,
      credentialType: g.credential.type,
      doors: g.doors,
      doorNames: namesOfDoors(g),
      validFrom: g.validFrom,
      validUntil: g.validUntil,
      schedule: g.schedule,
      offlineCapable: g.offlineCapable,
      updatedAt: r.updated_at,
    };
  });
  return pageOf(items, f.limit, (k) => [k.keyId]);
}
