import { randomBytes } from 'node:crypto';
import { newId, parseRow, parseRows } from '@tobira/shared';
import { z } from 'zod';
import {
  CreateTokenInput,
  DEFAULT_ROTATION_GRACE_SECONDS,
  Role,
  RotateTokenInput,
  expiryOf,
  hashToken,
  isTokenShaped,
  judgeToken,
  lastUseDue,
  mayCoverEverySite,
  rotationRefusal,
  tokenState,
  type Authentication,
  type RotateRefusal,
  type TokenLifetimeOptions,
} from '../../domain/tokens.js';
import type { Queryable } from './db.js';

/** The api_tokens table: the rules are domain/tokens.ts's, this module only stores and loads. */

export interface NewToken {
  readonly id: string;
  /** The clear token: shown once, only its SHA-256 is stored. */
  readonly token: string;
  readonly name: string;
  readonly role: Role;
  readonly sites: string[] | null;
  readonly expiresAt: number | null;
}

const newClearToken = (): string => `tbr_${randomBytes(32).toString('base64url')}`;

/**
 * Creates an API token and returns the clear token once; only its SHA-256 is
 * stored. There is no default token: the first admin token comes from this
 * function (the admin CLI's `tokens bootstrap`, or `TOBIRA_BOOTSTRAP_ADMIN_TOKEN`).
 * Lifetime: `expiresInDays`, else `opts.defaultTtlMs`, else none.
 */
export async function createApiToken(
  db: Queryable,
  input: z.input<typeof CreateTokenInput>,
  now: number = Date.now(),
  opts: TokenLifetimeOptions = {},
): Promise<NewToken> {
  const i = CreateTokenInput.parse(input);
  const sites = i.sites ?? null;
  if (sites === null && !mayCoverEverySite(i.role)) throw new Error('only admin tokens may cover every site; give sites');
  const token = newClearToken();
  const id = newId();
  const expiresAt = expiryOf(now, i.expiresInDays, opts);
  await db.query('INSERT INTO api_tokens (id, name, role, sites, token_hash, created_at, expires_at) VALUES ($1,$2,$3,$4,$5,$6,$7)', [
    id,
    i.name,
    i.role,
    sites,
    hashToken(token),
    now,
    expiresAt,
  ]);
  return { id, token, name: i.name, role: i.role, sites, expiresAt };
}

/**
 * Installs a clear token chosen by the operator (bootstrap from the
 * environment); idempotent by its hash. The token must look like one we make.
 * It never expires (it is configuration, not something the API handed out):
 * operators should rotate it once they have it and drop it from the environment.
 * A rotated or revoked bootstrap token stays so: installing it again is a no-op.
 */
export async function installApiToken(
  db: Queryable,
  token: string,
  input: { name: string; role: Role; sites?: string[] | null },
  now: number,
): Promise<string> {
  if (!isTokenShaped(token)) throw new Error('a bootstrap token must be tbr_ followed by 43 base64url characters (32 random bytes)');
  const id = newId();
  await db.query(
    'INSERT INTO api_tokens (id, name, role, sites, token_hash, created_at) VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (token_hash) DO NOTHING',
    [id, input.name, input.role, input.sites ?? null, hashToken(token), now],
  );
  return id;
}

export async function revokeApiToken(db: Queryable, id: string, now: number): Promise<boolean> {
  return (await db.query('UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL', [id, now])).rowCount === 1;
}

const AuthRow = z.object({
  id: z.string(),
  name: z.string(),
  role: z.string(),
  sites: z.array(z.string()).nullable(),
  expires_at: z.number().nullable(),
  revoked_at: z.number().nullable(),
  last_used_at: z.number().nullable(),
});

/**
 * Who a clear token is at `now` (judgeToken's rules): a malformed token is
 * not looked up. A live token's `last_used_at` is written when it is a minute
 * or more old, so a busy token costs one write a minute, not one per request;
 * a refused token writes nothing.
 */
