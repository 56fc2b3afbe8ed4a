import { applied, noop, refused, type Outcome } from '@tobira/shared';

/**
 * A cloud signing key's life (docs/operations.md "Rotating the
 * cloud signing key"). Private parts stay in CLOUD_SIGNING_JWK; this is only
 * where each key is:
 *
 * | from | step | to |
 * |---|---|---|
 * | — | loaded at start (table not empty) | `staged` |
 * | `staged` | publish | `published` (keyset.update add queued for every gateway) |
 * | `published` | switch (every gateway applied the publish) | `signing`; the old signer → `previous` |
 * | `previous` | switch back to it | `signing` |
 * | `previous` | retire (live grants re-sent since it stopped signing) | `retired` (keyset.update retire queued) |
 */
export const SIGNING_KEY_STATUSES = ['staged', 'published', 'signing', 'previous', 'retired'] as const;
export type SigningKeyStatus = (typeof SIGNING_KEY_STATUSES)[number];

/** The literal state table (docs/state-machines.md is checked against it). */
export const SIGNING_KEY_TRANSITIONS = [
  { from: 'staged', step: 'publish', to: 'published', code: 'SIGNING_KEY_PUBLISHED' },
  { from: 'published', step: 'switch', to: 'signing', code: 'SIGNING_KEY_SWITCHED' },
  { from: 'previous', step: 'switch', to: 'signing', code: 'SIGNING_KEY_SWITCHED' },
  { from: 'signing', step: 'switch_away', to: 'previous', code: 'SIGNING_KEY_SWITCHED' },
  { from: 'previous', step: 'retire', to: 'retired', code: 'SIGNING_KEY_RETIRED' },
] as const;

export interface SigningKeyState {
  readonly kid: string;
  readonly status: SigningKeyStatus;
  readonly notBefore: number | null;
  readonly retireAfter: number | null;
  readonly resignedAt: number | null;
  readonly updatedAt: number;
}

/**
 * Invariant: a key is published once; publishing again only re-sends to
 * gateways that have not applied it (`pendingGateways`), never un-retires.
 */
export function publish<K extends SigningKeyState>(k: K | null, pendingGateways: number, now: number): Outcome<K> {
  if (k === null) return refused('SIGNING_KEY_NOT_FOUND');
  if (k.status === 'retired') return refused('SIGNING_KEY_WRONG_STATE', 'a retired key is never published again');
  if (k.status === 'staged') return applied('SIGNING_KEY_PUBLISHED', { ...k, status: 'published', notBefore: now, updatedAt: now });
  // published, signing or previous: catch up the gateways that have not applied it (registered since, or refused it)
  if (pendingGateways > 0) return applied('SIGNING_KEY_PUBLISHED', k);
  return noop('SIGNING_KEY_ALREADY_PUBLISHED', k);
}

/**
 * Invariant: the cloud signs only with a key every gateway has applied (else
 * its downlinks would be refused as UNKNOWN_KID and the site would fail
 * closed), and only with a key this process holds. The old signer becomes
 * `previous`, announced to retire after `retireAfter`.
 */
export function switchTo<K extends SigningKeyState>(
  k: K | null,
  ctx: { readonly loaded: boolean; readonly notAcked: readonly string[]; readonly retireAfter: number },
  now: number,
): Outcome<K> {
  if (k === null) return refused('SIGNING_KEY_NOT_FOUND');
  if (k.status === 'signing') return noop('SIGNING_KEY_ALREADY_SIGNING', k);
  if (k.status === 'staged') return refused('SIGNING_KEY_NOT_PUBLISHED');
  if (k.status === 'retired') return refused('SIGNING_KEY_WRONG_STATE', 'a retired key never signs again');
  if (!ctx.loaded) return refused('SIGNING_KEY_NOT_LOADED');
  if (ctx.notAcked.length > 0)
    return refused(
      'SIGNING_KEY_NOT_DELIVERED',
      `not applied by ${ctx.notAcked.length} gateway(s): ${ctx.notAcked.slice(0, 10).join(', ')}; publish again to re-send`,
    );
  return applied('SIGNING_KEY_SWITCHED', { ...k, status: 'signing', retireAfter: null, updatedAt: now });
}

/** The signer that is switched away from: still trusted, announced to retire after `retireAfter`. */
export function switchAway<K extends SigningKeyState>(k: K, retireAfter: number, now: number): K {
  return { ...k, status: 'previous', retireAfter, resignedAt: null, updatedAt: now };
}

/**
 * Invariant: a key is retired only after it stopped signing and every live
 * grant was queued again under a later signer (`resignedAt`), so the
 * re-sent grants reach each gateway before the retire (same seq order) and no
 * valid key is left resting on a retired signature.
 */
export function retire<K extends SigningKeyState>(k: K | null, now: number): Outcome<K> {
  if (k === null) return refused('SIGNING_KEY_NOT_FOUND');
  if (k.status === 'retired') return noop('SIGNING_KEY_ALREADY_RETIRED', k);
  if (k.status === 'signing') return refused('SIGNING_KEY_IS_SIGNER');
  if (k.status === 'staged' || k.status === 'published')
    return refused('SIGNING_KEY_WRONG_STATE', 'only a key that signed before (previous) is retired');
  if (k.resignedAt === null) return refused('SIGNING_KEY_RESIGN_PENDING');
  const retireAfter = k.retireAfter === null ? now : Math.min(k.retireAfter, now);
  return applied('SIGNING_KEY_RETIRED', { ...k, status: 'retired', retireAfter, updatedAt: now });
}
