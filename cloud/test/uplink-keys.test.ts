import {
  generateSigningKeyPair,
  generateUplinkKeyPairSync,
  importSigningKey,
  newCorrelationId,
  newId,
  signMessage,
  signUplinkKeyProof,
  topics,
  type SigningKey,
  type UplinkMessage,
} from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { disconnectedLink } from './mqtt-helpers.js';
import { fixedSigner } from '../src/adapters/signer.js';
import { Uplink } from '../src/app/uplink.js';
import { listUplinkKeyRotations, rotateUplinkKey } from '../src/app/uplink-keys.js';
import * as domain from '../src/domain/uplink-keys.js';
import { cloudSigningKey } from './cloud-helpers.js';
import { deps, openTestDb, seed, type TestDb } from './helpers.js';

describe('uplink-key rotation rules (domain)', () => {
  const r: domain.UplinkKeyRotation = { id: 'r1', gatewayId: 'g', status: 'requested', oldKid: 'old', newKid: null, code: null };
  const facts = { signedKid: 'old', currentKid: 'old', newKid: 'new', proofOk: true, kidTaken: false };
  it('accepts a proposal signed by the current key with a good proof', () => {
    expect(domain.acceptProposal(r, facts)).toMatchObject({
      status: 'applied',
      code: 'UPLINK_KEY_PROPOSAL_ACCEPTED',
      state: { status: 'proposed', newKid: 'new' },
    });
  });
  it('refuses a rotation it did not issue, one signed by another key, and fails one with a bad proof or a used kid', () => {
    expect(domain.acceptProposal(null, facts)).toMatchObject({ status: 'refused', code: 'UPLINK_KEY_ROTATION_UNKNOWN' });
    expect(domain.acceptProposal(r, { ...facts, signedKid: 'other' })).toMatchObject({ status: 'refused', code: 'UPLINK_KEY_NOT_CURRENT' });
    expect(domain.acceptProposal(r, { ...facts, proofOk: false })).toMatchObject({
      state: { status: 'failed', code: 'UPLINK_KEY_BAD_PROOF' },
    });
    expect(domain.acceptProposal(r, { ...facts, kidTaken: true })).toMatchObject({
      state: { status: 'failed', code: 'UPLINK_KEY_KID_TAKEN' },
    });
    expect(domain.acceptProposal({ ...r, status: 'failed' }, facts)).toMatchObject({
      status: 'refused',
      code: 'UPLINK_KEY_ROTATION_NOT_OPEN',
    });
  });
  it('treats the same proposal again as a noop, and a second rotation while one is open as a conflict', () => {
    expect(domain.acceptProposal({ ...r, status: 'proposed', newKid: 'new' }, facts)).toMatchObject({ status: 'noop' });
    expect(domain.requestRotation(r)).toMatchObject({ status: 'conflict', code: 'UPLINK_KEY_ROTATION_IN_PROGRESS' });
    expect(domain.requestRotation(null)).toMatchObject({ status: 'applied' });
  });
  it('activates only on the proposed kid', () => {
    const p = { ...r, status: 'proposed' as const, newKid: 'new' };
    expect(domain.activateOnUse(p, 'new')).toMatchObject({ status: 'applied', state: { status: 'active' } });
    expect(domain.activateOnUse(p, 'old')).toMatchObject({ status: 'noop' });
  });
});

