import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/**
 * Broker passwords: made by the cloud (32 random bytes, base64url), shown
 * once to the caller, stored only as a salted scrypt hash
 * (`scrypt$N$r$p$salt$hash`, parameters kept with the hash so they can grow).
 */
export const newBrokerPassword = (): string => randomBytes(32).toString('base64url');

const PARAMS = { N: 16384, r: 8, p: 1 } as const;
const KEYLEN = 32;

function derive(password: string, salt: Buffer, o: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password, salt, KEYLEN, { ...o, maxmem: 64 * 1024 * 1024 }, (e, k) => (e ? reject(e) : resolve(k))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, PARAMS);
  return `scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

/** Constant-time check of a password against a stored hash; a malformed hash never matches. */
export async function verifyPassword(password: string, encoded: string): Promise<boolean> {
  const parts = encoded.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number) as [number, number, number];
  if (![N, r, p].every((n) => Number.isInteger(n) && n > 0)) return false;
  const want = Buffer.from(parts[5] as string, 'base64url');
  if (want.length !== KEYLEN) return false;
  const got = await derive(password, Buffer.from(parts[4] as string, 'base64url'), { N, r, p });
  return timingSafeEqual(got, want);
}

/** A hash no password matches, checked for unknown users so that they cost as much time as known ones. */
export const DUMMY_HASH = `scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$${Buffer.alloc(16).toString('base64url')}$${Buffer.alloc(KEYLEN).toString('base64url')}`;
