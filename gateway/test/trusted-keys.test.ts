import { generateSigningKeyPair, importSigningKey, newId, type KeyPairJwk, type PublicSigningJwk } from '@tobira/shared';
import { mqttBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applyKeySetUpdate, type TrustedKey } from '../src/domain/trusted-keys.js';
import { createGateway } from '../src/gateway.js';
import { T0, grant } from './fixtures.js';
import { PIN, provision, runSite, silentLog, waitFor, type Running } from './harness.js';

const pub = (p: KeyPairJwk): PublicSigningJwk => ({ kty: 'OKP', crv: 'Ed25519', x: String(p.publicJwk.x), kid: p.kid });
const trusted = (p: KeyPairJwk, status: 'trusted' | 'retired' = 'trusted'): TrustedKey => ({
  kid: p.kid,
  jwk: pub(p),
  status,
  source: 'config',
  notBefore: null,
  addedAt: T0,
  retiredAt: status === 'retired' ? T0 : null,
});

describe('keyset.update rules (domain/trusted-keys.ts)', () => {
  let a: KeyPairJwk;
  let b: KeyPairJwk;
  let c: KeyPairJwk;
  beforeEach(async () => {
    [a, b, c] = await Promise.all([generateSigningKeyPair(), generateSigningKeyPair(), generateSigningKeyPair()]);
  });

  it('adds a new key, signed by a trusted one', () => {
    const o = applyKeySetUpdate([trusted(a)], { add: [{ jwk: pub(b), notBefore: T0 }], retire: [] }, a.kid, T0);
    expect(o).toMatchObject({ status: 'applied', code: 'KEYSET_UPDATED' });
    expect(o.status === 'applied' && o.state).toEqual([expect.objectContaining({ kid: b.kid, status: 'trusted', source: 'cloud' })]);
  });

  it('retires an old key in an update signed by the new one', () => {
    const o = applyKeySetUpdate([trusted(a), trusted(b)], { add: [], retire: [{ kid: a.kid, at: T0 }] }, b.kid, T0);
    expect(o.status === 'applied' && o.state).toEqual([expect.objectContaining({ kid: a.kid, status: 'retired', retiredAt: T0 })]);
  });

  it('never trusts a retired kid again: re-adding it is refused KEYSET_KID_RETIRED', () => {
    const o = applyKeySetUpdate([trusted(a, 'retired'), trusted(b)], { add: [{ jwk: pub(a), notBefore: T0 }], retire: [] }, b.kid, T0);
    expect(o).toEqual({ status: 'refused', code: 'KEYSET_KID_RETIRED', detail: `kid ${a.kid}` });
  });

  it('refuses an update retiring the key it is signed with (KEYSET_SELF_RETIRE) or leaving no key (KEYSET_WOULD_BE_EMPTY)', () => {
    expect(applyKeySetUpdate([trusted(a), trusted(b)], { add: [], retire: [{ kid: a.kid, at: T0 }] }, a.kid, T0)).toMatchObject({
      status: 'refused',
      code: 'KEYSET_SELF_RETIRE',
    });
    expect(
      applyKeySetUpdate(
        [trusted(a), trusted(b)],
        {
          add: [],
          retire: [
            { kid: a.kid, at: T0 },
            { kid: b.kid, at: T0 },
          ],
        },
        c.kid,
        T0,
      ),
    ).toMatchObject({
      status: 'refused',
      code: 'KEYSET_WOULD_BE_EMPTY',
    });
  });

  it('refuses a known kid with another public key; an update that changes nothing is a noop', () => {
    expect(
      applyKeySetUpdate([trusted(a)], { add: [{ jwk: { ...pub(b), kid: a.kid }, notBefore: T0 }], retire: [] }, a.kid, T0),
    ).toMatchObject({
      status: 'refused',
      code: 'INVALID_PUBLIC_KEY',
    });
    expect(applyKeySetUpdate([trusted(a)], { add: [{ jwk: pub(a), notBefore: T0 }], retire: [] }, a.kid, T0)).toMatchObject({
      status: 'noop',
      code: 'KEYSET_UNCHANGED',
    });
  });

  it('a retire of a kid never seen is kept, so it can never be added later', () => {
    const o = applyKeySetUpdate([trusted(a)], { add: [], retire: [{ kid: c.kid, at: T0 }] }, a.kid, T0);
    expect(o.status === 'applied' && o.state).toEqual([expect.objectContaining({ kid: c.kid, jwk: null, status: 'retired' })]);
  });
});

