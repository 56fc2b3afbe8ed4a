import { applied, noop, refused, type Outcome, type PublicSigningJwk } from '@tobira/shared';

/**
 * The cloud keys a gateway trusts (docs/gateway.md "Trusted cloud
 * keys"): seeded from its config, changed only by a signed, sequenced
 * keyset.update. Rules: a retired kid is never trusted again; an update may
 * not retire the key it is signed with, nor leave no trusted key.
 */
export interface TrustedKey {
  readonly kid: string;
  /** null for a kid retired before it was ever added here. */
  readonly jwk: PublicSigningJwk | null;
  readonly status: 'trusted' | 'retired';
  readonly source: 'config' | 'cloud';
  readonly notBefore: number | null;
  readonly addedAt: number;
  readonly retiredAt: number | null;
}

export interface KeySetUpdateBody {
  readonly add: readonly { readonly jwk: PublicSigningJwk; readonly notBefore: number }[];
  readonly retire: readonly { readonly kid: string; readonly at: number }[];
}

/**
 * Invariant: after it, no retired kid is trusted, at least one kid is
 * trusted, and the key that signed the update is still trusted. Returns the
 * rows that change (applied), or nothing to do (noop KEYSET_UNCHANGED).
 */
export function applyKeySetUpdate(
  keys: readonly TrustedKey[],
  update: KeySetUpdateBody,
  signedBy: string | null,
  now: number,
): Outcome<readonly TrustedKey[]> {
  const byKid = new Map(keys.map((k) => [k.kid, k]));
  const changes = new Map<string, TrustedKey>();
  for (const { jwk, notBefore } of update.add) {
    const have = byKid.get(jwk.kid);
    if (have?.status === 'retired') return refused('KEYSET_KID_RETIRED', `kid ${jwk.kid}`);
    if (have !== undefined && have.jwk !== null && have.jwk.x !== jwk.x)
      return refused('INVALID_PUBLIC_KEY', `kid ${jwk.kid} names another key`);
    if (have === undefined)
      changes.set(jwk.kid, {
        kid: jwk.kid,
        jwk: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, kid: jwk.kid },
        status: 'trusted',
        source: 'cloud',
        notBefore,
        addedAt: now,
        retiredAt: null,
      });
  }
  for (const { kid } of update.retire) {
    if (kid === signedBy) return refused('KEYSET_SELF_RETIRE', `kid ${kid}`);
    const have = changes.get(kid) ?? byKid.get(kid);
    if (have?.status === 'retired') continue;
    changes.set(
      kid,
      have === undefined
        ? { kid, jwk: null, status: 'retired', source: 'cloud', notBefore: null, addedAt: now, retiredAt: now }
        : { ...have, status: 'retired', retiredAt: now },
    );
  }
  const after = new Map(byKid);
  for (const [kid, k] of changes) after.set(kid, k);
  if (![...after.values()].some((k) => k.status === 'trusted')) return refused('KEYSET_WOULD_BE_EMPTY');
  if (changes.size === 0) return noop('KEYSET_UNCHANGED', []);
  return applied('KEYSET_UPDATED', [...changes.values()]);
}
