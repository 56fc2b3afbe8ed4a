import {
  DEFAULT_OFFLINE_MAX_SECONDS,
  type CredentialType,
  type SiteMode,
  type DecisionCode,
  type DoorId,
  type KeyGrant,
  type LockId,
  type MobileTokenClaims,
} from '@tobira/shared';
import { isStale } from './freshness.js';
import type { StoredKey } from './keyset.js';
import { isLockedOut, type LockoutState } from './lockout.js';
import { inSchedule } from './schedule.js';

/**
 * The access decision at the door, a pure function of the
 * request, the key set, the lock, the site and trusted time.
 */
export interface AccessRequest {
  readonly lockId: LockId;
  readonly credentialType: CredentialType;
  /** `credentialDigest(pepper, type, value)` of what the lock presented. */
  readonly digest: string;
}

/**
 * A mobile token the lock relayed, once its signature was checked
 * (`verifyMobileTokenSignature`): its claims, and this gateway's id (the
 * audience it must name); or why the check refused it.
 */
export type MobileTokenRequest =
  | {
      readonly lockId: LockId;
      readonly claims: MobileTokenClaims;
      readonly audience: string;
      /** A token with this jti has opened a door already (absent: it has not). */
      readonly used?: boolean;
      /**
       * When this gateway started, on the cloud's clock (ms). A token whose issuing second ended before
       * it may have opened a door under a store that is gone (a restore from a backup forgets uses), so it
       * is refused; absent: no such bound.
       */
      readonly startedAt?: number;
    }
  | { readonly lockId: LockId; readonly refused: 'MOBILE_TOKEN_INVALID' | 'MOBILE_TOKEN_UNKNOWN_SIGNER' };

/** The key set as decide sees it: every key (active or revoked) that has this credential. */
export interface KeySetView {
  byCredential(type: CredentialType, digest: string): readonly StoredKey[];
  /** The key with this id (a mobile token names its key); absent: no key is found by id. */
  byKeyId?(keyId: string): StoredKey | null;
}

/**
 * null: the lock is not paired with this gateway. `privacy`: the guest
 * inside has privacy on (absent: off). `privacyUnknown`: the lock has not
 * said on this connection whether it is on (absent: it has); the keys
 * privacy refuses are refused then too.
 */
export type LockView =
  (LockoutState & { readonly doorId: DoorId | null; readonly privacy?: boolean; readonly privacyUnknown?: boolean }) | null;

/** Invariant: privacy is in force when the lock says it is on, and when it has not said (fail closed). */
function privacyInForce(lock: NonNullable<LockView>): boolean {
  return lock.privacy === true || lock.privacyUnknown === true;
}

export interface SiteView {
  readonly mode: SiteMode;
  readonly leaseExpiresAt: number | null;
  /** The site-wide lockout of the presented credential type (absent: none). */
  readonly credentialLockout?: LockoutState;
  /** The data folder is below its free-space headroom: a decision might not be recorded (absent: false). */
  readonly storageLow?: boolean;
  /**
   * When the gateway last proved itself in sync with the cloud (the moment
   * its lease counts from, see lastFreshSyncAt); null or absent: never, or
   * the proof was withdrawn (a SEQ_CONFLICT clears the lease), which fails
   * closed. An offline-capable key opens on a stale lease only within its
   * offline cap of this.
   */
  readonly lastFreshAt?: number | null;
}

/**
 * The last proven-fresh sync, read back from the lease: a heartbeat that
 * proved the gateway in sync set the lease to that moment plus the grace.
 * Invariant: null exactly when there is no lease.
 */
export function lastFreshSyncAt(leaseExpiresAt: number | null, offlineGraceSeconds: number): number | null {
  return leaseExpiresAt === null ? null : leaseExpiresAt - offlineGraceSeconds * 1000;
}

