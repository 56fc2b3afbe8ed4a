import { KeyObject, verify as verifySignature } from 'node:crypto';
import { SignJWT } from 'jose';
import { z } from 'zod';
import type { Clock } from './clock.js';
import { KeyId, PersonId } from './ids.js';
import { JWS_ALG, type KeySet, type SigningKey } from './signing.js';

/**
 * Mobile credential: a short-lived token the cloud signs
 * for a person's phone, bound to one key at one gateway. The phone hands it to
 * the lock (NFC/BLE), the lock relays it in its request as a `mobile_token`
 * credential, and the gateway checks it offline with the cloud's public keys
 * (the trusted key set it verifies downlink with; never fetched on demand).
 *
 * Compact JWS, EdDSA, with its own `typ` so that no signed cloud message can
 * pass for a token or a token for a message. Claims: `iss` the cloud, `aud`
 * the gateway (the site), `sub` the key id, `pid` the person, `jti`, `iat`,
 * `exp` (at most MOBILE_TOKEN_MAX_TTL_SECONDS after `iat`).
 *
 * The signature is checked synchronously (node:crypto over the same key as
 * jose imported), because the gateway decides inside one synchronous SQLite
 * transaction; the time and addressing rules are the gateway's decision
 * (the gateway's decideMobileToken), judged on its trusted time.
 */
export const MOBILE_TOKEN_TYP = 'tobira-mobile+jwt';
export const MOBILE_TOKEN_DEFAULT_TTL_SECONDS = 300;
export const MOBILE_TOKEN_MAX_TTL_SECONDS = 3600;
/** Longest token a lock relays (a compact JWS of these claims is ~400 characters). */
export const MOBILE_TOKEN_MAX_LENGTH = 2048;
export const MOBILE_TOKEN_PATTERN = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

export const MobileTokenClaims = z
  .strictObject({
    iss: z.string().min(1).max(128),
    aud: z.string().min(1).max(128),
    sub: KeyId,
    pid: PersonId,
    jti: z.uuid(),
    iat: z.int().nonnegative(),
    exp: z.int().nonnegative(),
  })
  .refine((c) => c.exp > c.iat && c.exp - c.iat <= MOBILE_TOKEN_MAX_TTL_SECONDS, { message: 'exp within the maximum lifetime after iat' });
export type MobileTokenClaims = z.infer<typeof MobileTokenClaims>;

/** Signs a token for `keyId` of `personId` at `gatewayId`, valid `ttlSeconds` (capped) from now, never past `notAfter` (ms). */
export async function signMobileToken(
  key: SigningKey,
  issuer: string,
  c: { gatewayId: string; keyId: string; personId: string; jti: string; ttlSeconds?: number; notAfter?: number },
  clock: Clock,
): Promise<{ token: string; claims: MobileTokenClaims }> {
  const iat = Math.floor(clock.now() / 1000);
  const ttl = Math.min(c.ttlSeconds ?? MOBILE_TOKEN_DEFAULT_TTL_SECONDS, MOBILE_TOKEN_MAX_TTL_SECONDS);
  const exp = Math.min(iat + ttl, c.notAfter === undefined ? Number.MAX_SAFE_INTEGER : Math.floor(c.notAfter / 1000));
  const claims = MobileTokenClaims.parse({ iss: issuer, aud: c.gatewayId, sub: c.keyId, pid: c.personId, jti: c.jti, iat, exp });
  const token = await new SignJWT({ ...claims })
    .setProtectedHeader({ alg: JWS_ALG, typ: MOBILE_TOKEN_TYP, kid: key.kid })
    .sign(key.privateKey);
  return { token, claims };
}

export type MobileTokenCheck =
  | { readonly ok: true; readonly claims: MobileTokenClaims; readonly kid: string }
  | { readonly ok: false; readonly code: 'MOBILE_TOKEN_INVALID' | 'MOBILE_TOKEN_UNKNOWN_SIGNER'; readonly detail: string };

const Header = z.object({
  alg: z.unknown().optional(),
  typ: z.unknown().optional(),
  kid: z.unknown().optional(),
  crit: z.unknown().optional(),
});
const decode = (segment: string): unknown => JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
const invalid = (detail: string): MobileTokenCheck => ({ ok: false, code: 'MOBILE_TOKEN_INVALID', detail });

/**
 * Checks a token's form, header, signature (by a key of `keys`, by kid) and
 * issuer, synchronously. It does NOT judge time or audience: that is the
 * decision's (on trusted time). Never throws on bad input.
 */
export function verifyMobileTokenSignature(token: string, keys: KeySet, issuer: string): MobileTokenCheck {
  if (token.length > MOBILE_TOKEN_MAX_LENGTH || !MOBILE_TOKEN_PATTERN.test(token)) return invalid('not a compact JWS');
  const [h = '', p = '', s = ''] = token.split('.');
  // one signed token has exactly one encoding (base64url is malleable in its padding bits)
  if (Buffer.from(s, 'base64url').toString('base64url') !== s) return invalid('non-canonical signature encoding');
  let header: unknown;
  let payload: unknown;
  try {
    header = decode(h);
    payload = decode(p);
  } catch {
    return invalid('unreadable header or claims');
  }
  const fields = Header.safeParse(header);
  if (!fields.success) return invalid('header is not an object');
  const { alg, typ, kid, crit } = fields.data;
  if (alg !== JWS_ALG) return invalid(`alg ${String(alg)}`);
  if (typ !== MOBILE_TOKEN_TYP) return invalid(`typ ${String(typ)}`);
  if (crit !== undefined) return invalid('crit header');
  if (typeof kid !== 'string') return { ok: false, code: 'MOBILE_TOKEN_UNKNOWN_SIGNER', detail: 'no kid' };
  const key = keys.get(kid);
  if (key === undefined) return { ok: false, code: 'MOBILE_TOKEN_UNKNOWN_SIGNER', detail: `kid ${kid.slice(0, 80)}` };
  const good = verifySignature(null, Buffer.from(`${h}.${p}`), KeyObject.from(key), Buffer.from(s, 'base64url'));
  if (!good) return invalid('signature does not verify');
  const claims = MobileTokenClaims.safeParse(payload);
  if (!claims.success) return invalid('claims do not match the mobile token schema');
  if (claims.data.iss !== issuer) return invalid('issuer is not the cloud');
  return { ok: true, claims: claims.data, kid };
}
