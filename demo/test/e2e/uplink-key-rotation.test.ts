import { readFileSync } from 'node:fs';
import {
  connectMqtt,
  importSigningKey,
  newCorrelationId,
  newId,
  signMessage,
  topics,
  waitConnected,
  type KeyPairJwk,
  type MessageOf,
  type UplinkMessage,
} from '@tobira/shared';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, expectApplied, waitFor } from './system.js';

/**
 * Issue #17 part 1, the other direction: the gateway's own uplink signing key
 * rotated twice on a running system (cloud, gateway, sim locks, a real
 * broker), started by the cloud. Access events before, during and after both
 * rotations all reach the cloud audit (none lost, none rejected), and an
 * uplink forged with a retired gateway key is rejected KID_RETIRED.
 */
const headerKid = (token: string) => (JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString()) as { kid?: string }).kid;
const typeOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { type?: string }).type;

describe.each(backends())('gateway uplink-key rotation on a running system (%s brokers and database)', (backend) => {
  let sys: System;
  let wire: MqttClient;
  let filePair: KeyPairJwk;
  const up: string[] = [];
  let decided = 0;
  const kids: string[] = [];

  const present = async (pin: string) => {
    const r = await sys.fleet.lock('L1').present({ type: 'pin', value: pin }, { timeoutMs: 10_000 });
    expect(r.status).toBe('decided');
    expect(r.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
    decided++;
  };
  const allAudited = () =>
    waitFor(
      async () => (await sys.cloud.listAudit({ gatewayId: sys.gatewayId, limit: 1000 })).length === decided,
      `${decided} events in the audit`,
    );
  const rotation = async (id: string) => (await sys.cloud.listUplinkKeyRotations(sys.gatewayId, null))?.find((r) => r.rotationId === id);

  const rotate = async () => {
    await present('246810');
    const o = expectApplied(await sys.cloud.rotateUplinkKey({ gatewayId: sys.gatewayId, scope: null, by: 'e2e' }), 'rotate');
    // a second request while it is open changes nothing
    expect(await sys.cloud.rotateUplinkKey({ gatewayId: sys.gatewayId, scope: null, by: 'e2e' })).toMatchObject({
      status: 'conflict',
      code: 'UPLINK_KEY_ROTATION_IN_PROGRESS',
    });
    // decisions while the rotation runs
    await present('246810');
    await present('246810');
    const done = await waitFor(async () => {
      const r = await rotation(o.rotationId);
      return r?.status === 'active' && r;
    }, 'rotation active');
    expect(done.oldKid).toBe(kids.at(-1));
    kids.push(done.newKid!);
    await present('246810');
    await allAudited();
    // the gateway signs with the new key; only that one still has a private part
    const stored = sys.gateway.store.db.prepare('SELECT kid, status FROM uplink_keys WHERE private_jwk IS NOT NULL').all();
    expect(stored).toEqual([{ kid: done.newKid, status: 'active' }]);
    await waitFor(() => up.some((t) => typeOf(t) === 'access.event' && headerKid(t) === done.newKid), 'an event under the new key');
  };

  beforeAll(async () => {
    sys = await new System(backend, { gatewayOverrides: { requestRate: { burst: 1000, perSecond: 1000 } } }).start();
    filePair = JSON.parse(readFileSync(sys.gatewayKeyFile, 'utf8')) as KeyPairJwk;
    kids.push(filePair.kid);
    wire = connectMqtt(sys.cloudBrokerUrl, { clientId: `wire-${sys.gatewayId}`, clean: true });
    wire.on('message', (_t, p) => up.push(p.toString()));
    await waitConnected(wire);
    await wire.subscribeAsync(topics.gatewayUp(sys.gatewayId), { qos: 1 });
    const k = expectApplied(await sys.issuePin('246810', ['L1']), 'issue');
    await sys.waitKeyStatus(k.id, 'active');
  });
  afterAll(async () => {
    await wire?.endAsync(true);
    await sys?.stop();
  });

  it('rotation 1: every access event reaches the audit, none rejected', async () => {
    await rotate();
    expect(await sys.cloud.listRejectedUplinks({ gatewayId: sys.gatewayId })).toEqual([]);
  });

  it('rotation 2: the same, and the key pair file no longer signs anything', async () => {
    await rotate();
    expect(kids).toHaveLength(3);
    expect(new Set(kids).size).toBe(3);
    expect(await sys.cloud.listRejectedUplinks({ gatewayId: sys.gatewayId })).toEqual([]);
    const last = up.filter((t) => typeOf(t) === 'access.event').at(-1)!;
    expect(headerKid(last)).toBe(kids[2]);
  });

  it('attack: an access event forged with a retired gateway key is rejected KID_RETIRED and never audited', async () => {
    const before = (await sys.cloud.listAudit({ gatewayId: sys.gatewayId, limit: 1000 })).length;
    const retired = await importSigningKey(filePair.privateJwk);
    const { token } = await signMessage<MessageOf<UplinkMessage, 'access.event'>>(
      retired,
      sys.gatewayId,
      {
        type: 'access.event',
        aud: sys.cloud.issuer,
        seq: 999_999,
        cid: newCorrelationId(),
        body: {
          eventId: newId(),
          requestId: 'forged-1',
          lockId: 'L1' as never,
          doorId: sys.doors.L1 as never,
          at: sys.clock.now(),
          allowed: true,
          code: 'ALLOWED',
          keyId: null,
          keyVersion: null,
          personId: null,
          credentialType: 'pin',
          commandId: null,
        },
      },
      sys.clock,
    );
    await wire.publishAsync(topics.gatewayUp(sys.gatewayId), token, { qos: 1 });
    const rejected = await waitFor(async () => {
      const r = await sys.cloud.listRejectedUplinks({ gatewayId: sys.gatewayId });
      return r.length > 0 && r;
    }, 'the forged uplink rejected');
    expect(rejected.map((r) => r.code)).toEqual(['KID_RETIRED']);
    expect((await sys.cloud.listAudit({ gatewayId: sys.gatewayId, limit: 1000 })).length).toBe(before);
    await present('246810');
    await allAudited();
  });
});
