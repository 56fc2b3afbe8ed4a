import { fixedSigner } from '../src/adapters/signer.js';
import fc from 'fast-check';
import { Uplink } from '../src/app/uplink.js';
import { ManualClock, newCorrelationId, newId, newMessageId, type DownlinkMessage, type KeyPairJwk, type Schedule } from '@tobira/shared';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { generateSigningKeyPair, importSigningKey, signMessage, topics, type UplinkMessage } from '@tobira/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunkSnapshot } from '../src/app/resync.js';
import { getModeRequest, requestMode, type RequestModeInput } from '../src/app/modes.js';
import type { Cloud } from '../src/index.js';
import { DAY, T0, capturingLogger, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { cloudSigningKey, startCloud } from './cloud-helpers.js';
import { disconnectedLink, fakeGateway, waitFor, type FakeGateway } from './mqtt-helpers.js';

type Seq = Extract<DownlinkMessage, { type: 'key.grant' | 'key.revoke' }>;
const sequenced = (msgs: DownlinkMessage[]) => msgs.filter((m): m is Seq => m.type === 'key.grant' || m.type === 'key.revoke');

const LOBBY: Schedule = { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '08:00', end: '20:00' }] };

const cloud0 = (t: TestDb) => t.db.query('SELECT id FROM rejected_uplinks');

describe('snapshot chunking', () => {
  it('keeps every part under the budget and loses no key or tombstone', () => {
    const grant = (i: number) => ({
      keyId: `k-${i}`,
      version: 1,
      personId: `p-${i}`,
      credential: { type: 'pin' as const, digest: 'A'.repeat(43) },
      doors: Array.from({ length: 20 }, (_, d) => `door-${d}-with-a-long-name`),
      validFrom: 0,
      validUntil: 1,
      schedule: null,
      offlineCapable: false,
    });
    const keys = Array.from({ length: 400 }, (_, i) => grant(i)) as never[];
    const revoked = Array.from({ length: 300 }, (_, i) => ({ keyId: `r-${i}`, version: 2 }));
    const parts = chunkSnapshot(keys, revoked, 20_000);
    expect(parts.length).toBeGreaterThan(1);
    for (const p of parts) expect(JSON.stringify(p).length).toBeLessThan(22_000);
    expect(parts.flatMap((p) => p.keys)).toHaveLength(400);
    expect(parts.flatMap((p) => p.revoked)).toHaveLength(300);
    expect(chunkSnapshot([], [])).toEqual([{ keys: [], revoked: [] }]);
  });

  it('with the default budget, every signed part stays under the 64 KiB message limit', async () => {
    const key = await cloudSigningKey();
    const signing = await importSigningKey(key.privateJwk);
    const keys = Array.from({ length: 900 }, (_, i) => ({
      keyId: `key-${i}-${'x'.repeat(60)}`,
      version: 3,
      personId: `person-${i}-${'y'.repeat(60)}`,
      credential: { type: 'card' as const, digest: 'B'.repeat(43) },
      doors: Array.from({ length: 6 }, (_, d) => `door-${d}-${'z'.repeat(50)}`),
      validFrom: 1,
      validUntil: 2,
      schedule: { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2, 3, 4, 5], start: '08:00', end: '18:00' }] },
      offlineCapable: false,
    })) as never[];
    const revoked = Array.from({ length: 2000 }, (_, i) => ({ keyId: `gone-${i}-${'w'.repeat(40)}`, version: 7 }));
    const parts = chunkSnapshot(keys, revoked);
    expect(parts.length).toBeGreaterThan(2);
    const snapshotId = newId();
    for (const [i, p] of parts.entries()) {
      const { token } = await signMessage<DownlinkMessage>(
        signing,
        'tobira-cloud',
        {
          type: 'keyset.snapshot',
          aud: 'gw-1',
          cid: 'c-1',
          body: { snapshotId, asOfSeq: 9, part: i + 1, parts: parts.length, ...p },
        } as never,
        new ManualClock(T0),
      );
      expect(Buffer.byteLength(token)).toBeLessThanOrEqual(64 * 1024);
    }
  });
});

