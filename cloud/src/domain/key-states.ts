import type { OutcomeCode } from '@tobira/shared';

/**
 * The entry-key state machine, as a literal table. The same
 * table is in docs/state-machines.md; a test parses the document and checks
 * that both agree. Verbs consult it through `transitionOf` / `noopOf`.
 */
export const KEY_STATUSES = ['issuing', 'active', 'revoking', 'revoked', 'expired', 'failed', 'used'] as const;
export type KeyStatus = (typeof KEY_STATUSES)[number];

export const KEY_EVENTS = [
  'issue',
  'grant_applied',
  'grant_rejected',
  'revoke',
  'revoke_applied',
  'validity_ended',
  'used_at_door',
] as const;
export type KeyEvent = (typeof KEY_EVENTS)[number];

export interface KeyTransitionRow {
  /** `null` is "no key yet". */
  readonly from: readonly (KeyStatus | null)[];
  readonly event: KeyEvent;
  readonly to: KeyStatus;
  readonly code: OutcomeCode;
}
export interface KeyNoopRow {
  readonly from: readonly KeyStatus[];
  readonly event: KeyEvent;
  readonly code: OutcomeCode;
}

export const KEY_TRANSITIONS: readonly KeyTransitionRow[] = [
  { from: [null], event: 'issue', to: 'issuing', code: 'KEY_ISSUED' },
  { from: ['issuing'], event: 'grant_applied', to: 'active', code: 'KEY_ACTIVATED' },
  { from: ['issuing'], event: 'grant_rejected', to: 'failed', code: 'KEY_DELIVERY_FAILED' },
  { from: ['issuing', 'active'], event: 'revoke', to: 'revoking', code: 'KEY_REVOKE_QUEUED' },
  { from: ['revoking'], event: 'revoke_applied', to: 'revoked', code: 'KEY_REVOKE_CONFIRMED' },
  { from: ['issuing', 'active'], event: 'validity_ended', to: 'expired', code: 'KEY_EXPIRED' },
  { from: ['issuing', 'active'], event: 'used_at_door', to: 'used', code: 'KEY_USED_RECORDED' },
];

/** Events that are answered with `noop` and a code from these states (nothing is written). */
export const KEY_NOOPS: readonly KeyNoopRow[] = [
  { from: ['revoking', 'revoked', 'expired', 'failed'], event: 'revoke', code: 'KEY_ALREADY_REVOKED' },
  { from: ['active'], event: 'grant_applied', code: 'KEY_ALREADY_ACTIVE' },
  { from: ['used'], event: 'revoke', code: 'KEY_ALREADY_USED' },
  { from: ['used'], event: 'used_at_door', code: 'KEY_ALREADY_USED' },
];

export function transitionOf(from: KeyStatus | null, event: KeyEvent): KeyTransitionRow | undefined {
  return KEY_TRANSITIONS.find((r) => r.event === event && r.from.includes(from));
}
export function noopOf(from: KeyStatus, event: KeyEvent): KeyNoopRow | undefined {
  return KEY_NOOPS.find((r) => r.event === event && r.from.includes(from));
}

/** A key the cloud still treats as able to open a door once delivered. */
export const isLive = (s: KeyStatus): boolean => s === 'issuing' || s === 'active';
