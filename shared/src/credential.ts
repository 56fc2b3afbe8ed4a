import { createHmac } from 'node:crypto';
import type { CredentialType } from './messages.js';

/**
 * Credentials are never stored or sent in clear. Cloud and gateway both keep a
 * keyed digest: HMAC-SHA256 with the site's credential pepper (a secret the
 * gateway gets at provisioning) over the type and the normalized value. The
 * gateway digests what a lock presents and looks the digest up.
 */
export function normalizeCredential(type: CredentialType, value: string): string {
  return type === 'card' ? value.toUpperCase() : value;
}

export function credentialDigest(pepper: Uint8Array, type: CredentialType, value: string): string {
  return createHmac('sha256', pepper)
    .update(`${type}:${normalizeCredential(type, value)}`)
    .digest('base64url');
}
