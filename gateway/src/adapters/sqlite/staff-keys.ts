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
  readonly credentialType: string;
  readonly doors: readonly string[];
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
      credentialType: g.credential.type,
      doors: g.doors,
      validFrom: g.validFrom,
      validUntil: g.validUntil,
      schedule: g.schedule,
      offlineCapable: g.offlineCapable,
      updatedAt: r.updated_at,
    };
  });
  return pageOf(items, f.limit, (k) => [k.keyId]);
}
