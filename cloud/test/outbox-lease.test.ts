import { randomUUID } from 'node:crypto';
import { ManualClock, newId, type DownlinkMessage } from '@tobira/shared';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openMqttLink, type MqttLink } from '../src/adapters/mqtt/link.js';
import { claim, type ClaimedRow } from '../src/adapters/outbox/claim.js';
import { Dispatcher } from '../src/adapters/outbox/dispatcher.js';
import { loadSigner } from '../src/adapters/signer.js';
import { noCrash } from '../src/app/crash.js';
import { issueKey } from '../src/app/keys.js';
import { cloudSigningKey } from './cloud-helpers.js';
import { DAY, T0, capturingLogger, deps, openTestDb, seed, testLog, type TestDb } from './helpers.js';
import { fakeGateway, startCutProxy, waitFor } from './mqtt-helpers.js';

/**
 * The dispatcher's claim lease against a slow broker and a broker that goes
 * away mid-batch. The dispatcher runs on a real MQTT link to a real broker;
 * its publish is wrapped so that a test can make the broker slow (the
 * injectable clock moves on while a publish is in flight) or cut it, and can
 * let a rival replica claim at that very moment (the real claim SQL).
 */
const LEASE_MS = 30_000;
const ROWS = 5;

interface OutboxRow {
  readonly seq: number;
  readonly status: string;
  readonly attempts: number;
  readonly lease_token: string | null;
  readonly next_attempt_at: number;
}

const grantsOf = (msgs: DownlinkMessage[]) => msgs.filter((m) => m.type === 'key.grant');

