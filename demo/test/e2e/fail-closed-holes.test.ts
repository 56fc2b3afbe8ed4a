import { afterEach, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

const DAY = 86_400_000;

/**
 * The holes a review found by reading, attacked from outside the code with
 * the whole system: a revoke the dispatcher never delivers (I1), uplinks the
 * broker lost (I2), and a gateway whose clock is wrong (I2).
 */
describe.each(backends())('fail-closed holes, end to end (%s brokers and database)', (backend) => {
  let sys: System | undefined;
  afterEach(async () => {
    await sys?.stop();
    sys = undefined;
  });
  const present = async (s: System, lock: string, pin: string) => {
    const r = await s.fleet.lock(lock).present({ type: 'pin', value: pin }, { timeoutMs: 10_000 });
    expect(r.status).toBe('decided');
    return r.decision!;
  };
  const auditOf = async (s: System) => s.cloud.listAudit({ gatewayId: s.gatewayId, limit: 1000 });

  describe.each([
    ["held in the dispatcher's backoff", 'NEW.next_attempt_at := NEW.next_attempt_at + 86400000;'],
    ['dead-lettered', "NEW.status := 'dead'; NEW.attempts := 5; NEW.last_error := 'test: dead-lettered';"],
  ])('when a revoke is %s', (_what, stuck) => {
    it('the gateway is not kept fresh over it: it asks, gets it by resync, and the door denies the key', async () => {
      const s = (sys = await new System(backend).start());
      const key = expectApplied(await s.issuePin('1357', ['L1']), 'issue');
      await s.waitKeyStatus(key.id, 'active');
      expect((await present(s, 'L1', '1357')).code).toBe('ALLOWED');

      // From now on every revoke row is born stuck: the dispatcher never publishes it.
      await s.cloud.db.query(`CREATE FUNCTION test_stuck_revoke() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.type = 'key.revoke' THEN ${stuck} END IF; RETURN NEW; END $$`);
      await s.cloud.db.query('CREATE TRIGGER test_stuck_revoke BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION test_stuck_revoke()');
      expect(await s.cloud.revokeKey({ keyId: key.id, reason: 'credential_lost' })).toMatchObject({ status: 'applied' });

      // Heartbeats (every 250 ms) name the revoke's seq; the gateway is behind and asks; the replay carries the stuck row.
      await s.waitKeyStatus(key.id, 'revoked');
      expect((await present(s, 'L1', '1357')).code).toBe('KEY_REVOKED');
      const row = (await s.cloud.listOutbox(s.gatewayId)).find((r) => r.type === 'key.revoke');
      expect(row?.status).toBe(stuck.includes('dead') ? 'dead' : 'pending'); // never published by the dispatcher
      await waitFor(
        () => (s.gateway.store.settings().leaseExpiresAt ?? 0) > s.clock.now() && s.gateway.store.settings().appliedSeq === 2,
        'fresh again once caught up',
      );
    });
  });

  it('loses no access event when the broker loses what it queued for the cloud (the gateway sends again what the cloud never acknowledged)', async () => {
    const s = (sys = await new System(backend, { pgliteOnDisk: true, gatewayOverrides: { uplinkAckTimeoutMs: 1000 } }).start());
    const key = expectApplied(await s.issuePin('2468', ['L1']), 'issue');
    await s.waitKeyStatus(key.id, 'active');
    await s.stopCloud();
    for (let i = 0; i < 3; i++) expect((await present(s, 'L1', '2468')).code).toBe('ALLOWED');
    // The broker took them (PUBACK) into the cloud's persistent session...
    await waitFor(() => s.gateway.store.outboxDepth() === 0, 'the broker took every uplink');
    // ...which is lost: the cloud comes back under a session that never had them, as after a broker restarted without persistence.
    await s.startCloud({ clientId: `cloud-${s.gatewayId}-after-loss` });
    const rows = await waitFor(async () => {
      const a = await auditOf(s);
      return a.length >= 3 && a;
    }, 'all three events in the audit log');
    expect(new Set(rows.map((r) => r.eventId)).size).toBe(rows.length); // exactly once each
    expect(rows.filter((r) => r.code === 'ALLOWED')).toHaveLength(3);
    const eventsUnacked = () =>
      (
        s.gateway.store.db.prepare("SELECT count(*) AS n FROM outbox WHERE type = 'access.event' AND acked_at IS NULL").get() as {
          n: number;
        }
      ).n;
    await waitFor(() => eventsUnacked() === 0, 'the cloud acknowledged every event');
  });

  it('applies the events of a gateway whose clock reads two days behind, decided before it ever heard from the cloud, with its own times', async () => {
    const s = (sys = await new System(backend, { gatewayInProcess: false, gatewayClockOffsetMs: -2 * DAY }).start());
    s.proxy.cut();
    await s.startGatewayOnly();
    await waitFor(() => s.gateway.siteConnected, "the gateway's site link");
    // (the lock may not take the answer of a gateway whose clock is that far off: only the record matters here)
    // (one request per lock: a lock that never takes an answer is busy until it gives up)
    for (const lock of ['L1', 'L2']) await s.fleet.lock(lock).present({ type: 'pin', value: '0000' }, { timeoutMs: 1_000 });
    await waitFor(
      () => (s.gateway.store.db.prepare('SELECT count(*) AS n FROM access_log').get() as { n: number }).n === 2,
      'both decided',
    );
    s.proxy.restore();
    const rows = await waitFor(async () => {
      const a = await auditOf(s);
      return a.length >= 2 && a;
    }, 'both events in the audit log');
    expect(rows).toHaveLength(2);
    for (const r of rows) expect(r.at).toBeLessThan(s.clock.now() - DAY); // the gateway's own (wrong) time, kept
    expect(await s.cloud.listRejectedUplinks({ gatewayId: s.gatewayId })).toEqual([]);
  });

  it('applies the events of a gateway whose clock runs ten minutes ahead, stamped with proven time, not its wall clock', async () => {
    // (started without waiting for a lease: the test is about the events it sends)
    const s = (sys = await new System(backend, { gatewayInProcess: false, gatewayClockOffsetMs: 10 * 60_000 }).start());
    await s.startGatewayOnly();
    await waitFor(() => s.gateway.siteConnected, "the gateway's site link");
    // the ceiling exists once the cloud has answered this process's resync: before that the wall clock is all it has
    await waitFor(() => s.gateway.timeProven, 'the cloud proved the time');
    // (one request per lock: a lock that never takes an answer is busy until it gives up)
    for (const lock of ['L1', 'L2']) await s.fleet.lock(lock).present({ type: 'pin', value: '0000' }, { timeoutMs: 1_000 });
    const rows = await waitFor(async () => {
      const a = await auditOf(s);
      return a.length >= 2 && a;
    }, 'both events in the audit log');
    expect(new Set(rows.map((r) => r.eventId)).size).toBe(2);
    expect(await s.cloud.listRejectedUplinks({ gatewayId: s.gatewayId })).toEqual([]);
    const skew = await s.cloud.db.query<{ clock_skew_ms: string | null }>('SELECT clock_skew_ms FROM gateways WHERE id = $1', [
      s.gatewayId,
    ]);
    // trusted time is capped by the last proven cloud time (plus the 30 s tolerance): the ten minutes never reach the cloud
    expect(Number(skew.rows[0]?.clock_skew_ms)).toBeLessThanOrEqual(31_000);
  });
});