/** Invariant: true only for an offline-capable key, while less than its cap has passed since the last proven-fresh sync. */
export function withinOfflineCap(g: KeyGrant, lastFreshAt: number | null | undefined, now: number): boolean {
  if (!g.offlineCapable || lastFreshAt === null || lastFreshAt === undefined) return false;
  return now - lastFreshAt < (g.offlineMaxSeconds ?? DEFAULT_OFFLINE_MAX_SECONDS) * 1000;
}

export interface Decision {
  readonly allowed: boolean;
  readonly code: DecisionCode;
  readonly key?: StoredKey;
}

/** How far a key got through the checks: the refusal of the key that got furthest is the answer. */
const PROGRESS: readonly DecisionCode[] = [
  'KEY_REVOKED',
  'SIGNER_RETIRED',
  'KEY_USED',
  'DOOR_NOT_PERMITTED',
  'KEY_NOT_YET_VALID',
  'KEY_EXPIRED',
  'OUTSIDE_SCHEDULE',
  'PRIVACY_ACTIVE',
  'SITE_LOCKDOWN',
  'CLOUD_STALE',
  'STORAGE_FULL',
  'ALLOWED',
];

/**
 * A staff key, for privacy: the grant's explicit marker; a grant without it
 * (from a cloud before the marker) is judged by `offlineCapable`, as before,
 * so nothing opens at a privacy door that did not.
 */
export function isStaffKey(g: Pick<KeyGrant, 'staff' | 'offlineCapable'>): boolean {
  return g.staff ?? g.offlineCapable;
}

/**
 * Who privacy keeps out: everyone but the room's guests. A guest's key is an
 * ordinary key (not a staff key, not one-time); a staff key (a cleaner's, a
 * master key) and a one-time key (a delivery, a single visit) are visitors,
 * refused while the guest inside has privacy on.
 * Invariant: true exactly for staff keys and one-time keys.
 */
export function privacyRefuses(g: Pick<KeyGrant, 'staff' | 'offlineCapable' | 'oneTime'>): boolean {
  return isStaffKey(g) || g.oneTime === true;
}

function judgeKey(k: StoredKey, doorId: DoorId, privacy: boolean, site: SiteView, now: number): DecisionCode {
  const g = k.grant;
  if (k.status !== 'active') return 'KEY_REVOKED';
  // signing-key rotation: a grant only a retired cloud key vouches for opens nothing (docs/gateway.md)
  if (k.signerRetired === true) return 'SIGNER_RETIRED';
  if (g.oneTime === true && k.consumedAt !== undefined) return 'KEY_USED';
  if (!g.doors.includes(doorId)) return 'DOOR_NOT_PERMITTED';
  if (now < g.validFrom) return 'KEY_NOT_YET_VALID';
  if (now >= g.validUntil) return 'KEY_EXPIRED';
  if (g.schedule !== null && !inSchedule(g.schedule, now)) return 'OUTSIDE_SCHEDULE';
  // Privacy: the guest inside turned it on; staff keys stay out. A supervisor's emergency entry is a
  // remote unlock with the emergency flag (domain/remote-unlock.ts), never a key.
  if (privacy && privacyRefuses(g)) return 'PRIVACY_ACTIVE';
  // Offline-capable staff keys pass lockdown, and a stale lease within their offline cap; nothing else does.
  if (site.mode === 'lockdown' && !g.offlineCapable) return 'SITE_LOCKDOWN';
  if (isStale(site.leaseExpiresAt, now) && !withinOfflineCap(g, site.lastFreshAt, now)) return 'CLOUD_STALE';
  // An unlock that may not reach the audit log breaks I2; staff keys still open (the headroom is kept for them).
  if (site.storageLow === true && !g.offlineCapable) return 'STORAGE_FULL';
  return 'ALLOWED';
}

