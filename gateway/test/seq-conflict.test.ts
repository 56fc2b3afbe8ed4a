import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { asKeyId, newId } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { grant } from './fixtures.js';
import { PIN, runSite, waitFor, type Running } from './harness.js';

const PIN2 = '246810';

/**
 * A cloud whose database was restored to an earlier point hands out seqs the
 * gateway already applied. Those messages must not be dropped as duplicates
 * (a revoke among them would be lost while the cloud thinks it delivered):
 * the gateway fails closed and asks for a snapshot past both histories.
 */
describe.each(mqttBackends())('a cloud history that differs from the gateway (seq conflict) on %s', (backend) => {
  let broker: MqttTestBroker;
  let s: Running;
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
    s = await runSite(broker.url, broker.url, broker.unique);
  });
  afterEach(async () => {
    await s?.close();
    await broker.stop();
  });

  it('fails closed on a seq it applied under another id, sends no ack for it, keeps the lease down, and recovers from a snapshot', async () => {
    // history before the restore: key-1 at seq 1, key-2 at seq 2, and a lease
    await s.cloud.grant();
    await s.cloud.grant({ keyId: asKeyId('key-2'), credential: { type: 'pin', digest: s.f.digest(PIN2) } });
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq === 2 && s.gw.store.settings().leaseExpiresAt !== null, 'history applied');
    expect((await s.lock.present(PIN2)).code).toBe('ALLOWED');

    // a heartbeat from a cloud that knows only seq 1: the lease stands, and the gateway asks (the cloud then moves past it)
    // (resync requests are rate-limited, so the heartbeat is repeated until one goes out)
    const ahead = await waitFor(async () => {
      await s.cloud.heartbeat(1);
      return s.cloud.ofType('resync.request').find((m) => m.body.reason === 'ahead');
    }, 'ahead resync request');
    expect(ahead.body.lastAppliedSeq).toBe(2);
    expect(s.gw.store.settings().leaseExpiresAt).not.toBeNull();

    // the restored cloud knows only seq 1, and its next message (revoking key-1) gets seq 2 again
    const clash = await s.cloud.revoke('key-1', 1, 2);
    await waitFor(() => s.gw.store.settings().seqConflictAt !== null, 'conflict detected');
    expect(s.gw.store.db.prepare('SELECT status, result, code FROM inbox WHERE jti = ?').get(clash.jti)).toEqual({
      status: 'processed',
      result: 'refused',
      code: 'SEQ_CONFLICT',
    });
    expect(s.gw.store.settings()).toMatchObject({ appliedSeq: 2, leaseExpiresAt: null });
    const resync = await waitFor(
      () => s.cloud.ofType('resync.request').find((m) => m.body.reason === 'conflict'),
      'conflict resync request',
    );
    expect(resync.body.lastAppliedSeq).toBe(2);
    // fail closed: no ordinary key opens, and the clashing revoke was neither applied nor acknowledged
    expect((await s.lock.present(PIN)).code).toBe('CLOUD_STALE');
    expect((await s.lock.present(PIN2)).code).toBe('CLOUD_STALE');
    await s.cloud.heartbeat(2);
    await waitFor(() => s.gw.store.inboxByStatus().pending === undefined, 'heartbeat handled');
    expect(s.gw.store.settings().leaseExpiresAt).toBeNull();
    expect(s.cloud.ofType('ack').some((a) => a.body.ackOf === clash.jti)).toBe(false);
    expect(await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_seq_conflicts_total')).toMatch(/ 1$/m);

    // the cloud answers with a snapshot past both histories: key-1 revoked, key-2 unknown to it (made after its backup)
    const snapshot = await s.cloud.send({
      type: 'keyset.snapshot',
      body: { snapshotId: newId(), asOfSeq: 3, part: 1, parts: 1, keys: [], revoked: [{ keyId: 'key-1', version: 1 }] },
    });
    await waitFor(() => s.gw.store.settings().appliedSeq === 3, 'snapshot applied');
    expect(s.gw.store.settings()).toMatchObject({ seqConflictAt: null, snapshotSeq: 3 });
    s.cloud.seq = 3;
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().leaseExpiresAt !== null, 'lease again');
    expect((await s.lock.present(PIN)).code).toBe('KEY_REVOKED');
    expect((await s.lock.present(PIN2)).code).toBe('UNKNOWN_CREDENTIAL');
    expect(s.cloud.ofType('ack').some((a) => a.body.ackOf === snapshot.jti && a.body.keyId === 'key-1')).toBe(true);

    // a message still in flight from before the snapshot (seq <= its asOfSeq) is a plain duplicate, not a conflict
    const straggler = await s.cloud.send({
      type: 'key.grant',
      seq: 3,
      body: { key: grant({ keyId: asKeyId('key-3'), credential: { type: 'pin', digest: s.f.digest('135790') } }) },
    });
    const dup = await waitFor(() => s.cloud.ofType('ack').find((a) => a.body.ackOf === straggler.jti), 'straggler ack');
    expect(dup.body).toMatchObject({ result: 'noop', code: 'DUPLICATE_MESSAGE' });
    expect(s.gw.store.settings().seqConflictAt).toBeNull();
    // and the chain goes on
    await s.cloud.grant({ keyId: asKeyId('key-4'), credential: { type: 'pin', digest: s.f.digest('112233') } }, 4);
    await waitFor(() => s.gw.store.settings().appliedSeq === 4, 'seq 4 applied');
    expect((await s.lock.present('112233')).code).toBe('ALLOWED');
  });
});
