import { newCorrelationId } from '@tobira/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

describe.each(backends())('the main job, end to end (%s brokers and database)', (backend) => {
  let sys: System;
  beforeAll(async () => {
    sys = await new System(backend).start();
  });
  afterAll(async () => {
    await sys.stop();
  });

  describe('when a key is issued', () => {
    let keyId: string;
    const cid = newCorrelationId();

    it('the gateway acks the grant and the key becomes active in the cloud', async () => {
      const key = expectApplied(await sys.issuePin('4321', ['L1'], { cid }), 'issueKey');
      keyId = key.id;
      expect(key.status).toBe('issuing');
      await sys.waitKeyStatus(keyId, 'active');
    });

    it('the PIN opens the door at the sim lock', async () => {
      const r = await sys.fleet.lock('L1').present({ type: 'pin', value: '4321' }, { timeoutMs: 10_000 });
      expect(r.status).toBe('decided');
      expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
      expect(r.command).toMatchObject({ result: 'executed', code: null, bolt: 'unlocked' });
    });

    it('the access event reaches the cloud audit log with the person and the correlation id of the issue', async () => {
      const [entry] = await waitFor(async () => {
        const rows = await sys.cloud.listAudit({ gatewayId: sys.gatewayId, keyId });
        return rows.length > 0 && rows;
      }, 'the access event in the cloud audit log');
      expect(entry).toMatchObject({
        allowed: true,
        code: 'ALLOWED',
        personId: sys.personId,
        keyId,
        lockId: 'L1',
        doorId: sys.doors.L1,
        cid,
      });
    });

    it('the PIN is refused at a door the key does not name', async () => {
      const r = await sys.fleet.lock('L2').present({ type: 'pin', value: '4321' }, { timeoutMs: 10_000 });
      expect(r.decision).toMatchObject({ allowed: false, code: 'DOOR_NOT_PERMITTED' });
      expect(r.bolt).toBe('locked');
    });
  });

  describe('when a key is revoked', () => {
    it('it becomes revoked after the gateway acks, and the PIN is then denied with KEY_REVOKED', async () => {
      const key = expectApplied(await sys.issuePin('5555', ['L2']), 'issueKey');
      await sys.waitKeyStatus(key.id, 'active');
      const revoked = await sys.cloud.revokeKey({ keyId: key.id, reason: 'stay_cancelled' });
      expect(revoked).toMatchObject({ status: 'applied', code: 'KEY_REVOKE_QUEUED' });
      await sys.waitKeyStatus(key.id, 'revoked');
      const r = await sys.fleet.lock('L2').present({ type: 'pin', value: '5555' }, { timeoutMs: 10_000 });
      expect(r.decision).toMatchObject({ allowed: false, code: 'KEY_REVOKED' });
      expect(r.command).toBeNull();
      expect(r.bolt).toBe('locked');
      const again = await sys.cloud.revokeKey({ keyId: key.id, reason: 'stay_cancelled' });
      expect(again).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_REVOKED' });
    });
  });

  describe('when a credential is unknown', () => {
    it('is denied with UNKNOWN_CREDENTIAL and the denial is audited too', async () => {
      const r = await sys.fleet.lock('L1').present({ type: 'pin', value: '000000' }, { timeoutMs: 10_000 });
      expect(r.decision).toMatchObject({ allowed: false, code: 'UNKNOWN_CREDENTIAL' });
      await waitFor(
        async () => (await sys.cloud.listAudit({ gatewayId: sys.gatewayId })).some((e) => e.code === 'UNKNOWN_CREDENTIAL'),
        'denial in audit',
      );
    });
  });
});
