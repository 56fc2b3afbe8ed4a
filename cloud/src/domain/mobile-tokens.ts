import type { OutcomeCode } from '@tobira/shared';
import { isLive, type KeyStatus } from './key-states.js';

/**
 * Invariant: a mobile token is issued only for a live (issuing or active)
 * key of credential type `mobile` whose validity window has not ended; the
 * token never outlives the key's window (the caller caps `exp` by it).
 */
export function mobileTokenRefusal(
  key: { readonly credentialType: string; readonly status: KeyStatus; readonly validUntil: number },
  now: number,
): OutcomeCode | null {
  if (key.credentialType !== 'mobile') return 'KEY_NOT_MOBILE';
  if (!isLive(key.status) || key.validUntil <= now) return 'KEY_NOT_LIVE';
  return null;
}
