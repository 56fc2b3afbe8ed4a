import { describe, expect, it } from 'vitest';
import {
  acceptProposal,
  activateOnUse,
  requestRotation,
  type ProposalFacts,
  type UplinkKeyRotation,
  type UplinkKeyRotationStatus,
} from '../src/domain/uplink-keys.js';

const rotation = (status: UplinkKeyRotationStatus, over: Partial<UplinkKeyRotation> = {}): UplinkKeyRotation => ({
  id: 'rot-1',
  gatewayId: 'gw-1',
  status,
  oldKid: 'up-1',
  newKid: null,
  code: null,
  ...over,
});

const facts = (over: Partial<ProposalFacts> = {}): ProposalFacts => ({
  signedKid: 'up-1',
  currentKid: 'up-1',
  newKid: 'up-2',
  proofOk: true,
  kidTaken: false,
  ...over,
});

describe('requestRotation', () => {
  it('a rotation is requested when none is open for the gateway', () => {
    expect(requestRotation(null)).toMatchObject({ status: 'applied', code: 'UPLINK_KEY_ROTATION_REQUESTED' });
  });
  it.each(['requested', 'proposed'] as const)('a %s rotation still open is a conflict', (status) => {
    expect(requestRotation(rotation(status))).toMatchObject({ status: 'conflict', code: 'UPLINK_KEY_ROTATION_IN_PROGRESS' });
  });
});

describe('acceptProposal', () => {
  it('a proposal under the current key with a good proof and a fresh kid moves the rotation to proposed with the new kid', () => {
    const r = rotation('requested');
    expect(acceptProposal(r, facts())).toEqual({
      status: 'applied',
      code: 'UPLINK_KEY_PROPOSAL_ACCEPTED',
      state: { ...r, status: 'proposed', newKid: 'up-2' },
      emits: [],
    });
  });
  it('a proposal for no rotation the cloud issued: UPLINK_KEY_ROTATION_UNKNOWN', () => {
    expect(acceptProposal(null, facts())).toMatchObject({ status: 'refused', code: 'UPLINK_KEY_ROTATION_UNKNOWN' });
  });
  it.each(['proposed', 'active'] as const)('a resend of the accepted proposal to a %s rotation changes nothing', (status) => {
    const r = rotation(status, { newKid: 'up-2' });
    // even if the resend would now fail a check: it was judged once
    expect(acceptProposal(r, facts({ signedKid: 'up-2', proofOk: false }))).toEqual({
      status: 'noop',
      code: 'UPLINK_KEY_PROPOSAL_ACCEPTED',
      state: r,
    });
  });
  it.each(['proposed', 'active'] as const)('another key proposed to a %s rotation is refused: the rotation is not open', (status) => {
    const o = acceptProposal(rotation(status, { newKid: 'up-2' }), facts({ newKid: 'up-3' }));
    expect(o).toMatchObject({ status: 'refused', code: 'UPLINK_KEY_ROTATION_NOT_OPEN' });
    expect(o.status === 'refused' && o.detail).toBe(`rotation is ${status}`);
  });
  it('a failed rotation is not open, even for the kid it was proposed with', () => {
    const o = acceptProposal(rotation('failed', { newKid: 'up-2', code: 'UPLINK_KEY_BAD_PROOF' }), facts());
    expect(o).toMatchObject({ status: 'refused', code: 'UPLINK_KEY_ROTATION_NOT_OPEN' });
    expect(o.status === 'refused' && o.detail).toBe('rotation is failed');
  });
  it('a proposal not signed by the current key is refused and leaves the rotation open', () => {
    const o = acceptProposal(rotation('requested'), facts({ signedKid: 'up-0', proofOk: false, kidTaken: true }));
    expect(o).toMatchObject({ status: 'refused', code: 'UPLINK_KEY_NOT_CURRENT' });
    expect(o.status === 'refused' && o.detail).toBe('signed by up-0');
  });
  it('a bad new-key proof fails the rotation, recording why', () => {
    const r = rotation('requested');
    expect(acceptProposal(r, facts({ proofOk: false, kidTaken: true }))).toMatchObject({
      status: 'applied',
      code: 'UPLINK_KEY_BAD_PROOF',
      state: { ...r, status: 'failed', code: 'UPLINK_KEY_BAD_PROOF', newKid: null },
    });
  });
  it('a kid the gateway used before fails the rotation, recording why', () => {
    const r = rotation('requested');
    expect(acceptProposal(r, facts({ kidTaken: true }))).toMatchObject({
      status: 'applied',
      code: 'UPLINK_KEY_KID_TAKEN',
      state: { ...r, status: 'failed', code: 'UPLINK_KEY_KID_TAKEN', newKid: null },
    });
  });
});

describe('activateOnUse', () => {
  it('the first uplink under the proposed key activates the rotation', () => {
    const r = rotation('proposed', { newKid: 'up-2' });
    expect(activateOnUse(r, 'up-2')).toEqual({
      status: 'applied',
      code: 'UPLINK_KEY_ACTIVATED',
      state: { ...r, status: 'active' },
      emits: [],
    });
  });
  it('an uplink under another key leaves a proposed rotation as it is', () => {
    const r = rotation('proposed', { newKid: 'up-2' });
    expect(activateOnUse(r, 'up-1')).toEqual({ status: 'noop', code: 'UPLINK_KEY_ALREADY_ACTIVE', state: r });
  });
  it.each(['requested', 'active', 'failed'] as const)('a %s rotation is not activated by an uplink', (status) => {
    const r = rotation(status, { newKid: 'up-2' });
    expect(activateOnUse(r, 'up-2')).toEqual({ status: 'noop', code: 'UPLINK_KEY_ALREADY_ACTIVE', state: r });
  });
});
