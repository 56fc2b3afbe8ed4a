import { JWS_TYP, newMessageId, topics } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { grant as baseGrant } from './fixtures.js';
import { CLOUD_ISSUER, PIN, STAFF_TOKEN, runSite, waitFor, type Running } from './harness.js';
import { capturingLog } from './staff-helpers.js';

type Json = Record<string, unknown>;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const NULL_CLAIMS = { claimedJti: null, claimedCid: null, claimedType: null, claimedSeq: null, claimedIssuer: null };

/** A compact JWS with the cloud's kid and any claims, and a signature that is all zeros (so it cannot verify). */
function unsignedToken(kid: string, claims: Json): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  return `${b64({ alg: 'EdDSA', typ: JWS_TYP, kid })}.${b64(claims)}.${Buffer.alloc(64).toString('base64url')}`;
}

describe.each(mqttBackends())('rejected downlinks of a running gateway against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  const cap = { current: capturingLog() };
  const start = async (opts: Parameters<typeof runSite>[3] = {}) => {
    cap.current = capturingLog();
    site = await runSite(broker.url, broker.url, broker.unique, { ...opts, deps: { log: cap.current.log, ...opts.deps } });
    return site;
  };
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const staffGet = async (s: Running, path: string): Promise<Json> => {
    const r = await fetch(`${s.gw.httpUrl!}${path}`, { headers: { authorization: `Bearer ${STAFF_TOKEN}` } });
    expect(r.status, path).toBe(200);
    return (await r.json()) as Json;
  };
  const rejectedItems = async (s: Running) => (await staffGet(s, '/staff/rejected?limit=500')).items as Json[];
  /** Highest rejected id so far (ids only grow, also when old rows are pruned). */
  const lastRejectedId = (s: Running) => (s.gw.store.db.prepare('SELECT max(id) AS n FROM rejected').get() as { n: number | null }).n ?? 0;
  const rejectionLines = () => cap.current.lines().filter((l) => l.msg === 'downlink message rejected');
  const foreignGrant = (s: Running, draft: Json = {}) =>
    s.cloud.sign(
      { type: 'key.grant', seq: 1, body: { key: baseGrant({ credential: { type: 'pin', digest: s.f.digest(PIN) } }) }, ...draft },
      s.f.otherKey,
    );

  describe('when a message does not verify', () => {
    it('records what a message signed with a foreign key claims (jti, cid, type, seq, issuer), logs the refusal under its claimed cid, and applies nothing', async () => {
      const s = await start();
      // a key the gateway does not know (its own kid), then the cloud's kid with another key's signature
      const foreign = await foreignGrant(s, { cid: 'cloud-req-42', seq: 7 });
      const forged = await s.cloud.sign(
        { type: 'heartbeat', cid: 'cloud-req-43', body: { lastSeq: 9, intervalMs: 1000 } },
        { kid: s.f.cloudPair.kid, privateKey: s.f.otherKey.privateKey },
      );
      await s.cloud.publishRaw(foreign.token);
      await waitFor(() => lastRejectedId(s) === 1, 'foreign message rejected');
      await s.cloud.publishRaw(forged.token);
      await waitFor(() => lastRejectedId(s) === 2, 'forged message rejected');

      const topic = topics.gatewayDown(s.f.gatewayId);
      expect(await rejectedItems(s)).toEqual([
        {
          id: 2,
          at: expect.any(Number),
          topic,
          code: 'BAD_SIGNATURE',
          detail: 'signature does not verify',
          bytes: forged.token.length,
          claimedJti: forged.message.jti,
          claimedCid: 'cloud-req-43',
          claimedType: 'heartbeat',
          claimedSeq: null,
          claimedIssuer: CLOUD_ISSUER,
        },
        {
          id: 1,
          at: expect.any(Number),
          topic,
          code: 'UNKNOWN_KID',
          detail: expect.stringContaining('kid '),
          bytes: foreign.token.length,
          claimedJti: foreign.message.jti,
          claimedCid: 'cloud-req-42',
          claimedType: 'key.grant',
          claimedSeq: 7,
          claimedIssuer: CLOUD_ISSUER,
        },
      ]);

      // the rejections of one cloud request, by the correlation id they claimed
      expect(((await staffGet(s, '/staff/rejected?cid=cloud-req-42')).items as Json[]).map((r) => r.id)).toEqual([1]);
      expect((await staffGet(s, '/staff/rejected?cid=no-such-cid')).items).toEqual([]);

      const lines = rejectionLines();
      expect(lines).toHaveLength(2);
      expect(lines[0]).toMatchObject({
        cid: 'cloud-req-42',
        cidClaimed: true,
        code: 'UNKNOWN_KID',
        claimed: { jti: foreign.message.jti, cid: 'cloud-req-42', type: 'key.grant', seq: 7, iss: CLOUD_ISSUER },
      });
      expect(lines[1]).toMatchObject({
        cid: 'cloud-req-43',
        cidClaimed: true,
        code: 'BAD_SIGNATURE',
        claimed: { jti: forged.message.jti, type: 'heartbeat', seq: null },
      });

      // nothing from it was applied, and neither the payload nor its body was kept anywhere
      expect(s.gw.store.inboxDepth()).toBe(0);
      expect(s.gw.store.keyCounts()).toEqual({ active: 0, revoked: 0, tombstones: 0 });
      expect(s.gw.store.settings().appliedSeq).toBe(0);
      const stored = JSON.stringify(s.gw.store.db.prepare('SELECT * FROM rejected').all());
      for (const secret of [s.f.digest(PIN), 'person-1', foreign.token.split('.')[1]!]) {
        expect(stored).not.toContain(secret);
        expect(cap.current.raw()).not.toContain(secret);
      }
    });

    it('refuses a grant truly signed by the trusted cloud key but naming no kid (UNKNOWN_KID), and applies the same claims once they name it', async () => {
      const s = await start();
      const signed = await s.cloud.sign({
        type: 'key.grant',
        seq: 1,
        cid: 'cloud-req-nokid',
        body: { key: baseGrant({ credential: { type: 'pin', digest: s.f.digest(PIN) } }) },
      });
      const [header, payload] = signed.token.split('.') as [string, string, string];
      expect(JSON.parse(Buffer.from(header, 'base64url').toString())).toMatchObject({ kid: s.f.cloudPair.kid });
      // the same claims under a header without the kid, signed with the cloud's own private key: only the kid is missing
      const bare = Buffer.from(JSON.stringify({ alg: 'EdDSA', typ: JWS_TYP })).toString('base64url');
      const sig = Buffer.from(await crypto.subtle.sign('Ed25519', s.f.cloudKey.privateKey, Buffer.from(`${bare}.${payload}`))).toString(
        'base64url',
      );
      await s.cloud.publishRaw(`${bare}.${payload}.${sig}`);
      await waitFor(() => lastRejectedId(s) === 1, 'the grant without a kid rejected');
      expect((await rejectedItems(s))[0]).toMatchObject({
        code: 'UNKNOWN_KID',
        detail: 'no kid',
        claimedJti: signed.message.jti,
        claimedCid: 'cloud-req-nokid',
        claimedSeq: 1,
      });
      expect(rejectionLines()[0]).toMatchObject({ cid: 'cloud-req-nokid', code: 'UNKNOWN_KID' });
      expect(s.gw.store.settings().appliedSeq).toBe(0);
      expect(s.gw.store.keyCounts()).toEqual({ active: 0, revoked: 0, tombstones: 0 });
      await s.cloud.publishRaw(signed.token);
      await waitFor(() => s.gw.store.settings().appliedSeq === 1 || undefined, 'the grant with its kid applied');
      expect(s.gw.store.keyCounts()).toMatchObject({ active: 1 });
    });

    it('gives a payload that does not decode a row with null claims, and its log line a cid of its own', async () => {
      const s = await start();
      const garbage = [
        'not a jws at all',
        Buffer.from([0xff, 0xfe, 0x00]),
        'aaa.bbb.ccc',
        `${Buffer.from('{"alg":"EdDSA"}').toString('base64url')}.${Buffer.from('[1]').toString('base64url')}.`,
      ];
      for (const [i, g] of garbage.entries()) {
        await s.cloud.publishRaw(g);
        await waitFor(() => lastRejectedId(s) === i + 1, `garbage ${i} rejected`);
      }
      const items = await rejectedItems(s);
      expect(items).toHaveLength(garbage.length);
      for (const r of items) expect(r).toMatchObject(NULL_CLAIMS);
      // newest first; the last one is a JWS in form whose claims are not an object
      expect(items.map((r) => r.code)).toEqual(['WRONG_TYP', 'MALFORMED', 'MALFORMED', 'MALFORMED']);
      expect(items.map((r) => r.bytes)).toEqual(garbage.map((g) => Buffer.byteLength(g)).reverse());

      const lines = rejectionLines();
      expect(lines).toHaveLength(garbage.length);
      for (const l of lines)
        expect(l).toMatchObject({ cidClaimed: false, claimed: { jti: null, cid: null, type: null, seq: null, iss: null } });
      const cids = lines.map((l) => l.cid as string);
      for (const c of cids) expect(c).toMatch(UUID);
      expect(new Set(cids).size).toBe(garbage.length);
    });

    it('refuses a claimed cid longer than 128 characters (null, never cut short; the log gets a cid of its own) and keeps one of exactly 128', async () => {
      const s = await start();
      const now = Math.floor(s.f.clock.now() / 1000);
      const claims = (cid: string) => ({
        jti: newMessageId(),
        cid,
        type: 'heartbeat',
        iss: CLOUD_ISSUER,
        aud: s.f.gatewayId,
        iat: now,
        exp: now + 60,
        body: { lastSeq: 0, intervalMs: 1000 },
      });
      const tooLong = claims(`a${'b'.repeat(128)}`);
      const longest = claims(`z${'y'.repeat(127)}`);
      await s.cloud.publishRaw(unsignedToken(s.f.cloudPair.kid, tooLong));
      await waitFor(() => lastRejectedId(s) === 1, 'too long rejected');
      await s.cloud.publishRaw(unsignedToken(s.f.cloudPair.kid, longest));
      await waitFor(() => lastRejectedId(s) === 2, 'longest rejected');

      const [second, first] = await rejectedItems(s);
      expect(first).toMatchObject({
        code: 'BAD_SIGNATURE',
        claimedJti: tooLong.jti,
        claimedCid: null,
        claimedType: 'heartbeat',
        claimedIssuer: CLOUD_ISSUER,
      });
      expect(second).toMatchObject({ code: 'BAD_SIGNATURE', claimedJti: longest.jti, claimedCid: longest.cid });

      const [l1, l2] = rejectionLines();
      expect(l1).toMatchObject({ cidClaimed: false, claimed: { jti: tooLong.jti, cid: null } });
      expect(l1!.cid).toMatch(UUID);
      expect(l2).toMatchObject({ cid: longest.cid, cidClaimed: true });
      // not even a prefix of the refused cid is stored or logged
      expect(JSON.stringify(s.gw.store.db.prepare('SELECT * FROM rejected').all())).not.toContain('b'.repeat(64));
      expect(cap.current.raw()).not.toContain('b'.repeat(64));
    });
  });

  describe('when many messages are rejected', () => {
    it('keeps only the newest rows once the row bound is reached, pruned on every insert', async () => {
      const s = await start({ deps: { retention: { rejectedMaxRows: 3 } } });
      const jtis: string[] = [];
      for (let i = 1; i <= 6; i++) {
        const m = await foreignGrant(s, { seq: i });
        jtis.push(m.message.jti);
        await s.cloud.publishRaw(m.token);
        await waitFor(() => lastRejectedId(s) === i, `rejection ${i}`);
        expect(s.gw.store.rejectedCount()).toBe(Math.min(i, 3));
      }
      const items = await rejectedItems(s);
      expect(items.map((r) => [r.claimedJti, r.claimedSeq])).toEqual([
        [jtis[5], 6],
        [jtis[4], 5],
        [jtis[3], 4],
      ]);
      expect((await staffGet(s, '/staff/status')).rejectedDownlinks).toBe(3);
      const metric = await s.gw.metrics.registry.getSingleMetricAsString('tobira_gateway_downlink_rejected_total');
      expect(metric).toContain('tobira_gateway_downlink_rejected_total{code="UNKNOWN_KID"} 6');
    });

    it('drops rows older than the age bound when the purge runs, and keeps younger ones', async () => {
      const s = await start({ deps: { retention: { rejectedMaxAgeMs: 60_000 } } });
      const old = await foreignGrant(s, { seq: 1 });
      await s.cloud.publishRaw(old.token);
      await waitFor(() => lastRejectedId(s) === 1, 'old rejection');
      s.f.clock.advance(30_000);
      const young = await foreignGrant(s, { seq: 2 });
      await s.cloud.publishRaw(young.token);
      await waitFor(() => lastRejectedId(s) === 2, 'young rejection');

      expect(s.gw.purgeNow()).toBe(0); // both within 60 s
      s.f.clock.advance(31_000); // the first is now 61 s old, the second 31 s
      expect(s.gw.purgeNow()).toBe(1);
      expect((await rejectedItems(s)).map((r) => r.claimedJti)).toEqual([young.message.jti]);
    });
  });
});
