import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DownlinkMessage,
  KeySet,
  LOCK_CHANNEL_SCHEMAS,
  LockCommand,
  LockRequest,
  UplinkMessage,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  parsePayload,
  signMessage,
  verifyMessage,
  type DownlinkMessage as Down,
  type UplinkMessage as Up,
} from '../src/index.js';
import { downlinkDraft, uplinkDraft } from './arbitraries.js';
import { CLOUD, GW, signingFixture } from './fixtures.js';

const f = await signingFixture();
const gwPair = await generateSigningKeyPair();
const gwKey = await importSigningKey(gwPair.privateJwk);
const gwKeys = await KeySet.fromJwks({ keys: [gwPair.publicJwk] });

describe('schema round trips', () => {
  it('every downlink message survives JSON and the schema unchanged', () => {
    fc.assert(
      fc.property(downlinkDraft, fc.uuid(), (d, jti) => {
        const m = { ...d, jti, iss: CLOUD, aud: GW, iat: 1, exp: 2, cid: 'c-1' };
        expect(DownlinkMessage.parse(JSON.parse(JSON.stringify(m)))).toEqual(m);
      }),
    );
  });

  it('every uplink message survives JSON and the schema unchanged', () => {
    fc.assert(
      fc.property(uplinkDraft, fc.uuid(), (d, jti) => {
        const m = { ...d, jti, iss: GW, aud: CLOUD, iat: 1, exp: 2, cid: 'c-1' };
        expect(UplinkMessage.parse(JSON.parse(JSON.stringify(m)))).toEqual(m);
      }),
    );
  });

  it('refuses unknown fields (strict objects)', () => {
    const r = LockRequest.safeParse({ requestId: 'r1', credential: { type: 'pin', value: '1234' }, at: 1, extra: true });
    expect(r.success).toBe(false);
  });

  it('a sequenced type without seq is refused, an unsequenced one with seq too', () => {
    const base = { jti: '0190c0de-0000-7000-8000-000000000000', iss: CLOUD, aud: GW, iat: 1, exp: 2, cid: 'c' };
    expect(
      DownlinkMessage.safeParse({ ...base, type: 'key.revoke', body: { keyId: 'k', version: 1, reason: 'staff_revoked' } }).success,
    ).toBe(false);
    expect(DownlinkMessage.safeParse({ ...base, type: 'heartbeat', seq: 1, body: { lastSeq: 1, intervalMs: 1 } }).success).toBe(false);
  });
});

describe('property: anything signed verifies back equal', () => {
  it('downlink (cloud -> gateway)', async () => {
    await fc.assert(
      fc.asyncProperty(downlinkDraft, async (d) => {
        const { token, message } = await signMessage<Down>(f.cloudKey, CLOUD, { ...d, aud: GW, cid: newCorrelationId() } as never, f.clock);
        const r = await verifyMessage(token, { keys: f.keys, issuer: CLOUD, audience: GW, schema: DownlinkMessage, clock: f.clock });
        expect(r).toEqual({ ok: true, message, kid: f.cloudKey.kid });
        expect(message).toMatchObject(d);
      }),
      { numRuns: 60 },
    );
  });

  it('uplink (gateway -> cloud)', async () => {
    await fc.assert(
      fc.asyncProperty(uplinkDraft, async (d) => {
        const { token, message } = await signMessage<Up>(gwKey, GW, { ...d, aud: CLOUD, cid: newCorrelationId() } as never, f.clock);
        const r = await verifyMessage(token, { keys: gwKeys, issuer: GW, audience: CLOUD, schema: UplinkMessage, clock: f.clock });
        expect(r).toEqual({ ok: true, message, kid: gwKey.kid });
      }),
      { numRuns: 60 },
    );
  });

  it('a downlink message is not accepted where an uplink is expected', async () => {
    const { token } = await signMessage<Down>(
      f.cloudKey,
      CLOUD,
      { type: 'heartbeat', aud: GW, cid: newCorrelationId(), body: { lastSeq: 1, intervalMs: 1 } },
      f.clock,
    );
    expect(await verifyMessage(token, { keys: f.keys, issuer: CLOUD, audience: GW, schema: UplinkMessage, clock: f.clock })).toMatchObject({
      ok: false,
      code: 'SCHEMA_INVALID',
    });
  });
});

describe('fuzz: parsers never throw', () => {
  const junk = fc.oneof(
    fc.string(),
    fc.string({ unit: 'binary' }),
    fc.uint8Array({ maxLength: 512 }).map((a) => Buffer.from(a)),
    fc.json().map((j) => Buffer.from(j)),
    fc.anything().map((a) => Buffer.from(JSON.stringify(a) ?? 'undefined')),
    fc.anything(),
  );

  it('parsePayload on every lock channel schema', () => {
    fc.assert(
      fc.property(junk, fc.constantFrom(...Object.values(LOCK_CHANNEL_SCHEMAS)), (input, schema) => {
        const r = parsePayload(schema, input);
        expect(typeof r.ok).toBe('boolean');
        if (!r.ok) expect(['TOO_LARGE', 'MALFORMED', 'SCHEMA_INVALID']).toContain(r.code);
      }),
      { numRuns: 1500 },
    );
  });

  it('parsePayload on near-valid commands (fields mutated)', () => {
    const valid = {
      commandId: '0190c0de-0000-7000-8000-000000000000',
      lockId: 'L1',
      action: 'unlock',
      holdMs: 5000,
      expiresAt: 1,
      mac: 'A'.repeat(43),
    };
    fc.assert(
      fc.property(fc.constantFrom(...Object.keys(valid)), fc.anything(), (field, value) => {
        const r = parsePayload(LockCommand, Buffer.from(JSON.stringify({ ...valid, [field]: value }) ?? ''));
        expect(typeof r.ok).toBe('boolean');
      }),
      { numRuns: 1000 },
    );
  });

  it('verifyMessage on junk and on mutated tokens', async () => {
    const { token } = await signMessage<Down>(
      f.cloudKey,
      CLOUD,
      { type: 'heartbeat', aud: GW, cid: newCorrelationId(), body: { lastSeq: 1, intervalMs: 1 } },
      f.clock,
    );
    const mutated = fc
      .tuple(fc.nat({ max: token.length - 1 }), fc.constantFrom(...'AZaz09-_.'.split('')))
      .map(([i, c]) => token.slice(0, i) + c + token.slice(i + 1))
      .filter((t) => t !== token);
    await fc.assert(
      fc.asyncProperty(fc.oneof(junk, mutated), async (input) => {
        const r = await verifyMessage(input, { keys: f.keys, issuer: CLOUD, audience: GW, schema: DownlinkMessage, clock: f.clock });
        expect(r.ok).toBe(false);
      }),
      { numRuns: 800 },
    );
  });
});
