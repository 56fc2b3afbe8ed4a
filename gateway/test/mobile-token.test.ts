import { describe, expect, it } from 'vitest';
import {
  KeySet,
  ManualClock,
  asDoorId,
  asKeyId,
  asLockId,
  asPersonId,
  generateSigningKeyPair,
  importSigningKey,
  newCorrelationId,
  newId,
  signMessage,
  signMobileToken,
  verifyMobileTokenSignature,
  type DownlinkMessage,
} from '@tobira/shared';
import { decideMobileToken, type KeySetView } from '../src/domain/decide.js';
import type { StoredKey } from '../src/domain/keyset.js';
import { T0, grant } from './fixtures.js';

/** The gateway's offline check of a relayed mobile token: signature first, then the decision's rules on trusted time. */
const ISSUER = 'tobira-cloud';
const GW = 'gw-1';
const lock = { doorId: asDoorId('door-1'), failures: 0, lockedOutUntil: null };
const site = { mode: 'normal' as const, leaseExpiresAt: T0 + 60_000 };
const mobileKey: StoredKey = {
  grant: grant({ keyId: asKeyId('key-m'), credential: { type: 'mobile', digest: 'B'.repeat(43) } }),
  version: 1,
  status: 'active',
};
const keys = (...ks: StoredKey[]): KeySetView => ({
  byCredential: () => [],
  byKeyId: (id) => ks.find((k) => k.grant.keyId === id) ?? null,
});

async function setup() {
  const pair = await generateSigningKeyPair();
  const key = await importSigningKey(pair.privateJwk);
  const trusted = await KeySet.fromJwks({ keys: [pair.publicJwk] });
  const clock = new ManualClock(T0);
  const token = async (over: { keyId?: string; personId?: string; gatewayId?: string; ttlSeconds?: number } = {}) =>
    (
      await signMobileToken(
        key,
        ISSUER,
        { gatewayId: GW, keyId: 'key-m', personId: 'person-1', jti: newId(), ttlSeconds: 60, ...over },
        clock,
      )
    ).token;
  const judge = (t: string, now = T0, ks = keys(mobileKey)) => {
    const v = verifyMobileTokenSignature(t, trusted, ISSUER);
    return decideMobileToken(
      v.ok ? { lockId: asLockId('lock-1'), claims: v.claims, audience: GW } : { lockId: asLockId('lock-1'), refused: v.code },
      ks,
      lock,
      { ...site, leaseExpiresAt: now + 60_000 },
      now,
    ).code;
  };
  return { key, trusted, clock, token, judge };
}

describe('a relayed mobile token', () => {
  it('opens for its mobile key until it expires (exp is exclusive, on trusted time)', async () => {
    const { token, judge } = await setup();
    const t = await token();
    expect(judge(t)).toBe('ALLOWED');
    expect(judge(t, T0 + 59_999)).toBe('ALLOWED');
    expect(judge(t, T0 + 60_000)).toBe('MOBILE_TOKEN_EXPIRED');
  });
  it('is refused once the gateway opened its store after the second the token was issued in (a restore forgets uses), not before', async () => {
    const { token, trusted } = await setup();
    const t = await token();
    const v = verifyMobileTokenSignature(t, trusted, ISSUER);
    if (!v.ok) throw new Error(v.code);
    const iatMs = v.claims.iat * 1000;
    const at = (startedAt: number) =>
      decideMobileToken({ lockId: asLockId('lock-1'), claims: v.claims, audience: GW, startedAt }, keys(mobileKey), lock, site, T0).code;
    expect(at(iatMs + 999)).toBe('ALLOWED');
    expect(at(iatMs + 1000)).toBe('MOBILE_TOKEN_BEFORE_START');
    expect(at(iatMs + 3_600_000)).toBe('MOBILE_TOKEN_BEFORE_START');
    // a used one still reads as used
    const used = decideMobileToken(
      { lockId: asLockId('lock-1'), claims: v.claims, audience: GW, used: true, startedAt: iatMs + 5000 },
      keys(mobileKey),
      lock,
      site,
      T0,
    ).code;
    expect(used).toBe('MOBILE_TOKEN_REPLAYED');
  });
  it('is refused when addressed to another gateway, or naming another person or a key that is not a mobile key', async () => {
    const { token, judge } = await setup();
    expect(judge(await token({ gatewayId: 'gw-2' }))).toBe('MOBILE_TOKEN_WRONG_SITE');
    expect(judge(await token({ personId: 'person-2' }))).toBe('MOBILE_TOKEN_MISMATCH');
    const pinKey: StoredKey = { ...mobileKey, grant: grant({ keyId: asKeyId('key-m'), personId: asPersonId('person-1') }) };
    expect(judge(await token(), T0, keys(pinKey))).toBe('MOBILE_TOKEN_MISMATCH');
    expect(judge(await token({ keyId: 'key-nobody' }))).toBe('UNKNOWN_CREDENTIAL');
  });
  it('is refused when issued in the future beyond the skew, tampered with, signed by an unknown key, or a signed cloud message passed off as a token', async () => {
    const { token, judge, key, clock } = await setup();
    clock.advance(120_000);
    expect(judge(await token())).toBe('MOBILE_TOKEN_INVALID');
    const t = await (await setup()).token();
    expect(judge(t)).toBe('MOBILE_TOKEN_UNKNOWN_SIGNER'); // another cloud's key
    const [h, p, s] = t.split('.') as [string, string, string];
    expect(judge(`${h}.${p}x.${s}`)).toBe('MOBILE_TOKEN_INVALID');
    const { token: msg } = await signMessage<DownlinkMessage>(
      key,
      ISSUER,
      { type: 'heartbeat', aud: GW, cid: newCorrelationId(), body: { lastSeq: 0, intervalMs: 1000 } } as never,
      clock,
    );
    expect(judge(msg)).toBe('MOBILE_TOKEN_INVALID'); // typ tobira-msg+jwt
    expect(judge('a.b.c')).toBe('MOBILE_TOKEN_INVALID');
  });
  it('a revoked or consumed one-time mobile key does not open', async () => {
    const { token, judge } = await setup();
    expect(judge(await token(), T0, keys({ ...mobileKey, status: 'revoked', version: 2 }))).toBe('KEY_REVOKED');
    const once: StoredKey = { ...mobileKey, grant: { ...mobileKey.grant, oneTime: true }, consumedAt: T0 - 1 };
    expect(judge(await token(), T0, keys(once))).toBe('KEY_USED');
  });
});
