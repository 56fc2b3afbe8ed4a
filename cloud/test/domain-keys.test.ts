import { KeyGrant, asDoorId, asGatewayId, asKeyId, asPersonId, newCorrelationId } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import {
  expireKey,
  issueKey,
  recordGatewayReport,
  recordKeyUse,
  revokeKey,
  toGrant,
  type EntryKey,
  type IssueKeyCommand,
} from '../src/domain/keys.js';

const NOW = Date.UTC(2026, 10, 29, 9);
const DAY = 86_400_000;
const cid = newCorrelationId();

const cmd = (over: Partial<IssueKeyCommand> = {}): IssueKeyCommand => ({
  keyId: asKeyId('key-1'),
  personId: asPersonId('p-1'),
  gatewayId: asGatewayId('gw-1'),
  credential: { type: 'pin', digest: 'A'.repeat(43) },
  doors: [asDoorId('d-1')],
  validFrom: NOW,
  validUntil: NOW + DAY,
  schedule: null,
  offlineCapable: false,
  offlineMaxSeconds: null,
  cid,
  ...over,
});

function issued(): EntryKey {
  const o = issueKey(null, cmd(), NOW);
  if (o.status !== 'applied') throw new Error('issue failed');
  return o.state;
}
const withStatus = (status: EntryKey['status'], over: Partial<EntryKey> = {}): EntryKey => ({ ...issued(), status, ...over });

