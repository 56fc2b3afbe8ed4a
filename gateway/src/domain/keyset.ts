import { applied, noop, refused, type KeyGrant, type KeyRevoke, type Outcome } from '@tobira/shared';

/**
 * Key-set rules: keys apply by version, never by arrival order.
 *
 * A slot is what the gateway knows about one key id: the key (active, or
 * revoked at a version) and its tombstone (the highest version ever revoked).
 * Tombstones are never removed, so a late or replayed grant at or below a
 * revoked version can never bring the key back. The rules commute: whatever
 * order grants and revokes arrive in, the key ends active iff its highest
 * granted version is above its highest revoked version.
 */
export const STORED_KEY_STATUSES = ['active', 'revoked'] as const;
/** A stored key's own two states (the cloud's `KeyStatus` has the key's whole life; this is only whether it opens). */
export type StoredKeyStatus = (typeof STORED_KEY_STATUSES)[number];

/** A key as the gateway stores it: the grant, the version it is at, and whether it is active. */
export interface StoredKey {
  readonly grant: KeyGrant;
  /** The version the key is at: the grant's, or the revoke's once revoked. */
  readonly version: number;
  readonly status: StoredKeyStatus;
  /**
   * The cloud key that signed the message this grant came in is retired (or,
   * for a grant stored before the gateway noted signers, some key was
   * retired since): the cloud did not re-send it under a current key.
   */
  readonly signerRetired?: boolean;
  /** A one-time key whose entry was used: when (trusted time). Absent: not consumed. */
  readonly consumedAt?: number;
}

export interface KeySlot {
  readonly key: StoredKey | null;
  readonly tombstone: number | null;
}

export const emptySlot: KeySlot = Object.freeze({ key: null, tombstone: null });

/** Invariant: a grant at or below the tombstone or the current version never changes the slot. */
export function applyGrant(slot: KeySlot, grant: KeyGrant): Outcome<KeySlot> {
  if (slot.tombstone !== null && grant.version <= slot.tombstone) return noop('STALE_VERSION', slot);
  if (slot.key !== null && grant.version < slot.key.version) return noop('STALE_VERSION', slot);
  if (slot.key !== null && grant.version === slot.key.version) {
    return slot.key.status === 'active' ? noop('KEY_ALREADY_ACTIVE', slot) : noop('STALE_VERSION', slot);
  }
  if (grant.validFrom >= grant.validUntil) return refused('INVALID_VALIDITY_WINDOW');
  return applied('KEY_ACTIVATED', { key: { grant, version: grant.version, status: 'active' }, tombstone: slot.tombstone });
}

/**
 * Invariant: after a revoke at version v, no key at version <= v is active.
 * A revoke of an older version than the current key (the key was re-issued
 * since) only raises the tombstone.
 */
export function applyRevoke(slot: KeySlot, revoke: KeyRevoke): Outcome<KeySlot> {
  if (slot.tombstone !== null && revoke.version <= slot.tombstone) return noop('KEY_ALREADY_REVOKED', slot);
  const tombstone = revoke.version;
  if (slot.key !== null && slot.key.version > revoke.version) return noop('STALE_VERSION', { key: slot.key, tombstone });
  const key: StoredKey | null = slot.key === null ? null : { grant: slot.key.grant, version: revoke.version, status: 'revoked' };
  return applied('KEY_REVOKE_CONFIRMED', { key, tombstone });
}

/** True when a slot's key may open doors at all (the decision adds time, door and site rules). */
export const isActive = (slot: KeySlot): boolean => slot.key !== null && slot.key.status === 'active';
