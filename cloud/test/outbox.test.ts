import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ManualClock, systemClock, type DownlinkMessage } from '@tobira/shared';
import { issueKey } from '../src/app/keys.js';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backoffMs } from '../src/adapters/outbox/fail.js';
import { SimulatedCrash, crashAt } from '../src/app/crash.js';
import { newId } from '@tobira/shared';
import { DAY, T0, TEST_KEK, capturingLogger, openTestDb, seed, deps, type TestDb } from './helpers.js';
import { cloudSigningKey, startCloud } from './cloud-helpers.js';
import { fakeGateway, startCutProxy, waitFor } from './mqtt-helpers.js';

describe('backoff', () => {
  const p = { baseMs: 1000, maxMs: 60_000, maxAttempts: 5 };
  it('doubles per attempt, stays within [exp/2, exp] and is capped', () => {
    expect(backoffMs(1, p, 0)).toBe(500);
    expect(backoffMs(1, p, 0.999999)).toBe(999);
    expect(backoffMs(3, p, 0)).toBe(2000);
    expect(backoffMs(30, p, 0.5)).toBe(45_000);
    expect(backoffMs(30, p, 0.999999)).toBeLessThanOrEqual(60_000);
  });
});

const grantsOf = (msgs: DownlinkMessage[]) =>
  msgs.filter((m) => m.type === 'key.grant' || m.type === 'key.revoke') as Extract<DownlinkMessage, { type: 'key.grant' | 'key.revoke' }>[];