/**
 * Invariant: `allowed` is true only for an active key at a version above any
 * revoke, granted under a cloud key that is not retired, not a one-time key already consumed, for this lock's door, inside its validity window and schedule, with
 * neither the lock nor the credential type locked out, not a staff or
 * one-time key (`privacyRefuses`) at a door whose guest has privacy on or
 * whose lock has not said whether it is on, with no lockdown and
 * disk headroom unless the key is offline-capable, and with a running lease
 * unless the key is offline-capable and less than its offline cap has passed
 * since the last proven-fresh sync.
 */
export function decide(request: AccessRequest, keySet: KeySetView, lock: LockView, site: SiteView, now: number): Decision {
  if (lock === null || lock.doorId === null) return { allowed: false, code: 'BAD_REQUEST' };
  if (isLockedOut(lock, now)) return { allowed: false, code: 'LOCKED_OUT' };
  if (site.credentialLockout !== undefined && isLockedOut(site.credentialLockout, now)) return { allowed: false, code: 'LOCKED_OUT' };
  return judgeCandidates(keySet.byCredential(request.credentialType, request.digest), lock.doorId, privacyInForce(lock), site, now);
}

/** Seconds a token's `iat` may be ahead of trusted time (the cloud's clock against the gateway's). */
export const MOBILE_TOKEN_SKEW_SECONDS = 60;

/**
 * The decision for a relayed mobile token. Invariant: `allowed` only for a
 * token signed by a trusted cloud key, addressed to this gateway, not
 * expired on trusted time, never used to open a door before, naming a mobile key of the person it names, and
 * only when that key would open this door now by every rule of `decide`.
 */
export function decideMobileToken(request: MobileTokenRequest, keySet: KeySetView, lock: LockView, site: SiteView, now: number): Decision {
  if (lock === null || lock.doorId === null) return { allowed: false, code: 'BAD_REQUEST' };
  if (isLockedOut(lock, now)) return { allowed: false, code: 'LOCKED_OUT' };
  if (site.credentialLockout !== undefined && isLockedOut(site.credentialLockout, now)) return { allowed: false, code: 'LOCKED_OUT' };
  if ('refused' in request) return { allowed: false, code: request.refused };
  const c = request.claims;
  if (c.aud !== request.audience) return { allowed: false, code: 'MOBILE_TOKEN_WRONG_SITE' };
  if (now >= c.exp * 1000) return { allowed: false, code: 'MOBILE_TOKEN_EXPIRED' };
  // single use: a token seen on the air (or replayed by a lock) opens nothing a second time
  if (request.used === true) return { allowed: false, code: 'MOBILE_TOKEN_REPLAYED' };
  if (request.startedAt !== undefined && (c.iat + 1) * 1000 <= request.startedAt)
    return { allowed: false, code: 'MOBILE_TOKEN_BEFORE_START' };
  if (c.iat * 1000 > now + MOBILE_TOKEN_SKEW_SECONDS * 1000) return { allowed: false, code: 'MOBILE_TOKEN_INVALID' };
  const key = keySet.byKeyId?.(c.sub) ?? null;
  if (key === null) return { allowed: false, code: 'UNKNOWN_CREDENTIAL' };
  if (key.grant.personId !== c.pid || key.grant.credential.type !== 'mobile') return { allowed: false, code: 'MOBILE_TOKEN_MISMATCH', key };
  return judgeCandidates([key], lock.doorId, privacyInForce(lock), site, now);
}

function judgeCandidates(candidates: readonly StoredKey[], doorId: DoorId, privacy: boolean, site: SiteView, now: number): Decision {
  let best: { code: DecisionCode; key: StoredKey; rank: number } | null = null;
  for (const key of candidates) {
    const code = judgeKey(key, doorId, privacy, site, now);
    if (code === 'ALLOWED') return { allowed: true, code, key };
    const rank = PROGRESS.indexOf(code);
    if (best === null || rank > best.rank) best = { code, key, rank };
  }
  if (best === null) return { allowed: false, code: 'UNKNOWN_CREDENTIAL' };
  return { allowed: false, code: best.code, key: best.key };
}
