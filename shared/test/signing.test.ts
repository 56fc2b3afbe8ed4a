import { CompactSign, SignJWT, base64url } from 'jose';
import { describe, expect, it } from 'vitest';
import {
  DownlinkMessage,
  JWS_TYP,
  MAX_MESSAGE_BYTES,
  NO_CLAIMS,
  readClaimsUnverified,
  signMessage,
  verifyMessage,
  type DownlinkMessage as Down,
} from '../src/index.js';
import { CLOUD, GW, cid, sampleGrant, signingFixture } from './fixtures.js';

const f = await signingFixture();
const verify = (token: unknown, over: Partial<Parameters<typeof verifyMessage>[1]> = {}) =>
  verifyMessage(token, { keys: f.keys, issuer: CLOUD, audience: GW, schema: DownlinkMessage, clock: f.clock, ...over });

async function signedGrant(audience = GW) {
  return signMessage<Down>(
    f.cloudKey,
    CLOUD,
    { type: 'key.grant', aud: audience, seq: 1, cid: cid(), body: { key: sampleGrant() } },
    f.clock,
  );
}

/** Re-signs arbitrary header + claims with the cloud's real key, to probe each check on its own. */
async function rawSign(header: Record<string, unknown>, claims: Record<string, unknown>) {
  return new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', ...header }).sign(f.cloudKey.privateKey);
}

describe('a message signed by the cloud', () => {
  it('verifies and comes back equal', async () => {
    const { token, message } = await signedGrant();
    const r = await verify(token);
    expect(r).toEqual({ ok: true, message, kid: f.cloudKey.kid });
  });

  it('verifies from raw MQTT bytes', async () => {
    const { token } = await signedGrant();
    expect((await verify(Buffer.from(token))).ok).toBe(true);
  });
});

