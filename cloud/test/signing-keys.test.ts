import {
  DownlinkMessage,
  KeySet,
  ManualClock,
  connectMqtt,
  generateSigningKeyPair,
  newId,
  topics,
  verifyMessage,
  waitConnected,
} from '@tobira/shared';
import { mqttBackends, pgBackends, startMqttBackend, type MqttTestBroker } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/app/keys.js';
import { startCloud } from './cloud-helpers.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { waitFor } from './mqtt-helpers.js';

/**
 * Outbox rows are stored unsigned and signed at each send (dispatcher
 * signRow), so no stored row carries a signature, or a kid, of its own: every
 * downlink names the kid of the key that signed it at that moment. A
 * rotation (CLOUD_SIGNING_JWK = [new, old]) signs rows queued before it with
 * the new key, and a gateway that does not trust the new kid yet refuses
 * them (UNKNOWN_KID) rather than trying its other keys.
 */
const headerOf = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString()) as { alg?: string; kid?: string };

describe.each(pgBackends())('downlink signing keys on %s', (pgBackend) => {
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

    it('every dispatched row names the kid of the key that signed it; after a rotation a row queued before it is signed with the new key', async () => {
      const clock = new ManualClock(T0);
      const d = deps(t.db, clock);
      const s = await seed(d, { gatewayId: `gw-${broker.unique}-${newId().slice(-8)}` });
      const oldKey = await generateSigningKeyPair();
      const newKey = await generateSigningKeyPair();
      const issue = async (i: number) => {
        const o = await issueKey(d, {
          personId: s.personId,
          doors: [s.doorA],
          credential: { type: 'pin', value: String(700000 + i) },
          validFrom: T0,
          validUntil: T0 + DAY,
        });
        if (o.status !== 'applied') throw new Error(o.code);
      };
      // the raw tokens on the gateway's down topic
      const raw = connectMqtt(broker.url, { clientId: `raw-${newId().slice(-12)}`, clean: true });
      const tokens: string[] = [];
      raw.on('message', (_t, p) => tokens.push(p.toString()));
      await waitConnected(raw);
      await raw.subscribeAsync(topics.gatewayDown(s.gatewayId), { qos: 1 });
      const seqOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { seq?: number }).seq;
      try {
        const before = await startCloud(t, broker.url, { clock, env: { CLOUD_SIGNING_JWK: JSON.stringify(oldKey.privateJwk) } });
        try {
          await issue(1);
          await before.flush();
          await waitFor(() => tokens.some((x) => seqOf(x) === 1) || undefined, 'seq 1 on the wire');
        } finally {
          await before.stop();
        }
        // queued while no cloud runs: the row waits unsigned
        await issue(2);
        const after = await startCloud(t, broker.url, {
          clock,
          env: { CLOUD_SIGNING_JWK: JSON.stringify([newKey.privateJwk, oldKey.privateJwk]) },
        });
        try {
          await after.flush();
          await waitFor(() => tokens.some((x) => seqOf(x) === 2) || undefined, 'seq 2 on the wire');
          expect(after.jwks.keys.map((k) => k.kid)).toEqual([newKey.kid, oldKey.kid]);
        } finally {
          await after.stop();
        }
        const bySeq = new Map(tokens.map((x) => [seqOf(x), headerOf(x)]));
        expect(bySeq.get(1)).toEqual(expect.objectContaining({ alg: 'EdDSA', kid: oldKey.kid }));
        expect(bySeq.get(2)).toEqual(expect.objectContaining({ alg: 'EdDSA', kid: newKey.kid }));
        // every signed downlink (heartbeats included) names a kid
        expect(tokens.every((x) => typeof headerOf(x).kid === 'string')).toBe(true);
        // as a gateway checks them: one trusting both keys, one trusting only the old key
        const verify = async (keys: KeySet, token: string) => {
          const v = await verifyMessage(token, { keys, issuer: 'tobira-cloud', audience: s.gatewayId, schema: DownlinkMessage, clock });
          return v.ok ? 'ok' : v.code;
        };
        const both = await KeySet.fromJwks({ keys: [oldKey.publicJwk, newKey.publicJwk] });
        const oldOnly = await KeySet.fromJwks({ keys: [oldKey.publicJwk] });
        const grant = (seq: number) => tokens.find((x) => seqOf(x) === seq) ?? '';
        expect([await verify(both, grant(1)), await verify(both, grant(2))]).toEqual(['ok', 'ok']);
        expect([await verify(oldOnly, grant(1)), await verify(oldOnly, grant(2))]).toEqual(['ok', 'UNKNOWN_KID']);
      } finally {
        await raw.endAsync(true);
      }
    });
  });
});
