import { afterEach, describe, expect, it } from 'vitest';
import { generateSigningKeyPair, importSigningKey, newId, signMobileToken } from '@tobira/shared';
import { System, backends, expectApplied, waitFor } from './system.js';

/**
 * Issue #17 part 2, end to end: cloud (PGlite or PostgreSQL), gateway, the
 * firmware-sim fleet and real brokers.
 */
describe.each(backends())('keys people ask for, end to end (%s brokers and database)', (backend) => {
  let sys: System | undefined;
  afterEach(async () => {
    await sys?.stop();
    sys = undefined;
  });

  it('a one-time key opens exactly one of two doors presented at once, the second and later tries are KEY_USED, and the cloud shows the key used', async () => {
    const s = (sys = await new System(backend).start());
    const now = s.clock.now();
    const key = expectApplied(
      await s.cloud.issueKey({
        personId: s.personId,
        doors: [s.doors.L1!, s.doors.L2!],
        credential: { type: 'pin', value: '8642' },
        validFrom: now - 3_600_000,
        validUntil: now + 86_400_000,
        oneTime: true,
      }),
      'issue',
    );
    expect(key.oneTime).toBe(true);
    await s.waitKeyStatus(key.id, 'active');
    const [a, b] = await Promise.all(
      ['L1', 'L2'].map((l) => s.fleet.lock(l).present({ type: 'pin', value: '8642' }, { timeoutMs: 10_000 })),
    );
    expect([a!.decision?.code, b!.decision?.code].sort()).toEqual(['ALLOWED', 'KEY_USED']);
    expect((await s.fleet.lock('L1').present({ type: 'pin', value: '8642' }, { timeoutMs: 10_000 })).decision?.code).toBe('KEY_USED');

    // The consumption reaches the cloud through the access event: the key is used, once.
    await s.waitKeyStatus(key.id, 'used');
    const used = await s.cloud.getKey(key.id);
    const audit = await waitFor(async () => {
      const rows = await s.cloud.listAudit({ gatewayId: s.gatewayId, limit: 100 });
      return rows.length === 3 && rows;
    }, 'three events in the audit log');
    const allowed = audit.filter((r) => r.allowed);
    expect(allowed).toHaveLength(1);
    expect(used?.usedAt).toBe(allowed[0]!.at);
    expect(audit.filter((r) => r.code === 'KEY_USED')).toHaveLength(2);
    expect((await s.cloud.listKeyHistory(key.id)).map((h) => h.toStatus)).toEqual(['issuing', 'active', 'used']);
    // a used key is no longer revocable: it can open nothing
    expect(await s.cloud.revokeKey({ keyId: key.id, reason: 'staff_revoked' })).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_USED' });
  }, 60_000);

  it(
    'a mobile token opens once: the same token again, at the same or another lock and after a gateway restart, is MOBILE_TOKEN_REPLAYED',
    { timeout: 90_000 },
    async () => {
      const s = (sys = await new System(backend).start());
      const now = s.clock.now();
      const key = expectApplied(
        await s.cloud.issueKey({
          personId: s.personId,
          doors: [s.doors.L1!, s.doors.L2!],
          credential: { type: 'mobile', value: 'phone-replay-0123456789' },
          validFrom: now - 3_600_000,
          validUntil: now + 86_400_000,
        }),
        'issue',
      );
      await s.waitKeyStatus(key.id, 'active');
      const present = async (lock: string, token: string) =>
        (await s.fleet.lock(lock).present({ type: 'mobile_token', value: token }, { timeoutMs: 10_000 })).decision?.code;
      const t = await s.cloud.issueMobileToken({ keyId: key.id, ttlSeconds: 120 });
      if (t.status !== 'applied') throw new Error(`token: ${t.code}`);
      expect(await present('L1', t.token)).toBe('ALLOWED');
      expect(await present('L1', t.token)).toBe('MOBILE_TOKEN_REPLAYED');
      expect(await present('L2', t.token)).toBe('MOBILE_TOKEN_REPLAYED');
      await s.gateway.stop();
      await s.startGateway();
      await waitFor(() => s.gateway.timeProven || undefined, 'the restarted gateway proven');
      expect(await present('L2', t.token)).toBe('MOBILE_TOKEN_REPLAYED');
      // a new token of the same key opens
      const t2 = await s.cloud.issueMobileToken({ keyId: key.id, ttlSeconds: 120 });
      if (t2.status !== 'applied') throw new Error(`token: ${t2.code}`);
      expect(await present('L2', t2.token)).toBe('ALLOWED');
    },
  );

  it("a phone's mobile token from the cloud opens the door through the sim lock; expired, other-site, unknown-signer and tampered tokens are refused with their codes", async () => {
    const s = (sys = await new System(backend).start());
    const now = s.clock.now();
    const mobileKey = (doors: string[], value: string) =>
      s.cloud.issueKey({
        personId: s.personId,
        doors,
        credential: { type: 'mobile', value },
        validFrom: now - 3_600_000,
        validUntil: now + 86_400_000,
      });
    const key = expectApplied(await mobileKey([s.doors.L1!], 'phone-0123456789abcdef'), 'issue');
    await s.waitKeyStatus(key.id, 'active');
    const present = async (lock: string, token: string) =>
      (await s.fleet.lock(lock).present({ type: 'mobile_token', value: token }, { timeoutMs: 10_000 })).decision?.code;

    const t = await s.cloud.issueMobileToken({ keyId: key.id, ttlSeconds: 60 });
    if (t.status !== 'applied') throw new Error(`token: ${t.code}`);
    expect(t).toMatchObject({ keyId: key.id, personId: s.personId, gatewayId: s.gatewayId });
    expect(await present('L1', t.token)).toBe('ALLOWED');
    // (a fresh token: the one used above is single use)
    const t1 = await s.cloud.issueMobileToken({ keyId: key.id, ttlSeconds: 60 });
    if (t1.status !== 'applied') throw new Error(`token: ${t1.code}`);
    expect(await present('L2', t1.token)).toBe('DOOR_NOT_PERMITTED');
    const audit = await waitFor(async () => {
      const rows = await s.cloud.listAudit({ gatewayId: s.gatewayId, limit: 100 });
      return rows.find((r) => r.allowed) ?? undefined;
    }, 'the allowed mobile entry in the audit log');
    expect(audit).toMatchObject({ keyId: key.id, personId: s.personId, credentialType: 'mobile' });

    // tampered: one claim changed (the key id), the signature kept
    const [h, p, sig] = t.token.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString()) as Record<string, unknown>;
    const forged = Buffer.from(JSON.stringify({ ...claims, exp: (claims.exp as number) + 86_400 })).toString('base64url');
    expect(await present('L1', `${h}.${forged}.${sig}`)).toBe('MOBILE_TOKEN_INVALID');
    // one character of the signature changed, early (the last characters carry padding bits a decoder may ignore)
    const bad = `${sig.slice(0, 10)}${sig[10] === 'A' ? 'B' : 'A'}${sig.slice(11)}`;
    expect(await present('L1', `${h}.${p}.${bad}`)).toBe('MOBILE_TOKEN_INVALID');

    // signed by a key the gateway does not trust, with claims that are otherwise right
    const stranger = await importSigningKey((await generateSigningKeyPair()).privateJwk);
    const unknown = await signMobileToken(
      stranger,
      claims.iss as string,
      { gatewayId: s.gatewayId, keyId: key.id, personId: s.personId, jti: newId(), ttlSeconds: 60 },
      s.clock,
    );
    expect(await present('L1', unknown.token)).toBe('MOBILE_TOKEN_UNKNOWN_SIGNER');

    // a real token of the same cloud for a mobile key at another site's gateway
    const other = `gw-other-${newId().slice(0, 8)}`;
    await s.cloud.registerGateway({ gatewayId: other, siteId: s.siteId, publicJwk: (await generateSigningKeyPair()).publicJwk });
    const door = await s.cloud.createDoor({ gatewayId: other, name: 'elsewhere' });
    if (door.status !== 'applied') throw new Error('door');
    const elsewhere = expectApplied(await mobileKey([door.state.id], 'phone-elsewhere-0123456'), 'issue elsewhere');
    const t2 = await s.cloud.issueMobileToken({ keyId: elsewhere.id });
    if (t2.status !== 'applied') throw new Error(`token: ${t2.code}`);
    expect(await present('L1', t2.token)).toBe('MOBILE_TOKEN_WRONG_SITE');

    // the cloud signs tokens only for mobile keys
    const pin = expectApplied(await s.issuePin('9753', ['L1']), 'pin key');
    expect(await s.cloud.issueMobileToken({ keyId: pin.id })).toMatchObject({ status: 'refused', code: 'KEY_NOT_MOBILE' });

    // expired: a minute and a half later (heartbeats keep the lease fresh), the 60 s token is refused
    s.clock.advance(90_000);
    await waitFor(() => (s.gateway.store.settings().leaseExpiresAt ?? 0) > s.clock.now() + 200_000, 'fresh at the new time');
    expect(await present('L1', t.token)).toBe('MOBILE_TOKEN_EXPIRED');
    const fresh = await s.cloud.issueMobileToken({ keyId: key.id });
    if (fresh.status !== 'applied') throw new Error('fresh token');
    expect(await present('L1', fresh.token)).toBe('ALLOWED');
    const unused = await s.cloud.issueMobileToken({ keyId: key.id });
    if (unused.status !== 'applied') throw new Error('unused token');

    // revoked: the key's tokens open nothing once the gateway has the revoke
    await s.cloud.revokeKey({ keyId: key.id, reason: 'credential_lost' });
    await s.waitKeyStatus(key.id, 'revoked');
    expect(await present('L1', unused.token)).toBe('KEY_REVOKED');
    expect(await s.cloud.issueMobileToken({ keyId: key.id })).toMatchObject({ status: 'refused', code: 'KEY_NOT_LIVE' });
  }, 90_000);
});
