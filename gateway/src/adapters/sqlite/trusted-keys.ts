import { PublicSigningJwk, parseRows } from '@tobira/shared';
import type { JWK } from 'jose';
import { z } from 'zod';
import type { TrustedKey } from '../../domain/trusted-keys.js';
import { prepared, type ReadableDb, type WritableDb } from './db.js';
import { memTrustedKeys } from './memory.js';

/** The `trusted_keys` table (migration 0009): the cloud keys this gateway trusts, and the retired ones it never will again. */
const Row = z.object({
  kid: z.string(),
  jwk: z.string(),
  status: z.enum(['trusted', 'retired']),
  source: z.enum(['config', 'cloud']),
  not_before: z.int().nullable(),
  added_at: z.int(),
  retired_at: z.int().nullable(),
});

export function loadTrustedKeys(db: ReadableDb): TrustedKey[] {
  return parseRows('trusted_keys', Row, prepared(db, 'SELECT * FROM trusted_keys ORDER BY added_at, kid').all()).map((r) => {
    const jwk = r.jwk === 'null' ? null : PublicSigningJwk.parse(JSON.parse(r.jwk));
    return { kid: r.kid, jwk, status: r.status, source: r.source, notBefore: r.not_before, addedAt: r.added_at, retiredAt: r.retired_at };
  });
}

/**
 * Seeds the table from the config's `cloud.jwks` at start: a kid the table
 * already has (trusted, or retired by the cloud) is left as it is, so a
 * config that still lists a retired key never brings it back.
 */
export function seedTrustedKeys(db: WritableDb, keys: readonly JWK[], now: number): number {
  let n = 0;
  db.transaction(() => {
    for (const k of keys) {
      const jwk = PublicSigningJwk.parse({ kty: k.kty, crv: k.crv, x: k.x, kid: k.kid });
      n += prepared(
        db,
        `INSERT INTO trusted_keys (kid, jwk, status, source, added_at) VALUES (?, ?, 'trusted', 'config', ?) ON CONFLICT (kid) DO NOTHING`,
      ).run(jwk.kid, JSON.stringify(jwk), now).changes;
    }
    memTrustedKeys(db);
  }).immediate();
  return n;
}

/** Writes changed rows (inside the inbox writer's transaction). */
export function saveTrustedKeys(db: WritableDb, rows: readonly TrustedKey[]): void {
  for (const k of rows) {
    prepared(
      db,
      `INSERT INTO trusted_keys (kid, jwk, status, source, not_before, added_at, retired_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (kid) DO UPDATE SET status = excluded.status, retired_at = excluded.retired_at`,
    ).run(k.kid, JSON.stringify(k.jwk), k.status, k.source, k.notBefore, k.addedAt, k.retiredAt);
  }
  if (rows.length > 0) memTrustedKeys(db);
}