describe.each(pgBackends())('gateway uplink-key rotation on %s', (pgBackend) => {
  let t: TestDb;
  let cloudKey: Awaited<ReturnType<typeof cloudSigningKey>>;
  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    cloudKey = await cloudSigningKey();
  });
  afterAll(async () => {
    await t.close();
  });

  async function setup() {
    let woken = 0;
    const d = deps(t.db, undefined, { wake: () => void woken++ });
    const s = await seed(d);
    const inbox = async () =>
      new Uplink(d, {
        link: disconnectedLink,
        signer: fixedSigner('tobira-cloud', await importSigningKey(cloudKey.privateJwk), { keys: [cloudKey.publicJwk] }),
        replayMax: 10,
        publishTimeoutMs: 100,
      });
    const up = await inbox();
    const oldKey = await importSigningKey(s.pair.privateJwk);
    let seq = 0;
    const send = async (key: SigningKey, draft: { type: string; body: unknown }, via = up, jti?: string) => {
      const { token, message } = await signMessage<UplinkMessage>(
        key,
        s.gatewayId,
        { ...draft, seq: ++seq, aud: 'tobira-cloud', cid: newCorrelationId(), ...(jti ? { jti } : {}) } as never,
        d.clock,
      );
      await via.handle(topics.gatewayUp(s.gatewayId), Buffer.from(token));
      return message;
    };
    const event = () => ({
      type: 'access.event',
      body: {
        eventId: newId(),
        requestId: newId(),
        lockId: 'lock-1',
        doorId: s.doorA,
        at: d.clock.now(),
        allowed: false,
        code: 'UNKNOWN_CREDENTIAL',
        keyId: null,
        keyVersion: null,
        personId: null,
        credentialType: 'pin',
        commandId: null,
      },
    });
    const audited = async (eventId: string) => (await t.db.query('SELECT 1 FROM audit WHERE event_id = $1', [eventId])).rowCount === 1;
    const rejected = async () =>
      (await t.db.query<{ code: string }>('SELECT code FROM rejected_uplinks WHERE gateway_id = $1 ORDER BY id', [s.gatewayId])).rows.map(
        (r) => r.code,
      );
    const outbox = async (type: string) =>
      (
        await t.db.query<{ body: Record<string, string>; seq: number }>(
          'SELECT body, seq FROM outbox WHERE gateway_id = $1 AND type = $2 ORDER BY seq',
          [s.gatewayId, type],
        )
      ).rows;
    const keys = async () =>
      (
        await t.db.query<{ kid: string; status: string }>(
          'SELECT kid, status FROM gateway_uplink_keys WHERE gateway_id = $1 ORDER BY status',
          [s.gatewayId],
        )
      ).rows;
    const rotate = () => rotateUplinkKey(d, { gatewayId: s.gatewayId, scope: null, by: 'ops' });
    const propose = (rotationId: string, opts: { proofBy?: 'new' | 'other'; kid?: string } = {}) => {
      const pair = generateUplinkKeyPairSync(opts.kid ?? `up-${newId()}`);
      const other = generateUplinkKeyPairSync(pair.publicJwk.kid);
      const proof = signUplinkKeyProof(
        opts.proofBy === 'other' ? other.privateJwk : pair.privateJwk,
        s.gatewayId,
        rotationId,
        pair.publicJwk.kid,
      );
      return { pair, draft: { type: 'uplink_key.proposal', body: { rotationId, publicJwk: pair.publicJwk, proof } } };
    };
    const inboxResult = async (jti: string) =>
      (await t.db.query<{ result: string; code: string }>('SELECT result, code FROM uplink_inbox WHERE jti = $1', [jti])).rows[0];
    return { d, s, up, inbox, oldKey, send, event, audited, rejected, outbox, keys, rotate, propose, inboxResult, woken: () => woken };
  }

  it('rotate queues a sequenced uplink_key.rotate; a second rotate while it is open is a conflict with a code', async () => {
    const x = await setup();
    const o = await x.rotate();
    expect(o).toMatchObject({
      status: 'applied',
      code: 'UPLINK_KEY_ROTATION_REQUESTED',
      state: { status: 'requested', oldKid: x.s.pair.kid },
    });
    if (o.status !== 'applied') throw new Error('rotate');
    expect(await x.outbox('uplink_key.rotate')).toEqual([{ body: { rotationId: o.state.rotationId }, seq: o.state.rotateSeq }]);
    expect(x.woken()).toBe(1);
    const again = await x.rotate();
    expect(again).toMatchObject({
      status: 'conflict',
      code: 'UPLINK_KEY_ROTATION_IN_PROGRESS',
      current: { rotationId: o.state.rotationId },
    });
    expect(await x.outbox('uplink_key.rotate')).toHaveLength(1);
    expect(await rotateUplinkKey(x.d, { gatewayId: 'no-such-gw', scope: null, by: 'ops' })).toMatchObject({
      status: 'refused',
      code: 'GATEWAY_NOT_FOUND',
    });
    // another site's token does not see the gateway
    expect(await rotateUplinkKey(x.d, { gatewayId: x.s.gatewayId, scope: ['other-site'], by: 'ops' })).toMatchObject({
      status: 'refused',
      code: 'GATEWAY_NOT_FOUND',
    });
  });

  it('a proposal under the old key with a good proof installs the new key; the old one is accepted until the first uplink under the new one, then refused KID_RETIRED and never applied', async () => {
    const x = await setup();
    const o = await x.rotate();
    if (o.status !== 'applied') throw new Error('rotate');
    const before = x.event();
    await x.send(x.oldKey, before);
    const { pair, draft } = x.propose(o.state.rotationId);
    const m = await x.send(x.oldKey, draft);
    expect(await x.inboxResult(m.jti)).toEqual({ result: 'applied', code: 'UPLINK_KEY_PROPOSAL_ACCEPTED' });
    expect(await x.outbox('uplink_key.activate')).toEqual([
      { body: { rotationId: o.state.rotationId, kid: pair.publicJwk.kid }, seq: o.state.rotateSeq + 1 },
    ]);
    expect(await x.keys()).toEqual([
      { kid: pair.publicJwk.kid, status: 'current' },
      { kid: x.s.pair.kid, status: 'previous' },
    ]);
    // in flight under the old key: still accepted
    const during = x.event();
    await x.send(x.oldKey, during);
    // the same proposal again (a resend with a new jti) changes nothing
    const again = await x.send(x.oldKey, draft);
    expect(await x.inboxResult(again.jti)).toEqual({ result: 'noop', code: 'UPLINK_KEY_PROPOSAL_ACCEPTED' });
    expect(await x.outbox('uplink_key.activate')).toHaveLength(1);

    const newKey = await importSigningKey(pair.privateJwk as never);
    const after = x.event();
    await x.send(newKey, after);
    expect(await x.keys()).toEqual([
      { kid: pair.publicJwk.kid, status: 'current' },
      { kid: x.s.pair.kid, status: 'retired' },
    ]);
    expect(await listUplinkKeyRotations(x.d, x.s.gatewayId, null)).toMatchObject([{ status: 'active', newKid: pair.publicJwk.kid }]);
    for (const e of [before, during, after]) expect(await x.audited(e.body.eventId)).toBe(true);

    const forged = x.event();
    await x.send(x.oldKey, forged);
    expect(await x.audited(forged.body.eventId)).toBe(false);
    expect(await x.rejected()).toEqual(['KID_RETIRED']);
    // the gateway row carries the current key too
    const g = await t.db.query<{ public_jwk: { kid: string } }>('SELECT public_jwk FROM gateways WHERE id = $1', [x.s.gatewayId]);
    expect(g.rows[0]?.public_jwk.kid).toBe(pair.publicJwk.kid);
    // a second rotation can start now
    expect(await x.rotate()).toMatchObject({ status: 'applied', state: { oldKid: pair.publicJwk.kid } });
  });

  it('a replica that read the keys before the rotation still refuses the retired key (the table decides, not its cache)', async () => {
    const x = await setup();
    const stale = await x.inbox();
    const warm = x.event();
    await x.send(x.oldKey, warm, stale); // stale replica caches the old key
    const o = await x.rotate();
    if (o.status !== 'applied') throw new Error('rotate');
    const { pair, draft } = x.propose(o.state.rotationId);
    await x.send(x.oldKey, draft);
    await x.send(await importSigningKey(pair.privateJwk as never), x.event());
    const forged = x.event();
    await x.send(x.oldKey, forged, stale);
    expect(await x.audited(forged.body.eventId)).toBe(false);
    expect(await x.rejected()).toEqual(['KID_RETIRED']);
    // and its next message under the new key verifies after it re-reads the keys
    x.d.clock.advance(2_000);
    const ok = x.event();
    await x.send(await importSigningKey(pair.privateJwk as never), ok, stale);
    expect(await x.audited(ok.body.eventId)).toBe(true);
  });

  it('refuses a proposal signed by an unknown key, one for a rotation it did not issue, and fails one whose new-key proof is bad', async () => {
    const x = await setup();
    const o = await x.rotate();
    if (o.status !== 'applied') throw new Error('rotate');
    // signed by a key the cloud never had
    const stranger = await generateSigningKeyPair();
    await x.send(await importSigningKey(stranger.privateJwk), x.propose(o.state.rotationId).draft);
    expect(await x.rejected()).toEqual(['UNKNOWN_KID']);
    // a rotation id the cloud did not issue
    const unknown = await x.send(x.oldKey, x.propose(newId()).draft);
    expect(await x.inboxResult(unknown.jti)).toEqual({ result: 'refused', code: 'UPLINK_KEY_ROTATION_UNKNOWN' });
    expect(await x.keys()).toEqual([{ kid: x.s.pair.kid, status: 'current' }]);
    expect(await listUplinkKeyRotations(x.d, x.s.gatewayId, null)).toMatchObject([{ status: 'requested' }]);
    // a proof made by another key
    const bad = await x.send(x.oldKey, x.propose(o.state.rotationId, { proofBy: 'other' }).draft);
    expect(await x.inboxResult(bad.jti)).toEqual({ result: 'refused', code: 'UPLINK_KEY_BAD_PROOF' });
    expect(await listUplinkKeyRotations(x.d, x.s.gatewayId, null)).toMatchObject([{ status: 'failed', code: 'UPLINK_KEY_BAD_PROOF' }]);
    expect(await x.keys()).toEqual([{ kid: x.s.pair.kid, status: 'current' }]);
    expect(await x.outbox('uplink_key.activate')).toEqual([]);
    // a good one for the failed rotation is refused too; a new rotation goes through
    const late = await x.send(x.oldKey, x.propose(o.state.rotationId).draft);
    expect(await x.inboxResult(late.jti)).toEqual({ result: 'refused', code: 'UPLINK_KEY_ROTATION_NOT_OPEN' });
    const o2 = await x.rotate();
    if (o2.status !== 'applied') throw new Error('rotate 2');
    // a proposal that reuses the current kid fails its rotation
    const reuse = await x.send(x.oldKey, x.propose(o2.state.rotationId, { kid: x.s.pair.kid }).draft);
    expect(await x.inboxResult(reuse.jti)).toEqual({ result: 'refused', code: 'UPLINK_KEY_KID_TAKEN' });
  });

  it('a proposal for another gateway’s rotation is refused as unknown', async () => {
    const a = await setup();
    const b = await setup();
    const o = await b.rotate();
    if (o.status !== 'applied') throw new Error('rotate');
    const m = await a.send(a.oldKey, a.propose(o.state.rotationId).draft);
    expect(await a.inboxResult(m.jti)).toEqual({ result: 'refused', code: 'UPLINK_KEY_ROTATION_UNKNOWN' });
    expect(await listUplinkKeyRotations(b.d, b.s.gatewayId, null)).toMatchObject([{ status: 'requested' }]);
  });

  it('the database refuses a rotation status change outside a verb, and a backwards one inside', async () => {
    const x = await setup();
    const o = await x.rotate();
    if (o.status !== 'applied') throw new Error('rotate');
    await expect(
      t.db.query(`UPDATE gateway_uplink_key_rotations SET status = 'failed', settled_at = 1 WHERE id = $1`, [o.state.rotationId]),
    ).rejects.toThrow(/gateway_uplink_key_rotations\.status requested -> failed is not a move of verb \(none: tobira\.verb unset\)/);
    // the verb that activates a rotation may do so only from proposed
    await expect(
      t.db.transaction(async (tx) => {
        await tx.query("SELECT set_config('tobira.verb', 'activateUplinkKey', true)");
        await tx.query(`UPDATE gateway_uplink_key_rotations SET status = 'active', new_kid = 'k' WHERE id = $1`, [o.state.rotationId]);
      }),
    ).rejects.toThrow(/requested -> active is not a move of verb activateUplinkKey/);
    expect(await listUplinkKeyRotations(x.d, x.s.gatewayId, null)).toMatchObject([{ status: 'requested' }]);
  });
});