describe.each(mqttBackends())('trusted cloud keys of a running gateway against %s', (backend) => {
  let broker: MqttTestBroker;
  let site: Running | undefined;
  beforeEach(async () => {
    broker = await startMqttBackend(backend);
  });
  afterEach(async () => {
    await site?.close();
    site = undefined;
    await broker.stop();
  });

  const update = (s: Running, body: { add?: unknown[]; retire?: unknown[] }, key = s.f.cloudKey) =>
    s.cloud.sign({ type: 'keyset.update', seq: ++s.cloud.seq, body: { updateId: newId(), add: [], retire: [], ...body } }, key);
  const acks = (s: Running) => s.cloud.ofType('ack').filter((m) => m.body.keyId === null && m.body.ackSeq !== null);
  const rejected = (s: Running, code: string) =>
    s.gw.store.db.prepare('SELECT count(*) AS n FROM rejected WHERE code = ?').get(code) as { n: number };

  it('a key granted under a retired signer that was not re-sent opens nothing (SIGNER_RETIRED); one re-sent under the new key opens', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    const next = await generateSigningKeyPair();
    const nextKey = await importSigningKey(next.privateJwk);
    // two keys under the old signer
    await provision(s, { keyId: 'key-kept' as never });
    await s.cloud.grant({ keyId: 'key-left' as never, credential: { type: 'pin', digest: s.f.digest('777777') } });
    // add the next key (signed by the old one), then the kept key's grant again under the next key
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore: T0 }] })).token);
    // as the cloud does (switch waits for the ack): nothing under the next key before the gateway applied it
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the add applied');
    const kept = (
      await s.cloud.sign({ type: 'key.grant', seq: ++s.cloud.seq, body: { key: s.gw.store.loadSlot('key-kept').key!.grant } }, nextKey)
    ).token;
    await s.cloud.publishRaw(kept);
    // retire the old key, in an update signed by the next one
    await s.cloud.publishRaw((await update(s, { retire: [{ kid: s.f.cloudPair.kid, at: T0 }] }, nextKey)).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the rotation applied');
    expect(
      s.gw.store
        .trustedKeys()
        .map((k) => [k.kid, k.status])
        .sort(),
    ).toEqual(
      [
        [next.kid, 'trusted'],
        [s.f.cloudPair.kid, 'retired'],
      ].sort(),
    );
    await waitFor(() => acks(s).length >= 2, 'both updates acked');
    expect(acks(s).map((a) => a.body.code)).toEqual(['KEYSET_UPDATED', 'KEYSET_UPDATED']);
    // a heartbeat under the new key keeps the site fresh
    await s.cloud.publishRaw(
      (await s.cloud.sign({ type: 'heartbeat', body: { lastSeq: s.cloud.seq, intervalMs: 30_000 } }, nextKey)).token,
    );
    await waitFor(() => (s.gw.store.settings().leaseExpiresAt ?? 0) > s.f.clock.now(), 'fresh lease');
    expect(await s.lock.present(PIN)).toMatchObject({ allowed: true, code: 'ALLOWED' });
    expect(await s.lock.present('777777')).toMatchObject({ allowed: false, code: 'SIGNER_RETIRED' });
    // and the old key signs nothing any more: a heartbeat under it is refused KID_RETIRED
    await s.cloud.heartbeat();
    await waitFor(() => rejected(s, 'KID_RETIRED').n === 1, 'the old-key heartbeat refused');
  });

  it('a message signed by a trusted key before its notBefore (gateway trusted time) is refused KID_NOT_YET_VALID and applies nothing; from its notBefore on it is accepted', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s);
    const next = await generateSigningKeyPair();
    const nextKey = await importSigningKey(next.privateJwk);
    const HOUR = 3_600_000;
    const notBefore = s.f.clock.now() + HOUR;
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore }] })).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the add applied');
    expect(s.gw.store.trustedKeys().find((k) => k.kid === next.kid)).toMatchObject({ status: 'trusted', notBefore });

    // As the cloud would send it: a sequenced grant under the new key, an hour early.
    const early = await s.cloud.sign(
      {
        type: 'key.grant',
        seq: ++s.cloud.seq,
        body: { key: grant({ keyId: 'key-early' as never, credential: { type: 'pin', digest: s.f.digest('555555') } }) },
      },
      nextKey,
    );
    await s.cloud.publishRaw(early.token);
    await waitFor(() => rejected(s, 'KID_NOT_YET_VALID').n === 1, 'the early message refused');
    expect(s.gw.store.db.prepare('SELECT count(*) AS n FROM inbox WHERE jti = ?').get(early.message.jti)).toEqual({ n: 0 });
    expect(s.gw.store.loadSlot('key-early').key).toBeNull();

    // From its notBefore on (by the gateway's trusted time) the key signs: the same grant now applies.
    s.f.clock.advance(HOUR);
    const onTime = await s.cloud.sign({ type: 'key.grant', seq: s.cloud.seq, body: early.message.body }, nextKey);
    await s.cloud.publishRaw(onTime.token);
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the grant applied');
    expect(s.gw.store.loadSlot('key-early').key).not.toBeNull();
    expect(rejected(s, 'KID_NOT_YET_VALID').n).toBe(1);
  });

  it('an update signed by an unknown key is refused UNKNOWN_KID; one re-adding a retired key is refused KEYSET_KID_RETIRED and changes nothing', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    const next = await generateSigningKeyPair();
    await provision(s);
    // signed by a key the gateway never trusted: refused before the inbox
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore: T0 }] }, s.f.otherKey)).token);
    s.cloud.seq--; // it never reached the inbox: the seq is free again
    await waitFor(() => rejected(s, 'UNKNOWN_KID').n === 1, 'refused UNKNOWN_KID');
    expect(s.gw.store.trustedKeys().map((k) => k.kid)).toEqual([s.f.cloudPair.kid]);
    // add next, retire the old (signed by next), then an update signed by next re-adding the old one
    const nextKey = await importSigningKey(next.privateJwk);
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore: T0 }] })).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the add applied');
    await s.cloud.publishRaw((await update(s, { retire: [{ kid: s.f.cloudPair.kid, at: T0 }] }, nextKey)).token);
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(s.f.cloudPair), notBefore: T0 }] }, nextKey)).token);
    await waitFor(() => acks(s).length >= 3, 'three updates acked');
    expect(acks(s).map((a) => [a.body.result, a.body.code])).toEqual([
      ['applied', 'KEYSET_UPDATED'],
      ['applied', 'KEYSET_UPDATED'],
      ['refused', 'KEYSET_KID_RETIRED'],
    ]);
    expect(s.gw.store.trustedKeys().find((k) => k.kid === s.f.cloudPair.kid)?.status).toBe('retired');
  });

  const snapshot = async (s: Running, body: Record<string, unknown>, key = s.f.cloudKey) => {
    const { token, message } = await s.cloud.sign(
      { type: 'keyset.snapshot', body: { snapshotId: newId(), asOfSeq: s.cloud.seq, part: 1, parts: 1, keys: [], revoked: [], ...body } },
      key,
    );
    return { token, jti: message.jti };
  };
  const baseGrantOf = (s: Running, keyId: string) =>
    grant({ keyId: keyId as never, credential: { type: 'pin', digest: s.f.digest('555555') } });
  /** Acks of a whole snapshot: no key, no seq, naming a snapshot's jti. */
  const wholeAcks = (s: Running, ...jtis: string[]) =>
    s.cloud.ofType('ack').filter((m) => m.body.keyId === null && m.body.ackSeq === null && jtis.includes(m.body.ackOf));
  const modeRow = (s: Running) =>
    s.gw.store.db.prepare('SELECT mode, mode_origin, mode_by, mode_request_id FROM settings WHERE id = 1').get() as Record<string, unknown>;

  it('a gateway offline across the re-sign and the retire catches up by snapshot: the old kid is retired (KID_RETIRED after), the keys open under the new signer, the skipped site.mode applies, the whole snapshot is acked SNAPSHOT_APPLIED', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    const next = await generateSigningKeyPair();
    const nextKey = await importSigningKey(next.privateJwk);
    const kept = (await provision(s, { keyId: 'key-kept' as never })).body.key;
    const left = (await s.cloud.grant({ keyId: 'key-left' as never, credential: { type: 'pin', digest: s.f.digest('777777') } })).body.key;
    // the add reached it (the cloud switches only after every gateway applied it)
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore: T0 }] })).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the add applied');
    // then it is offline while the cloud re-signs both grants (seq 4, 5), sets lockdown (6) and retires the old key (7):
    // those rows are purged, so it catches up by a snapshot, signed by the new key
    s.cloud.seq += 4;
    const requestId = newId();
    const m = await snapshot(
      s,
      {
        keys: [kept, left],
        trustedKeys: { add: [{ jwk: pub(next), notBefore: T0 }], retire: [{ kid: s.f.cloudPair.kid, at: T0 }] },
        modes: { mode: { seq: 6, requestId, mode: 'lockdown', by: 'ops', reason: 'drill' }, passage: [] },
      },
      nextKey,
    );
    await s.cloud.publishRaw(m.token);
    await waitFor(() => wholeAcks(s, m.jti).length >= 1, 'the whole snapshot acked');
    expect(wholeAcks(s, m.jti).map((a) => [a.body.ackOf, a.body.result, a.body.code])).toEqual([[m.jti, 'applied', 'SNAPSHOT_APPLIED']]);
    expect(s.gw.store.settings().appliedSeq).toBe(7);
    expect(
      s.gw.store
        .trustedKeys()
        .map((k) => [k.kid, k.status])
        .sort(),
    ).toEqual(
      [
        [next.kid, 'trusted'],
        [s.f.cloudPair.kid, 'retired'],
      ].sort(),
    );
    expect(modeRow(s)).toEqual({ mode: 'lockdown', mode_origin: 'cloud', mode_by: 'ops', mode_request_id: requestId });
    // no key rests on the retired signer: the snapshot's grants are noted under the new one
    const signers = s.gw.store.db.prepare('SELECT key_id, signer_kid FROM keys ORDER BY key_id').all();
    expect(signers).toEqual([
      { key_id: 'key-kept', signer_kid: next.kid },
      { key_id: 'key-left', signer_kid: next.kid },
    ]);
    // lockdown from the skipped site.mode holds
    await s.cloud.publishRaw(
      (await s.cloud.sign({ type: 'heartbeat', body: { lastSeq: s.cloud.seq, intervalMs: 30_000 } }, nextKey)).token,
    );
    await waitFor(() => (s.gw.store.settings().leaseExpiresAt ?? 0) > s.f.clock.now(), 'fresh lease');
    expect(await s.lock.present(PIN)).toMatchObject({ allowed: false, code: 'SITE_LOCKDOWN' });
    // the old key signs nothing any more: a replayed grant of the left key under it and a heartbeat are refused KID_RETIRED
    await s.cloud.publishRaw((await s.cloud.sign({ type: 'key.grant', seq: ++s.cloud.seq, body: { key: { ...left, version: 2 } } })).token);
    await s.cloud.heartbeat();
    await waitFor(() => rejected(s, 'KID_RETIRED').n === 2, 'old-key messages refused');
    expect(s.gw.store.loadSlot('key-left').key?.grant.version).toBe(1);
  });

  it("attacks on a snapshot's trusted keys: one retiring its own signer is refused whole (the rest applies), a retired kid it adds stays retired, an older cloud mode does not undo a newer one, a replay changes nothing", async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    const next = await generateSigningKeyPair();
    const nextKey = await importSigningKey(next.privateJwk);
    await provision(s);
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore: T0 }] })).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the add applied');
    await s.cloud.publishRaw((await update(s, { retire: [{ kid: s.f.cloudPair.kid, at: T0 }] }, nextKey)).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the retire applied');
    const trustedNow = () =>
      s.gw.store
        .trustedKeys()
        .map((k) => [k.kid, k.status])
        .sort();
    const before = trustedNow();
    // a snapshot (signed by next) whose keys retire next: its keys refused, its grant and mode still apply
    const other = await generateSigningKeyPair();
    s.cloud.seq += 1;
    const selfRetire = await snapshot(
      s,
      {
        keys: [baseGrantOf(s, 'key-new')],
        trustedKeys: { add: [{ jwk: pub(other), notBefore: T0 }], retire: [{ kid: next.kid, at: T0 }] },
        modes: { mode: { seq: s.cloud.seq, requestId: newId(), mode: 'lockdown', by: 'ops', reason: null }, passage: [] },
      },
      nextKey,
    );
    await s.cloud.publishRaw(selfRetire.token);
    await waitFor(() => wholeAcks(s, selfRetire.jti).length >= 1, 'acked');
    expect(wholeAcks(s, selfRetire.jti)[0]?.body).toMatchObject({ ackOf: selfRetire.jti, result: 'refused', code: 'KEYSET_SELF_RETIRE' });
    expect(trustedNow()).toEqual(before);
    expect(s.gw.store.loadSlot('key-new').key?.grant.keyId).toBe('key-new');
    expect(modeRow(s)).toMatchObject({ mode: 'lockdown', mode_origin: 'cloud' });
    // staff set normal at the gateway; a snapshot naming the retired kid as trusted and the same (already applied) mode
    s.gw.store.db.prepare("UPDATE settings SET mode = 'normal', mode_origin = 'gateway' WHERE id = 1").run();
    const lockdownSeq = s.cloud.seq;
    s.cloud.seq += 1;
    const readd = await snapshot(
      s,
      {
        trustedKeys: {
          add: [
            { jwk: pub(s.f.cloudPair), notBefore: T0 },
            { jwk: pub(next), notBefore: T0 },
          ],
          retire: [],
        },
        modes: { mode: { seq: lockdownSeq, requestId: newId(), mode: 'lockdown', by: 'ops', reason: null }, passage: [] },
      },
      nextKey,
    );
    const token = readd.token;
    await s.cloud.publishRaw(token);
    await waitFor(() => wholeAcks(s, readd.jti).length >= 1, 'acked');
    expect(wholeAcks(s, readd.jti)[0]?.body).toMatchObject({ ackOf: readd.jti, result: 'applied', code: 'SNAPSHOT_APPLIED' });
    expect(trustedNow()).toEqual(before);
    expect(modeRow(s)).toMatchObject({ mode: 'normal', mode_origin: 'gateway' });
    // the same token again: a duplicate message id, never applied twice
    await s.cloud.publishRaw(token);
    await new Promise((r) => setTimeout(r, 300));
    expect(wholeAcks(s, selfRetire.jti, readd.jti)).toHaveLength(2);
    expect(trustedNow()).toEqual(before);
  });

  it('privacy by the staff marker, through the stored key set: a grant marked staff is refused PRIVACY_ACTIVE at a door with privacy on, an unmarked offline-capable one too (fallback), the guest key opens', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    await provision(s);
    await s.cloud.grant({ keyId: 'key-cleaner' as never, staff: true, credential: { type: 'pin', digest: s.f.digest('777777') } });
    await s.cloud.grant({
      keyId: 'key-master' as never,
      offlineCapable: true,
      offlineMaxSeconds: 3600,
      credential: { type: 'pin', digest: s.f.digest('888888') },
    });
    await s.cloud.heartbeat();
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'grants applied');
    // without privacy every key opens
    expect((await s.lock.present('777777')).code).toBe('ALLOWED');
    await s.lock.publish('event', { eventId: newId(), lockId: s.lock.lockId, at: s.f.clock.now(), kind: 'privacy', active: true });
    const privacyOn = () =>
      (s.gw.store.db.prepare('SELECT privacy_since FROM locks WHERE lock_id = ?').get(s.lock.lockId) as { privacy_since: number | null })
        .privacy_since !== null;
    await waitFor(privacyOn, 'privacy on');
    expect(await s.lock.present('777777')).toMatchObject({ allowed: false, code: 'PRIVACY_ACTIVE' });
    expect(await s.lock.present('888888')).toMatchObject({ allowed: false, code: 'PRIVACY_ACTIVE' });
    expect(await s.lock.present(PIN)).toMatchObject({ allowed: true, code: 'ALLOWED' });
  });

  it('a restart re-seeds from the config, which still lists the retired key: it stays retired', async () => {
    site = await runSite(broker.url, broker.url, broker.unique);
    const s = site;
    const next = await generateSigningKeyPair();
    const nextKey = await importSigningKey(next.privateJwk);
    await provision(s);
    await s.cloud.publishRaw((await update(s, { add: [{ jwk: pub(next), notBefore: T0 }] })).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'the add applied');
    await s.cloud.publishRaw((await update(s, { retire: [{ kid: s.f.cloudPair.kid, at: T0 }] }, nextKey)).token);
    await waitFor(() => s.gw.store.settings().appliedSeq >= s.cloud.seq, 'updates applied');
    await s.gw.stop({ force: true });
    const again = createGateway(s.f.config, { clock: s.f.clock, log: silentLog(), tickMs: 50 });
    await again.start();
    try {
      expect(
        again.store
          .trustedKeys()
          .map((k) => [k.kid, k.status])
          .sort(),
      ).toEqual(
        [
          [next.kid, 'trusted'],
          [s.f.cloudPair.kid, 'retired'],
        ].sort(),
      );
    } finally {
      await again.stop({ force: true });
    }
  });
});