export async function authenticate(db: Queryable, token: string, now: number): Promise<Authentication> {
  if (!isTokenShaped(token)) return { kind: 'unknown' };
  const r = await db.query('SELECT id, name, role, sites, expires_at, revoked_at, last_used_at FROM api_tokens WHERE token_hash = $1', [
    hashToken(token),
  ]);
  const row = r.rows[0] === undefined ? undefined : parseRow('api_tokens', AuthRow, r.rows[0]);
  const a = judgeToken(
    row && { id: row.id, name: row.name, role: row.role, sites: row.sites, expiresAt: row.expires_at, revokedAt: row.revoked_at },
    now,
  );
  if (a.kind === 'ok' && row && lastUseDue(row.last_used_at, now)) {
    // the guard keeps it monotonic when replicas (or a clock step back) race
    await db.query('UPDATE api_tokens SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)', [row.id, now]);
  }
  return a;
}

export type RotateOutcome =
  | {
      readonly status: 'applied';
      readonly code: 'MESSAGE_APPLIED';
      readonly token: NewToken;
      /** The old token after the rotation: working until expiresAt, or revoked now (grace 0). */
      readonly previous: { readonly id: string; readonly expiresAt: number | null; readonly revokedAt: number | null };
    }
  | { readonly status: 'refused'; readonly code: RotateRefusal; readonly detail?: string };

const RotatedRow = z.object({
  name: z.string(),
  role: Role,
  sites: z.array(z.string()).nullable(),
  old_expires_at: z.number().nullable(),
  old_revoked_at: z.number().nullable(),
  new_expires_at: z.number().nullable(),
});
const RotationStateRow = z.object({
  revoked_at: z.number().nullable(),
  expires_at: z.number().nullable(),
  rotated_to: z.string().nullable(),
  successor_revoked: z.boolean().nullable(),
});

/**
 * Rotates token `id`: a new token with the same name, role and sites, and the
 * old one kept until `now + graceSeconds` (0: revoked now; an earlier expiry
 * is never extended). One statement updates the old row by compare-and-set
 * (live, not yet rotated, or its successor was revoked: rotationRefusal's
 * rules in SQL) and inserts the new one, so it is atomic on any connection
 * and a concurrent second rotation changes 0 rows and is refused
 * TOKEN_ALREADY_ROTATED. Unless `mayExtend` (an admin rotates it), the new
 * token expires no later than the old one would have: a token cannot renew
 * itself past the lifetime its admin gave it, however often it rotates.
 */