describe('issueKey', () => {
  it('creates an issuing key at version 1 and emits its grant', () => {
    const o = issueKey(null, cmd(), NOW);
    expect(o.status).toBe('applied');
    if (o.status !== 'applied') return;
    expect(o.code).toBe('KEY_ISSUED');
    expect(o.state).toMatchObject({ status: 'issuing', version: 1, revision: 1 });
    expect(o.emits).toEqual([{ type: 'key.grant', body: { key: expect.objectContaining({ keyId: 'key-1', version: 1 }) } }]);
  });
  it('an offline-capable key carries its offline cap in its grant; an ordinary key carries none, and may not ask for one', () => {
    const staff = issueKey(null, cmd({ offlineCapable: true, offlineMaxSeconds: 3600 }), NOW);
    if (staff.status !== 'applied') throw new Error('issue failed');
    const g = toGrant(staff.state);
    expect(g).toMatchObject({ offlineCapable: true, offlineMaxSeconds: 3600 });
    expect(KeyGrant.parse(g)).toEqual(g);
    expect(toGrant(issued())).not.toHaveProperty('offlineMaxSeconds');
    expect(issueKey(null, cmd({ offlineMaxSeconds: 3600 }), NOW)).toMatchObject({ status: 'refused', code: 'INVALID_REQUEST' });
    // the same id again with another cap is other content, not a noop
    expect(issueKey(staff.state, cmd({ offlineCapable: true, offlineMaxSeconds: 7200 }), NOW)).toMatchObject({
      status: 'conflict',
      code: 'KEY_ALREADY_EXISTS',
    });
  });
  it('refuses a window that ends before it starts or has already ended', () => {
    expect(issueKey(null, cmd({ validUntil: NOW - 1, validFrom: NOW - DAY }), NOW)).toMatchObject({
      status: 'refused',
      code: 'INVALID_VALIDITY_WINDOW',
    });
    expect(issueKey(null, cmd({ validFrom: NOW + DAY, validUntil: NOW + DAY }), NOW)).toMatchObject({
      status: 'refused',
      code: 'INVALID_VALIDITY_WINDOW',
    });
  });
  it('accepts an overnight window (the gateway opens it past midnight) and refuses an empty one or one with no days or dates', () => {
    const overnight = { timeZone: 'Asia/Tokyo', windows: [{ days: [1], start: '18:00', end: '09:00' }] };
    expect(issueKey(null, cmd({ schedule: overnight }), NOW)).toMatchObject({ status: 'applied' });
    for (const w of [
      { days: [1], start: '09:00', end: '09:00' },
      { start: '09:00', end: '10:00' },
      { dates: ['2026-02-30'], start: '09:00', end: '10:00' },
    ])
      expect(issueKey(null, cmd({ schedule: { timeZone: 'Asia/Tokyo', windows: [w] } }), NOW)).toMatchObject({
        status: 'refused',
        code: 'INVALID_SCHEDULE',
      });
  });
  it('answers noop for the same id and content, conflict for other content', () => {
    const k = issued();
    expect(issueKey(k, cmd(), NOW)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_ISSUED' });
    expect(issueKey(k, cmd({ validUntil: NOW + 2 * DAY }), NOW)).toMatchObject({ status: 'conflict', code: 'KEY_ALREADY_EXISTS' });
  });
});

describe('revokeKey', () => {
  it.each(['issuing', 'active'] as const)('moves %s to revoking with a higher version and emits the revoke', (status) => {
    const o = revokeKey(withStatus(status), { reason: 'credential_lost', cid }, NOW);
    expect(o).toMatchObject({
      status: 'applied',
      code: 'KEY_REVOKE_QUEUED',
      state: { status: 'revoking', version: 2, revision: 2, revokeReason: 'credential_lost' },
    });
    if (o.status === 'applied')
      expect(o.emits).toEqual([{ type: 'key.revoke', body: { keyId: 'key-1', version: 2, reason: 'credential_lost' } }]);
  });
  it.each(['revoking', 'revoked', 'expired', 'failed'] as const)('is a noop with KEY_ALREADY_REVOKED when %s', (status) => {
    const k = withStatus(status);
    expect(revokeKey(k, { reason: 'staff_revoked', cid }, NOW)).toEqual({ status: 'noop', code: 'KEY_ALREADY_REVOKED', state: k });
  });
  it('refuses an unknown key and conflicts on a stale expected revision', () => {
    expect(revokeKey(null, { reason: 'staff_revoked', cid }, NOW)).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
    expect(revokeKey(withStatus('active'), { reason: 'staff_revoked', cid, expectedRevision: 7 }, NOW)).toMatchObject({
      status: 'conflict',
      code: 'KEY_STATE_CHANGED',
    });
  });
});

describe('expireKey', () => {
  it('does nothing before validUntil', () => {
    expect(expireKey(withStatus('active'), { cid }, NOW)).toMatchObject({ status: 'noop', code: 'KEY_NOT_EXPIRED' });
  });
  it('expires a live key at validUntil and emits nothing', () => {
    const o = expireKey(withStatus('active'), { cid }, NOW + DAY);
    expect(o).toMatchObject({ status: 'applied', code: 'KEY_EXPIRED', state: { status: 'expired', version: 1 }, emits: [] });
  });
  it('leaves a revoked key alone', () => {
    expect(expireKey(withStatus('revoked'), { cid }, NOW + DAY)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_REVOKED' });
  });
});

describe('recordGatewayReport', () => {
  const report = (over: Partial<Parameters<typeof recordGatewayReport>[1]> = {}) => ({
    gatewayId: asGatewayId('gw-1'),
    keyVersion: 1,
    result: 'applied' as const,
    code: 'MESSAGE_APPLIED',
    cid,
    ...over,
  });
  it('activates an issuing key on an applied ack of its version', () => {
    expect(recordGatewayReport(withStatus('issuing'), report(), NOW)).toMatchObject({
      status: 'applied',
      code: 'KEY_ACTIVATED',
      state: { status: 'active' },
    });
  });
  it('fails an issuing key on a refused ack', () => {
    expect(recordGatewayReport(withStatus('issuing'), report({ result: 'refused' }), NOW)).toMatchObject({
      status: 'applied',
      code: 'KEY_DELIVERY_FAILED',
      state: { status: 'failed' },
    });
  });
  it('confirms a revoke on an ack of the revoke version', () => {
    const k = withStatus('revoking', { version: 2 });
    expect(recordGatewayReport(k, report({ keyVersion: 2 }), NOW)).toMatchObject({
      status: 'applied',
      code: 'KEY_REVOKE_CONFIRMED',
      state: { status: 'revoked' },
    });
  });
  it('ignores an ack of an older version, and one from another gateway', () => {
    const k = withStatus('revoking', { version: 2 });
    expect(recordGatewayReport(k, report({ keyVersion: 1 }), NOW)).toEqual({ status: 'noop', code: 'REPORT_IGNORED', state: k });
    expect(recordGatewayReport(k, report({ keyVersion: 2, gatewayId: asGatewayId('gw-2') }), NOW)).toMatchObject({
      status: 'noop',
      code: 'REPORT_IGNORED',
    });
  });
  it('answers a duplicate ack for an active key with KEY_ALREADY_ACTIVE', () => {
    expect(recordGatewayReport(withStatus('active'), report(), NOW)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_ACTIVE' });
  });
});

describe('recordKeyUse (one-time keys)', () => {
  const report = { gatewayId: asGatewayId('gw-1'), at: NOW + 5000, cid };
  const oneTime = (status: EntryKey['status']) => withStatus(status, { oneTime: true });
  it('a one-time key carries oneTime in its grant; an ordinary key carries none', () => {
    const o = issueKey(null, cmd({ oneTime: true }), NOW);
    if (o.status !== 'applied') throw new Error('issue failed');
    expect(toGrant(o.state).oneTime).toBe(true);
    expect(KeyGrant.safeParse(toGrant(o.state)).success).toBe(true);
    expect('oneTime' in toGrant(issued())).toBe(false);
  });
  it('moves an issuing or active one-time key to used, with the entry time, at a higher version, and sends it as a sequenced revoke', () => {
    for (const status of ['issuing', 'active'] as const) {
      const key = oneTime(status);
      const o = recordKeyUse(key, report, NOW + 6000);
      expect(o).toMatchObject({
        status: 'applied',
        code: 'KEY_USED_RECORDED',
        state: { status: 'used', usedAt: NOW + 5000, version: key.version + 1 },
        emits: [{ type: 'key.revoke', body: { keyId: key.id, version: key.version + 1, reason: 'key_used' } }],
      });
    }
  });
  it('changes nothing for an ordinary key, a report from another gateway, a used or already dead key', () => {
    expect(recordKeyUse(withStatus('active'), report, NOW)).toMatchObject({ status: 'noop', code: 'REPORT_IGNORED' });
    expect(recordKeyUse(oneTime('active'), { ...report, gatewayId: asGatewayId('gw-2') }, NOW)).toMatchObject({
      status: 'noop',
      code: 'REPORT_IGNORED',
    });
    expect(recordKeyUse(oneTime('used'), report, NOW)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_USED' });
    for (const status of ['revoking', 'revoked', 'expired', 'failed'] as const)
      expect(recordKeyUse(oneTime(status), report, NOW)).toMatchObject({ status: 'noop', code: 'REPORT_IGNORED' });
    expect(recordKeyUse(null, report, NOW)).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
  });
  it('a used key is not revoked or expired again', () => {
    expect(revokeKey(oneTime('used'), { reason: 'staff_revoked', cid }, NOW)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_USED' });
    expect(expireKey(oneTime('used'), { cid }, NOW + 2 * DAY)).toMatchObject({ status: 'noop' });
  });
});