describe.each(pgBackends())('outbox claim lease on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  describe.each(mqttBackends())('with %s', (mqttBackend) => {
    let broker: MqttTestBroker;
    beforeAll(async () => {
      broker = await startMqttBackend(mqttBackend);
    });
    afterAll(async () => {
      await broker.stop();
    });

    /** A gateway with `ROWS` queued grants (seq 1..ROWS), a stand-in gateway listening, and nothing dispatching yet. */
    async function queued(clock: ManualClock) {
      const d = deps(t.db, clock);
      const s = await seed(d, { gatewayId: `gw-${broker.unique}-${newId().slice(-8)}` });
      for (let i = 0; i < ROWS; i++) {
        const o = await issueKey(d, {
          personId: s.personId,
          doors: [s.doorA],
          credential: { type: 'pin', value: String(300000 + i) },
          validFrom: T0,
          validUntil: T0 + DAY,
        });
        expect(o.status).toBe('applied');
      }
      const key = await cloudSigningKey();
      const gw = await fakeGateway({
        url: broker.url,
        gatewayId: s.gatewayId,
        pair: s.pair,
        cloudJwks: { keys: [key.publicJwk] },
        cloudIssuer: 'tobira-cloud',
        clock,
      });
      return { s, gw };
    }

    const rowsOf = async (gatewayId: string) =>
      (
        await t.db.query<OutboxRow>(
          'SELECT seq, status, attempts, lease_token, next_attempt_at FROM outbox WHERE gateway_id = $1 ORDER BY seq',
          [gatewayId],
        )
      ).rows;

    /** A rival replica's claim, exactly as its dispatcher would make it. */
    const rivalClaim = (clock: ManualClock, token: string) =>
      t.db.transaction((tx) => claim(tx, { token, now: clock.now(), leaseMs: LEASE_MS, limit: 100 }));

    /**
     * A dispatcher on a real link to `url`, whose every publish first runs `before(n)` (n = 1, 2, ...):
     * the hook plays the slow or vanishing broker. Answers how many publishes reached the real link.
     */
    async function dispatcherWith(url: string, clock: ManualClock, before: (n: number, link: MqttLink) => Promise<void>) {
      const link = openMqttLink(url, testLog, { clean: true, clientId: `cloud-lease-${newId().slice(-12)}` });
      expect(await link.waitConnected(5_000)).toBe(true);
      let publishes = 0;
      let calls = 0;
      const wrapped: MqttLink = {
        get connected() {
          return link.connected;
        },
        async publish(topic, payload, timeoutMs, qos) {
          await before(++calls, link);
          await link.publish(topic, payload, timeoutMs, qos);
          publishes++;
        },
        onMessage: (h) => link.onMessage(h),
        subscribe: (f) => link.subscribe(f),
        onConnect: (cb) => link.onConnect(cb),
        waitConnected: (ms) => link.waitConnected(ms),
        close: () => link.close(),
      };
      const { log, lines } = await capturingLogger();
      const key = await cloudSigningKey();
      const signer = await loadSigner('tobira-cloud', JSON.stringify(key.privateJwk), testLog);
      const dispatcher = new Dispatcher(
        { db: t.db, clock, log, crash: noCrash, link: wrapped, signer, random: () => 0.5 },
        { pollMs: 3_600_000, batch: ROWS, leaseMs: LEASE_MS, publishTimeoutMs: 5_000, baseMs: 1_000, maxMs: 60_000, maxAttempts: 10 },
      );
      return {
        dispatcher,
        lines,
        publishes: () => publishes,
        async close() {
          await dispatcher.stop();
          await link.close();
        },
      };
    }

    describe('when publishing a batch outlasts the claim lease', () => {
      it('a rival replica claiming meanwhile gets none of the batch: the lease is renewed before each publish, every row goes out once', async () => {
        const clock = new ManualClock(T0);
        const { s, gw } = await queued(clock);
        const rival: ClaimedRow[] = [];
        // each publish takes 0.6 lease: by the second one the batch's first lease has run out
        const d = await dispatcherWith(broker.url, clock, async () => {
          clock.advance(LEASE_MS * 0.6);
          rival.push(...(await rivalClaim(clock, randomUUID())).filter((r) => r.gatewayId === s.gatewayId));
        });
        try {
          await d.dispatcher.start();
          await waitFor(async () => (await rowsOf(s.gatewayId)).every((r) => r.status !== 'pending') || undefined, 'the batch claimed');
          await d.dispatcher.idle();
          expect(d.lines.filter((l) => Number(l.level) >= 50)).toEqual([]);
          expect(rival).toEqual([]);
          expect(await rowsOf(s.gatewayId)).toEqual(
            Array.from({ length: ROWS }, (_, i) => expect.objectContaining({ seq: i + 1, status: 'sent', attempts: 1, lease_token: null })),
          );
          expect(d.publishes()).toBe(ROWS);
          const got = await waitFor(
            () => (grantsOf(gw.received).length >= ROWS ? grantsOf(gw.received) : undefined),
            'every grant at the gateway',
          );
          // once each (the fake gateway verifies asynchronously, so its arrival order is not the wire's)
          expect(got.map((m) => m.seq).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5]);
          expect(d.lines.filter((l) => String(l.msg).includes('lease was lost'))).toEqual([]);
        } finally {
          await d.close();
          await gw.close();
        }
      });

      it('a dispatcher that stalled past its lease and lost the rows to a rival publishes none of them after the one in flight', async () => {
        const clock = new ManualClock(T0);
        const { s, gw } = await queued(clock);
        const token = randomUUID();
        let rival: ClaimedRow[] = [];
        // the first publish alone outlasts the lease, and a rival takes the whole batch while it hangs
        const d = await dispatcherWith(broker.url, clock, async (n) => {
          if (n !== 1) return;
          clock.advance(LEASE_MS * 1.5);
          rival = (await rivalClaim(clock, token)).filter((r) => r.gatewayId === s.gatewayId);
        });
        try {
          await d.dispatcher.start();
          await waitFor(async () => (await rowsOf(s.gatewayId)).every((r) => r.status !== 'pending') || undefined, 'the batch claimed');
          await d.dispatcher.idle();
          expect(rival.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
          // only the row already in flight went out; the rows it no longer holds stay the rival's, untouched
          expect(d.publishes()).toBe(1);
          expect(await rowsOf(s.gatewayId)).toEqual(
            Array.from({ length: ROWS }, (_, i) => expect.objectContaining({ seq: i + 1, status: 'sending', lease_token: token })),
          );
          const lost = d.lines.filter(
            (l) => l.msg === 'lease lost before publishing: another dispatcher claimed the row; not publishing it',
          );
          expect(lost.map((l) => l.seq)).toEqual([2, 3, 4, 5]);
          expect(lost.every((l) => typeof l.cid === 'string')).toBe(true);
        } finally {
          await d.close();
          await gw.close();
          // the rival is not a real dispatcher: its rows would be claimed by the next test's dispatcher once their lease ran out
          await t.db.query('DELETE FROM outbox WHERE gateway_id = $1', [s.gatewayId]);
        }
      });
    });

    describe('when a publish fails (the broker is up)', () => {
      it("the gateway's later rows of the batch wait behind the failed one (back to pending, unspent) and go out after it, in seq order", async () => {
        const clock = new ManualClock(T0);
        const { s, gw } = await queued(clock);
        const order: number[] = [];
        gw.client.on('message', (_topic, payload) => {
          const claims = JSON.parse(Buffer.from(payload.toString().split('.')[1] ?? '', 'base64url').toString()) as { seq?: number };
          if (typeof claims.seq === 'number') order.push(claims.seq);
        });
        // the second publish fails once (a broker refusal, not a cut)
        const d = await dispatcherWith(broker.url, clock, async (n) => {
          if (n === 2) throw new Error('refused by the broker');
        });
        try {
          await d.dispatcher.start();
          await waitFor(
            async () => (await rowsOf(s.gatewayId)).every((r) => r.status === 'pending' || r.status === 'sent') || undefined,
            'the pass done',
          );
          await d.dispatcher.idle();
          const rows = await rowsOf(s.gatewayId);
          expect(rows.map((r) => [r.seq, r.status, r.attempts])).toEqual([
            [1, 'sent', 1],
            [2, 'pending', 1],
            [3, 'pending', 0],
            [4, 'pending', 0],
            [5, 'pending', 0],
          ]);
          // seq 2 waits out its backoff, and nothing behind it is claimable meanwhile
          expect((await rivalClaim(clock, randomUUID())).filter((r) => r.gatewayId === s.gatewayId)).toEqual([]);
          clock.advance(60_000);
          d.dispatcher.wake();
          await waitFor(async () => (await rowsOf(s.gatewayId)).every((r) => r.status === 'sent') || undefined, 'all sent');
          await waitFor(() => order.length >= ROWS || undefined, 'all at the gateway');
          expect(order).toEqual([1, 2, 3, 4, 5]);
        } finally {
          await d.close();
          await gw.close();
        }
      });
    });

    describe('when the broker connection drops mid-batch', () => {
      it('the unsent rows go back to pending, due at once, with their attempt count unchanged; they go out when the broker returns', async () => {
        const clock = new ManualClock(T0);
        const { s, gw } = await queued(clock);
        const proxy = await startCutProxy(broker.url);
        // the third publish finds the broker gone
        const d = await dispatcherWith(proxy.url, clock, async (n, link) => {
          if (n !== 3) return;
          await proxy.cut();
          await waitFor(() => !link.connected, 'the link to see the cut');
        });
        try {
          await d.dispatcher.start();
          await waitFor(
            async () => (await rowsOf(s.gatewayId)).filter((r) => r.status === 'sent').length === 2 || undefined,
            'two rows sent before the cut',
          );
          await d.dispatcher.idle();
          expect(await rowsOf(s.gatewayId)).toEqual([
            expect.objectContaining({ seq: 1, status: 'sent', attempts: 1 }),
            expect.objectContaining({ seq: 2, status: 'sent', attempts: 1 }),
            ...[3, 4, 5].map((seq) =>
              expect.objectContaining({ seq, status: 'pending', attempts: 0, lease_token: null, next_attempt_at: clock.now() }),
            ),
          ]);
          expect(d.publishes()).toBe(2);
          expect(
            d.lines.find((l) => l.msg === 'broker connection lost mid-batch: unsent rows back to pending, no attempt spent'),
          ).toMatchObject({ released: 2 });
          await proxy.restore();
          await waitFor(
            async () => (await rowsOf(s.gatewayId)).every((r) => r.status === 'sent') || undefined,
            'the rest sent after the broker returned',
          );
          expect((await rowsOf(s.gatewayId)).map((r) => r.attempts)).toEqual([1, 1, 1, 1, 1]);
          const got = await waitFor(
            () => (new Set(grantsOf(gw.received).map((m) => m.seq)).size === ROWS ? grantsOf(gw.received) : undefined),
            'every seq at the gateway',
          );
          expect(new Set(got.map((m) => m.seq))).toEqual(new Set([1, 2, 3, 4, 5]));
        } finally {
          await d.close();
          await proxy.stop();
          await gw.close();
        }
      });
    });
  });
});