describe('a bad message is refused with its code and nothing throws', () => {
  it('forged signature (signed by a key with the same kid but another secret) -> BAD_SIGNATURE', async () => {
    const { token } = await signMessage<Down>(
      { kid: f.cloudKey.kid, privateKey: f.otherKey.privateKey },
      CLOUD,
      { type: 'heartbeat', aud: GW, cid: cid(), body: { lastSeq: 3, intervalMs: 10_000 } },
      f.clock,
    );
    expect(await verify(token)).toMatchObject({ ok: false, code: 'BAD_SIGNATURE' });
  });

  it("signed by a trusted key before the key's notBefore (by the receiver's clock) -> KID_NOT_YET_VALID; from it on, verifies; a forgery under it stays BAD_SIGNATURE", async () => {
    const { token } = await signedGrant();
    const now = f.clock.now();
    const early = new Map([[f.cloudKey.kid, now + 1]]);
    expect(await verify(token, { kidNotBefore: early })).toMatchObject({ ok: false, code: 'KID_NOT_YET_VALID' });
    expect((await verify(token, { kidNotBefore: new Map([[f.cloudKey.kid, now]]) })).ok).toBe(true);
    expect((await verify(token, { kidNotBefore: new Map([['another-kid', now + 1]]) })).ok).toBe(true);
    const { token: forged } = await signMessage<Down>(
      { kid: f.cloudKey.kid, privateKey: f.otherKey.privateKey },
      CLOUD,
      { type: 'heartbeat', aud: GW, cid: cid(), body: { lastSeq: 3, intervalMs: 10_000 } },
      f.clock,
    );
    expect(await verify(forged, { kidNotBefore: early })).toMatchObject({ ok: false, code: 'BAD_SIGNATURE' });
  });

  it('tampered payload -> BAD_SIGNATURE', async () => {
    const { token } = await signedGrant();
    const [h, p, s] = token.split('.') as [string, string, string];
    const claims = JSON.parse(new TextDecoder().decode(base64url.decode(p))) as { body: { key: { offlineCapable: boolean } } };
    claims.body.key.offlineCapable = true;
    const forged = `${h}.${base64url.encode(JSON.stringify(claims))}.${s}`;
    expect(await verify(forged)).toMatchObject({ ok: false, code: 'BAD_SIGNATURE' });
  });

  it('alg none -> ALG_NOT_ALLOWED', async () => {
    const { token } = await signedGrant();
    const [, p] = token.split('.') as [string, string];
    const header = base64url.encode(JSON.stringify({ alg: 'none', typ: JWS_TYP, kid: f.cloudKey.kid }));
    expect(await verify(`${header}.${p}.`)).toMatchObject({ ok: false, code: 'ALG_NOT_ALLOWED' });
  });

  it('algorithm swap to HS256 keyed with the public key -> ALG_NOT_ALLOWED', async () => {
    const { token } = await signedGrant();
    const [, p] = token.split('.') as [string, string];
    const secret = new TextEncoder().encode(JSON.stringify(f.cloudPair.publicJwk));
    const swapped = await new CompactSign(base64url.decode(p))
      .setProtectedHeader({ alg: 'HS256', typ: JWS_TYP, kid: f.cloudKey.kid })
      .sign(secret);
    expect(await verify(swapped)).toMatchObject({ ok: false, code: 'ALG_NOT_ALLOWED' });
  });

  it('unknown kid -> UNKNOWN_KID', async () => {
    const { token } = await signMessage<Down>(
      f.otherKey,
      CLOUD,
      { type: 'heartbeat', aud: GW, cid: cid(), body: { lastSeq: 0, intervalMs: 1 } },
      f.clock,
    );
    expect(await verify(token)).toMatchObject({ ok: false, code: 'UNKNOWN_KID' });
  });

  it('missing kid -> UNKNOWN_KID', async () => {
    const { message } = await signedGrant();
    expect(await verify(await rawSign({ typ: JWS_TYP }, message))).toMatchObject({ ok: false, code: 'UNKNOWN_KID' });
  });

  it('wrong audience -> WRONG_AUDIENCE', async () => {
    const { token } = await signedGrant('gw-2');
    expect(await verify(token)).toMatchObject({ ok: false, code: 'WRONG_AUDIENCE' });
  });

  it('wrong issuer -> WRONG_ISSUER', async () => {
    const { message } = await signedGrant();
    const token = await rawSign({ typ: JWS_TYP, kid: f.cloudKey.kid }, { ...message, iss: 'someone-else' });
    expect(await verify(token)).toMatchObject({ ok: false, code: 'WRONG_ISSUER' });
  });

  it('wrong typ -> WRONG_TYP', async () => {
    const { message } = await signedGrant();
    expect(await verify(await rawSign({ typ: 'JWT', kid: f.cloudKey.kid }, message))).toMatchObject({ ok: false, code: 'WRONG_TYP' });
  });

  it('expired -> EXPIRED', async () => {
    const { token } = await signMessage<Down>(
      f.cloudKey,
      CLOUD,
      { type: 'heartbeat', aud: GW, cid: cid(), ttlSeconds: 30, body: { lastSeq: 0, intervalMs: 1 } },
      f.clock,
    );
    const later = { now: () => f.clock.now() + 10 * 60_000 };
    expect(await verify(token, { clock: later })).toMatchObject({ ok: false, code: 'EXPIRED' });
  });

  it('issued in the future beyond the tolerance -> NOT_YET_VALID', async () => {
    const { token } = await signedGrant();
    const earlier = { now: () => f.clock.now() - 10 * 60_000 };
    expect(await verify(token, { clock: earlier })).toMatchObject({ ok: false, code: 'NOT_YET_VALID' });
  });

  it('issued in the future is accepted with futureIatOk; an expired one still is not', async () => {
    const { token } = await signedGrant();
    const earlier = { now: () => f.clock.now() - 10 * 60_000 };
    expect(await verify(token, { clock: earlier, futureIatOk: true })).toMatchObject({ ok: true });
    const later = { now: () => f.clock.now() + 400 * 86_400_000 };
    expect(await verify(token, { clock: later, futureIatOk: true })).toMatchObject({ ok: false, code: 'EXPIRED' });
  });

  it('oversize -> TOO_LARGE, before any parsing', async () => {
    const big = Buffer.alloc(MAX_MESSAGE_BYTES + 1, 0x41);
    expect(await verify(big)).toMatchObject({ ok: false, code: 'TOO_LARGE' });
    expect(await verify('x'.repeat(MAX_MESSAGE_BYTES + 1))).toMatchObject({ ok: false, code: 'TOO_LARGE' });
  });

  it('malformed JSON in the payload -> MALFORMED', async () => {
    const header = base64url.encode(JSON.stringify({ alg: 'EdDSA', typ: JWS_TYP, kid: f.cloudKey.kid }));
    const payload = base64url.encode('{"jti": nope');
    const jws = await new CompactSign(new TextEncoder().encode('{"jti": nope'))
      .setProtectedHeader({ alg: 'EdDSA', typ: JWS_TYP, kid: f.cloudKey.kid })
      .sign(f.cloudKey.privateKey);
    expect(jws.startsWith(`${header}.${payload}`)).toBe(true);
    expect(await verify(jws)).toMatchObject({ ok: false, code: 'MALFORMED' });
  });

  it('malformed JSON in the header -> MALFORMED', async () => {
    const { token } = await signedGrant();
    const [, p, s] = token.split('.') as [string, string, string];
    expect(await verify(`${base64url.encode('{alg:')}.${p}.${s}`)).toMatchObject({ ok: false, code: 'MALFORMED' });
  });

  it('invalid UTF-8 -> MALFORMED', async () => {
    expect(await verify(Buffer.from([0x65, 0x79, 0xff, 0xfe, 0x2e]))).toMatchObject({ ok: false, code: 'MALFORMED' });
  });

  it('deeply nested JSON in a validly signed payload -> SCHEMA_INVALID, not a crash', async () => {
    const depth = 20_000;
    const nested = `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const jws = await new CompactSign(
      new TextEncoder().encode(`{"body":${nested},"jti":"x","iat":1,"exp":99999999999,"iss":"${CLOUD}","aud":"${GW}"}`),
    )
      .setProtectedHeader({ alg: 'EdDSA', typ: JWS_TYP, kid: f.cloudKey.kid })
      .sign(f.cloudKey.privateKey);
    const r = await verify(jws);
    expect(r.ok).toBe(false);
    expect(['SCHEMA_INVALID', 'MALFORMED']).toContain(r.ok ? '' : r.code);
  });

  it('truncated token -> MALFORMED or BAD_SIGNATURE, never ok', async () => {
    const { token } = await signedGrant();
    for (const cut of [1, 10, token.length / 2, token.length - 5, token.length - 1]) {
      const r = await verify(token.slice(0, Math.floor(cut)));
      expect(r.ok).toBe(false);
    }
    expect(await verify(token.slice(0, token.lastIndexOf('.')))).toMatchObject({ ok: false, code: 'MALFORMED' });
    const r = await verify(token.slice(0, -2));
    expect(r.ok ? 'ok' : r.code).toBe('BAD_SIGNATURE');
  });

  it('a non-canonical base64url signature (padding bits flipped) -> MALFORMED', async () => {
    const { token } = await signedGrant();
    const last = token.at(-1) as string;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const twin = alphabet[alphabet.indexOf(last) + 1] as string;
    expect(await verify(token.slice(0, -1) + twin)).toMatchObject({ ok: false, code: 'MALFORMED' });
  });

  it('a validly signed message of the wrong shape -> SCHEMA_INVALID', async () => {
    const { message } = await signedGrant();
    const token = await rawSign({ typ: JWS_TYP, kid: f.cloudKey.kid }, { ...message, body: { key: { keyId: 'k' } } });
    expect(await verify(token)).toMatchObject({ ok: false, code: 'SCHEMA_INVALID' });
  });

  it('non-string, non-bytes input -> MALFORMED', async () => {
    for (const x of [undefined, null, 42, {}, []]) expect(await verify(x)).toMatchObject({ ok: false, code: 'MALFORMED' });
  });
});

describe('signing refuses to produce what a receiver would refuse', () => {
  it('an invalid draft throws (a bug, not input)', async () => {
    await expect(
      signMessage<Down>(f.cloudKey, CLOUD, { type: 'key.grant', aud: GW, seq: 0, cid: cid(), body: { key: sampleGrant() } }, f.clock),
    ).rejects.toThrow(/invalid key.grant/);
  });
});

describe('reading what a refused message claims, without trusting it', () => {
  it('reads jti, cid, type, seq and iss of a message signed with a foreign key (the signature is not checked)', async () => {
    const { token, message } = await signMessage<Down>(
      f.otherKey,
      'someone-else',
      { type: 'key.grant', aud: GW, seq: 4, cid: cid(), body: { key: sampleGrant() } },
      f.clock,
    );
    expect(await verify(token)).toMatchObject({ ok: false, code: 'UNKNOWN_KID' });
    expect(readClaimsUnverified(Buffer.from(token))).toEqual({
      jti: message.jti,
      cid: message.cid,
      type: 'key.grant',
      seq: 4,
      iss: 'someone-else',
    });
  });

  it('gives no claims for input that is not a decodable compact JWS, or is over 64 KiB', async () => {
    const { token } = await signedGrant();
    const [h, , s] = token.split('.');
    const notJson = `${h}.${base64url.encode('not json')}.${s}`;
    const notObject = `${h}.${base64url.encode('[1,2]')}.${s}`;
    const huge = `${token}${'A'.repeat(MAX_MESSAGE_BYTES)}`;
    for (const x of ['not a jws', '', notJson, notObject, huge, Buffer.from([0xff, 0xfe]), undefined, 42])
      expect(readClaimsUnverified(x)).toEqual(NO_CLAIMS);
  });

  it('keeps a claim only in its protocol form, never a truncated one', async () => {
    const long = 'c'.repeat(129);
    const claims = { jti: 'not-a-uuid', cid: long, type: 'x'.repeat(65), seq: -1, iss: 'bad\nissuer', aud: GW };
    const token = await rawSign({ typ: JWS_TYP, kid: f.cloudKey.kid }, claims);
    expect(readClaimsUnverified(token)).toEqual(NO_CLAIMS);
    const edge = await rawSign(
      { typ: JWS_TYP, kid: f.cloudKey.kid },
      { cid: 'c'.repeat(128), type: 'some.future-type', seq: 0, iss: 'x'.repeat(128), jti: 42 },
    );
    expect(readClaimsUnverified(edge)).toEqual({ jti: null, cid: 'c'.repeat(128), type: 'some.future-type', seq: 0, iss: 'x'.repeat(128) });
    for (const seq of [1.5, 2 ** 53, '3']) {
      expect(readClaimsUnverified(await rawSign({ typ: JWS_TYP, kid: f.cloudKey.kid }, { seq })).seq).toBeNull();
    }
  });
});