describe.each(pgBackends())('uplink inbox on %s', (pgBackend) => {
  let t: TestDb;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
  });
  afterAll(async () => {
    await t.close();
  });

  describe('fuzzed uplinks', () => {
    it('never crash the inbox: every malformed payload or topic is rejected and recorded', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      // the inbox's own port, disconnected: fuzzing needs no broker (nothing here publishes)
      const key = await cloudSigningKey();
      const inbox = new Uplink(d, {
        link: disconnectedLink,
        signer: fixedSigner('tobira-cloud', await importSigningKey(key.privateJwk), { keys: [key.publicJwk] }),
        replayMax: 10,
        publishTimeoutMs: 100,
      });
      const before = (await cloud0(t)).rowCount;
      let runs = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(
            fc.constant(topics.gatewayUp(s.gatewayId)),
            fc.constant(topics.gatewayPresence(s.gatewayId)),
            fc.string({ maxLength: 80 }),
            fc.constant('tobira/v1/gw/+/up'),
          ),
          fc.oneof(
            fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
            fc.string({ maxLength: 300 }).map((x) => Buffer.from(x)),
            fc
              .tuple(fc.base64String(), fc.base64String(), fc.base64String())
              .map(([a, b, c]) => Buffer.from(`${a}.${b}.${c}`.replace(/[+/=]/g, '_'))),
            fc.constant(Buffer.alloc(70 * 1024, 65)),
            // JSON.parse quotes bad input in its message: NUL and control bytes must still be storable
            fc.constant(Buffer.from([0, 1, 2, 123, 0])),
          ),
          async (topic, payload) => {
            runs++;
            await inbox.handle(topic, payload);
          },
        ),
        { numRuns: 150 },
      );
      const after = (await cloud0(t)).rowCount;
      expect(after - before).toBeGreaterThan(runs / 2);
      expect((await t.db.query('SELECT 1 FROM uplink_inbox WHERE gateway_id = $1', [s.gatewayId])).rowCount).toBe(0);
    });
  });

  describe('when garbage floods in', () => {
    it('keeps rejected_uplinks bounded by rows (the newest), not only by age', async () => {
      const d = deps(t.db);
      const s = await seed(d);
      const key = await cloudSigningKey();
      const inbox = new Uplink(d, {
        link: disconnectedLink,
        signer: fixedSigner('tobira-cloud', await importSigningKey(key.privateJwk), { keys: [key.publicJwk] }),
        replayMax: 10,
        publishTimeoutMs: 100,
        rejectedMaxRows: 5,
      });
      for (let i = 0; i < 12; i++) await inbox.handle(topics.gatewayUp(s.gatewayId), Buffer.from(`garbage ${i}`));
      const rows = await t.db.query<{ detail: string }>('SELECT detail FROM rejected_uplinks ORDER BY id');
      expect(rows.rowCount).toBe(5);
      expect(rows.rows.at(-1)?.detail).toBeDefined();
      expect((await t.db.query('SELECT 1 FROM rejected_uplinks WHERE gateway_id = $1', [s.gatewayId])).rowCount).toBe(5); // the newest are this flood's
    });
  });

  describe.each(mqttBackends())('with %s', (mqttBackend) => {
    let broker: MqttTestBroker;
    let cloud: Cloud & { clock: ManualClock };
    const clock = new ManualClock(T0);
    beforeAll(async () => {
      broker = await startMqttBackend(mqttBackend);
      cloud = await startCloud(t, broker.url, { clock, env: { RESYNC_REPLAY_MAX: '3' } });
    });
    afterAll(async () => {
      await cloud.stop();
      await broker.stop();
    });

    let n = 0;
    /** `gwClock`: the fake gateway's own clock (default: the cloud's). */
    async function setup(gwClock: { now(): number } = clock) {
      const s = await seed(deps(t.db, clock), { gatewayId: `gw-${broker.unique}-u${++n}` });
      const key = await cloudSigningKey();
      const gw = await fakeGateway({
        url: broker.url,
        gatewayId: s.gatewayId,
        pair: s.pair,
        cloudJwks: { keys: [key.publicJwk] },
        cloudIssuer: 'tobira-cloud',
        clock: gwClock,
      });
      return { s, gw };
    }
    const issue = (s: Awaited<ReturnType<typeof seed>>, i = 1) =>
      cloud.issueKey({
        personId: s.personId,
        doors: [s.doorA],
        credential: { type: 'pin', value: String(200000 + i) },
        validFrom: T0,
        validUntil: T0 + DAY,
      });
    let upSeq = 0;
    const ack = (gw: FakeGateway, m: Seq, result: 'applied' | 'refused' = 'applied') =>
      gw.send({
        type: 'ack',
        seq: ++upSeq,
        cid: m.cid,
        body: {
          ackOf: m.jti,
          ackSeq: m.seq,
          result,
          code: result === 'applied' ? 'MESSAGE_APPLIED' : 'MESSAGE_REJECTED',
          keyId: m.type === 'key.grant' ? m.body.key.keyId : m.type === 'key.revoke' ? m.body.keyId : null,
          keyVersion: m.type === 'key.grant' ? m.body.key.version : m.type === 'key.revoke' ? m.body.version : null,
        },
      });
    const statusOf = async (keyId: string) => (await cloud.getKey(keyId))?.status;

    it('an ack of the grant activates the key, an ack of the revoke confirms it', async () => {
      const { s, gw } = await setup();
      try {
        const o = await issue(s);
        if (o.status !== 'applied') throw new Error('issue');
        const grant = await waitFor(() => sequenced(gw.received)[0], 'grant');
        await ack(gw, grant);
        await waitFor(async () => (await statusOf(o.state.id)) === 'active', 'key active');
        await cloud.revokeKey({ keyId: o.state.id, reason: 'staff_revoked' });
        const revoke = await waitFor(() => sequenced(gw.received).find((m) => m.type === 'key.revoke'), 'revoke');
        expect(revoke).toMatchObject({ seq: 2, body: { version: 2, reason: 'staff_revoked' } });
        await ack(gw, revoke);
        await waitFor(async () => (await statusOf(o.state.id)) === 'revoked', 'key revoked');
        expect(await cloud.revokeKey({ keyId: o.state.id, reason: 'staff_revoked' })).toMatchObject({
          status: 'noop',
          code: 'KEY_ALREADY_REVOKED',
        });
        const h = await cloud.listKeyHistory(o.state.id);
        expect(h.map((x) => x.toStatus)).toEqual(['issuing', 'active', 'revoking', 'revoked']);
        expect(h[1]?.cid).toBe(o.cid);
      } finally {
        await gw.close();
      }
    });

    it('a refused grant fails the key', async () => {
      const { s, gw } = await setup();
      try {
        const o = await issue(s);
        if (o.status !== 'applied') throw new Error('issue');
        const grant = await waitFor(() => sequenced(gw.received)[0], 'grant');
        await ack(gw, grant, 'refused');
        await waitFor(async () => (await statusOf(o.state.id)) === 'failed', 'key failed');
      } finally {
        await gw.close();
      }
    });

    it('an access event is attributed to the holder the cloud has on record for its key', async () => {
      const { s, gw } = await setup();
      try {
        const o = await issue(s, 7);
        if (o.status !== 'applied') throw new Error('issue');
        await gw.send({
          type: 'access.event',
          seq: 1,
          cid: o.cid,
          body: {
            eventId: newId(),
            requestId: 'r-9',
            lockId: 'lock-1',
            doorId: s.doorA,
            at: T0,
            allowed: true,
            code: 'ALLOWED',
            keyId: o.state.id,
            keyVersion: 1,
            personId: null,
            credentialType: 'pin',
            commandId: null,
          },
        });
        const [a] = await waitFor(async () => {
          const rows = await cloud.listAudit({ gatewayId: s.gatewayId });
          return rows.length > 0 ? rows : undefined;
        }, 'audit row');
        expect(a).toMatchObject({ personId: s.personId, keyId: o.state.id, cid: o.cid });
        expect(await cloud.listAudit({ personId: s.personId })).toHaveLength(1);
      } finally {
        await gw.close();
      }
    });

    it("a gateway's access event naming another gateway's door or key is refused WRONG_GATEWAY, in no audit", async () => {
      const a = await setup();
      const b = await setup();
      try {
        const o = await issue(a.s, 8);
        if (o.status !== 'applied') throw new Error('issue');
        const forged = (seq: number, doorId: string, keyId: string | null) =>
          b.gw.send({
            type: 'access.event',
            seq,
            cid: o.cid,
            body: {
              eventId: newId(),
              requestId: `forged-${seq}`,
              lockId: 'lock-1',
              doorId,
              at: T0,
              allowed: true,
              code: 'ALLOWED',
              keyId,
              keyVersion: keyId === null ? null : 1,
              personId: a.s.personId,
              credentialType: 'pin',
              commandId: null,
            },
          });
        await forged(1, a.s.doorA, o.state.id);
        await forged(2, a.s.doorA, null);
        await forged(3, b.s.doorA, o.state.id);
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE gateway_id = $1', [b.s.gatewayId])).rowCount === 3,
          'three inbox rows',
        );
        const rows = await t.db.query<{ result: string; code: string }>(
          'SELECT result, code FROM uplink_inbox WHERE gateway_id = $1 ORDER BY seq',
          [b.s.gatewayId],
        );
        expect(rows.rows).toEqual([
          { result: 'refused', code: 'WRONG_GATEWAY' },
          { result: 'refused', code: 'WRONG_GATEWAY' },
          { result: 'refused', code: 'WRONG_GATEWAY' },
        ]);
        expect(await cloud.listAudit({ keyId: o.state.id })).toEqual([]);
        expect(await cloud.listAudit({ personId: a.s.personId })).toEqual([]);
        expect(await cloud.listAudit({ gatewayId: b.s.gatewayId })).toEqual([]);
      } finally {
        await a.gw.close();
        await b.gw.close();
      }
    });

    it('a duplicate uplink is applied once', async () => {
      const { s, gw } = await setup();
      try {
        const event = {
          type: 'access.event',
          seq: 1,
          jti: newMessageId(),
          body: {
            eventId: newId(),
            requestId: 'r-1',
            lockId: 'lock-1',
            doorId: s.doorA,
            at: T0,
            allowed: true,
            code: 'ALLOWED',
            keyId: 'k-1',
            keyVersion: 1,
            personId: s.personId,
            credentialType: 'pin',
            commandId: newId(),
          },
        };
        const sent = await gw.send(event);
        await gw.send(event); // same jti: a QoS 1 redelivery
        await gw.send({ ...event, seq: 2, jti: newMessageId() }); // same event id under a new message
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE gateway_id = $1', [s.gatewayId])).rowCount === 2,
          'two inbox rows',
        );
        const audit = await cloud.listAudit({ gatewayId: s.gatewayId });
        expect(audit).toEqual([expect.objectContaining({ personId: s.personId, cid: sent.cid, allowed: true, code: 'ALLOWED', seq: 1 })]);
      } finally {
        await gw.close();
      }
    });

    it('applies an access event whose uplink seq was used before by another message (a gateway whose store was reset)', async () => {
      const { s, gw } = await setup();
      try {
        const ev = () => ({
          type: 'access.event',
          seq: 1,
          body: {
            eventId: newId(),
            requestId: 'r',
            lockId: 'lock-1',
            doorId: null,
            at: T0,
            allowed: false,
            code: 'UNKNOWN_CREDENTIAL',
            keyId: null,
            keyVersion: null,
            personId: null,
            credentialType: 'pin',
            commandId: null,
          },
        });
        await gw.send(ev());
        await gw.send(ev());
        await waitFor(async () => (await cloud.listAudit({ gatewayId: s.gatewayId })).length === 2, 'both events in the audit log');
        expect(await cloud.listRejectedUplinks({ gatewayId: s.gatewayId })).toEqual([]);
      } finally {
        await gw.close();
      }
    });

    it('records gaps in a gateway uplink seq, and a late message fills its gap', async () => {
      const { s, gw } = await setup();
      try {
        const ev = (seq: number) => ({
          type: 'access.event',
          seq,
          body: {
            eventId: newId(),
            requestId: `r-${seq}`,
            lockId: 'lock-1',
            doorId: null,
            at: T0 + seq,
            allowed: false,
            code: 'UNKNOWN_CREDENTIAL',
            keyId: null,
            keyVersion: null,
            personId: null,
            credentialType: 'pin',
            commandId: null,
          },
        });
        for (const seq of [1, 2, 5, 7]) await gw.send(ev(seq));
        await waitFor(async () => (await cloud.listAudit({ gatewayId: s.gatewayId })).length === 4, 'four events');
        expect((await cloud.listAudit({ gatewayId: s.gatewayId })).every((a) => a.personId === null)).toBe(true);
        expect(await cloud.listUplinkGaps(s.gatewayId)).toEqual([
          { fromSeq: 3, toSeq: 4 },
          { fromSeq: 6, toSeq: 6 },
        ]);
        await gw.send(ev(6));
        await waitFor(async () => (await cloud.listAudit({ gatewayId: s.gatewayId })).length === 5, 'five events');
        expect(await cloud.listUplinkGaps(s.gatewayId)).toEqual([{ fromSeq: 3, toSeq: 4 }]);
        // after the retention purge, purged seqs are not reported as missing
        const start = clock.now();
        try {
          clock.advance(8 * DAY);
          await gw.send(ev(9));
          await waitFor(async () => (await cloud.listAudit({ gatewayId: s.gatewayId })).length === 6, 'six events');
          await cloud.purge(); // purges seqs 1..7 (received 8 days ago), keeps 9
          expect(await cloud.listUplinkGaps(s.gatewayId)).toEqual([{ fromSeq: 8, toSeq: 8 }]);
        } finally {
          clock.set(start);
        }
      } finally {
        await gw.close();
      }
    });

    describe('bad uplinks are rejected with a code, recorded and never applied', () => {
      let other: KeyPairJwk;
      beforeAll(async () => {
        other = await generateSigningKeyPair();
      });

      it.each([
        ['forged (signed with a key the gateway never registered)', 'UNKNOWN_KID'],
        ['tampered after signing', 'BAD_SIGNATURE'],
        ['addressed to another audience', 'WRONG_AUDIENCE'],
        ['signed by another issuer', 'WRONG_ISSUER'],
        ['not a JWS at all', 'MALFORMED'],
        ['on the topic of an unknown gateway', 'UNKNOWN_GATEWAY'],
      ])('%s → %s', async (_what, code) => {
        const { s, gw } = await setup();
        try {
          const o = await issue(s);
          if (o.status !== 'applied') throw new Error('issue');
          const grant = await waitFor(() => sequenced(gw.received)[0], 'grant');
          const body = { ackOf: grant.jti, ackSeq: 1, result: 'applied', code: 'MESSAGE_APPLIED', keyId: o.state.id, keyVersion: 1 };
          const sign = async (key: KeyPairJwk, over: Record<string, unknown> = {}, issuer = s.gatewayId) =>
            (
              await signMessage<UplinkMessage>(
                await importSigningKey(key.privateJwk),
                issuer,
                { type: 'ack', aud: 'tobira-cloud', seq: 1, cid: grant.cid, body, ...over } as never,
                clock,
              )
            ).token;
          let topic = topics.gatewayUp(s.gatewayId);
          let payload: string;
          switch (code) {
            case 'UNKNOWN_KID':
              payload = await sign(other);
              break;
            case 'BAD_SIGNATURE': {
              const [h, p, sig] = (await sign(s.pair)).split('.');
              const claims = JSON.parse(Buffer.from(p ?? '', 'base64url').toString()) as { body: { result: string } };
              claims.body.result = 'refused';
              payload = `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${sig}`;
              break;
            }
            case 'EXPIRED':
              payload = await sign(s.pair, { ttlSeconds: 60 });
              clock.advance(10 * 60_000);
              break;
            case 'WRONG_AUDIENCE':
              payload = await sign(s.pair, { aud: 'someone-else' });
              break;
            case 'WRONG_ISSUER':
              payload = await sign(s.pair, {}, 'gw-impostor');
              break;
            case 'UNKNOWN_GATEWAY':
              payload = await sign(s.pair);
              topic = topics.gatewayUp(`${s.gatewayId}-x`);
              break;
            default:
              payload = 'not a jws {';
          }
          await gw.sendRaw(payload, topic);
          const gwId = code === 'UNKNOWN_GATEWAY' ? `${s.gatewayId}-x` : s.gatewayId;
          const rejected = await waitFor(async () => (await cloud.listRejectedUplinks({ gatewayId: gwId }))[0], 'rejection recorded');
          expect(rejected.code).toBe(code);
          expect(await statusOf(o.state.id)).toBe('issuing');
          expect((await t.db.query('SELECT 1 FROM uplink_inbox WHERE gateway_id = $1', [s.gatewayId])).rowCount).toBe(0);
        } finally {
          await gw.close();
        }
      });
    });

    describe('resync', () => {
      const request = (gw: FakeGateway, lastAppliedSeq: number) =>
        gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq, reason: 'gap' } });

      it('answers up_to_date, replays a short gap with the same jti and seq, and snapshots a long one', async () => {
        const { s, gw } = await setup();
        try {
          const keys = [];
          for (let i = 0; i < 4; i++) keys.push(await issue(s, i));
          await cloud.revokeKey({ keyId: keys[0]?.status === 'applied' ? keys[0].state.id : '', reason: 'credential_lost' });
          await waitFor(() => sequenced(gw.received).length >= 5 || undefined, 'five sequenced messages');
          const original = new Map(sequenced(gw.received).map((m) => [m.seq, m.jti]));

          await request(gw, 5);
          const upToDate = await waitFor(() => gw.received.find((m) => m.type === 'resync.answer'), 'answer');
          expect(upToDate).toMatchObject({ body: { mode: 'up_to_date', toSeq: 5 } });

          gw.received.length = 0;
          await request(gw, 3);
          await waitFor(() => sequenced(gw.received).length >= 2 || undefined, 'replay');
          expect(gw.received.find((m) => m.type === 'resync.answer')).toMatchObject({ body: { mode: 'replay', fromSeq: 4, toSeq: 5 } });
          // the fake gateway verifies asynchronously, so arrival order is not kept here: compare by seq
          expect(
            sequenced(gw.received)
              .map((m) => [m.seq, m.jti])
              .sort((a, b) => Number(a[0]) - Number(b[0])),
          ).toEqual([
            [4, original.get(4)],
            [5, original.get(5)],
          ]);

          gw.received.length = 0;
          await request(gw, 0);
          const snap = await waitFor(() => gw.received.find((m) => m.type === 'keyset.snapshot'), 'snapshot');
          expect(gw.received.find((m) => m.type === 'resync.answer')).toMatchObject({ body: { mode: 'snapshot', toSeq: 5 } });
          if (snap.type !== 'keyset.snapshot') throw new Error('type');
          expect(snap.body).toMatchObject({ asOfSeq: 5, part: 1, parts: 1 });
          expect(snap.body.keys.map((k) => k.keyId).sort()).toEqual(
            keys
              .slice(1)
              .map((k) => (k.status === 'applied' ? k.state.id : ''))
              .sort(),
          );
          expect(snap.body.revoked).toEqual([{ keyId: keys[0]?.status === 'applied' ? keys[0].state.id : '', version: 2 }]);
          // the snapshot's grants carry the display names the cloud holds now, as an issue's grant does
          expect(snap.body.keys.map((k) => [k.personName, k.doorNames])).toEqual(keys.slice(1).map(() => ['Hana', { [s.doorA]: 'A' }]));
        } finally {
          await gw.close();
        }
      });
    });

    it('a snapshot carries the trusted cloud keys and the modes it covers; its ack settles those mode requests (MODE_SNAPSHOT_COVERED), once, for that gateway only, and no later one', async () => {
      const { s, gw } = await setup();
      const other = await setup();
      try {
        const d = deps(t.db, clock);
        const mode = (input: Partial<RequestModeInput>) =>
          requestMode(d, {
            scope: null,
            siteId: s.siteId,
            mode: null,
            passage: null,
            by: 'ops',
            reason: null,
            cid: newCorrelationId(),
            ...input,
          });
        await issue(s, 31);
        const lockdown = await mode({ mode: 'lockdown', reason: 'drill' });
        const passage = await mode({ passage: { doorIds: [s.doorA], schedule: LOBBY } });
        const normal = await mode({ mode: 'normal' });
        await issue(s, 32);
        if (lockdown.status !== 'applied' || passage.status !== 'applied' || normal.status !== 'applied') throw new Error('mode');
        // the gateway never acked a site.mode: it catches up from 0 by snapshot (more than RESYNC_REPLAY_MAX behind)
        gw.received.length = 0;
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 0, reason: 'startup' } });
        const snap = await waitFor(() => gw.received.find((m) => m.type === 'keyset.snapshot'), 'snapshot');
        if (snap.type !== 'keyset.snapshot') throw new Error('type');
        expect(snap.body.asOfSeq).toBe(5);
        const signer = await cloudSigningKey();
        expect(snap.body.trustedKeys).toEqual({
          add: [{ jwk: expect.objectContaining({ kid: signer.kid, x: signer.publicJwk.x }), notBefore: expect.any(Number) }],
          retire: [],
        });
        expect(snap.body.modes).toEqual({
          mode: { seq: 4, requestId: normal.state.requestId, mode: 'normal', by: 'ops', reason: null },
          passage: [{ seq: 3, requestId: passage.state.requestId, doorId: s.doorA, schedule: LOBBY, by: 'ops', reason: null }],
        });
        // signing-key deliveries of this gateway: one the snapshot covers (skipped as DUPLICATE_MESSAGE), one past it
        await t.db.query(
          `INSERT INTO signing_key_deliveries (kid, step, gateway_id, jti, seq, queued_at, acked_at, result, code)
           VALUES ($1, 'publish', $2, $3, 2, 1, 1, 'noop', 'DUPLICATE_MESSAGE'), ($1, 'retire', $2, $4, 99, 1, NULL, NULL, NULL)`,
          [signer.kid, s.gatewayId, newMessageId(), newMessageId()],
        );
        const deliveries = async () =>
          (
            await t.db.query<{ step: string; result: string | null; code: string | null }>(
              'SELECT step, result, code FROM signing_key_deliveries WHERE gateway_id = $1 ORDER BY step',
              [s.gatewayId],
            )
          ).rows;
        // a request queued after the snapshot was read is not covered by it
        const later = await mode({ mode: 'lockdown' });
        if (later.status !== 'applied') throw new Error('later');
        const wholeAck = (g: FakeGateway, code = 'SNAPSHOT_APPLIED') =>
          g.send({
            type: 'ack',
            seq: ++upSeq,
            cid: snap.cid,
            body: { ackOf: snap.jti, ackSeq: null, result: 'applied', code, keyId: null, keyVersion: null },
          });
        const statusOf = async (requestId: string) => (await getModeRequest(d, requestId, null))?.gateways[0];
        // another gateway acking this snapshot's jti settles nothing
        await wholeAck(other.gw);
        await new Promise((r) => setTimeout(r, 300));
        expect((await statusOf(lockdown.state.requestId))?.status).toBe('pending');
        await wholeAck(gw);
        for (const r of [lockdown, passage, normal])
          await waitFor(async () => (await statusOf(r.state.requestId))?.status === 'applied' || undefined, 'covered request settled');
        expect(await statusOf(normal.state.requestId)).toMatchObject({ status: 'applied', code: 'MODE_SNAPSHOT_COVERED' });
        expect(await statusOf(later.state.requestId)).toMatchObject({ status: 'pending', code: null });
        // the snapshot's trusted keys were applied: the covered delivery counts as applied, the later one does not
        expect(await deliveries()).toEqual([
          { step: 'publish', result: 'applied', code: 'SNAPSHOT_COVERED' },
          { step: 'retire', result: null, code: null },
        ]);
        // the same ack again (QoS 1 redelivers, a replayed uplink): nothing moves
        await wholeAck(gw);
        await new Promise((r) => setTimeout(r, 300));
        expect(await statusOf(later.state.requestId)).toMatchObject({ status: 'pending' });
        const rows = await t.db.query<{ ack_code: string }>('SELECT ack_code FROM resync_snapshots WHERE jti = $1', [snap.jti]);
        expect(rows.rows).toEqual([{ ack_code: 'SNAPSHOT_APPLIED' }]);
      } finally {
        await gw.close();
        await other.gw.close();
      }
    });

    it('a gateway ahead of the cloud (its database restored to an earlier point), or one that reports a seq conflict, gets a snapshot past both histories, and no seq is handed out twice', async () => {
      const { s, gw } = await setup();
      try {
        const k1 = await issue(s, 11);
        await issue(s, 12);
        await waitFor(() => sequenced(gw.received).length >= 2 || undefined, 'seqs 1 and 2');
        const lastSeq = async () =>
          (await t.db.query<{ last_seq: number }>('SELECT last_seq FROM gateway_seq WHERE gateway_id = $1', [s.gatewayId])).rows[0]
            ?.last_seq;
        expect(await lastSeq()).toBe(2);

        // the gateway applied up to 7: seqs 3..7 came from a history this database no longer has
        gw.received.length = 0;
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 7, reason: 'gap' } });
        const snap = await waitFor(() => gw.received.find((m) => m.type === 'keyset.snapshot'), 'snapshot');
        expect(gw.received.find((m) => m.type === 'resync.answer')).toMatchObject({ body: { mode: 'snapshot', fromSeq: 7, toSeq: 8 } });
        if (snap.type !== 'keyset.snapshot') throw new Error('type');
        expect(snap.body.asOfSeq).toBe(8);
        expect(snap.body.keys).toHaveLength(2);
        expect(await lastSeq()).toBe(8);
        // the next message gets a seq neither history used
        gw.received.length = 0;
        if (k1.status !== 'applied') throw new Error(k1.code);
        await cloud.revokeKey({ keyId: k1.state.id, reason: 'credential_lost' });
        const revoke = await waitFor(() => sequenced(gw.received)[0], 'revoke');
        expect(revoke.seq).toBe(9);

        // a conflict report: even when the gateway is not ahead, the counter moves past and a snapshot (never a replay) follows
        gw.received.length = 0;
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 8, reason: 'conflict' } });
        const again = await waitFor(() => gw.received.find((m) => m.type === 'keyset.snapshot'), 'snapshot after a conflict');
        expect(gw.received.find((m) => m.type === 'resync.answer')).toMatchObject({ body: { mode: 'snapshot', fromSeq: 8, toSeq: 10 } });
        if (again.type !== 'keyset.snapshot') throw new Error('type');
        expect(again.body).toMatchObject({ asOfSeq: 10, revoked: [{ keyId: k1.state.id, version: 2 }] });
        expect(sequenced(gw.received)).toEqual([]);
      } finally {
        await gw.close();
      }
    });

    it('answers with a snapshot when the missing rows were purged, even for a short gap', async () => {
      const { s, gw } = await setup();
      const start = clock.now();
      try {
        await issue(s, 1);
        await issue(s, 2);
        await waitFor(async () => (await cloud.listOutbox(s.gatewayId)).every((r) => r.status === 'sent') || undefined, 'sent');
        clock.advance(8 * DAY);
        const purged = await cloud.purge();
        expect(purged.outbox).toBeGreaterThanOrEqual(1);
        expect(purged.rejected).toBeGreaterThan(0); // the rejections recorded by the tests above
        expect((await cloud.listOutbox(s.gatewayId)).map((r) => r.seq)).toEqual([2]);
        gw.received.length = 0;
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 0, reason: 'startup' } });
        const answer = await waitFor(() => gw.received.find((m) => m.type === 'resync.answer'), 'answer');
        expect(answer).toMatchObject({ body: { mode: 'snapshot', fromSeq: 0, toSeq: 2 } });
        await waitFor(() => gw.received.find((m) => m.type === 'keyset.snapshot'), 'snapshot part');
      } finally {
        clock.set(start);
        await gw.close();
      }
    });

    const accessEvent = (s: Awaited<ReturnType<typeof seed>>, at: number) => ({
      eventId: newId(),
      requestId: `r-${newId()}`,
      lockId: 'lock-1',
      doorId: s.doorA,
      at,
      allowed: false,
      code: 'UNKNOWN_CREDENTIAL',
      keyId: null,
      keyVersion: null,
      personId: null,
      credentialType: 'pin',
      commandId: null,
    });
    const heartbeatTo = async (gw: FakeGateway, gatewayId: string) => {
      gw.received.length = 0;
      await cloud.sendHeartbeats();
      return waitFor(
        () => gw.received.find((m): m is Extract<DownlinkMessage, { type: 'heartbeat' }> => m.type === 'heartbeat' && m.aud === gatewayId),
        'heartbeat',
      );
    };

    it.each([
      ['10 minutes ahead', 10 * 60_000],
      ['2 days behind', -2 * DAY],
    ])(
      "applies a verified uplink from a gateway whose clock is %s, with the gateway's own time, and records the skew",
      async (_what, offset) => {
        const gwClock = { now: () => clock.now() + offset };
        const { s, gw } = await setup(gwClock);
        try {
          const body = accessEvent(s, gwClock.now());
          await gw.send({ type: 'access.event', seq: 1, body, ttlSeconds: 60 });
          const row = await waitFor(
            async () => (await cloud.listAudit({ gatewayId: s.gatewayId })).find((a) => a.eventId === body.eventId),
            'event in the audit log',
          );
          expect(row.at).toBe(body.at);
          expect(await cloud.listRejectedUplinks({ gatewayId: s.gatewayId })).toEqual([]);
          const skew = await waitFor(
            async () =>
              (await t.db.query<{ clock_skew_ms: string | null }>('SELECT clock_skew_ms FROM gateways WHERE id = $1', [s.gatewayId]))
                .rows[0]?.clock_skew_ms ?? undefined,
            'skew recorded',
          );
          expect(Math.abs(Number(skew) - offset)).toBeLessThan(2_000);
          // sent again (no acknowledgement reached the gateway): applied once
          await gw.send({ type: 'access.event', seq: 1, body, ttlSeconds: 60 });
          await gw.send({
            type: 'alarm',
            seq: 2,
            body: { alarmId: newId(), lockId: 'lock-1', doorId: null, kind: 'tamper', at: gwClock.now() },
          });
          await waitFor(
            async () => (await t.db.query('SELECT 1 FROM alarms WHERE gateway_id = $1', [s.gatewayId])).rowCount === 1 || undefined,
            'alarm applied',
          );
          expect((await cloud.listAudit({ gatewayId: s.gatewayId })).filter((a) => a.eventId === body.eventId)).toHaveLength(1);
        } finally {
          await gw.close();
        }
      },
    );

    it('acknowledges uplinks in heartbeats only up to the first missing seq; resends walk the pointer on; a restarted history is named by its lost pointer until the gateway resyncs for it', async () => {
      const { s, gw } = await setup();
      try {
        const send = (seq: number, jti = newMessageId()) => gw.send({ type: 'access.event', seq, jti, body: accessEvent(s, clock.now()) });
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toBeUndefined(); // nothing from it yet
        const m1 = await send(1);
        const m2 = await send(2);
        const m4 = await send(4); // 3 was lost on the way (say a broker restarted without its queue)
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [m4.jti])).rowCount === 1 || undefined,
          'seq 4 applied',
        );
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 2, jti: m2.jti });
        // the gateway, unacknowledged, sends 3 and 4 again (4 with its same jti): the pointer walks over both
        const m3 = await send(3);
        await send(4, m4.jti);
        await waitFor(
          async () => ((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck?.seq === 4 ? true : undefined),
          'acknowledged up to 4',
        );
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 4, jti: m4.jti });
        expect(new Set([m1.jti, m2.jti, m3.jti, m4.jti]).size).toBe(4);
        // the gateway's store was reset (or restored) and it sent before any heartbeat reached it: its
        // seq starts again at 1 with new messages. Heartbeats keep naming the history it lost, which its
        // store has no row for, so the gateway sees the restore (GATEWAY_RESTORED) however the two raced.
        const again = await send(1);
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [again.jti])).rowCount === 1 || undefined,
          'the restarted history applied',
        );
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 4, jti: m4.jti });
        await send(2);
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 4, jti: m4.jti });
        // a resync for another reason does not end it; the gateway's conflict resync does
        const gap = await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 0, reason: 'gap' } });
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [gap.jti])).rowCount === 1 || undefined,
          'the gap request handled',
        );
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 4, jti: m4.jti });
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 0, reason: 'conflict' } });
        await waitFor(
          async () => ((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck?.seq === 2 ? true : undefined),
          'acknowledgement of the new history',
        );
      } finally {
        await gw.close();
      }
    });

    it('a store put back from a backup goes on from its last seq: after the resync the pointer walks the new history from there', async () => {
      const { s, gw } = await setup();
      try {
        const send = (seq: number, jti = newMessageId()) => gw.send({ type: 'access.event', seq, jti, body: accessEvent(s, clock.now()) });
        const inbox = (jti: string) => async () =>
          (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [jti])).rowCount === 1 || undefined;
        const old: string[] = [];
        for (const seq of [1, 2, 3, 4]) old.push((await send(seq)).jti);
        await waitFor(
          async () => ((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck?.seq === 4 ? true : undefined),
          'acknowledged up to 4',
        );
        // the backup held seqs 1-2: the restored store's next uplinks are 3 and 4 again, as new messages
        const n3 = await send(3);
        await waitFor(inbox(n3.jti), 'the restored history applied');
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 4, jti: old[3] });
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 0, reason: 'conflict' } });
        await waitFor(async () => ((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck?.jti === n3.jti ? true : undefined), 'the new 3');
        const n4 = await send(4);
        await waitFor(async () => ((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck?.jti === n4.jti ? true : undefined), 'the new 4');
        expect((await heartbeatTo(gw, s.gatewayId)).body.uplinkAck).toEqual({ seq: 4, jti: n4.jti });
      } finally {
        await gw.close();
      }
    });

    it("after a restore whose first new uplink overtook the others, the pointer restarts where the gateway's conflict resync says its store is unacknowledged, and the late ones guess no second restart", async () => {
      const { s, gw } = await setup();
      try {
        const send = (seq: number, jti = newMessageId()) => gw.send({ type: 'access.event', seq, jti, body: accessEvent(s, clock.now()) });
        const inbox = (jti: string) => async () =>
          (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [jti])).rowCount === 1 || undefined;
        const ack = async () => (await heartbeatTo(gw, s.gatewayId)).body.uplinkAck;
        const old: string[] = [];
        for (const seq of [1, 2, 3, 4, 5, 6]) old.push((await send(seq)).jti);
        await waitFor(async () => ((await ack())?.seq === 6 ? true : undefined), 'acknowledged up to 6');
        // The backup held seqs 1-2, acknowledged; the restored store's new 3, 4 and 5 are on their way,
        // and 5 overtakes the others: the restart is seen at 5, and the lost pointer is named.
        const [n3, n4, n5] = [newMessageId(), newMessageId(), newMessageId()];
        await send(5, n5);
        await waitFor(inbox(n5), 'the overtaking 5 applied');
        expect(await ack()).toEqual({ seq: 6, jti: old[5] });
        // The gateway finds no 6 of its own, fails closed and resyncs, naming 3 as its lowest unacknowledged.
        const req = await gw.send({
          type: 'resync.request',
          body: { requestId: newId(), lastAppliedSeq: 0, reason: 'conflict', uplinkUnackedFrom: 3 },
        });
        await waitFor(inbox(req.jti), 'the conflict resync handled');
        // Acknowledged up to 2 (the store's own word), which names no message: nothing is claimed for 3-5 yet.
        expect(await ack()).toBeUndefined();
        // The late 3 and 4 are the next seqs, not another restart; the resent 5 walks the pointer on.
        await send(3, n3);
        await send(4, n4);
        await send(5, n5);
        await waitFor(async () => ((await ack())?.seq === 5 ? true : undefined), 'acknowledged up to the new 5');
        expect(await ack()).toEqual({ seq: 5, jti: n5 });
        const n6 = await send(6);
        await waitFor(async () => ((await ack())?.seq === 6 ? true : undefined), 'the new 6');
        expect(await ack()).toEqual({ seq: 6, jti: n6.jti });
        const row = await t.db.query('SELECT lost_seq, lost_jti FROM uplink_seq WHERE gateway_id = $1', [s.gatewayId]);
        expect(row.rows[0]).toEqual({ lost_seq: null, lost_jti: null });
      } finally {
        await gw.close();
      }
    });

    it('a conflict resync names an unacknowledged seq past everything seen: the pointer stops at the highest seq seen', async () => {
      const { s, gw } = await setup();
      try {
        const send = (seq: number, jti = newMessageId()) => gw.send({ type: 'access.event', seq, jti, body: accessEvent(s, clock.now()) });
        const ack = async () => (await heartbeatTo(gw, s.gatewayId)).body.uplinkAck;
        for (const seq of [1, 2, 3]) await send(seq);
        await waitFor(async () => ((await ack())?.seq === 3 ? true : undefined), 'acknowledged up to 3');
        const n1 = await send(1); // a restarted history
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [n1.jti])).rowCount === 1 || undefined,
          'n1',
        );
        const req = await gw.send({
          type: 'resync.request',
          body: { requestId: newId(), lastAppliedSeq: 0, reason: 'conflict', uplinkUnackedFrom: 1000 },
        });
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [req.jti])).rowCount === 1 || undefined,
          'req',
        );
        const row = await t.db.query('SELECT acked_seq, acked_jti, lost_seq FROM uplink_seq WHERE gateway_id = $1', [s.gatewayId]);
        expect(row.rows[0]).toEqual({ acked_seq: 3, acked_jti: null, lost_seq: null });
      } finally {
        await gw.close();
      }
    });

    it('heartbeats name the last seq handed out, with a row held in backoff or dead-lettered (the gateway stays behind, never fresh over it)', async () => {
      const { s, gw } = await setup();
      try {
        await issue(s, 1);
        await waitFor(async () => (await cloud.listOutbox(s.gatewayId)).every((r) => r.status === 'sent') || undefined, 'sent');
        // two more rows handed out that the dispatcher does not send: one waiting out a backoff, one dead-lettered
        await t.db.transaction(async (tx) => {
          for (const status of ['pending', 'dead']) {
            const seq = (
              await tx.query<{ last_seq: number }>(
                'UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = $1 RETURNING last_seq',
                [s.gatewayId],
              )
            ).rows[0]?.last_seq;
            await tx.query(
              `INSERT INTO outbox (gateway_id, seq, jti, type, body, cid, status, attempts, next_attempt_at, created_at)
               VALUES ($1, $2, gen_random_uuid(), 'key.revoke', $3, 'cid-stuck', $4, 3, $5, $5)`,
              [s.gatewayId, seq, JSON.stringify({ keyId: 'k-stuck', version: 2, reason: 'staff_revoked' }), status, clock.now() + DAY],
            );
          }
        });
        const sent = await cloud.sendHeartbeats();
        expect(sent).toContainEqual({ gatewayId: s.gatewayId, lastSeq: 3 });
        expect((await cloud.listOutbox(s.gatewayId)).map((r) => r.status)).toEqual(['sent', 'pending', 'dead']);
        // and a resync from the gateway gets them replayed, pending and dead alike
        gw.received.length = 0;
        await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 1, reason: 'gap' } });
        // (the grant, seq 1, may be delivered again meanwhile: QoS 1 is at least once; the fake gateway
        // verifies asynchronously, so what it records is in verification order, not arrival order)
        const replayed = () =>
          [
            ...new Map(
              sequenced(gw.received)
                .filter((m) => m.seq > 1)
                .map((m) => [m.seq, m.type]),
            ).entries(),
          ].sort((a, b) => a[0] - b[0]);
        await waitFor(() => (replayed().length >= 2 ? true : undefined), 'replayed');
        expect(replayed()).toEqual([
          [2, 'key.revoke'],
          [3, 'key.revoke'],
        ]);
      } finally {
        await gw.close();
      }
    });

    it('answers a storm of signed resync requests from one gateway only up to its rate (the rest recorded refused RESYNC_RATE_LIMITED), so it cannot make the cloud build snapshot after snapshot', async () => {
      const { s, gw } = await setup();
      try {
        await issue(s, 1);
        await waitFor(async () => (await cloud.listOutbox(s.gatewayId)).every((r) => r.status === 'sent') || undefined, 'sent');
        gw.received.length = 0;
        const sent = [];
        for (let i = 0; i < 20; i++)
          sent.push(await gw.send({ type: 'resync.request', body: { requestId: newId(), lastAppliedSeq: 0, reason: 'startup' } }));
        const last = sent.at(-1)!;
        await waitFor(
          async () => (await t.db.query('SELECT 1 FROM uplink_inbox WHERE jti = $1', [last.jti])).rowCount === 1 || undefined,
          'every request handled',
        );
        const codes = await t.db.query<{ code: string; n: string }>(
          "SELECT code, count(*) AS n FROM uplink_inbox WHERE gateway_id = $1 AND type = 'resync.request' GROUP BY code",
          [s.gatewayId],
        );
        const byCode = Object.fromEntries(codes.rows.map((r) => [r.code, Number(r.n)]));
        expect(byCode.MESSAGE_APPLIED).toBeLessThanOrEqual(5); // the burst (clock frozen: no refill)
        expect(byCode.RESYNC_RATE_LIMITED).toBeGreaterThanOrEqual(15);
        await new Promise((r) => setTimeout(r, 500));
        const answers = gw.received.filter((m) => m.type === 'resync.answer');
        expect(answers.length).toBeGreaterThanOrEqual(1);
        expect(answers.length).toBeLessThanOrEqual(5);
      } finally {
        await gw.close();
      }
    });

    it('heartbeats name the last seq sent to each gateway', async () => {
      const { s, gw } = await setup();
      try {
        await issue(s, 1);
        await issue(s, 2);
        await waitFor(async () => (await cloud.listOutbox(s.gatewayId)).every((r) => r.status === 'sent') || undefined, 'sent');
        const sent = await cloud.sendHeartbeats();
        expect(sent).toContainEqual({ gatewayId: s.gatewayId, lastSeq: 2 });
        const hb = await waitFor(() => gw.received.find((m) => m.type === 'heartbeat'), 'heartbeat');
        expect(hb).toMatchObject({ type: 'heartbeat', body: { lastSeq: 2 } });
        // an offline gateway (retained presence) gets none
        await gw.client.publishAsync(topics.gatewayPresence(s.gatewayId), JSON.stringify({ online: false }), { qos: 1, retain: true });
        await waitFor(
          async () => !(await cloud.sendHeartbeats()).some((h) => h.gatewayId === s.gatewayId) || undefined,
          'no heartbeat when offline',
        );
        await gw.client.publishAsync(topics.gatewayPresence(s.gatewayId), '', { qos: 1, retain: true });
      } finally {
        await gw.close();
      }
    });
  });

  // A cloud of its own (no other cloud on this database subscribed to the uplinks), with a persistent
  // session so that a message it did not acknowledge would come back to it after a restart.
  describe.each(mqttBackends())('when the database refuses the data of a verified uplink, with %s', (mqttBackend) => {
    let broker: MqttTestBroker;
    beforeAll(async () => {
      broker = await startMqttBackend(mqttBackend);
    });
    afterAll(async () => {
      await broker.stop();
    });

    it('it is rejected APPLY_FAILED, logged with its cid, acknowledged (not redelivered after a restart) and writes nothing else', async () => {
      const clock = new ManualClock(T0);
      const s = await seed(deps(t.db, clock), { gatewayId: `gw-${broker.unique}-unstorable` });
      const key = await cloudSigningKey();
      const env = { MQTT_CLIENT_ID: `cloud-unstorable-${newId().slice(-12)}`, MQTT_CLEAN_SESSION: 'false' };
      const { log, lines } = await capturingLogger();
      const first = await startCloud(t, broker.url, { clock, env, deps: { log } });
      const gw = await fakeGateway({
        url: broker.url,
        gatewayId: s.gatewayId,
        pair: s.pair,
        cloudJwks: { keys: [key.publicJwk] },
        cloudIssuer: 'tobira-cloud',
        clock,
      });
      const event = (seq: number, keyVersion: number) => ({
        type: 'access.event',
        seq,
        body: {
          eventId: newId(),
          requestId: `r-${seq}`,
          lockId: 'lock-1',
          doorId: s.doorA,
          at: T0,
          allowed: false,
          code: 'UNKNOWN_CREDENTIAL',
          keyId: 'k-1',
          keyVersion,
          personId: null,
          credentialType: 'pin',
          commandId: null,
        },
      });
      let restarted: Cloud | undefined;
      let firstRunning = true;
      try {
        // a valid message (a version is any positive safe integer) that audit.key_version (int) cannot hold: SQLSTATE 22003
        const bad = await gw.send(event(1, 2 ** 31));
        const rejected = await waitFor(
          async () => (await first.listRejectedUplinks({ gatewayId: s.gatewayId }))[0],
          'the rejection recorded',
        );
        expect(rejected).toMatchObject({ code: 'APPLY_FAILED', detail: expect.stringContaining(bad.jti) });
        const line = lines.find((l) => l.msg === 'uplink rejected' && l.code === 'APPLY_FAILED');
        expect(line).toMatchObject({ cid: bad.cid, gatewayId: s.gatewayId });
        // the transaction rolled back whole: no inbox row, no seq tracking, no audit row
        expect((await t.db.query('SELECT 1 FROM uplink_inbox WHERE gateway_id = $1', [s.gatewayId])).rowCount).toBe(0);
        expect((await t.db.query('SELECT 1 FROM uplink_seq WHERE gateway_id = $1', [s.gatewayId])).rowCount).toBe(0);
        expect(await first.listAudit({ gatewayId: s.gatewayId })).toEqual([]);
        await first.stop();
        firstRunning = false;

        // the same session again: an unacknowledged message would be redelivered before the next one
        restarted = await startCloud(t, broker.url, { clock, env });
        const good = await gw.send(event(2, 1));
        await waitFor(async () => (await restarted?.listAudit({ gatewayId: s.gatewayId }))?.length === 1, 'the next event applied');
        expect((await restarted.listAudit({ gatewayId: s.gatewayId })).map((a) => a.cid)).toEqual([good.cid]);
        expect(await restarted.listRejectedUplinks({ gatewayId: s.gatewayId })).toHaveLength(1);
      } finally {
        await restarted?.stop();
        if (firstRunning) await first.stop();
        await gw.close();
      }
    });
  });
});
