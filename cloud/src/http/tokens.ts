import { createHash, randomBytes } from 'node:crypto';
import { newId } from '@tobira/shared';
import { z } from 'zod';
import type { Queryable } from '../adapters/db/db.js';

export const ROLES = ['admin', 'manager', 'auditor'] as const;
export const Role = z.enum(ROLES);
export type Role = z.infer<typeof Role>;

/** Who is calling: the token's role and the sites it may see (null = every site, admins only). */
export interface Principal {
  readonly tokenId: string;
  readonly name: string;
  readonly role: Role;
  readonly sites: readonly string[] | null;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Any role may call this write route on its own token (auditors too); the
     * handler enforces "self or admin". Token rotation only.
     */
    selfService?: boolean;
  }
}

const DAY_MS = 86_400_000;
/** A response to a token that expires within this carries `Tobira-Token-Expires-At`. */
export const EXPIRY_WARNING_MS = 7 * DAY_MS;
export const TOKEN_EXPIRES_HEADER = 'tobira-token-expires-at';
/** `last_used_at` is written at most this often per token, so use is not a write per request. */
export const LAST_USED_RESOLUTION_MS = 60_000;
/** How long the old token keeps working after a rotation when the request names no grace. */
export const DEFAULT_ROTATION_GRACE_SECONDS = 3600;

export const hashToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

const TOKEN = /^tbr_[A-Za-z0-9_-]{43}$/;

/** A token's lifetime in whole days from its creation (no way to ask for "never" here: see tokenDefaultTtlMs). */
export const TokenLifetimeDays = z.int().min(1).max(3650);

export const CreateTokenInput = z.strictObject({
  name: z.string().min(1).max(200),
  role: Role,
  /** Omitted or null: every site (admins only). */
  sites: z.array(z.string().min(1).max(128)).max(1000).nullable().optional(),
  /** Omitted: the configured default lifetime (tokenDefaultTtlMs). */
  expiresInDays: TokenLifetimeDays.optional().describe('lifetime in days (1-3650); omitted: the server default (90 days unless configured)'),
});

export const RotateTokenInput = z.strictObject({
  graceSeconds: z
    .int()
    .min(0)
    .max(7 * 86_400)
    .optional()
    .describe(`how long the old token keeps working (default ${DEFAULT_ROTATION_GRACE_SECONDS}); 0 revokes it now; never extends an earlier expiry`),
  expiresInDays: TokenLifetimeDays.optional().describe('lifetime of the new token in days; omitted: the server default'),
});

/** Where the lifetime of a new token comes from when the input names none. */
export interface TokenLifetimeOptions {
  /** ms; null or omitted: no expiry. The API passes `config.tokenDefaultTtlMs`. */
  readonly defaultTtlMs?: number | null;
}

