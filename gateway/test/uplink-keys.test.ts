import { decodeProtectedHeader, type JWK } from 'jose';
import { newId, verifyUplinkKeyProof, type UplinkMessage } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGateway, type Gateway } from '../src/gateway.js';
import { provision, runSite, waitFor, type Running } from './harness.js';

type Proposal = Extract<UplinkMessage, { type: 'uplink_key.proposal' }>;

describe.each(mqttBackends())('uplink-key rotation of a running gateway against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  let restarted: Gateway | undefined;
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await restarted?.stop({ force: true });
    restarted = undefined;
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const kidOf = (token: string) => decodeProtectedHeader(token).kid;
  const rows = (gw: Gateway) =>
    gw.store.db
      .prepare('SELECT kid, status, private_jwk IS NOT NULL AS has_private, rotation_id FROM uplink_keys ORDER BY status')
      .all() as {
      kid: string;
      status: string;
      has_private: number;
      rotation_id: string | null;
    }[];
  const proposals = (s: Running) => s.cloud.ofType('uplink_key.proposal') as Proposal[];
  /** The raw tokens that carried a message of this type, once per message (a batch carrying two counts twice: its kid signed both). */
  const rawOf = (s: Running, type: string) =>
    s.cloud.rawUplink.flatMap((t) => {
      const claims = JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString()) as {
        type: string;
        body?: { items?: { type: string }[] };
      };
      if (claims.type === 'uplink.batch') return (claims.body?.items ?? []).filter((i) => i.type === type).map(() => t);
      return claims.type === type ? [t] : [];
    });
  const keyAcks = (s: Running) => s.cloud.ofType('ack').filter((m) => m.body.keyId === null && m.body.ackSeq !== null);

  it('proposes a new key signed with the old one, with a valid proof, keeps signing with the old key until activate, then switches and erases the old private key', async () => {
    const logs: string[] = [];
    site = await runSite(broker.url, broker.url, broker.unique, {
      deps: { log: pino({ level: 'debug' }, { write: (l: string) => void logs.push(l) }) },
    });
    const s = site;
    await provision(s);
    const rotationId = newId();
    const rotate = await s.cloud.sign({ type: 'uplink_key.rotate', seq: ++s.cloud.seq, body: { rotationId } });
    await s.cloud.publishRaw(rotate.token);
    const p = await waitFor(() => proposals(s)[0], 'proposal');
    expect(p.body.rotationId).toBe(rotationId);
    expect(p.body.publicJwk).not.toHaveProperty('d');
    expect(verifyUplinkKeyProof(p.body.publicJwk, p.body.proof, s.f.gatewayId, rotationId)).toBe(true);
    // the proof binds the gateway and the rotation
    expect(verifyUplinkKeyProof(p.body.publicJwk, p.body.proof, 'another-gw', rotationId)).toBe(false);
    expect(verifyUplinkKeyProof(p.body.publicJwk, p.body.proof, s.f.gatewayId, newId())).toBe(false);
    // signed with the old key (proof of possession of the key the cloud has on record)
    expect(rawOf(s, 'uplink_key.proposal').map(kidOf)).toEqual([s.f.gatewayPair.kid]);
    expect(rows(s.gw)).toEqual([
      { kid: s.f.gatewayPair.kid, status: 'active', has_private: 1, rotation_id: null },
      { kid: p.body.publicJwk.kid, status: 'proposed', has_private: 1, rotation_id: rotationId },
    ]);
    // the replayed rotate (same token, an old seq) does nothing: no second key, no second proposal
    await s.cloud.publishRaw(rotate.token);
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'heartbeat applied');
    expect(rows(s.gw)).toHaveLength(2);
    expect(proposals(s)).toHaveLength(1);
    // an access decision before the confirm goes under the old key
    await s.lock.present('123456');
    await waitFor(() => rawOf(s, 'access.event').length >= 1, 'event before');
    expect(rawOf(s, 'access.event').map(kidOf)).toEqual([s.f.gatewayPair.kid]);

    // confirm: the gateway switches; from now on everything is signed with the new key
    s.cloud.acceptGatewayKey(p.body.publicJwk as JWK);
    await s.cloud.publishRaw(
      (await s.cloud.sign({ type: 'uplink_key.activate', seq: ++s.cloud.seq, body: { rotationId, kid: p.body.publicJwk.kid } })).token,
    );
    await waitFor(() => keyAcks(s).find((a) => a.body.code === 'UPLINK_KEY_ACTIVATED'), 'activate acked');
    const activateAck = rawOf(s, 'ack').at(-1)!;
    expect(kidOf(activateAck)).toBe(p.body.publicJwk.kid);
    await s.lock.present('123456');
    await waitFor(() => rawOf(s, 'access.event').length >= 2, 'event after');
    expect(rawOf(s, 'access.event').map(kidOf)).toEqual([s.f.gatewayPair.kid, p.body.publicJwk.kid]);
    expect(rows(s.gw)).toEqual([
      { kid: p.body.publicJwk.kid, status: 'active', has_private: 1, rotation_id: rotationId },
      { kid: s.f.gatewayPair.kid, status: 'retired', has_private: 0, rotation_id: null },
    ]);
    // the private parts never reach a log line
    const newD = (s.gw.store.db.prepare("SELECT private_jwk FROM uplink_keys WHERE status = 'active'").get() as { private_jwk: string })
      .private_jwk;
    const secrets = [String(s.f.gatewayPair.privateJwk.d), String((JSON.parse(newD) as { d: string }).d)];
    for (const d of secrets) expect(logs.some((l) => l.includes(d))).toBe(false);
    expect(logs.some((l) => l.includes('UPLINK_KEY_ACTIVATED'))).toBe(true);
  });

  it('an activate for a rotation or kid it did not propose is refused, and it keeps signing with its key', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s);
    const rotationId = newId();
    await s.cloud.send({ type: 'uplink_key.rotate', seq: ++s.cloud.seq, body: { rotationId } });
    const p = await waitFor(() => proposals(s)[0], 'proposal');
    await s.cloud.send({ type: 'uplink_key.activate', seq: ++s.cloud.seq, body: { rotationId: newId(), kid: p.body.publicJwk.kid } });
    await s.cloud.send({ type: 'uplink_key.activate', seq: ++s.cloud.seq, body: { rotationId, kid: 'up-not-this-one' } });
    await waitFor(() => keyAcks(s).filter((a) => a.body.code === 'UPLINK_KEY_ROTATION_UNKNOWN').length >= 2, 'refused');
    expect(
      keyAcks(s)
        .filter((a) => a.body.code === 'UPLINK_KEY_ROTATION_UNKNOWN')
        .map((a) => a.body.result),
    ).toEqual(['refused', 'refused']);
    expect(rows(s.gw).map((r) => r.status)).toEqual(['active', 'proposed']);
    expect(rawOf(s, 'ack').every((t) => kidOf(t) === s.f.gatewayPair.kid)).toBe(true);
    // the cloud gave up on that rotation and asks again: the earlier proposed key is dropped with its private part
    const second = newId();
    await s.cloud.send({ type: 'uplink_key.rotate', seq: ++s.cloud.seq, body: { rotationId: second } });
    const p2 = await waitFor(() => proposals(s).find((m) => m.body.rotationId === second), 'second proposal');
    expect(p2.body.publicJwk.kid).not.toBe(p.body.publicJwk.kid);
    expect(rows(s.gw)).toEqual([
      { kid: s.f.gatewayPair.kid, status: 'active', has_private: 1, rotation_id: null },
      { kid: p2.body.publicJwk.kid, status: 'proposed', has_private: 1, rotation_id: second },
      { kid: p.body.publicJwk.kid, status: 'retired', has_private: 0, rotation_id: rotationId },
    ]);
  });

  it('a restart between proposal and confirm resumes: the same proposal is sent again with the same stored key, and the confirm then switches', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s);
    const rotationId = newId();
    await s.cloud.send({ type: 'uplink_key.rotate', seq: ++s.cloud.seq, body: { rotationId } });
    const p = await waitFor(() => proposals(s)[0], 'proposal');
    const before = rows(s.gw);
    await s.gw.stop({ force: true });

    const gw2 = createGateway(s.f.config, { clock: s.f.clock, log: pino({ level: 'silent' }), tickMs: 50 });
    restarted = gw2;
    await gw2.start();
    await waitFor(() => gw2.cloudConnected, 'restarted gateway connected');
    expect(rows(gw2)).toEqual(before);
    // a heartbeat acknowledging up to before the proposal: the gateway sends it again, unchanged
    const acked = s.cloud.uplink
      .filter((m) => m.type !== 'resync.request' && m.seq < p.seq)
      .sort((a, b) => ('seq' in b ? b.seq : 0) - ('seq' in a ? a.seq : 0))[0];
    if (acked === undefined || acked.type === 'resync.request') throw new Error('no earlier uplink');
    s.f.clock.advance(120_000);
    await s.cloud.heartbeat(s.cloud.seq, { seq: acked.seq, jti: acked.jti });
    await waitFor(() => rawOf(s, 'uplink_key.proposal').length >= 2, 'proposal sent again');
    // each sending of the proposal, alone or as an item of a batch
    const again = s.cloud.rawUplink.flatMap((t) => {
      const claims = JSON.parse(Buffer.from(t.split('.')[1]!, 'base64url').toString()) as { type: string; body?: { items?: Proposal[] } };
      if (claims.type === 'uplink.batch') return (claims.body?.items ?? []).filter((i) => i.type === 'uplink_key.proposal');
      return claims.type === 'uplink_key.proposal' ? [claims as unknown as Proposal] : [];
    });
    expect(new Set(again.map((m) => m.body.publicJwk.kid))).toEqual(new Set([p.body.publicJwk.kid]));
    expect(new Set(again.map((m) => m.jti))).toEqual(new Set([p.jti]));
    expect(rows(gw2)).toEqual(before);

    s.cloud.acceptGatewayKey(p.body.publicJwk as JWK);
    await s.cloud.send({ type: 'uplink_key.activate', seq: ++s.cloud.seq, body: { rotationId, kid: p.body.publicJwk.kid } });
    await waitFor(() => rows(gw2).find((r) => r.status === 'active')?.kid === p.body.publicJwk.kid, 'switched');
    await waitFor(() => keyAcks(s).find((a) => a.body.code === 'UPLINK_KEY_ACTIVATED'), 'activate acked');
    // the key pair file no longer signs: a restart keeps the stored key
    await gw2.stop({ force: true });
    const gw3 = createGateway(s.f.config, { clock: s.f.clock, log: pino({ level: 'silent' }), tickMs: 50 });
    restarted = gw3;
    await gw3.start();
    expect(rows(gw3).find((r) => r.status === 'active')?.kid).toBe(p.body.publicJwk.kid);
  });
});
