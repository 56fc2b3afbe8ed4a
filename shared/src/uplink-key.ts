import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type JsonWebKey } from 'node:crypto';
import type { PublicSigningJwk } from './messages.js';

/**
 * Proof of possession of a new gateway uplink key: an
 * Ed25519 signature, made with the new private key, over a domain-separated
 * text naming the gateway, the rotation and the new kid. It can never be
 * mistaken for a signed message (no JWS) and is bound to one rotation of one
 * gateway, so a proof seen once is worth nothing anywhere else.
 * Synchronous (node:crypto), so the gateway makes it inside its inbox transaction.
 */
export function uplinkKeyProofInput(gatewayId: string, rotationId: string, kid: string): Buffer {
  return Buffer.from(`tobira-uplink-key-proof/v1\n${gatewayId}\n${rotationId}\n${kid}`, 'utf8');
}

/** A new Ed25519 pair as JWKs; the kid is a random id (the thumbprint needs an await; the kid only has to be new). */
export function generateUplinkKeyPairSync(kid: string): { publicJwk: PublicSigningJwk; privateJwk: JsonWebKey & { kid: string } } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const pub = publicKey.export({ format: 'jwk' });
  const priv = privateKey.export({ format: 'jwk' });
  if (typeof pub.x !== 'string' || typeof priv.d !== 'string') throw new Error('Ed25519 JWK export failed');
  return {
    publicJwk: { kty: 'OKP', crv: 'Ed25519', x: pub.x, kid, alg: 'EdDSA', use: 'sig' },
    privateJwk: { kty: 'OKP', crv: 'Ed25519', x: pub.x, d: priv.d, kid, alg: 'EdDSA', use: 'sig' },
  };
}

/** The proof, base64url (86 characters). */
export function signUplinkKeyProof(privateJwk: JsonWebKey, gatewayId: string, rotationId: string, kid: string): string {
  const key = createPrivateKey({ key: privateJwk, format: 'jwk' });
  return sign(null, uplinkKeyProofInput(gatewayId, rotationId, kid), key).toString('base64url');
}

/** True only when `proof` is the new key's signature over this gateway, rotation and kid. Never throws on bad input. */
export function verifyUplinkKeyProof(publicJwk: PublicSigningJwk, proof: string, gatewayId: string, rotationId: string): boolean {
  try {
    const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: publicJwk.x }, format: 'jwk' });
    const sig = Buffer.from(proof, 'base64url');
    if (sig.length !== 64 || sig.toString('base64url') !== proof) return false;
    return verify(null, uplinkKeyProofInput(gatewayId, rotationId, publicJwk.kid), key, sig);
  } catch {
    return false;
  }
}