const expiryOf = (now: number, expiresInDays: number | undefined, o: TokenLifetimeOptions): number | null =>
  expiresInDays !== undefined ? now + expiresInDays * DAY_MS : o.defaultTtlMs == null ? null : now + o.defaultTtlMs;

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
  if (sites === null && i.role !== 'admin') throw new Error('only admin tokens may cover every site; give sites');
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
export async function installApiToken(db: Queryable, token: string, input: { name: string; role: Role; sites?: string[] | null }, now: number): Promise<string> {
  if (!TOKEN.test(token)) throw new Error('a bootstrap token must be tbr_ followed by 43 base64url characters (32 random bytes)');
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

export type Authentication =
  | { readonly kind: 'ok'; readonly principal: Principal; readonly expiresAt: number | null }
  | { readonly kind: 'expired'; readonly tokenId: string; readonly expiresAt: number }
  | { readonly kind: 'unknown' };

/**
 * Who a clear token is at `now`: `unknown` when malformed, unknown or revoked
 * (revoked wins over expired), `expired` from its `expires_at` on. A live
 * token's `last_used_at` is written when it is a minute or more old, so a
 * busy token costs one write a minute, not one per request; a refused token
 * writes nothing.
 */
export async function authenticate(db: Queryable, token: string, now: number): Promise<Authentication> {
  if (!TOKEN.test(token)) return { kind: 'unknown' };
  const r = await db.query<{ id: string; name: string; role: string; sites: string[] | null; expires_at: number | null; revoked_at: number | null; last_used_at: number | null }>(
    'SELECT id, name, role, sites, expires_at, revoked_at, last_used_at FROM api_tokens WHERE token_hash = $1',
    [hashToken(token)],
  );
  const row = r.rows[0];
  if (!row || row.revoked_at !== null) return { kind: 'unknown' };
  const role = Role.safeParse(row.role);
  if (!role.success) return { kind: 'unknown' };
  if (row.expires_at !== null && row.expires_at <= now) return { kind: 'expired', tokenId: row.id, expiresAt: row.expires_at };
  if (row.last_used_at === null || now - row.last_used_at >= LAST_USED_RESOLUTION_MS) {
    // the guard keeps it monotonic when replicas (or a clock step back) race
    await db.query('UPDATE api_tokens SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)', [row.id, now]);
  }
  return { kind: 'ok', principal: { tokenId: row.id, name: row.name, role: role.data, sites: row.sites }, expiresAt: row.expires_at };
}

/** The `Tobira-Token-Expires-At` value (ISO 8601) when the token expires within EXPIRY_WARNING_MS, else undefined. */
export const expiryWarning = (expiresAt: number | null, now: number): string | undefined =>
  expiresAt !== null && expiresAt - now <= EXPIRY_WARNING_MS ? new Date(expiresAt).toISOString() : undefined;

export const TokenState = z.enum(['active', 'expiring', 'expired', 'revoked']);
export type TokenState = z.infer<typeof TokenState>;
/** revoked > expired > expiring (within EXPIRY_WARNING_MS) > active. */
export function tokenState(t: { readonly revokedAt: number | null; readonly expiresAt: number | null }, now: number): TokenState {
  if (t.revokedAt !== null) return 'revoked';
  if (t.expiresAt === null) return 'active';
  if (t.expiresAt <= now) return 'expired';
  return t.expiresAt - now <= EXPIRY_WARNING_MS ? 'expiring' : 'active';
}

export type RotateOutcome =
  | {
      readonly status: 'applied';
      readonly code: 'MESSAGE_APPLIED';
      readonly token: NewToken;
      /** The old token after the rotation: working until expiresAt, or revoked now (grace 0). */
      readonly previous: { readonly id: string; readonly expiresAt: number | null; readonly revokedAt: number | null };
    }
  | { readonly status: 'refused'; readonly code: 'TOKEN_NOT_FOUND' | 'TOKEN_REVOKED' | 'TOKEN_EXPIRED' | 'TOKEN_ALREADY_ROTATED'; readonly detail?: string };

/**
 * Rotates token `id`: a new token with the same name, role and sites, and the
 * old one kept until `now + graceSeconds` (0: revoked now; an earlier expiry
 * is never extended). One statement updates the old row by compare-and-set
 * (live, not yet rotated, or its successor was revoked) and inserts the new
 * one, so it is atomic on any connection and a concurrent second rotation
 * changes 0 rows and is refused TOKEN_ALREADY_ROTATED.
 */
export async function rotateApiToken(
  db: Queryable,
  id: string,
  input: z.input<typeof RotateTokenInput>,
  now: number,
  opts: TokenLifetimeOptions = {},
): Promise<RotateOutcome> {
  const i = RotateTokenInput.parse(input);
  const graceMs = (i.graceSeconds ?? DEFAULT_ROTATION_GRACE_SECONDS) * 1000;
  for (let attempt = 0; attempt < 3; attempt++) {
    const token = newClearToken();
    const newTokenId = newId();
    const expiresAt = expiryOf(now, i.expiresInDays, opts);
    const r = await db.query<{ name: string; role: string; sites: string[] | null; old_expires_at: number | null; old_revoked_at: number | null }>(
      `WITH old AS (
         UPDATE api_tokens t SET
           rotated_to = $2,
           revoked_at = CASE WHEN $4::boolean THEN $3::bigint ELSE NULL END,
           expires_at = CASE WHEN $4::boolean THEN t.expires_at ELSE LEAST(t.expires_at, $5::bigint) END
         WHERE t.id = $1 AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > $3::bigint)
           AND (t.rotated_to IS NULL OR EXISTS (SELECT 1 FROM api_tokens s WHERE s.id = t.rotated_to AND s.revoked_at IS NOT NULL))
         RETURNING t.name, t.role, t.sites, t.expires_at, t.revoked_at
       ), ins AS (
         INSERT INTO api_tokens (id, name, role, sites, token_hash, created_at, expires_at)
         SELECT $2, name, role, sites, $6, $3::bigint, $7::bigint FROM old
         RETURNING id
       )
       SELECT old.name, old.role, old.sites, old.expires_at AS old_expires_at, old.revoked_at AS old_revoked_at FROM old, ins`,
      [id, newTokenId, now, graceMs === 0, now + graceMs, hashToken(token), expiresAt],
    );
    const row = r.rows[0];
    if (row) {
      const role = Role.parse(row.role);
      return {
        status: 'applied',
        code: 'MESSAGE_APPLIED',
        token: { id: newTokenId, token, name: row.name, role, sites: row.sites, expiresAt },
        previous: { id, expiresAt: row.old_expires_at, revokedAt: row.old_revoked_at },
      };
    }
    const cur = await db.query<{ revoked_at: number | null; expires_at: number | null; rotated_to: string | null; successor_revoked: boolean | null }>(
      `SELECT t.revoked_at, t.expires_at, t.rotated_to, s.revoked_at IS NOT NULL AS successor_revoked
         FROM api_tokens t LEFT JOIN api_tokens s ON s.id = t.rotated_to WHERE t.id = $1`,
      [id],
    );
    const c = cur.rows[0];
    if (!c) return { status: 'refused', code: 'TOKEN_NOT_FOUND' };
    if (c.revoked_at !== null) return { status: 'refused', code: 'TOKEN_REVOKED' };
    if (c.expires_at !== null && c.expires_at <= now) return { status: 'refused', code: 'TOKEN_EXPIRED', detail: `expired at ${new Date(c.expires_at).toISOString()}` };
    if (c.rotated_to !== null && c.successor_revoked !== true) return { status: 'refused', code: 'TOKEN_ALREADY_ROTATED', detail: `rotated to ${c.rotated_to}` };
    // changed between the two statements (e.g. its successor was just revoked): try again, a bounded number of times
  }
  return { status: 'refused', code: 'TOKEN_ALREADY_ROTATED', detail: 'the token changed during the rotation; retry' };
}
