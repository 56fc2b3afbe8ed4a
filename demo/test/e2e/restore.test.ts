import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

/**
 * The cloud's database is restored from a backup taken before the gateway's
 * last changes (the 3 a.m. disaster recovery). The cloud must not hand out
 * a seq the gateway already used (a revoke under it would be dropped as a
 * duplicate while the cloud saw it acknowledged); the gateway converges on
 * the restored database's key set — except that its tombstones keep a
 * revocation the backup lost in force (fail safe) — and keys managed after
 * that work again.
 */
describe.each(backends())('after the cloud database is restored from a backup (%s brokers and database)', (backend) => {
  let sys: System;
  const decide = async (pin: string) => {
    const r = await sys.fleet.lock('L1').present({ type: 'pin', value: pin }, { timeoutMs: 10_000 });
    if (r.status !== 'decided' || !r.decision) throw new Error(`no decision: ${r.status}`);
    return r.decision.code;
  };

  beforeAll(async () => {
    sys = await new System(backend, { locks: ['L1'], pgliteOnDisk: true }).start();
  });
  afterAll(async () => {
    await sys?.stop();
  });

  it(
    'the gateway converges on the restored key set (a lost revocation stays in force at the door), the cloud never reuses a seq, and keys managed afterwards work',
    { timeout: 120_000 },
    async () => {
      // before the backup: key A
      const a = expectApplied(await sys.issuePin('1357'), 'issue A');
      await sys.waitKeyStatus(a.id, 'active');
      await sys.stopCloud();
      await sys.backupCloudDatabase();
      await sys.startCloud();

      // after the backup: key B issued, key A revoked; the gateway applied both (seq 3)
      const b = expectApplied(await sys.issuePin('2468'), 'issue B');
      await sys.waitKeyStatus(b.id, 'active');
      expectApplied(await sys.cloud.revokeKey({ keyId: a.id, reason: 'credential_lost' }), 'revoke A');
      await sys.waitKeyStatus(a.id, 'revoked');
      expect(sys.gateway.store.settings().appliedSeq).toBe(3);
      expect(await decide('1357')).toBe('KEY_REVOKED');
      expect(await decide('2468')).toBe('ALLOWED');

      // disaster: the database goes back to the backup (seq 1, key A active, no key B)
      await sys.stopCloud();
      await sys.restoreCloudDatabase();
      await sys.startCloud();
      expect(await sys.keyStatus(a.id)).toBe('active');
      expect(await sys.keyStatus(b.id)).toBeUndefined();

      // the cloud's heartbeat names seq 1; the gateway (at 3) asks, the cloud moves past both histories and sends its key set
      await waitFor(() => sys.gateway.store.settings().snapshotSeq > 3 || undefined, 'the snapshot past both histories');
      const seqAfter = sys.gateway.store.settings().appliedSeq;
      const counter = await sys.cloud.db.query<{ last_seq: number }>('SELECT last_seq FROM gateway_seq WHERE gateway_id = $1', [
        sys.gatewayId,
      ]);
      expect(counter.rows[0]?.last_seq).toBeGreaterThanOrEqual(seqAfter);
      await waitFor(async () => (await decide('2468')) === 'UNKNOWN_CREDENTIAL' || undefined, 'key B gone with the restore');
      // A is active in the restored database, but the gateway's tombstone (version 2) holds back its version-1 grant:
      // the revocation the backup lost stays in force at the door, and the cloud still shows A active
      expect(await decide('1357')).toBe('KEY_REVOKED');
      expect(await sys.keyStatus(a.id)).toBe('active');

      // the operator revokes A again: a fresh seq, the gateway confirms, and the cloud agrees with the door
      expectApplied(await sys.cloud.revokeKey({ keyId: a.id, reason: 'credential_lost' }), 'revoke A again');
      await sys.waitKeyStatus(a.id, 'revoked');
      expect(await decide('1357')).toBe('KEY_REVOKED');
      const revokeRow = (await sys.cloud.listOutbox(sys.gatewayId)).find((r) => r.keyId === a.id && r.type === 'key.revoke');
      expect(revokeRow?.seq).toBeGreaterThan(3);
      expect(sys.gateway.store.db.prepare("SELECT count(*) AS n FROM inbox WHERE code = 'SEQ_CONFLICT'").get()).toEqual({ n: 0 });

      // and a new key works end to end
      const c = expectApplied(await sys.issuePin('8642'), 'issue C');
      await sys.waitKeyStatus(c.id, 'active');
      expect(await decide('8642')).toBe('ALLOWED');
    },
  );
});
