import { createHash } from 'node:crypto';
import { z } from 'zod';

/**
 * API token rules: roles, lifetimes, states and rotation. Pure: time is an
 * argument, and the clear token (random) is made by the adapter.
 */

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

export const DAY_MS = 86_400_000;
/** A response to a token that expires within this carries `Tobira-Token-Expires-At`. */
export const EXPIRY_WARNING_MS = 7 * DAY_MS;
/** `last_used_at` is written at most this often per token, so use is not a write per request. */
export const LAST_USED_RESOLUTION_MS = 60_000;
/** How long the old token keeps working after a rotation when the request names no grace. */
export const DEFAULT_ROTATION_GRACE_SECONDS = 3600;

/** Only the SHA-256 of a token is stored; a token is found by it. */
export const hashToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

const TOKEN = /^tbr_[A-Za-z0-9_-]{43}$/;
/** True when `token` looks like one we make (`tbr_` + 43 base64url chars); anything else is never looked up. */
export const isTokenShaped = (token: string): boolean => TOKEN.test(token);

/** A token's lifetime in whole days from its creation (no way to ask for "never" here: see tokenDefaultTtlMs). */
export const TokenLifetimeDays = z.int().min(1).max(3650);

export const CreateTokenInput = z.strictObject({
  name: z.string().min(1).max(200),
  role: Role,
  /** Omitted or null: every site (admins only). */
  sites: z.array(z.string().min(1).max(128)).max(1000).nullable().optional(),
  /** Omitted: the configured default lifetime (tokenDefaultTtlMs). */
  expiresInDays: TokenLifetimeDays.optional().describe(
    'lifetime in days (1-3650); omitted: the server default (90 days unless configured)',
  ),
});

export const RotateTokenInput = z.strictObject({
  graceSeconds: z
    .int()
    .min(0)
    .max(7 * 86_400)
    .optional()
    .describe(
      `how long the old token keeps working (default ${DEFAULT_ROTATION_GRACE_SECONDS}); 0 revokes it now; never extends an earlier expiry`,
    ),
  expiresInDays: TokenLifetimeDays.optional().describe('lifetime of the new token in days; omitted: the server default'),
});

/** Where the lifetime of a new token comes from when the input names none. */
export interface TokenLifetimeOptions {
  /** ms; null or omitted: no expiry. The API passes `config.tokenDefaultTtlMs`. */
  readonly defaultTtlMs?: number | null;
}

/** A new token's expiry: `expiresInDays` from now, else the default lifetime, else none. */
export const expiryOf = (now: number, expiresInDays: number | undefined, o: TokenLifetimeOptions): number | null =>
  expiresInDays !== undefined ? now + expiresInDays * DAY_MS : o.defaultTtlMs == null ? null : now + o.defaultTtlMs;

/** Only admin tokens may cover every site (`sites` null). */
export const mayCoverEverySite = (role: Role): boolean => role === 'admin';

/** The token expires within EXPIRY_WARNING_MS: its responses carry the warning header. */
export const expiresSoon = (expiresAt: number | null, now: number): expiresAt is number =>
  expiresAt !== null && expiresAt - now <= EXPIRY_WARNING_MS;

export const TokenState = z.enum(['active', 'expiring', 'expired', 'revoked']);
export type TokenState = z.infer<typeof TokenState>;
/** revoked > expired > expiring (within EXPIRY_WARNING_MS) > active. */
export function tokenState(t: { readonly revokedAt: number | null; readonly expiresAt: number | null }, now: number): TokenState {
  if (t.revokedAt !== null) return 'revoked';
  if (t.expiresAt === null) return 'active';
  if (t.expiresAt <= now) return 'expired';
  return t.expiresAt - now <= EXPIRY_WARNING_MS ? 'expiring' : 'active';
}

export type Authentication =
  | { readonly kind: 'ok'; readonly principal: Principal; readonly expiresAt: number | null }
  | { readonly kind: 'expired'; readonly tokenId: string; readonly expiresAt: number }
  | { readonly kind: 'unknown' };

/** A stored token as authentication judges it. */
export interface StoredToken {
  readonly id: string;
  readonly name: string;
  readonly role: string;
  readonly sites: string[] | null;
  readonly expiresAt: number | null;
  readonly revokedAt: number | null;
}

/** Who a stored token is at `now`: revoked (or of no known role) is `unknown` (revoked wins over expired), `expired` from its expiry on. */
export function judgeToken(t: StoredToken | undefined, now: number): Authentication {
  if (!t || t.revokedAt !== null) return { kind: 'unknown' };
  const role = Role.safeParse(t.role);
  if (!role.success) return { kind: 'unknown' };
  if (t.expiresAt !== null && t.expiresAt <= now) return { kind: 'expired', tokenId: t.id, expiresAt: t.expiresAt };
  return { kind: 'ok', principal: { tokenId: t.id, name: t.name, role: role.data, sites: t.sites }, expiresAt: t.expiresAt };
}

/** Its `last_used_at` is due a write: never written, or a minute or more old. */
export const lastUseDue = (lastUsedAt: number | null, now: number): boolean =>
  lastUsedAt === null || now - lastUsedAt >= LAST_USED_RESOLUTION_MS;

export type RotateRefusal = 'TOKEN_NOT_FOUND' | 'TOKEN_REVOKED' | 'TOKEN_EXPIRED' | 'TOKEN_ALREADY_ROTATED';

/**
 * Why a token may not be rotated at `now` (null: it may): it must exist, be
 * neither revoked nor expired, and have no live successor (a successor that
 * was revoked frees it to rotate again).
 */
export function rotationRefusal(
  t:
    | {
        readonly revokedAt: number | null;
        readonly expiresAt: number | null;
        readonly rotatedTo: string | null;
        readonly successorRevoked: boolean;
      }
    | undefined,
  now: number,
): RotateRefusal | null {
  if (!t) return 'TOKEN_NOT_FOUND';
  if (t.revokedAt !== null) return 'TOKEN_REVOKED';
  if (t.expiresAt !== null && t.expiresAt <= now) return 'TOKEN_EXPIRED';
  if (t.rotatedTo !== null && !t.successorRevoked) return 'TOKEN_ALREADY_ROTATED';
  return null;
}
