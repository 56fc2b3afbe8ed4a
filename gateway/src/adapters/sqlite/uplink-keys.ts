import { PublicSigningJwk, parseRow, parseRows } from '@tobira/shared';
import type { JWK } from 'jose';
import { z } from 'zod';
import { prepared, type ReadableDb, type WritableDb } from './db.js';

/**
 * The `uplink_keys` table (migration 0012): this gateway's own uplink signing
 * keys. One `active` key signs; a `proposed` one waits for the cloud's
 * uplink_key.activate; a `retired` one has its private part erased.
 * The private JWK is read only to sign; nothing here logs it.
 */
export type UplinkKeyStatus = 'proposed' | 'active' | 'retired';
export interface UplinkKeyRow {
  readonly kid: string;
  readonly privateJwk: JWK | null;
  readonly publicJwk: PublicSigningJwk;
  readonly status: UplinkKeyStatus;
  readonly rotationId: string | null;
}

const Row = z.object({
  kid: z.string(),
  private_jwk: z.string().nullable(),
  public_jwk: z.string(),
  status: z.enum(['proposed', 'active', 'retired']),
  rotation_id: z.string().nullable(),
});
const toRow = (r: z.infer<typeof Row>): UplinkKeyRow => ({
  kid: r.kid,
  privateJwk: r.private_jwk === null ? null : (z.looseObject({ d: z.string(), kid: z.string() }).parse(JSON.parse(r.private_jwk)) as JWK),
  publicJwk: PublicSigningJwk.parse(JSON.parse(r.public_jwk)),
  status: r.status,
  rotationId: r.rotation_id,
});
const COLUMNS = 'kid, private_jwk, public_jwk, status, rotation_id';

export function loadUplinkKeys(db: ReadableDb): UplinkKeyRow[] {
  return parseRows('uplink_keys', Row, prepared(db, `SELECT ${COLUMNS} FROM uplink_keys ORDER BY added_at, kid`).all()).map(toRow);
}

/** The key that signs now (null only before the first seed). */
export function activeUplinkKey(db: ReadableDb): UplinkKeyRow | null {
  const r = prepared(db, `SELECT ${COLUMNS} FROM uplink_keys WHERE status = 'active'`).get();
  return r === undefined ? null : toRow(parseRow('uplink_keys', Row, r));
}

/** The key made for a rotation, whatever its status, or null. */
export function uplinkKeyOfRotation(db: ReadableDb, rotationId: string): UplinkKeyRow | null {
  const r = prepared(db, `SELECT ${COLUMNS} FROM uplink_keys WHERE rotation_id = ?`).get(rotationId);
  return r === undefined ? null : toRow(parseRow('uplink_keys', Row, r));
}

/**
 * Seeds the first active key from the config's key pair file when the table
 * has no active key (a fresh gateway, or one upgraded to 0012). Once a
 * rotation made another key active, the file is not used again. Returns
 * whether the file's key is the active one.
 */
export function seedUplinkKey(db: WritableDb, pair: { kid: string; privateJwk: JWK; publicJwk: JWK }, now: number): boolean {
  return db
    .transaction(() => {
      const active = activeUplinkKey(db);
      if (active !== null) return active.kid === pair.kid;
      const pub = PublicSigningJwk.parse({ kty: pair.publicJwk.kty, crv: pair.publicJwk.crv, x: pair.publicJwk.x, kid: pair.kid });
      prepared(
        db,
        `INSERT INTO uplink_keys (kid, private_jwk, public_jwk, status, source, added_at, activated_at) VALUES (?, ?, ?, 'active', 'config', ?, ?)`,
      ).run(pair.kid, JSON.stringify({ ...pair.privateJwk, kid: pair.kid }), JSON.stringify(pub), now, now);
      return true;
    })
    .immediate();
}

/** A new key for a rotation (inside the inbox writer's transaction). */
export function insertProposedKey(
  db: WritableDb,
  k: { kid: string; privateJwk: JWK; publicJwk: PublicSigningJwk; rotationId: string },
  now: number,
): void {
  prepared(
    db,
    `INSERT INTO uplink_keys (kid, private_jwk, public_jwk, status, source, rotation_id, added_at) VALUES (?, ?, ?, 'proposed', 'rotation', ?, ?)`,
  ).run(k.kid, JSON.stringify(k.privateJwk), JSON.stringify(k.publicJwk), k.rotationId, now);
}

/** Proposed keys of other rotations (the cloud gave up on them) are retired, their private parts erased. */
export function discardProposedKeys(db: WritableDb, now: number): number {
  return prepared(db, `UPDATE uplink_keys SET status = 'retired', private_jwk = NULL, retired_at = ? WHERE status = 'proposed'`).run(now)
    .changes;
}

/** The active key retired (private part erased), then the proposed `kid` active: the switch, in the caller's transaction. */
export function switchUplinkKey(db: WritableDb, kid: string, now: number): void {
  prepared(db, `UPDATE uplink_keys SET status = 'retired', private_jwk = NULL, retired_at = ? WHERE status = 'active'`).run(now);
  const n = prepared(db, `UPDATE uplink_keys SET status = 'active', activated_at = ? WHERE kid = ? AND status = 'proposed'`).run(
    now,
    kid,
  ).changes;
  if (n !== 1) throw new Error(`uplink key ${kid} is not proposed`);
}
