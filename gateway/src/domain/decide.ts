import {
  DEFAULT_OFFLINE_MAX_SECONDS,
  type CredentialType,
  type SiteMode,
  type DecisionCode,
  type DoorId,
  type KeyGrant,
  type LockId,
} from '@tobira/shared';
import { isStale } from './freshness.js';
import type { StoredKey } from './keyset.js';
import { isLockedOut, type LockoutState } from './lockout.js';
import { inSchedule } from './schedule.js';

/**
 * The access decision at the door (DESIGN.md §3), a pure function of the
 * request, the key set, the lock, the site and trusted time.
 */
export interface AccessRequest {
  readonly lockId: LockId;
  readonly credentialType: CredentialType;
  /** `credentialDigest(pepper, type, value)` of what the lock presented. */
  readonly digest: string;
}

/** The key set as decide sees it: every key (active or revoked) that has this credential. */
export interface KeySetView {
  byCredential(type: CredentialType, digest: string): readonly StoredKey[];
}

/**
 * null: the lock is not paired with this gateway. `privacy`: the guest
 * inside has privacy on (absent: off); staff keys are refused then.
 */
export type LockView = (LockoutState & { readonly doorId: DoorId | null; readonly privacy?: boolean }) | null;

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

function judgeKey(k: StoredKey, doorId: DoorId, privacy: boolean, site: SiteView, now: number): DecisionCode {
  const g = k.grant;
  if (k.status !== 'active') return 'KEY_REVOKED';
  if (!g.doors.includes(doorId)) return 'DOOR_NOT_PERMITTED';
  if (now < g.validFrom) return 'KEY_NOT_YET_VALID';
  if (now >= g.validUntil) return 'KEY_EXPIRED';
  if (g.schedule !== null && !inSchedule(g.schedule, now)) return 'OUTSIDE_SCHEDULE';
  // Privacy: the guest inside turned it on; staff (offline-capable, master) keys stay out. A supervisor's
  // emergency entry is a remote unlock with the emergency flag (domain/remote-unlock.ts), never a key.
  if (privacy && g.offlineCapable) return 'PRIVACY_ACTIVE';
  // Offline-capable staff keys pass lockdown, and a stale lease within their offline cap; nothing else does.
  if (site.mode === 'lockdown' && !g.offlineCapable) return 'SITE_LOCKDOWN';
  if (isStale(site.leaseExpiresAt, now) && !withinOfflineCap(g, site.lastFreshAt, now)) return 'CLOUD_STALE';
  // An unlock that may not reach the audit log breaks I2; staff keys still open (the headroom is kept for them).
  if (site.storageLow === true && !g.offlineCapable) return 'STORAGE_FULL';
  return 'ALLOWED';
}

/**
 * Invariant: `allowed` is true only for an active key at a version above any
 * revoke, for this lock's door, inside its validity window and schedule, with
 * neither the lock nor the credential type locked out, not a staff
 * (offline-capable) key at a door whose guest has privacy on, with no lockdown and
 * disk headroom unless the key is offline-capable, and with a running lease
 * unless the key is offline-capable and less than its offline cap has passed
 * since the last proven-fresh sync.
 */
export function decide(request: AccessRequest, keySet: KeySetView, lock: LockView, site: SiteView, now: number): Decision {
  if (lock === null || lock.doorId === null) return { allowed: false, code: 'BAD_REQUEST' };
  if (isLockedOut(lock, now)) return { allowed: false, code: 'LOCKED_OUT' };
  if (site.credentialLockout !== undefined && isLockedOut(site.credentialLockout, now)) return { allowed: false, code: 'LOCKED_OUT' };
  const candidates = keySet.byCredential(request.credentialType, request.digest);
  let best: { code: DecisionCode; key: StoredKey; rank: number } | null = null;
  for (const key of candidates) {
    const code = judgeKey(key, lock.doorId, lock.privacy === true, site, now);
    if (code === 'ALLOWED') return { allowed: true, code, key };
    const rank = PROGRESS.indexOf(code);
    if (best === null || rank > best.rank) best = { code, key, rank };
  }
  if (best === null) return { allowed: false, code: 'UNKNOWN_CREDENTIAL' };
  return { allowed: false, code: best.code, key: best.key };
}
