import { copyFileSync, existsSync, rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

/**
 * The gateway's own SQLite file is restored from a backup taken before a
 * one-time key was used (a replaced SD card, a box rolled back). Its
 * consumed_keys row is gone with the restore; the cloud recorded the entry.
 * The restored gateway must not let the key in again.
 */
describe.each(backends())('a gateway restored from a backup (%s brokers and database)', (backend) => {
  let sys: System | undefined;
  afterEach(async () => {
    await sys?.stop();
    sys = undefined;
  });

  const files = (path: string) => [path, `${path}-wal`, `${path}-shm`];
  const copyDb = (from: string, to: string) => {
    for (const [i, f] of files(from).entries()) {
      const target = files(to)[i] as string;
      rmSync(target, { force: true });
      if (existsSync(f)) copyFileSync(f, target);
    }
  };

  /** What lock L1 was answered for a credential it relayed. */
  const presentAtL1 = async (s: System, credential: { type: 'pin' | 'mobile_token'; value: string }) => {
    const r = await s.fleet.lock('L1').present(credential, { timeoutMs: 10_000 });
    expect(r.status).toBe('decided');
    return r.decision!.code;
  };
  /** A key for L1's door, valid from an hour ago for a day, on the gateway. */
  const activeKeyAtL1 = async (s: System, k: { credential: { type: 'pin' | 'mobile'; value: string }; oneTime?: boolean }) => {
    const now = s.clock.now();
    const key = expectApplied(
      await s.cloud.issueKey({
        personId: s.personId,
        doors: [s.doors.L1 as string],
        credential: k.credential,
        validFrom: now - 3_600_000,
        validUntil: now + 86_400_000,
        ...(k.oneTime === true ? { oneTime: true } : {}),
      }),
      'issue',
    );
    await s.waitKeyStatus(key.id, 'active');
    return key;
  };

  /** The restored gateway is fresh again and holds every seq the cloud handed out. */
  const freshAndCaughtUp = async (s: System) => {
    const cloudLastSeq = async () =>
      Number(
        (await s.cloud.db.query<{ last_seq: string }>('SELECT last_seq FROM gateway_seq WHERE gateway_id = $1', [s.gatewayId])).rows[0]
          ?.last_seq ?? 0,
      );
    await waitFor(async () => {
      const st = s.gateway.store.settings();
      return (
        (s.gateway.timeProven &&
          st.seqConflictAt === null &&
          (st.leaseExpiresAt ?? 0) > s.clock.now() &&
          st.appliedSeq >= (await cloudLastSeq())) ||
        undefined
      );
    }, 'the restored gateway fresh and caught up');
  };

  it('does not let a used one-time key in again: the consumption reaches it as a sequenced revoke, and the signs of the restore make it resync in full', async () => {
    const s = (sys = await new System(backend, { locks: ['L1'], gatewayOverrides: { uplinkBatchMax: 1 } }).start());
    const present = (pin: string) => presentAtL1(s, { type: 'pin', value: pin });
    const key = await activeKeyAtL1(s, { credential: { type: 'pin', value: '975310' }, oneTime: true });

    // the backup, taken with the gateway stopped
    const path = s.gatewayConfig.sqlitePath;
    const backup = `${path}.bak`;
    await s.gateway.stop();
    copyDb(path, backup);
    await s.startGateway();
    await waitFor(() => s.gateway.timeProven || undefined, 'the restarted gateway proven');

    expect(await present('975310')).toBe('ALLOWED');
    expect(await present('975310')).toBe('KEY_USED');
    await s.waitKeyStatus(key.id, 'used');
    // the cloud has applied (and acknowledges) the entry's access.event
    await waitFor(() => s.gateway.store.settings().uplinkAckedSeq > 0 || undefined, 'the uplinks acknowledged');

    // disaster at the site: the gateway comes back on the backup
    await s.gateway.stop();
    copyDb(backup, path);
    await s.startGatewayOnly();

    // once it is fresh again and holds every seq the cloud handed out, the key stays out
    await freshAndCaughtUp(s);
    const code = await present('975310');
    expect(code).not.toBe('ALLOWED');
    expect(['KEY_REVOKED', 'KEY_USED', 'UNKNOWN_CREDENTIAL']).toContain(code);
    // two restarts and a full resync (the restore is seen, whichever of its uplink and the cloud's heartbeat came first)
  }, 120_000);

  it('does not let a used mobile token in again: a token issued before the gateway opened its store is refused after any start', async () => {
    const s = (sys = await new System(backend, { locks: ['L1'] }).start());
    const present = (token: string) => presentAtL1(s, { type: 'mobile_token', value: token });
    const key = await activeKeyAtL1(s, { credential: { type: 'mobile', value: 'phone-restore-0123456789' } });
    const path = s.gatewayConfig.sqlitePath;
    const backup = `${path}.bak`;
    await s.gateway.stop();
    copyDb(path, backup);
    await s.startGateway();
    await waitFor(() => s.gateway.timeProven || undefined, 'the restarted gateway proven');

    const t = await s.cloud.issueMobileToken({ keyId: key.id, ttlSeconds: 600 });
    if (t.status !== 'applied') throw new Error(`token: ${t.code}`);
    expect(await present(t.token)).toBe('ALLOWED');
    expect(await present(t.token)).toBe('MOBILE_TOKEN_REPLAYED');

    // the site comes back on the backup, which has no record of the token's use (its uplink may never have left)
    await s.gateway.stop();
    s.clock.advance(2_000);
    copyDb(backup, path);
    await s.startGatewayOnly();
    await freshAndCaughtUp(s);
    expect(await present(t.token)).toBe('MOBILE_TOKEN_BEFORE_START');
    // the phone asks for a new token, which opens
    const t2 = await s.cloud.issueMobileToken({ keyId: key.id, ttlSeconds: 600 });
    if (t2.status !== 'applied') throw new Error(`token: ${t2.code}`);
    expect(await present(t2.token)).toBe('ALLOWED');

    // restored again, on a wall clock an hour behind, then on one reset to 1970 (a flat clock battery): the
    // start is known on the cloud's clock, from the first proof, so the restored floor does not stand for it
    for (const offset of [-3_600_000, -s.clock.now()]) {
      await s.gateway.stop();
      s.clock.advance(2_000);
      copyDb(backup, path);
      await s.startGatewayOnly(offset);
      await freshAndCaughtUp(s);
      expect(await present(t2.token)).toBe('MOBILE_TOKEN_BEFORE_START');
    }
  }, 120_000);
});
