import { parseRow, parseRows, type PublicSigningJwk } from '@tobira/shared';
import { z } from 'zod';
import type { EntryKey } from '../../domain/keys.js';
import type { SigningKeyStatus } from '../../domain/signing-keys.js';
import { SIGNING_KEY_STATUSES } from '../../domain/signing-keys.js';
import type { Queryable } from './db.js';
import { keyFromRow } from './keys.js';

/**
 * The `signing_keys` and `signing_key_deliveries` tables (migration 0023):
 * each cloud signing key's public JWK and place in its life, and the
 * keyset.update queued to each gateway for each step with the gateway's ack.
 * Every verb joins the caller's transaction.
 */
export interface SigningKeyRow {
  readonly kid: string;
  readonly publicJwk: PublicSigningJwk;
  readonly status: SigningKeyStatus;
  readonly notBefore: number | null;
  readonly retireAfter: number | null;
  readonly resignedAt: number | null;
  readonly createdAt: number;
  readonly updatedAt: number;
}
export type PublishedKey = Pick<SigningKeyRow, 'kid' | 'publicJwk' | 'notBefore' | 'retireAfter'>;

const Int = z.coerce.number().int();
const Row = z.object({
  kid: z.string(),
  public_jwk: z.object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: z.string(), kid: z.string() }).loose(),
  status: z.enum(SIGNING_KEY_STATUSES),
  not_before: Int.nullable(),
  retire_after: Int.nullable(),
  resigned_at: Int.nullable(),
  created_at: Int,
  updated_at: Int,
});
const toKey = (r: z.infer<typeof Row>): SigningKeyRow => ({
  kid: r.kid,
  publicJwk: { kty: 'OKP', crv: 'Ed25519', x: r.public_jwk.x, kid: r.public_jwk.kid },
  status: r.status,
  notBefore: r.not_before,
  retireAfter: r.retire_after,
  resignedAt: r.resigned_at,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/**
 * Registers the keys this process loaded from CLOUD_SIGNING_JWK. On an empty
 * table (the first start after migration 0023) the first signs and the
 * others are published, as before rotation existed (gateways were given all
 * of them at provisioning); later, a key the table does not know is staged:
 * no gateway trusts it yet, so nothing is signed with it until it is
 * published and switched to. Keys already in the table are left as they are.
 */
export async function registerLoadedKeys(q: Queryable, publics: readonly PublishedKey['publicJwk'][], now: number): Promise<void> {
  const n = await q.query<{ n: string }>('SELECT count(*) AS n FROM signing_keys');
  const empty = Number(n.rows[0]?.n ?? 0) === 0;
  for (const [i, jwk] of publics.entries()) {
    const status: SigningKeyStatus = empty ? (i === 0 ? 'signing' : 'published') : 'staged';
    const pub = { kty: jwk.kty, crv: jwk.crv, x: jwk.x, kid: jwk.kid };
    // DO NOTHING on any conflict: a replica starting at the same moment registered it (or its signer) first
    await q.query(
      `INSERT INTO signing_keys (kid, public_jwk, status, not_before, created_at, updated_at)
       VALUES ($1, $2::jsonb, $3, $4, $5, $5) ON CONFLICT DO NOTHING`,
      [jwk.kid, JSON.stringify(pub), status, status === 'staged' ? null : now, now],
    );
  }
}

/** The signing kid and the published set (what the JWKS shows and gateways trust), the signer first. */
export async function currentSigningKeys(q: Queryable): Promise<{ signingKid: string | null; published: PublishedKey[] }> {
  const r = await q.query(
    `SELECT * FROM signing_keys WHERE status IN ('signing', 'published', 'previous')
      ORDER BY (status = 'signing') DESC, not_before NULLS LAST, kid`,
  );
  const rows = parseRows('signing_keys', Row, r.rows).map(toKey);
  return { signingKid: rows.find((k) => k.status === 'signing')?.kid ?? null, published: rows };
}

export async function listSigningKeys(q: Queryable): Promise<SigningKeyRow[]> {
  const r = await q.query('SELECT * FROM signing_keys ORDER BY created_at, kid');
  return parseRows('signing_keys', Row, r.rows).map(toKey);
}

/** One key, locked for the caller's transaction (the verbs' compare-and-set is the status they read under this lock). */
export async function lockSigningKey(q: Queryable, kid: string): Promise<SigningKeyRow | null> {
  const r = await q.query('SELECT * FROM signing_keys WHERE kid = $1 FOR UPDATE', [kid]);
  return r.rows[0] === undefined ? null : toKey(parseRow('signing_keys', Row, r.rows[0]));
}

/** Every key row, locked (switch and re-sign change more than one). */
export async function lockAllSigningKeys(q: Queryable): Promise<SigningKeyRow[]> {
  const r = await q.query('SELECT * FROM signing_keys ORDER BY kid FOR UPDATE');
  return parseRows('signing_keys', Row, r.rows).map(toKey);
}

/** Writes a key's new status and times; 1 row, or 0 when the status it was read in changed (CAS on status). */
export async function saveSigningKey(q: Queryable, k: SigningKeyRow, expectedStatus: SigningKeyStatus): Promise<number> {
  const r = await q.query(
    `UPDATE signing_keys SET status = $2, not_before = $3, retire_after = $4, resigned_at = $5, updated_at = $6
      WHERE kid = $1 AND status = $7`,
    [k.kid, k.status, k.notBefore, k.retireAfter, k.resignedAt, k.updatedAt, expectedStatus],
  );
  return r.rowCount ?? 0;
}

const APPLIED = `(result = 'applied' OR code = 'KEYSET_UNCHANGED')`;

export async function allGatewayIds(q: Queryable): Promise<string[]> {
  const r = await q.query<{ id: string }>('SELECT id FROM gateways ORDER BY id');
  return r.rows.map((x) => x.id);
}

/**
 * Gateways that have not applied this key's step: every gateway without an
 * ack `applied`, or noop `KEYSET_UNCHANGED` (it had it already). Any other
 * noop does not count: DUPLICATE_MESSAGE is an update skipped because a
 * snapshot covered its seq; the ack of that snapshot as a whole marks it
 * `applied` (SNAPSHOT_COVERED) once the gateway applied the trusted keys the
 * snapshot carried (adapters/db/snapshots.ts settleSnapshotAck).
 */
export async function gatewaysNotAcked(q: Queryable, kid: string, step: 'publish' | 'retire'): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT g.id FROM gateways g
      WHERE NOT EXISTS (SELECT 1 FROM signing_key_deliveries d
                         WHERE d.kid = $1 AND d.step = $2 AND d.gateway_id = g.id AND ${APPLIED})
      ORDER BY g.id`,
    [kid, step],
  );
  return r.rows.map((x) => x.id);
}

/** Records the keyset.update queued for a gateway's step (a re-sent one replaces the last, its ack cleared). */
export async function recordDelivery(
  q: Queryable,
  d: { kid: string; step: 'publish' | 'retire'; gatewayId: string; jti: string; seq: number },
  now: number,
): Promise<void> {
  await q.query(
    `INSERT INTO signing_key_deliveries (kid, step, gateway_id, jti, seq, queued_at) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (kid, step, gateway_id) DO UPDATE
       SET jti = excluded.jti, seq = excluded.seq, queued_at = excluded.queued_at, acked_at = NULL, result = NULL, code = NULL`,
    [d.kid, d.step, d.gatewayId, d.jti, d.seq, now],
  );
}

/** A gateway's ack of a keyset.update (by the message's jti); the first ack counts. Returns the rows it settled (0: not a keyset.update). */
export async function recordDeliveryAck(
  q: Queryable,
  a: { gatewayId: string; jti: string; result: string; code: string },
  now: number,
): Promise<number> {
  const r = await q.query(
    `UPDATE signing_key_deliveries SET acked_at = $3, result = $4, code = $5
      WHERE jti = $1 AND gateway_id = $2 AND acked_at IS NULL`,
    [a.jti, a.gatewayId, now, a.result, a.code],
  );
  return r.rowCount ?? 0;
}

export interface DeliveryCount {
  readonly kid: string;
  readonly step: 'publish' | 'retire';
  readonly queued: number;
  readonly applied: number;
  readonly refused: number;
}
const CountRow = z.object({
  kid: z.string(),
  step: z.enum(['publish', 'retire']),
  queued: Int,
  applied: Int,
  refused: Int,
});
export async function deliveryCounts(q: Queryable): Promise<DeliveryCount[]> {
  const r = await q.query(
    `SELECT kid, step, count(*) AS queued, count(*) FILTER (WHERE ${APPLIED}) AS applied,
            count(*) FILTER (WHERE result = 'refused') AS refused
       FROM signing_key_deliveries GROUP BY kid, step ORDER BY kid, step`,
  );
  return parseRows('signing_key_deliveries', CountRow, r.rows);
}

/** Every live key (issuing or active): what the re-sign step sends again under the current signer. */
export async function liveKeys(q: Queryable): Promise<EntryKey[]> {
  const r = await q.query(`SELECT * FROM keys WHERE status IN ('issuing', 'active') ORDER BY gateway_id, id`);
  return r.rows.map(keyFromRow);
}
