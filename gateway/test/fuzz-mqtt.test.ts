import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  KeySet,
  ManualClock,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  signMessage,
  topics,
  type DownlinkMessage,
  type SigningKey,
} from '@tobira/shared';
import { pino } from 'pino';
import { openDatabase } from '../src/adapters/sqlite/db.js';
import { GatewayStore } from '../src/adapters/sqlite/store.js';
import { TrustedTime, noCrash, type AppContext } from '../src/app/context.js';
import { receiveDownlink, type DownlinkDeps } from '../src/app/downlink.js';
import { handleLockMessage } from '../src/app/locks.js';
import { createMetrics } from '../src/metrics.js';
import { T0 } from './fixtures.js';

/**
 * The gateway's MQTT inbound handlers not fuzzed elsewhere (lock requests
 * are in model.test.ts): downlink messages from the cloud broker (random
 * bytes and text, JWS-shaped junk, tokens of another signer or audience,
 * valid tokens with a byte changed) and lock state, event and presence
 * messages from the site broker. Property: nothing throws; a refused
 * downlink is answered `rejected` and writes nothing but its diagnostic row;
 * the key set, the inbox and the settings never change.
 */
const GW = 'gw-fuzz-mqtt';

describe('gateway MQTT inbound handlers, fuzzed', () => {
  let dir: string;
  let store: GatewayStore;
  let down: DownlinkDeps;
  let ctx: AppContext;
  let cloudKey: SigningKey;
  let otherKey: SigningKey;
  const clock = new ManualClock(T0);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tobira-gw-fuzz-mqtt-'));
    store = new GatewayStore(openDatabase(join(dir, 'gateway.sqlite')));
    store.upsertLock('lock-1', 'door-1', T0);
    const pair = await generateSigningKeyPair();
    cloudKey = await importSigningKey(pair.privateJwk);
    otherKey = await importSigningKey((await generateSigningKeyPair()).privateJwk);
    ctx = {
      gatewayId: GW,
      store,
      time: new TrustedTime(clock, clock),
      log: pino({ level: 'silent' }),
      metrics: createMetrics(),
      crash: noCrash,
      outboxWritten: () => {},
    };
    down = { ...ctx, cloudKeys: await KeySet.fromJwks({ keys: [pair.publicJwk] }), cloudIssuer: 'tobira-cloud', applySoon: () => {} };
  });
  afterAll(() => {
    store?.db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const count = (table: string) => (store.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
  const state = () => ({
    settings: store.settings(),
    keys: store.db.prepare('SELECT * FROM keys ORDER BY key_id').all(),
    inbox: count('inbox'),
    outbox: count('outbox'),
  });

  const b64 = fc.uint8Array({ maxLength: 120 }).map((b) => Buffer.from(b).toString('base64url'));
  const json64 = fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v) ?? 'null').toString('base64url'));

  it('random downlink payloads are rejected without throwing and change no key, inbox row or setting', async () => {
    const sign = async (key: SigningKey, iss: string, aud: string) =>
      (
        await signMessage<DownlinkMessage>(
          key,
          iss,
          { type: 'heartbeat', aud, cid: newCorrelationId(), body: { lastSeq: 0, intervalMs: 30_000 } } as never,
          clock,
        )
      ).token;
    const payload = fc.oneof(
      fc.uint8Array({ maxLength: 400 }).map((b) => Buffer.from(b)),
      fc.string({ maxLength: 400 }).map((s) => Buffer.from(s)),
      fc.tuple(json64, json64, b64).map(([h, p, s]) => Buffer.from(`${h}.${p}.${s}`)),
      fc.tuple(fc.constantFrom('other-key', 'wrong-issuer', 'wrong-audience', 'flipped'), fc.nat()).map(([kind, n]) => ({ kind, n })),
    );
    await fc.assert(
      fc.asyncProperty(payload, async (p) => {
        let bytes: Buffer;
        if (Buffer.isBuffer(p)) bytes = p;
        else {
          const token =
            p.kind === 'other-key'
              ? await sign(otherKey, 'tobira-cloud', GW)
              : p.kind === 'wrong-issuer'
                ? await sign(cloudKey, 'someone', GW)
                : p.kind === 'wrong-audience'
                  ? await sign(cloudKey, 'tobira-cloud', 'gw-other')
                  : await sign(cloudKey, 'tobira-cloud', GW);
          bytes = Buffer.from(token);
          if (p.kind === 'flipped') {
            const i = p.n % bytes.length;
            bytes[i] = bytes[i] === 0x41 ? 0x42 : 0x41;
          }
        }
        const before = state();
        const rejectedBefore = count('rejected');
        const r = await receiveDownlink(down, topics.gatewayDown(GW), bytes);
        if (r.kind === 'rejected') {
          expect(r.code).toMatch(/^[A-Z][A-Z_]+$/);
          expect(state()).toEqual(before);
          expect(count('rejected')).toBeLessThanOrEqual(rejectedBefore + 1);
        } else {
          expect.unreachable(`accepted a tampered or foreign message: ${bytes.toString().slice(0, 80)}`);
        }
      }),
      { numRuns: 300 },
    );
  }, 120_000);

  it('random lock state, event and presence payloads never throw and never touch the key set, inbox or lease', () => {
    const payload = fc.oneof(
      fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
      fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v) ?? 'null')),
      fc
        .record(
          {
            lockId: fc.constantFrom('lock-1', 'lock-2', ''),
            online: fc.jsonValue(),
            bolt: fc.oneof(fc.constantFrom('locked', 'unlocked', 'jammed'), fc.jsonValue()),
            door: fc.oneof(fc.constantFrom('open', 'closed'), fc.jsonValue()),
            battery: fc.oneof(fc.double(), fc.jsonValue()),
            kind: fc.oneof(fc.constantFrom('forced', 'held_open', 'tamper', 'jam'), fc.string()),
            at: fc.oneof(fc.integer(), fc.double(), fc.jsonValue()),
            eventId: fc.string(),
            commandId: fc.string(),
          },
          { requiredKeys: [] },
        )
        .map((v) => Buffer.from(JSON.stringify(v))),
    );
    fc.assert(
      fc.property(
        fc.constantFrom('state', 'event', 'presence') as fc.Arbitrary<'state' | 'event' | 'presence'>,
        fc.constantFrom('lock-1', 'lock-9'),
        payload,
        (channel, lockId, p) => {
          const before = state();
          expect(() => handleLockMessage(ctx, lockId, channel, p)).not.toThrow();
          const after = state();
          expect(after.keys).toEqual(before.keys);
          expect(after.inbox).toBe(before.inbox);
          expect(after.settings.appliedSeq).toBe(before.settings.appliedSeq);
          expect(after.settings.leaseExpiresAt).toBe(before.settings.leaseExpiresAt);
          expect(after.settings.mode).toBe(before.settings.mode);
        },
      ),
      { numRuns: 400 },
    );
  }, 120_000);
});
