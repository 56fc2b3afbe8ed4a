import { KeySet, generateSigningKeyPair, importSigningKey, type Jwks, type SigningKey, type Logger } from '@tobira/shared';

/** The cloud's signing identity: the key that signs every downlink message and the JWKS gateways trust. */
export interface CloudSigner {
  readonly issuer: string;
  readonly key: SigningKey;
  readonly jwks: Jwks;
}

type JwkJson = Parameters<typeof importSigningKey>[0];

/**
 * Loads CLOUD_SIGNING_JWK (one private JWK or an array; the first signs, all
 * are published so keys can rotate). Without it a key is generated: fine for
 * the demo and tests, wrong for several replicas (each would sign differently).
 */
export async function loadSigner(issuer: string, jwkJson: string | undefined, log: Logger): Promise<CloudSigner> {
  let privates: JwkJson[];
  if (jwkJson) {
    const parsed = JSON.parse(jwkJson) as JwkJson | JwkJson[];
    privates = Array.isArray(parsed) ? parsed : [parsed];
  } else {
    log.warn('CLOUD_SIGNING_JWK unset: generated an ephemeral signing key');
    privates = [(await generateSigningKeyPair()).privateJwk];
  }
  const first = privates[0];
  if (!first) throw new Error('CLOUD_SIGNING_JWK holds no key');
  const key = await importSigningKey(first);
  const publics = privates.map(({ d: _d, ...pub }) => pub);
  const jwks = (await KeySet.fromJwks({ keys: publics })).toJwks();
  return { issuer, key, jwks };
}
