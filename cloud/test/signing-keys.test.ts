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
import { recordDeliveryAck } from '../src/adapters/db/signing-keys.js';
import { startCloud } from './cloud-helpers.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { waitFor } from './mqtt-helpers.js';

/**
 * Outbox rows are stored unsigned and signed at each send (dispatcher
 * signRow), so no stored row carries a signature, or a kid, of its own: every
 * downlink names the kid of the key that signed it at that moment. Which key
 * signs is the `signing_keys` table's: a key added to
 * CLOUD_SIGNING_JWK is only staged, and the cloud switches to it only once
 * every gateway applied the keyset.update that publishes it.
 */
const headerOf = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString()) as { alg?: string; kid?: string };

describe.each(pgBackends())('downlink signing keys on %s', (pgBackend) => {
  describe.each(mqttBackends())('with %s', (mqttBackend) => {
    // a database of its own: which key signs is the database's (signing_keys), shared by every cloud on it
    let t: TestDb;
    let broker: MqttTestBroker;
    beforeAll(async () => {
      t = await openTestDb(pgBackend);
      broker = await startMqttBackend(mqttBackend);
    });
    afterAll(async () => {
      await broker.stop();
      await t.close();
    });

    it('every dispatched row names the kid of the key that signed it; a key added to CLOUD_SIGNING_JWK signs only once published and applied by every gateway', async () => {
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
        // the "add" step: the new key joins CLOUD_SIGNING_JWK (first, even) and the cloud restarts. It is only
        // staged: no gateway trusts it yet, so the cloud keeps signing with the old key (before staging existed the
        // first key signed at once, and a gateway that did not know it refused everything: UNKNOWN_KID)
        const after = await startCloud(t, broker.url, {
          clock,
          env: { CLOUD_SIGNING_JWK: JSON.stringify([newKey.privateJwk, oldKey.privateJwk]) },
        });
        try {
          await after.flush();
          await waitFor(() => tokens.some((x) => seqOf(x) === 2) || undefined, 'seq 2 on the wire');
          expect(after.jwks.keys.map((k) => k.kid)).toEqual([oldKey.kid]);
          expect((await after.listSigningKeys()).map((k) => [k.kid, k.status]).sort()).toEqual(
            [
              [newKey.kid, 'staged'],
              [oldKey.kid, 'signing'],
            ].sort(),
          );
          // publish: a keyset.update adding it (seq 3, signed by the old key); switching waits for the gateway's ack
          expect(await after.publishSigningKey({ kid: newKey.kid })).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_PUBLISHED' });
          expect(after.jwks.keys.map((k) => k.kid)).toEqual([oldKey.kid, newKey.kid]);
          await after.flush();
          await waitFor(() => tokens.some((x) => seqOf(x) === 3) || undefined, 'seq 3 on the wire');
          const sw = await after.switchSigningKey({ kid: newKey.kid });
          expect(sw).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_DELIVERED' });
          expect(sw.status === 'refused' && sw.detail).toContain(s.gatewayId);
          // the gateway's ack of seq 3 (the uplink inbox records it this way; the e2e rotation test goes through MQTT)
          const update = tokens.find((x) => seqOf(x) === 3) ?? '';
          const jti = (JSON.parse(Buffer.from(update.split('.')[1] ?? '', 'base64url').toString()) as { jti: string }).jti;
          expect(await recordDeliveryAck(t.db, { gatewayId: s.gatewayId, jti, result: 'applied', code: 'KEYSET_UPDATED' }, T0)).toBe(1);
          expect(await after.switchSigningKey({ kid: newKey.kid })).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_SWITCHED' });
          await issue(4);
          await after.flush();
          await waitFor(() => tokens.some((x) => seqOf(x) === 4) || undefined, 'seq 4 on the wire');
        } finally {
          await after.stop();
        }
        const bySeq = new Map(tokens.map((x) => [seqOf(x), headerOf(x)]));
        expect(bySeq.get(1)).toEqual(expect.objectContaining({ alg: 'EdDSA', kid: oldKey.kid }));
        expect(bySeq.get(2)).toEqual(expect.objectContaining({ alg: 'EdDSA', kid: oldKey.kid }));
        expect(bySeq.get(3)).toEqual(expect.objectContaining({ alg: 'EdDSA', kid: oldKey.kid }));
        expect(bySeq.get(4)).toEqual(expect.objectContaining({ alg: 'EdDSA', kid: newKey.kid }));
        // every signed downlink (heartbeats included) names a kid
        expect(tokens.every((x) => typeof headerOf(x).kid === 'string')).toBe(true);
        // as a gateway checks them: one that applied seq 3 trusts both; one still on the old key alone
        // refuses only what came after the switch it had to apply first
        const verify = async (keys: KeySet, token: string) => {
          const v = await verifyMessage(token, { keys, issuer: 'tobira-cloud', audience: s.gatewayId, schema: DownlinkMessage, clock });
          return v.ok ? 'ok' : v.code;
        };
        const both = await KeySet.fromJwks({ keys: [oldKey.publicJwk, newKey.publicJwk] });
        const oldOnly = await KeySet.fromJwks({ keys: [oldKey.publicJwk] });
        const msg = (seq: number) => tokens.find((x) => seqOf(x) === seq) ?? '';
        expect(await Promise.all([1, 2, 3, 4].map((q) => verify(both, msg(q))))).toEqual(['ok', 'ok', 'ok', 'ok']);
        expect(await Promise.all([1, 2, 3, 4].map((q) => verify(oldOnly, msg(q))))).toEqual(['ok', 'ok', 'ok', 'UNKNOWN_KID']);
      } finally {
        await raw.endAsync(true);
      }
    });
  });
});
