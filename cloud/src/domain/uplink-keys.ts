import { applied, conflict, noop, refused, type Outcome } from '@tobira/shared';

/**
 * Rotation of a gateway's own uplink signing key
 * (docs/state-machines.md "Gateway uplink-key rotation"). Pure: the app layer
 * loads the rotation and the facts (which key signed the proposal, whether the
 * new-key proof verified), these functions decide.
 */
export const UPLINK_KEY_ROTATION_STATUSES = ['requested', 'proposed', 'active', 'failed'] as const;
export type UplinkKeyRotationStatus = (typeof UPLINK_KEY_ROTATION_STATUSES)[number];

/** The literal table (docs/state-machines.md checks it equal). */
export const UPLINK_KEY_ROTATION_TRANSITIONS = [
  { from: '—', event: 'rotate', to: 'requested', code: 'UPLINK_KEY_ROTATION_REQUESTED' },
  { from: 'requested', event: 'proposal verified', to: 'proposed', code: 'UPLINK_KEY_PROPOSAL_ACCEPTED' },
  { from: 'requested', event: 'proposal with a bad new-key proof', to: 'failed', code: 'UPLINK_KEY_BAD_PROOF' },
  { from: 'requested', event: 'proposal with a kid used before', to: 'failed', code: 'UPLINK_KEY_KID_TAKEN' },
  { from: 'proposed', event: 'first uplink under the new key', to: 'active', code: 'UPLINK_KEY_ACTIVATED' },
] as const;

export interface UplinkKeyRotation {
  readonly id: string;
  readonly gatewayId: string;
  readonly status: UplinkKeyRotationStatus;
  readonly oldKid: string;
  readonly newKid: string | null;
  readonly code: string | null;
}

/** A rotation may be requested only when none is open (requested or proposed) for the gateway. */
export function requestRotation(open: UplinkKeyRotation | null): Outcome<null, never> {
  if (open !== null) return conflict('UPLINK_KEY_ROTATION_IN_PROGRESS', null);
  return applied('UPLINK_KEY_ROTATION_REQUESTED', null);
}

export interface ProposalFacts {
  /** The kid the proposal message was verified with. */
  readonly signedKid: string;
  /** The gateway's current key on record. */
  readonly currentKid: string;
  readonly newKid: string;
  /** The proof made with the new key verified over this gateway, rotation and kid. */
  readonly proofOk: boolean;
  /** The new kid is one the gateway had before (or is its current one). */
  readonly kidTaken: boolean;
}

/**
 * Invariant: a new key is accepted only for a rotation the cloud issued to
 * this gateway, proposed under its current key, with a proof made by the new key.
 */
export function acceptProposal(r: UplinkKeyRotation | null, f: ProposalFacts): Outcome<UplinkKeyRotation, never> {
  if (r === null) return refused('UPLINK_KEY_ROTATION_UNKNOWN');
  // a resend of the accepted proposal (the same key) changes nothing
  if ((r.status === 'proposed' || r.status === 'active') && r.newKid === f.newKid) return noop('UPLINK_KEY_PROPOSAL_ACCEPTED', r);
  if (r.status !== 'requested') return refused('UPLINK_KEY_ROTATION_NOT_OPEN', `rotation is ${r.status}`);
  if (f.signedKid !== f.currentKid) return refused('UPLINK_KEY_NOT_CURRENT', `signed by ${f.signedKid}`);
  if (!f.proofOk) return applied('UPLINK_KEY_BAD_PROOF', { ...r, status: 'failed', code: 'UPLINK_KEY_BAD_PROOF' });
  if (f.kidTaken) return applied('UPLINK_KEY_KID_TAKEN', { ...r, status: 'failed', code: 'UPLINK_KEY_KID_TAKEN' });
  return applied('UPLINK_KEY_PROPOSAL_ACCEPTED', { ...r, status: 'proposed', newKid: f.newKid });
}

/** The first uplink verified under the proposed key ends the rotation: the old key is retired. */
export function activateOnUse(r: UplinkKeyRotation, kid: string): Outcome<UplinkKeyRotation, never> {
  if (r.status !== 'proposed' || r.newKid !== kid) return noop('UPLINK_KEY_ALREADY_ACTIVE', r);
  return applied('UPLINK_KEY_ACTIVATED', { ...r, status: 'active' });
}