describe.each(pgBackends())('outbox dispatcher on %s', (pgBackend) => {
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

    async function setup(clock = new ManualClock(T0)) {
      const s = await seed(deps(t.db, clock), { gatewayId: `gw-${broker.unique}-${Math.random().toString(36).slice(2, 8)}` });
      const key = await cloudSigningKey();
      const gw = await fakeGateway({
        url: broker.url,
        gatewayId: s.gatewayId,
        pair: s.pair,
        cloudJwks: { keys: [key.publicJwk] },
        cloudIssuer: 'tobira-cloud',
        clock,
      });
      return { s, gw, clock };
    }
    const issueInput = (s: Awaited<ReturnType<typeof seed>>, i: number) => ({
      personId: s.personId,
      doors: [s.doorA],
      credential: { type: 'pin' as const, value: String(100000 + i) },
      validFrom: T0,
      validUntil: T0 + DAY,
    });

    it('publishes a queued grant, signed and carrying the command cid, and marks it sent after the PUBACK', async () => {
      const { s, gw, clock } = await setup();
      const { log, lines } = await capturingLogger();
      const cloud = await startCloud(t, broker.url, { clock, deps: { log } });
      try {
        const o = await cloud.issueKey(issueInput(s, 1));
        expect(o.status).toBe('applied');
        if (o.status !== 'applied') return;
        await waitFor(async () => (await cloud.listOutbox(s.gatewayId)).every((r) => r.status === 'sent'), 'row sent');
        const m = await waitFor(() => grantsOf(gw.received)[0], 'grant at the gateway');
        expect(m).toMatchObject({ type: 'key.grant', seq: 1, cid: o.cid, iss: 'tobira-cloud', aud: s.gatewayId, jti: o.emits[0]?.jti });
        expect(gw.rejected).toEqual([]);
        // every dispatcher line about the row carries the command's cid
        const rowLines = lines.filter((l) => l.jti === m.jti);
        expect(rowLines.some((l) => l.msg === 'outbox row sent')).toBe(true);
        expect(rowLines.every((l) => l.cid === o.cid)).toBe(true);
      } finally {
        await cloud.stop();
        await gw.close();
      }
    });

    it('two cloud instances on one database publish each row once', async () => {
      const { s, gw, clock } = await setup();
      const a = await startCloud(t, broker.url, { clock });
      const b = await startCloud(t, broker.url, { clock, ownPool: true });
      try {
        const results = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? a : b).issueKey(issueInput(s, i))));
        expect(results.every((r) => r.status === 'applied')).toBe(true);
        await waitFor(async () => (await a.listOutbox(s.gatewayId)).filter((r) => r.status === 'sent').length === 16, 'all rows sent');
        await waitFor(() => grantsOf(gw.received).length >= 16 || undefined, 'grants at the gateway');
        await a.flush();
        await b.flush();
        const got = grantsOf(gw.received);
        expect(new Set(got.map((m) => m.jti)).size).toBe(16);
        expect(got).toHaveLength(16);
        expect(got.map((m) => m.seq).sort((x, y) => x - y)).toEqual(Array.from({ length: 16 }, (_, i) => i + 1));
      } finally {
        await a.stop();
        await b.stop();
        await gw.close();
      }
    });

    it('while the broker is unreachable rows wait, and go out when it returns', async () => {
      const { s, gw, clock } = await setup();
      const proxy = await startCutProxy(broker.url);
      const cloud = await startCloud(t, proxy.url, { clock });
      try {
        await proxy.cut();
        await waitFor(() => !cloud.mqttConnected, 'cloud sees the broker gone');
        const o = await cloud.issueKey(issueInput(s, 1));
        expect(o.status).toBe('applied');
        await cloud.flush();
        expect((await cloud.listOutbox(s.gatewayId)).map((r) => r.status)).toEqual(['pending']);
        await proxy.restore();
        await waitFor(async () => (await cloud.listOutbox(s.gatewayId))[0]?.status === 'sent', 'row sent after the broker returned');
        const m = await waitFor(() => grantsOf(gw.received)[0], 'grant at the gateway');
        expect(m.seq).toBe(1);
      } finally {
        await cloud.stop();
        await proxy.stop();
        await gw.close();
      }
    });

    it('a crash after publish and before mark delivers again after restart, with the same jti and seq', async () => {
      const { s, gw, clock } = await setup();
      const crashing = await startCloud(t, broker.url, { clock, deps: { crash: crashAt(['afterPublishBeforeMark']) } });
      let jti: string;
      try {
        await crashing.issueKey(issueInput(s, 1));
        await waitFor(() => crashing.dispatcherCrashed, 'simulated crash');
        const first = await waitFor(() => grantsOf(gw.received)[0], 'first delivery');
        jti = first.jti;
        expect((await crashing.listOutbox(s.gatewayId)).map((r) => r.status)).toEqual(['sending']);
      } finally {
        await crashing.stop();
      }
      const restarted = await startCloud(t, broker.url, { clock });
      try {
        clock.advance(31_000); // past the dead instance's lease
        await restarted.flush();
        await waitFor(async () => (await restarted.listOutbox(s.gatewayId))[0]?.status === 'sent', 'row sent after restart');
        await waitFor(() => grantsOf(gw.received).length >= 2 || undefined, 'second delivery');
        const got = grantsOf(gw.received);
        expect(new Set(got.map((m) => m.jti))).toEqual(new Set([jti]));
        expect(got.every((m) => m.seq === 1)).toBe(true);
      } finally {
        await restarted.stop();
        await gw.close();
      }
    });

    it('an uplink whose handling crashed after the inbox insert is redelivered to the restarted cloud and applied once', async () => {
      const { s, gw, clock } = await setup();
      const clientId = `cloud-crash-${newId().slice(-12)}`;
      const env = { MQTT_CLIENT_ID: clientId, MQTT_CLEAN_SESSION: 'false' };
      let hits = 0;
      const crashing = await startCloud(t, broker.url, {
        clock,
        env,
        deps: {
          crash: (p) => {
            if (p === 'afterInboxInsertBeforeApply') {
              hits++;
              throw new SimulatedCrash(p);
            }
          },
        },
      });
      let keyId = '';
      let ackJti: string | undefined;
      try {
        const o = await crashing.issueKey(issueInput(s, 1));
        if (o.status !== 'applied') throw new Error('issue');
        keyId = o.state.id;
        const grant = await waitFor(() => grantsOf(gw.received)[0], 'grant');
        const ack = await gw.send({
          type: 'ack',
          seq: 1,
          cid: grant.cid,
          body: { ackOf: grant.jti, ackSeq: 1, result: 'applied', code: 'MESSAGE_APPLIED', keyId, keyVersion: 1 },
        });
        ackJti = ack.jti;
        await waitFor(() => hits > 0, 'crash while handling the ack');
        expect((await crashing.getKey(keyId))?.status).toBe('issuing');
      } finally {
        await crashing.stop();
      }
      const restarted = await startCloud(t, broker.url, { clock, env });
      try {
        await waitFor(async () => (await restarted.getKey(keyId))?.status === 'active', 'ack applied after restart');
        expect((await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [ackJti])).rowCount).toBe(1);
        expect((await restarted.listKeyHistory(keyId)).map((h) => h.event)).toEqual(['issue', 'grant_applied']);
      } finally {
        await restarted.stop();
        await gw.close();
      }
    });

    it('nothing is lost across broker cuts: the gateway ends with every seq, and its view equals the cloud key set', async () => {
      const { s, gw, clock } = await setup();
      const proxy = await startCutProxy(broker.url);
      const cloud = await startCloud(t, proxy.url, { clock, env: { PUBLISH_TIMEOUT_MS: '1000' } });
      let rnd = 42;
      const next = () => (rnd = (rnd * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      const keyIds: string[] = [];
      let cut = false;
      try {
        for (let step = 0; step < 40; step++) {
          const r = next();
          if (r < 0.1) {
            if (cut) await proxy.restore();
            else await proxy.cut();
            cut = !cut;
          } else if (r < 0.4 && keyIds.length > 0) {
            const keyId = keyIds[Math.floor(next() * keyIds.length)] ?? '';
            await cloud.revokeKey({ keyId, reason: 'staff_revoked' });
          } else {
            const o = await cloud.issueKey(issueInput(s, 1000 + step));
            if (o.status === 'applied') keyIds.push(o.state.id);
          }
        }
        if (cut) await proxy.restore();
        await waitFor(() => cloud.mqttConnected, 'reconnected');
        clock.advance(3_600_000); // any backoff from a publish that failed during a cut is over
        await cloud.flush();
        const rows = await waitFor(async () => {
          const r = await cloud.listOutbox(s.gatewayId);
          return r.every((x) => x.status === 'sent') ? r : undefined;
        }, 'every row sent');
        const bySeq = await waitFor(() => {
          const m = new Map(grantsOf(gw.received).map((x) => [x.seq, x]));
          return m.size === rows.length ? m : undefined;
        }, 'every seq at the gateway');
        // the same message under each seq, and the gateway's last word per key equals the cloud's key
        for (const row of rows) expect(bySeq.get(row.seq)?.jti).toBe(row.jti);
        for (const keyId of keyIds) {
          const k = await cloud.getKey(keyId);
          const last = [...bySeq.values()]
            .filter((m) => (m.type === 'key.grant' ? m.body.key.keyId : m.type === 'key.revoke' ? m.body.keyId : null) === keyId)
            .sort((a, b) => b.seq - a.seq)[0];
          expect(last?.type).toBe(k?.status === 'revoking' ? 'key.revoke' : 'key.grant');
          expect(last?.type === 'key.grant' ? last.body.key.version : last?.type === 'key.revoke' ? last.body.version : null).toBe(
            k?.version,
          );
        }
      } finally {
        await cloud.stop();
        await proxy.stop();
        await gw.close();
      }
    });

    // kill -9 needs a second process on the same database: PostgreSQL only (an in-memory PGlite lives in one process)
    if (pgBackend === 'postgres') {
      it('a cloud process killed with SIGKILL mid-dispatch loses nothing: a new one sends the rest, every seq arrives once in effect', async () => {
        const d = deps(t.db, systemClock as ManualClock);
        const s = await seed(d, { gatewayId: `gw-${broker.unique}-kill${Math.random().toString(36).slice(2, 6)}` });
        const key = await cloudSigningKey();
        const gw = await fakeGateway({
          url: broker.url,
          gatewayId: s.gatewayId,
          pair: s.pair,
          cloudJwks: { keys: [key.publicJwk] },
          cloudIssuer: 'tobira-cloud',
          clock: systemClock,
        });
        let child: ChildProcess | undefined;
        const sequencedAt = () => new Map(grantsOf(gw.received).map((m) => [m.seq, m.jti]));
        try {
          const now = Date.now();
          for (let i = 0; i < 30; i++) {
            const o = await issueKey(d, {
              personId: s.personId,
              doors: [s.doorA],
              credential: { type: 'pin', value: String(500000 + i) },
              validFrom: now,
              validUntil: now + DAY,
            });
            expect(o.status).toBe('applied');
          }
          child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/child-cloud.ts', import.meta.url))], {
            env: {
              ...process.env,
              DATABASE_URL: t.databaseUrl,
              MQTT_URL: broker.url,
              MQTT_CLIENT_ID: `cloud-child-${broker.unique}-${s.u}`,
              MQTT_CLEAN_SESSION: 'true',
              CLOUD_SIGNING_JWK: JSON.stringify(key.privateJwk),
              TOBIRA_KEK: TEST_KEK,
              DISPATCH_BATCH: '1',
              DISPATCH_LEASE_MS: '500',
              HEARTBEAT_INTERVAL_MS: '3600000',
              LOG_LEVEL: 'silent',
            },
            stdio: ['ignore', 'ignore', 'inherit'],
          });
          await waitFor(() => sequencedAt().size >= 3 || undefined, 'the child has sent some rows', 30_000);
          child.kill('SIGKILL');
          await new Promise((r) => child?.once('exit', r));
          const cloud = await startCloud(t, broker.url, { ownPool: true, deps: { clock: systemClock } });
          try {
            await waitFor(
              async () => (await cloud.listOutbox(s.gatewayId)).every((r) => r.status === 'sent') || undefined,
              'every row sent',
              30_000,
            );
            await waitFor(() => sequencedAt().size === 30 || undefined, 'every seq at the gateway');
            const bySeq = sequencedAt();
            for (const r of await cloud.listOutbox(s.gatewayId)) expect(bySeq.get(r.seq)).toBe(r.jti);
          } finally {
            await cloud.stop();
          }
        } finally {
          if (child && child.exitCode === null) child.kill('SIGKILL');
          await gw.close();
        }
      });
    }

    it('a commit in one replica wakes another replica through LISTEN/NOTIFY (no poll needed)', async () => {
      const { s, gw, clock } = await setup();
      const proxy = await startCutProxy(broker.url);
      const noPoll = { DISPATCH_POLL_MS: '3600000' };
      // writer: its broker link is cut, so its own dispatcher cannot send
      const writer = await startCloud(t, proxy.url, { clock, env: noPoll, ownPool: true });
      const sender = await startCloud(t, broker.url, { clock, env: noPoll });
      try {
        await proxy.cut();
        await waitFor(() => !writer.mqttConnected, 'writer offline');
        const o = await writer.issueKey(issueInput(s, 1));
        expect(o.status).toBe('applied');
        await waitFor(async () => (await sender.listOutbox(s.gatewayId))[0]?.status === 'sent', 'row sent by the other replica');
        await waitFor(() => grantsOf(gw.received)[0], 'grant at the gateway');
      } finally {
        await writer.stop();
        await sender.stop();
        await proxy.stop();
        await gw.close();
      }
    });

    it('sends heartbeats on its own timer', async () => {
      const { gw, clock } = await setup();
      const cloud = await startCloud(t, broker.url, { clock, env: { HEARTBEAT_INTERVAL_MS: '100' } });
      try {
        const hb = await waitFor(() => gw.received.find((m) => m.type === 'heartbeat'), 'heartbeat');
        expect(hb).toMatchObject({ body: { lastSeq: 0, intervalMs: 100 } });
      } finally {
        await cloud.stop();
        await gw.close();
      }
    });

    it('CRASH_AT from the config turns a crash point into a throw, leaving nothing half-written', async () => {
      const { s, gw, clock } = await setup();
      const cloud = await startCloud(t, broker.url, { clock, env: { CRASH_AT: 'afterOutboxInsertBeforeCommit' } });
      try {
        await expect(cloud.issueKey(issueInput(s, 1))).rejects.toBeInstanceOf(SimulatedCrash);
        expect(await cloud.listOutbox(s.gatewayId)).toEqual([]);
        expect((await t.db.query('SELECT 1 FROM keys WHERE person_id = $1', [s.personId])).rowCount).toBe(0);
      } finally {
        await cloud.stop();
        await gw.close();
      }
    });

    it('dead-letters a row that fails every attempt, shows it, and retries it on request', async () => {
      const { s, gw, clock } = await setup();
      const cloud = await startCloud(t, broker.url, { clock, env: { DISPATCH_MAX_ATTEMPTS: '3', DISPATCH_BACKOFF_BASE_MS: '1000' } });
      try {
        // a poison row: its body can never be signed (fails the schema)
        await t.db.transaction(async (tx) => {
          const seq = (
            await tx.query<{ last_seq: number }>(
              'UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq',
              [s.gatewayId],
            )
          ).rows[0]?.last_seq;
          await tx.query(
            `INSERT INTO outbox (gateway_id, seq, jti, type, body, cid, status, next_attempt_at, created_at) VALUES ($1,$2,gen_random_uuid(),'key.grant','{"key":{}}','cid-poison','pending',$3,$3)`,
            [s.gatewayId, seq, clock.now()],
          );
        });
        for (let i = 0; i < 3; i++) {
          await cloud.flush();
          clock.advance(60_000);
        }
        await cloud.flush();
        const dead = await cloud.listDeadLetters({ gatewayId: s.gatewayId });
        expect(dead).toEqual([
          expect.objectContaining({ seq: 1, attempts: 3, cid: 'cid-poison', lastError: expect.stringContaining('refusing to sign') }),
        ]);
        const good = await cloud.issueKey(issueInput(s, 2));
        expect(good.status).toBe('applied');
        await waitFor(
          async () => (await cloud.listOutbox(s.gatewayId)).find((r) => r.seq === 2)?.status === 'sent',
          'later row still sent',
        );
        expect(await cloud.retryDeadLetter(dead[0]?.id ?? -1)).toMatchObject({ status: 'applied' });
        await cloud.flush();
        // retried once more (and failed again): back to pending with a fresh attempt count
        expect((await cloud.listOutbox(s.gatewayId)).find((r) => r.seq === 1)).toMatchObject({ status: 'pending', attempts: 1 });
        expect(await cloud.retryDeadLetter(999_999_999)).toMatchObject({ status: 'refused', code: 'DEAD_LETTER_NOT_FOUND' });
      } finally {
        await cloud.stop();
        await gw.close();
      }
    });
  });
});
