import { ManualClock, type DownlinkMessage } from '@tobira/shared';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/adapters/db/db.js';
import type { Cloud } from '../src/index.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { cloudSigningKey, startCloud } from './cloud-helpers.js';
import { fakeGateway, waitFor } from './mqtt-helpers.js';

type Heartbeat = Extract<DownlinkMessage, { type: 'heartbeat' }>;

/**
 * The database port with a gate a test can close on the signing-key read
 * (the round trip a heartbeat makes between reading the last seq and signing):
 * everything else goes straight through, so a revoke can commit while a
 * heartbeat waits there, as it can when that read is slow.
 */
function gatedDb(db: Db): { db: Db; hold(): void; held: () => boolean; release(): void } {
  let gate: Promise<void> | null = null;
  let open: (() => void) | null = null;
  let waiting = false;
  const gated: Db = {
    get kind() {
      return db.kind;
    },
    async query(sql, params) {
      if (gate !== null && /FROM signing_keys WHERE status IN/.test(sql)) {
        waiting = true;
        await gate;
        waiting = false;
      }
      return db.query(sql, params);
    },
    exec: (sql) => db.exec(sql),
    transaction: (fn) => db.transaction(fn),
    listen: (channel, onNotify) => db.listen(channel, onNotify),
    close: () => db.close(),
    poolStats: () => db.poolStats(),
  };
  return {
    db: gated,
    hold() {
      gate = new Promise<void>((r) => (open = r));
    },
    held: () => waiting,
    release() {
      gate = null;
      open?.();
    },
  };
}

describe.each(pgBackends())('heartbeat against a revoke committed while it is being made (%s)', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  describe.each(mqttBackends())('with %s', (mqttBackend) => {
    let broker: MqttTestBroker;
    let cloud: Cloud & { clock: ManualClock };
    const clock = new ManualClock(T0);
    const gate = { current: undefined as ReturnType<typeof gatedDb> | undefined };
    beforeAll(async () => {
      broker = await startMqttBackend(mqttBackend);
      gate.current = gatedDb(t.db);
      cloud = await startCloud(t, broker.url, { clock, deps: { db: gate.current.db } });
    });
    afterAll(async () => {
      await cloud.stop();
      await broker.stop();
    });

    it('never claims a time after a revoke whose seq it does not name', async () => {
      const g = gate.current!;
      const s = await seed(deps(t.db, clock), { gatewayId: `gw-${broker.unique}-hb` });
      const key = await cloudSigningKey();
      const gw = await fakeGateway({
        url: broker.url,
        gatewayId: s.gatewayId,
        pair: s.pair,
        cloudJwks: { keys: [key.publicJwk] },
        cloudIssuer: 'tobira-cloud',
        clock,
      });
      try {
        const issued = await cloud.issueKey({
          personId: s.personId,
          doors: [s.doorA],
          credential: { type: 'pin', value: '482913' },
          validFrom: T0,
          validUntil: T0 + DAY,
        });
        if (issued.status !== 'applied') throw new Error('issue');
        await waitFor(() => gw.received.some((m) => m.type === 'key.grant'), 'the grant');

        // The heartbeat reads the last seq handed out (the grant's), then waits on the signing-key read...
        g.hold();
        const beat = cloud.sendHeartbeats();
        await waitFor(() => g.held(), 'the heartbeat held at the signing-key read');
        // ...while 8 s pass and the revoke commits with the next seq.
        clock.advance(8_000);
        const revokedAt = clock.now();
        expect(await cloud.revokeKey({ keyId: issued.state.id, reason: 'credential_lost' })).toMatchObject({ status: 'applied' });
        clock.advance(1_000);
        g.release();
        await beat;

        const hb = await waitFor(() => gw.received.find((m): m is Heartbeat => m.type === 'heartbeat'), 'the heartbeat');
        const revoke = await waitFor(() => gw.received.find((m) => m.type === 'key.revoke'), 'the revoke');
        expect(hb.body.lastSeq).toBeLessThan(revoke.seq ?? 0); // it did not name the revoke...
        // ...so the lease it grants (iat + grace) must count from before the revoke, not after it
        expect(hb.iat * 1000).toBeLessThan(revokedAt);
      } finally {
        g.release();
        await gw.close();
      }
    });
  });
});