export async function rotateApiToken(
  db: Queryable,
  id: string,
  input: z.input<typeof RotateTokenInput>,
  now: number,
  opts: TokenLifetimeOptions & { readonly mayExtend?: boolean } = {},
): Promise<RotateOutcome> {
  const i = RotateTokenInput.parse(input);
  const graceMs = (i.graceSeconds ?? DEFAULT_ROTATION_GRACE_SECONDS) * 1000;
  for (let attempt = 0; attempt < 3; attempt++) {
    const token = newClearToken();
    const newTokenId = newId();
    const expiresAt = expiryOf(now, i.expiresInDays, opts);
    const r = await db.query(
      `WITH before AS (SELECT expires_at FROM api_tokens WHERE id = $1), old AS (
         UPDATE api_tokens t SET
           rotated_to = $2,
           revoked_at = CASE WHEN $4::boolean THEN $3::bigint ELSE NULL END,
           expires_at = CASE WHEN $4::boolean THEN t.expires_at ELSE LEAST(t.expires_at, $5::bigint) END
         WHERE t.id = $1 AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > $3::bigint)
           AND (t.rotated_to IS NULL OR EXISTS (SELECT 1 FROM api_tokens s WHERE s.id = t.rotated_to AND s.revoked_at IS NOT NULL))
         RETURNING t.name, t.role, t.sites, t.expires_at, t.revoked_at
       ), ins AS (
         INSERT INTO api_tokens (id, name, role, sites, token_hash, created_at, expires_at)
         SELECT $2, name, role, sites, $6, $3::bigint,
                -- the old expiry as it was before this statement (a CTE reads the statement's snapshot)
                CASE WHEN $8::boolean OR before.expires_at IS NULL THEN $7::bigint
                     ELSE LEAST(COALESCE($7::bigint, before.expires_at), before.expires_at) END
           FROM old, before
         RETURNING id, expires_at
       )
       SELECT old.name, old.role, old.sites, old.expires_at AS old_expires_at, old.revoked_at AS old_revoked_at,
              ins.expires_at AS new_expires_at FROM old, ins`,
      [id, newTokenId, now, graceMs === 0, now + graceMs, hashToken(token), expiresAt, opts.mayExtend === true],
    );
    if (r.rows[0] !== undefined) {
      const row = parseRow('api_tokens', RotatedRow, r.rows[0]);
      return {
        status: 'applied',
        code: 'MESSAGE_APPLIED',
        token: { id: newTokenId, token, name: row.name, role: row.role, sites: row.sites, expiresAt: row.new_expires_at },
        previous: { id, expiresAt: row.old_expires_at, revokedAt: row.old_revoked_at },
      };
    }
    const cur = await db.query(
      `SELECT t.revoked_at, t.expires_at, t.rotated_to, s.revoked_at IS NOT NULL AS successor_revoked
         FROM api_tokens t LEFT JOIN api_tokens s ON s.id = t.rotated_to WHERE t.id = $1`,
      [id],
    );
    const c = cur.rows[0] === undefined ? undefined : parseRow('api_tokens', RotationStateRow, cur.rows[0]);
    const refusal = rotationRefusal(
      c && { revokedAt: c.revoked_at, expiresAt: c.expires_at, rotatedTo: c.rotated_to, successorRevoked: c.successor_revoked === true },
      now,
    );
    if (refusal === 'TOKEN_EXPIRED' && c?.expires_at != null)
      return { status: 'refused', code: refusal, detail: `expired at ${new Date(c.expires_at).toISOString()}` };
    if (refusal === 'TOKEN_ALREADY_ROTATED' && c?.rotated_to != null)
      return { status: 'refused', code: refusal, detail: `rotated to ${c.rotated_to}` };
    if (refusal) return { status: 'refused', code: refusal };
    // changed between the two statements (e.g. its successor was just revoked): try again, a bounded number of times
  }
  return { status: 'refused', code: 'TOKEN_ALREADY_ROTATED', detail: 'the token changed during the rotation; retry' };
}

const ListedRow = z.object({
  id: z.string(),
  name: z.string(),
  role: Role,
  sites: z.array(z.string()).nullable(),
  created_at: z.number(),
  revoked_at: z.number().nullable(),
  expires_at: z.number().nullable(),
  last_used_at: z.number().nullable(),
  rotated_to: z.string().nullable(),
  rotated_from: z.string().nullable(),
});

/** Tokens as the API shows them (never the token or its hash), with their state at `now`: every token, or one. */
export async function listApiTokens(db: Queryable, now: number, id?: string) {
  const r = await db.query(
    `SELECT t.id, t.name, t.role, t.sites, t.created_at, t.revoked_at, t.expires_at, t.last_used_at, t.rotated_to, p.id AS rotated_from
       FROM api_tokens t LEFT JOIN api_tokens p ON p.rotated_to = t.id WHERE ($1::text IS NULL OR t.id = $1) ORDER BY t.created_at, t.id`,
    [id ?? null],
  );
  return parseRows('api_tokens', ListedRow, r.rows).map((x) => ({
    id: x.id,
    name: x.name,
    role: x.role,
    sites: x.sites,
    createdAt: x.created_at,
    revokedAt: x.revoked_at,
    expiresAt: x.expires_at,
    lastUsedAt: x.last_used_at,
    rotatedTo: x.rotated_to,
    rotatedFrom: x.rotated_from,
    state: tokenState({ revokedAt: x.revoked_at, expiresAt: x.expires_at }, now),
  }));
}
