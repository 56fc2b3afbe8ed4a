import type { SiteMode } from '@tobira/shared';

/**
 * May a staff member open one door remotely, now? (docs/gateway.md "Remote
 * unlock"). Pure: the use case (app/staff-unlock.ts) reads the inputs and
 * writes the result.
 *
 * | check (in this order)                       | answer                      |
 * |---------------------------------------------|-----------------------------|
 * | the caller is not a supervisor              | refused NOT_SUPERVISOR      |
 * | no reason (blank after trimming)            | refused REASON_REQUIRED     |
 * | the gateway knows no such lock              | refused LOCK_NOT_FOUND      |
 * | the lock is offline (its presence)          | refused LOCK_OFFLINE        |
 * | the site is in lockdown                     | refused SITE_LOCKDOWN       |
 * | the guest has privacy on, no emergency flag | refused PRIVACY_ACTIVE      |
 * | the guest has privacy on, emergency flag    | allowed, code PRIVACY_OVERRIDE |
 * | the site is failing closed (CLOUD_STALE)    | allowed, warning FAILING_CLOSED |
 * | otherwise                                   | allowed                     |
 *
 * Failing closed guards against a key the cloud revoked while the gateway
 * could not hear of it: it is about keys. A remote unlock uses no key: a
 * supervisor, signed in at the site's own gateway, decides for one entry
 * with a reason that is audited. That is what staff need when the internet
 * is down (a guest locked out at night), so it stays allowed, and says so
 * loudly (the answer's warning, a warn log line, the page's confirmation).
 * Lockdown is the opposite: a deliberate local decision that no door opens,
 * which a remote unlock must not undo (end the lockdown first). Privacy
 * (the guest inside turned the thumb-turn) keeps staff out; only a
 * supervisor who flags the entry as an emergency passes, and the access
 * event then carries PRIVACY_OVERRIDE instead of REMOTE_UNLOCK so the audit
 * tells it apart.
 */
export type RemoteUnlockCode =
  'NOT_SUPERVISOR' | 'REASON_REQUIRED' | 'LOCK_NOT_FOUND' | 'LOCK_OFFLINE' | 'SITE_LOCKDOWN' | 'PRIVACY_ACTIVE';

export interface RemoteUnlockInput {
  readonly role: 'staff' | 'supervisor';
  readonly reason: string;
  readonly lock: { readonly online: boolean; readonly privacy?: boolean } | null;
  /** The supervisor flagged this entry as an emergency (absent: false). */
  readonly emergency?: boolean;
  readonly mode: SiteMode;
  /** Why ordinary keys are refused now (null: the site is in sync). */
  readonly failClosedReason: string | null;
}

export type RemoteUnlockDecision =
  | {
      readonly allowed: true;
      readonly reason: string;
      readonly warning: 'FAILING_CLOSED' | null;
      /** PRIVACY_OVERRIDE: an emergency entry through the guest's privacy (absent: an ordinary remote unlock). */
      readonly code?: 'PRIVACY_OVERRIDE';
    }
  | { readonly allowed: false; readonly code: RemoteUnlockCode };

export function decideRemoteUnlock(i: RemoteUnlockInput): RemoteUnlockDecision {
  if (i.role !== 'supervisor') return { allowed: false, code: 'NOT_SUPERVISOR' };
  const reason = i.reason.trim();
  if (reason === '') return { allowed: false, code: 'REASON_REQUIRED' };
  if (i.lock === null) return { allowed: false, code: 'LOCK_NOT_FOUND' };
  if (!i.lock.online) return { allowed: false, code: 'LOCK_OFFLINE' };
  if (i.mode === 'lockdown') return { allowed: false, code: 'SITE_LOCKDOWN' };
  const warning = i.failClosedReason === null ? null : 'FAILING_CLOSED';
  if (i.lock.privacy === true)
    return i.emergency === true ? { allowed: true, reason, warning, code: 'PRIVACY_OVERRIDE' } : { allowed: false, code: 'PRIVACY_ACTIVE' };
  return { allowed: true, reason, warning };
}
