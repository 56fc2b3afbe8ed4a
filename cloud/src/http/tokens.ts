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

export const hashToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

const TOKEN = /^tbr_[A-Za-z0-9_-]{43}$/;

export const CreateTokenInput = z.strictObject({
  name: z.string().min(1).max(200),
  role: Role,
  /** Omitted or null: every site (admins only). */
  sites: z.array(z.string().min(1).max(128)).max(1000).nullable().optional(),
});

/**
 * Creates an API token and returns the clear token once; only its SHA-256 is
 * stored. There is no default token: the first admin token comes from this
 * function (the admin CLI's `tokens create`, or `TOBIRA_BOOTSTRAP_ADMIN_TOKEN`).
 */
export async function createApiToken(
  db: Queryable,
  input: z.input<typeof CreateTokenInput>,
  now: number = Date.now(),
): Promise<{ id: string; token: string; role: Role; sites: string[] | null; name: string }> {
  const i = CreateTokenInput.parse(input);
  const sites = i.sites ?? null;
  if (sites === null && i.role !== 'admin') throw new Error('only admin tokens may cover every site; give sites');
  const token = `tbr_${randomBytes(32).toString('base64url')}`;
  const id = newId();
  await db.query('INSERT INTO api_tokens (id, name, role, sites, token_hash, created_at) VALUES ($1,$2,$3,$4,$5,$6)', [
    id,
    i.name,
    i.role,
    sites,
    hashToken(token),
    now,
  ]);
  return { id, token, role: i.role, sites, name: i.name };
}

/**
 * Installs a clear token chosen by the operator (bootstrap from the
 * environment); idempotent by its hash. The token must look like one we make.
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

/** The principal of a clear token, or null when unknown, malformed or revoked. */
export async function authenticate(db: Queryable, token: string): Promise<Principal | null> {
  if (!TOKEN.test(token)) return null;
  const r = await db.query<{ id: string; name: string; role: string; sites: string[] | null }>(
    'SELECT id, name, role, sites FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL',
    [hashToken(token)],
  );
  const row = r.rows[0];
  if (!row) return null;
  const role = Role.safeParse(row.role);
  if (!role.success) return null;
  return { tokenId: row.id, name: row.name, role: role.data, sites: row.sites };
}
