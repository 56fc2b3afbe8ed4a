import { KeySet, importSigningKey, type Jwks, type SigningKey, type Logger } from '@tobira/shared';
import { parseSigningJwks, requireSigningJwk } from '../config.js';

/** The cloud's signing identity: the key that signs every downlink message and the JWKS gateways trust. */
export interface CloudSigner {
  readonly issuer: string;
  readonly key: SigningKey;
  readonly jwks: Jwks;
}

/**
 * Loads CLOUD_SIGNING_JWK (one private JWK or an array; the first signs, all
 * are published so keys can rotate). There is no generated fallback: a key
 * made up at start differs per process and per restart, so with two
 * replicas, or after a restart, the gateways would refuse every downlink
 * (UNKNOWN_KID) and fail closed. Throws ConfigError SIGNING_KEY_REQUIRED or
 * SIGNING_KEY_INVALID. Every message it signs names the signing key's `kid`
 * in its protected header (shared signMessage), so a gateway knows which of
 * the published keys to check it with.
 */
export async function loadSigner(issuer: string, jwkJson: string | undefined, log: Logger): Promise<CloudSigner> {
  const privates = parseSigningJwks(requireSigningJwk({ signingJwk: jwkJson }));
  const key = await importSigningKey(privates[0]);
  const publics = privates.map(({ d: _d, ...pub }) => pub);
  const jwks = (await KeySet.fromJwks({ keys: publics })).toJwks();
  log.info({ kid: key.kid, published: publics.map((k) => k.kid) }, 'cloud signing key loaded');
  return { issuer, key, jwks };
}
