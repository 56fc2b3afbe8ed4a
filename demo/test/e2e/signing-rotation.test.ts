import {
  connectMqtt,
  credentialDigest,
  decodeSecret,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  signMessage,
  topics,
  waitConnected,
  type DownlinkMessage,
  type KeyPairJwk,
  type MessageOf,
} from '@tobira/shared';
import type { PresentResult } from '@tobira/firmware-sim';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

/**
 * Issue #17 part 1: the cloud's signing key rotated twice on a running
 * system (cloud, gateway, sim locks, a real broker): add → publish → switch
 * → re-sign → retire. Every decision for a valid key is ALLOWED throughout,
 * and nothing signed with a retired key is accepted afterwards: a replayed
 * old grant and a forged new one are refused KID_RETIRED.
 */
const headerKid = (token: string) => (JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString()) as { kid?: string }).kid;
const claimsOf = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { type?: string; seq?: number };

describe.each(backends())('signing-key rotation on a running system (%s brokers and database)', (backend) => {
  let sys: System;
  let k1: KeyPairJwk;
  let k2: KeyPairJwk;
  let k3: KeyPairJwk;
  const cloudEnv: Record<string, string> = {};
  const decisions: { pin: string; r: PresentResult }[] = [];
  const pins = new Set<string>();
  let wire: MqttClient;
  const tokens: string[] = [];

  const present = async (pin: string, lock = 'L1') => {
    const r = await sys.fleet.lock(lock).present({ type: 'pin', value: pin }, { timeoutMs: 10_000 });
    expect(r.status).toBe('decided');
    decisions.push({ pin, r });
    return r;
  };
  /** Every valid key opens, now. */
  const allOpen = async () => {
    for (const pin of pins) expect((await present(pin)).decision, `PIN ${pin}`).toMatchObject({ allowed: true, code: 'ALLOWED' });
  };
  const issue = async (pin: string) => {
    const k = expectApplied(await sys.issuePin(pin, ['L1']), `issue ${pin}`);
    await sys.waitKeyStatus(k.id, 'active');
    pins.add(pin);
    return k;
  };
  const keyRow = async (kid: string) => (await sys.cloud.listSigningKeys()).find((k) => k.kid === kid);
  const delivered = async (kid: string, step: 'publish' | 'retire') =>
    waitFor(
      async () => (await keyRow(kid))?.deliveries.find((d) => d.step === step)?.applied === 1,
      `${step} of ${kid} applied by the gateway`,
    );
  const restartCloudWith = async (keys: KeyPairJwk[]) => {
    cloudEnv.CLOUD_SIGNING_JWK = JSON.stringify(keys.map((k) => k.privateJwk));
    await sys.stopCloud();
    await sys.startCloud();
  };

  /** The five steps; `from` is the signer being rotated out. */
  const rotate = async (from: KeyPairJwk, to: KeyPairJwk, all: KeyPairJwk[]) => {
    // add: the new private key goes into CLOUD_SIGNING_JWK (every replica) and the cloud restarts
    await restartCloudWith(all);
    expect(await keyRow(to.kid)).toMatchObject({ status: 'staged', loaded: true });
    // a staged key is neither published nor used
    expect(sys.cloud.jwks.keys.map((k) => k.kid)).not.toContain(to.kid);
    expect(await sys.cloud.switchSigningKey({ kid: to.kid })).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_PUBLISHED' });
    await allOpen();

    // publish: in the JWKS, and a keyset.update adding it goes to the gateway (signed by the old key)
    expect(await sys.cloud.publishSigningKey({ kid: to.kid })).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_PUBLISHED' });
    expect(sys.cloud.jwks.keys.map((k) => k.kid)).toContain(to.kid);
    await delivered(to.kid, 'publish');
    expect(sys.gateway.store.trustedKeys().find((k) => k.kid === to.kid)).toMatchObject({ status: 'trusted', source: 'cloud' });
    await allOpen();

    // switch: from now on every downlink is signed by the new key
    expect(await sys.cloud.switchSigningKey({ kid: to.kid })).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_SWITCHED' });
    expect(await keyRow(from.kid)).toMatchObject({ status: 'previous' });
    // a key issued now travels under the new key
    await issue(String(100000 + pins.size));
    await allOpen();

    // re-sign: every live grant again, under the new key
    const resign = await sys.cloud.resignLiveGrants();
    expect(resign).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_RESIGN_QUEUED' });
    expect(resign.status === 'applied' && resign.state.queued).toBe(pins.size);
    // retire: queued after the re-sent grants, so the gateway applies them first (seq order)
    expect(await sys.cloud.retireSigningKey({ kid: from.kid })).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_RETIRED' });
    await delivered(from.kid, 'retire');
    expect(sys.gateway.store.trustedKeys().find((k) => k.kid === from.kid)).toMatchObject({ status: 'retired' });
    expect(sys.cloud.jwks.keys.map((k) => k.kid)).not.toContain(from.kid);
    await allOpen();
  };

  beforeAll(async () => {
    [k1, k2, k3] = await Promise.all([generateSigningKeyPair(), generateSigningKeyPair(), generateSigningKeyPair()]);
    cloudEnv.CLOUD_SIGNING_JWK = JSON.stringify(k1.privateJwk);
    // pgliteOnDisk: the cloud restarts (the add step) on the same database; a generous request rate: this test presents often
    sys = await new System(backend, {
      cloudEnv,
      pgliteOnDisk: true,
      gatewayOverrides: { requestRate: { burst: 1000, perSecond: 1000 } },
    }).start();
    wire = connectMqtt(sys.cloudBrokerUrl, { clientId: `wire-${sys.gatewayId}`, clean: true });
    wire.on('message', (_t, p) => tokens.push(p.toString()));
    await waitConnected(wire);
    await wire.subscribeAsync(topics.gatewayDown(sys.gatewayId), { qos: 1 });
    await issue('246810');
    await issue('135790');
  });
  afterAll(async () => {
    await wire?.endAsync(true);
    await sys?.stop();
  });

  it('rotation 1 (k1 → k2): every valid key opens before, during and after', async () => {
    await allOpen();
    await rotate(k1, k2, [k1, k2]);
  });

  it('rotation 2 (k2 → k3): still no valid key denied; the gateway trusts k3 alone', async () => {
    await rotate(k2, k3, [k2, k3]);
    expect(
      sys.gateway.store
        .trustedKeys()
        .filter((k) => k.status === 'trusted')
        .map((k) => k.kid),
    ).toEqual([k3.kid]);
    await allOpen();
  });

  it('every decision made for a valid key was ALLOWED', () => {
    const denied = decisions.filter((d) => pins.has(d.pin) && d.r.decision?.allowed !== true);
    expect(denied).toEqual([]);
    expect(decisions.length).toBeGreaterThan(10);
  });

  it('attack: an old grant signed by a retired key, replayed, is refused KID_RETIRED and changes nothing', async () => {
    const old = tokens.find((t) => headerKid(t) === k1.kid && claimsOf(t).type === 'key.grant');
    expect(old).toBeDefined();
    const before = sys.gateway.store.settings().appliedSeq;
    await wire.publishAsync(topics.gatewayDown(sys.gatewayId), old as string, { qos: 1 });
    await waitFor(
      () => sys.gateway.store.db.prepare("SELECT 1 FROM rejected WHERE code = 'KID_RETIRED'").get() !== undefined,
      'the replay refused KID_RETIRED',
    );
    expect(sys.gateway.store.settings().appliedSeq).toBe(before);
    await allOpen();
  });

  it('attack: a new grant forged with a retired key is refused KID_RETIRED; its PIN opens nothing', async () => {
    const retired = await importSigningKey(k2.privateJwk);
    const pepper = decodeSecret(sys.gatewayConfig.credentialPepper);
    const now = sys.clock.now();
    const { token } = await signMessage<MessageOf<DownlinkMessage, 'key.grant'>>(
      retired,
      sys.cloud.issuer,
      {
        type: 'key.grant',
        aud: sys.gatewayId,
        seq: sys.gateway.store.settings().appliedSeq + 1,
        cid: newCorrelationId(),
        body: {
          key: {
            keyId: 'key-forged' as never,
            version: 1,
            personId: sys.personId as never,
            credential: { type: 'pin', digest: credentialDigest(pepper, 'pin', '999111') },
            doors: [sys.doors.L1 as never],
            validFrom: now - 60_000,
            validUntil: now + 3_600_000,
            schedule: null,
            offlineCapable: false,
          },
        },
      },
      sys.clock,
    );
    const n = () =>
      Number((sys.gateway.store.db.prepare("SELECT count(*) AS n FROM rejected WHERE code = 'KID_RETIRED'").get() as { n: number }).n);
    const seen = n();
    await wire.publishAsync(topics.gatewayDown(sys.gatewayId), token, { qos: 1 });
    await waitFor(() => n() > seen, 'the forged grant refused KID_RETIRED');
    expect(sys.gateway.store.loadSlot('key-forged').key).toBeNull();
    expect((await present('999111')).decision).toMatchObject({ allowed: false, code: 'UNKNOWN_CREDENTIAL' });
  });

  it('the published JWKS holds only current keys, never a private part', () => {
    const keys = sys.cloud.jwks.keys;
    expect(keys.map((k) => k.kid)).toEqual([k3.kid]);
    expect(keys.every((k) => k.d === undefined && k.use === 'sig')).toBe(true);
  });
});
