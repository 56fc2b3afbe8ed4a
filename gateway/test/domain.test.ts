import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OFFLINE_MAX_SECONDS, asKeyId, type KeyGrant } from '@tobira/shared';
import { decide, lastFreshSyncAt, type KeySetView, type LockView, type SiteView } from '../src/domain/decide.js';
import { advanceFloor, isStale, onHeartbeat, trustedNow, type TimeAnchor } from '../src/domain/freshness.js';
import { applyGrant, applyRevoke, emptySlot, isActive, type KeySlot, type StoredKey } from '../src/domain/keyset.js';
import { isLockedOut, noLockout, noSiteLockout, recordAttempt, recordSiteAttempt, type SiteLockoutState } from '../src/domain/lockout.js';
import { fullBucket, takeToken, type Bucket } from '@tobira/shared';
import { inSchedule } from '../src/domain/schedule.js';
import { DOOR, LOCK, T0, grant } from './fixtures.js';

const keys = (...ks: StoredKey[]): KeySetView => ({
  byCredential: (t, d) => ks.filter((k) => k.grant.credential.type === t && k.grant.credential.digest === d),
});
const active = (g: KeyGrant): StoredKey => ({ grant: g, version: g.version, status: 'active' });
const lock: LockView = { doorId: DOOR, failures: 0, lockedOutUntil: null };
const fresh: SiteView = { mode: 'normal', leaseExpiresAt: T0 + 60_000, lastFreshAt: T0 - 240_000 };
const req = { lockId: LOCK, credentialType: 'pin' as const, digest: 'A'.repeat(43) };

describe('decide', () => {
  it('allows an active key for its door inside its window with a running lease', () => {
    expect(decide(req, keys(active(grant())), lock, fresh, T0)).toMatchObject({ allowed: true, code: 'ALLOWED' });
  });
  it('answers each refusal with its code', () => {
    const cases: [StoredKey | null, LockView, SiteView, string][] = [
      [null, lock, fresh, 'UNKNOWN_CREDENTIAL'],
      [{ ...active(grant()), status: 'revoked' }, lock, fresh, 'KEY_REVOKED'],
      [active(grant({ doors: [asKeyId('door-2') as never] })), lock, fresh, 'DOOR_NOT_PERMITTED'],
      [active(grant({ validFrom: T0 + 1 })), lock, fresh, 'KEY_NOT_YET_VALID'],
      [active(grant({ validUntil: T0 })), lock, fresh, 'KEY_EXPIRED'],
      [active(grant()), lock, { mode: 'lockdown', leaseExpiresAt: T0 + 1, lastFreshAt: T0 - 299_999 }, 'SITE_LOCKDOWN'],
      [active(grant()), lock, { mode: 'normal', leaseExpiresAt: T0, lastFreshAt: T0 - 300_000 }, 'CLOUD_STALE'],
      [active(grant()), lock, { mode: 'normal', leaseExpiresAt: null, lastFreshAt: null }, 'CLOUD_STALE'],
      [active(grant()), { ...lock, lockedOutUntil: T0 + 1 }, fresh, 'LOCKED_OUT'],
      [active(grant()), lock, { ...fresh, credentialLockout: { failures: 0, lockedOutUntil: T0 + 1 } }, 'LOCKED_OUT'],
      [active(grant()), lock, { ...fresh, storageLow: true }, 'STORAGE_FULL'],
      [active(grant()), null, fresh, 'BAD_REQUEST'],
    ];
    for (const [k, l, s, code] of cases) {
      const d = decide(req, k === null ? keys() : keys(k), l, s, T0);
      expect({ code: d.code, allowed: d.allowed }).toEqual({ code, allowed: false });
    }
  });
  describe("privacy (the guest inside turned it on): staff keys stay out, by the grant's staff marker", () => {
    const privateLock: LockView = { ...lock, privacy: true };
    const decideAt = (g: KeyGrant, l: LockView = privateLock) => decide(req, keys(active(g)), l, fresh, T0);
    it('refuses a key marked staff, offline-capable or not; a guest key opens', () => {
      expect(decideAt(grant({ staff: true }))).toMatchObject({ allowed: false, code: 'PRIVACY_ACTIVE' });
      expect(decideAt(grant({ staff: true, offlineCapable: true, offlineMaxSeconds: 3600 })).code).toBe('PRIVACY_ACTIVE');
      expect(decideAt(grant({ staff: false }))).toMatchObject({ allowed: true, code: 'ALLOWED' });
      expect(decideAt(grant())).toMatchObject({ allowed: true, code: 'ALLOWED' });
      // without privacy a staff key opens as any key
      expect(decideAt(grant({ staff: true }), lock)).toMatchObject({ allowed: true, code: 'ALLOWED' });
    });
    it('a grant without the marker (an older cloud) falls back to offlineCapable, so nothing opens that did not before', () => {
      expect(decideAt(grant({ offlineCapable: true, offlineMaxSeconds: 3600 }))).toMatchObject({ allowed: false, code: 'PRIVACY_ACTIVE' });
    });
    it('property: with privacy on, a key opens only if it is neither marked staff nor (unmarked and) offline-capable', () => {
      fc.assert(
        fc.property(fc.option(fc.boolean(), { nil: undefined }), fc.boolean(), (staff, offlineCapable) => {
          const g = grant({
            offlineCapable,
            ...(offlineCapable ? { offlineMaxSeconds: 3600 } : {}),
            ...(staff === undefined ? {} : { staff }),
          });
          const d = decideAt(g);
          const isStaff = staff ?? offlineCapable;
          expect(d.allowed).toBe(!isStaff);
          if (isStaff) expect(d.code).toBe('PRIVACY_ACTIVE');
        }),
      );
    });
  });
  it('lets offline-capable staff keys through lockdown', () => {
    const staff = active(grant({ offlineCapable: true, offlineMaxSeconds: 3600 }));
    expect(decide(req, keys(staff), lock, { ...fresh, mode: 'lockdown' }, T0).code).toBe('ALLOWED');
  });

  describe('when the lease has run out (the gateway fails closed)', () => {
    const HOUR = 3_600_000;
    // proven in sync an hour and a half ago, with a 5-minute grace: stale since 85 minutes
    const stale: SiteView = { mode: 'normal', leaseExpiresAt: T0 - 90 * 60_000 + 300_000, lastFreshAt: T0 - 90 * 60_000 };
    const staff = (over: Partial<KeyGrant> = {}) => active(grant({ offlineCapable: true, validUntil: T0 + 60 * 86_400_000, ...over }));

    it('an offline-capable key opens while less than its offline cap has passed since the last proven-fresh sync', () => {
      expect(decide(req, keys(staff({ offlineMaxSeconds: 2 * 3600 })), lock, stale, T0)).toMatchObject({ allowed: true, code: 'ALLOWED' });
      expect(decide(req, keys(staff({ offlineMaxSeconds: 2 * 3600 })), lock, { ...stale, mode: 'lockdown' }, T0).code).toBe('ALLOWED');
      expect(decide(req, keys(staff({ offlineMaxSeconds: 2 * 3600 })), lock, stale, stale.lastFreshAt! + 2 * HOUR - 1).code).toBe(
        'ALLOWED',
      );
    });

    it('at and beyond its offline cap it is CLOUD_STALE like any key', () => {
      const k = staff({ offlineMaxSeconds: 3600 });
      expect(decide(req, keys(k), lock, stale, T0)).toMatchObject({ allowed: false, code: 'CLOUD_STALE' });
      expect(decide(req, keys(k), lock, stale, stale.lastFreshAt! + HOUR).code).toBe('CLOUD_STALE');
      expect(decide(req, keys(k), lock, { ...stale, mode: 'lockdown' }, T0 + 30 * 86_400_000).code).toBe('CLOUD_STALE');
    });

    it('a grant without a cap (from an older cloud) gets the 7-day default, not forever', () => {
      const k = staff();
      expect(k.grant.offlineMaxSeconds).toBeUndefined();
      const last = stale.lastFreshAt!;
      expect(decide(req, keys(k), lock, stale, last + DEFAULT_OFFLINE_MAX_SECONDS * 1000 - 1).code).toBe('ALLOWED');
      expect(decide(req, keys(k), lock, stale, last + DEFAULT_OFFLINE_MAX_SECONDS * 1000).code).toBe('CLOUD_STALE');
    });

    it('with no proven-fresh sync to count from (never synced, or the lease withdrawn) an offline-capable key is CLOUD_STALE', () => {
      expect(
        decide(req, keys(staff({ offlineMaxSeconds: 3600 })), lock, { mode: 'normal', leaseExpiresAt: null, lastFreshAt: null }, T0).code,
      ).toBe('CLOUD_STALE');
      expect(
        decide(req, keys(staff({ offlineMaxSeconds: 3600 })), lock, { mode: 'lockdown', leaseExpiresAt: null, lastFreshAt: null }, T0).code,
      ).toBe('CLOUD_STALE');
      // a caller that does not say when the last proven-fresh sync was gets the fail-closed answer
      expect(
        decide(req, keys(staff({ offlineMaxSeconds: 3600 })), lock, { mode: 'normal', leaseExpiresAt: stale.leaseExpiresAt }, T0).code,
      ).toBe('CLOUD_STALE');
    });

    it('a revoked offline-capable key is refused KEY_REVOKED, inside its cap too', () => {
      const revoked: StoredKey = { ...staff({ offlineMaxSeconds: 2 * 3600 }), status: 'revoked' };
      expect(decide(req, keys(revoked), lock, stale, T0)).toMatchObject({ allowed: false, code: 'KEY_REVOKED' });
    });

    it('the cap never lets an ordinary key through', () => {
      expect(decide(req, keys(active(grant({ offlineMaxSeconds: 2 * 3600 }))), lock, stale, T0).code).toBe('CLOUD_STALE');
    });
  });

  it('reads the last proven-fresh sync back from the lease: lease minus the grace, none without a lease', () => {
    expect(lastFreshSyncAt(T0 + 300_000, 300)).toBe(T0);
    expect(lastFreshSyncAt(T0, 0)).toBe(T0);
    expect(lastFreshSyncAt(null, 300)).toBeNull();
  });
  it('below the disk headroom refuses ordinary keys (an unrecorded unlock breaks I2) and still opens for staff keys', () => {
    const low: SiteView = { ...fresh, storageLow: true };
    expect(decide(req, keys(active(grant())), lock, low, T0)).toMatchObject({
      allowed: false,
      code: 'STORAGE_FULL',
      key: { grant: { keyId: 'key-1' } },
    });
    expect(decide(req, keys(active(grant({ offlineCapable: true }))), lock, low, T0).code).toBe('ALLOWED');
    expect(decide(req, keys(active(grant())), lock, { ...fresh, storageLow: false }, T0).code).toBe('ALLOWED');
  });
  it('refuses everything, staff keys too, while the credential type is locked out across the site, and opens again after', () => {
    const locked: SiteView = { ...fresh, credentialLockout: { failures: 0, lockedOutUntil: T0 + 1000 } };
    expect(decide(req, keys(active(grant({ offlineCapable: true }))), lock, locked, T0).code).toBe('LOCKED_OUT');
    expect(decide(req, keys(active(grant())), lock, locked, T0 + 1000).code).toBe('ALLOWED');
  });
  it('evaluates the schedule in its time zone', () => {
    // T0 is Monday 12:00 in Tokyo, Monday 03:00 UTC.
    const tokyo = { timeZone: 'Asia/Tokyo', windows: [{ days: [1], start: '09:00', end: '17:00' }] };
    const utc = { timeZone: 'UTC', windows: [{ days: [1], start: '09:00', end: '17:00' }] };
    expect(decide(req, keys(active(grant({ schedule: tokyo }))), lock, fresh, T0).code).toBe('ALLOWED');
    expect(decide(req, keys(active(grant({ schedule: utc }))), lock, fresh, T0).code).toBe('OUTSIDE_SCHEDULE');
  });
  it('picks the allowing key among several with the same credential', () => {
    const other = active(grant({ keyId: asKeyId('key-2'), doors: [asKeyId('door-9') as never] }));
    expect(decide(req, keys(other, active(grant())), lock, fresh, T0).key?.grant.keyId).toBe('key-1');
  });
});

describe('schedule', () => {
  it('matches windows that wrap past midnight on the next morning', () => {
    const s = { timeZone: 'UTC', windows: [{ days: [0], start: '22:00', end: '06:00' }] }; // Sunday night
    expect(inSchedule(s, Date.UTC(2026, 10, 29, 23, 0))).toBe(true); // Sun 23:00
    expect(inSchedule(s, Date.UTC(2026, 10, 30, 5, 59))).toBe(true); // Mon 05:59
    expect(inSchedule(s, Date.UTC(2026, 10, 30, 6, 0))).toBe(false);
    expect(inSchedule(s, Date.UTC(2026, 10, 29, 21, 59))).toBe(false);
  });
  it('fails closed on an unknown time zone', () => {
    expect(inSchedule({ timeZone: 'Mars/Olympus', windows: [{ days: [0, 1, 2, 3, 4, 5, 6], start: '00:00', end: '24:00' }] }, T0)).toBe(
      false,
    );
  });
});

describe('key set rules', () => {
  it('ignores a grant at or below a tombstone (revoke before grant)', () => {
    const r = applyRevoke(emptySlot, { keyId: asKeyId('key-1'), version: 2, reason: 'staff_revoked' });
    expect(r.status).toBe('applied');
    const slot = (r as { state: KeySlot }).state;
    expect(applyGrant(slot, grant({ version: 2 }))).toMatchObject({ status: 'noop', code: 'STALE_VERSION' });
    expect(applyGrant(slot, grant({ version: 1 }))).toMatchObject({ status: 'noop', code: 'STALE_VERSION' });
  });
  it('treats a duplicate grant as a noop and a replayed older grant as stale', () => {
    const s = (applyGrant(emptySlot, grant({ version: 3 })) as { state: KeySlot }).state;
    expect(applyGrant(s, grant({ version: 3 })).code).toBe('KEY_ALREADY_ACTIVE');
    expect(applyGrant(s, grant({ version: 2 })).code).toBe('STALE_VERSION');
  });
  it('refuses an empty validity window', () => {
    expect(applyGrant(emptySlot, grant({ validFrom: 5, validUntil: 5 }))).toMatchObject({
      status: 'refused',
      code: 'INVALID_VALIDITY_WINDOW',
    });
  });

  type Op = { kind: 'grant' | 'revoke'; version: number };
  const ops = fc.array(
    fc.record({ kind: fc.constantFrom<'grant' | 'revoke'>('grant', 'revoke'), version: fc.integer({ min: 1, max: 8 }) }),
    { minLength: 1, maxLength: 12 },
  );
  const run = (list: readonly Op[]): KeySlot =>
    list.reduce<KeySlot>((slot, op) => {
      const o =
        op.kind === 'grant'
          ? applyGrant(slot, grant({ version: op.version }))
          : applyRevoke(slot, { keyId: asKeyId('key-1'), version: op.version, reason: 'staff_revoked' });
      return o.status === 'applied' || o.status === 'noop' ? o.state : slot;
    }, emptySlot);

  it('never lets a revoked version become active, whatever order grants and revokes arrive in', () => {
    fc.assert(
      fc.property(
        ops.chain((list) => fc.tuple(fc.constant(list), fc.shuffledSubarray(list, { minLength: list.length, maxLength: list.length }))),
        ([list, shuffled]) => {
          const maxRevoke = Math.max(0, ...list.filter((o) => o.kind === 'revoke').map((o) => o.version));
          const maxGrant = Math.max(0, ...list.filter((o) => o.kind === 'grant').map((o) => o.version));
          for (const order of [list, shuffled]) {
            const slot = run(order);
            // Convergent: active iff the highest grant is above the highest revoke, at that version.
            expect(isActive(slot)).toBe(maxGrant > maxRevoke);
            if (isActive(slot)) expect(slot.key?.version).toBe(maxGrant);
            // And no prefix of the delivery ever has an active key at or below a revoke seen so far.
            let seenRevoke = 0;
            order.reduce<Op[]>((prefix, op) => {
              const next = [...prefix, op];
              if (op.kind === 'revoke') seenRevoke = Math.max(seenRevoke, op.version);
              const s = run(next);
              if (isActive(s)) expect(s.key!.version).toBeGreaterThan(seenRevoke);
              return next;
            }, []);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('freshness', () => {
  it('extends the lease only when everything up to lastSeq is applied', () => {
    expect(onHeartbeat({ lastSeq: 5, iatMs: T0 }, 4, null, 300)).toEqual({ kind: 'behind', appliedSeq: 4, lastSeq: 5 });
    expect(onHeartbeat({ lastSeq: 5, iatMs: T0 }, 5, null, 300)).toEqual({ kind: 'extend', leaseExpiresAt: T0 + 300_000 });
  });
  it('never shortens the lease', () => {
    expect(onHeartbeat({ lastSeq: 0, iatMs: T0 - 10_000 }, 0, T0 + 1_000_000, 300)).toEqual({
      kind: 'extend',
      leaseExpiresAt: T0 + 1_000_000,
    });
  });
  const trusted = (wall: number, floor: { maxIatMs: number; highWaterMs: number }, anchor: TimeAnchor | null = null, mono = 0) =>
    trustedNow(wall, advanceFloor(anchor, floor, mono).nowFloorMs);
  it('never takes trusted time earlier than the newest iat or the high-water mark', () => {
    expect(trusted(T0 - 3_600_000, { maxIatMs: T0, highWaterMs: 0 })).toBe(T0);
    expect(trusted(0, { maxIatMs: 0, highWaterMs: T0 })).toBe(T0);
    expect(isStale(T0 + 1, trusted(0, { maxIatMs: T0 + 1, highWaterMs: 0 }))).toBe(true);
  });
  it('carries the floor forward by elapsed monotonic time, so a stopped or reset wall clock cannot freeze it', () => {
    const a = advanceFloor(null, { maxIatMs: T0, highWaterMs: 0 }, 5_000);
    expect(a).toEqual({ floorMs: T0, monoMs: 5_000, nowFloorMs: T0 });
    expect(trusted(0, { maxIatMs: T0, highWaterMs: 0 }, a, 5_000 + 120_000)).toBe(T0 + 120_000);
    // a newer persisted floor (a fresh iat) becomes the anchor
    const b = advanceFloor(a, { maxIatMs: T0 + 200_000, highWaterMs: 0 }, 5_000 + 120_000);
    expect(b).toEqual({ floorMs: T0 + 200_000, monoMs: 125_000, nowFloorMs: T0 + 200_000 });
    // a wall clock ahead wins; it never pulls trusted time back when it returns
    expect(trusted(T0 + 10 * 86_400_000, { maxIatMs: T0, highWaterMs: 0 }, a, 5_000)).toBe(T0 + 10 * 86_400_000);
  });
  it('keeps trusted time in whole ms when the monotonic clock reads fractions (performance.now())', () => {
    const a = advanceFloor(null, { maxIatMs: T0, highWaterMs: 0 }, 1000.25);
    const b = advanceFloor(a, { maxIatMs: T0, highWaterMs: 0 }, 1000.25 + 1234.987);
    expect(b.nowFloorMs).toBe(T0 + 1234);
    expect(Number.isInteger(trustedNow(0, b.nowFloorMs))).toBe(true);
  });
  it('runs the lease out after at most offlineGraceSeconds of elapsed time, whatever the wall clock reads (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 4_000_000_000_000 }), // iat of the heartbeat
        fc.array(fc.tuple(fc.integer({ min: 0, max: 4_000_000_000_000 }), fc.integer({ min: 0, max: 60_000 })), {
          minLength: 1,
          maxLength: 40,
        }), // (wall reading, elapsed ms) steps
        fc.integer({ min: 0, max: 3600 }), // grace
        (iat, steps, grace) => {
          let floor = { maxIatMs: iat, highWaterMs: 0 };
          let mono = 1_000;
          let anchor: TimeAnchor | null = advanceFloor(null, floor, mono);
          const lease = onHeartbeat({ lastSeq: 0, iatMs: iat }, 0, null, grace);
          if (lease.kind !== 'extend') throw new Error('unexpected');
          let elapsed = 0;
          let prev = Number.NEGATIVE_INFINITY;
          for (const [wall, dt] of steps) {
            mono += dt;
            elapsed += dt;
            const a = advanceFloor(anchor, floor, mono);
            anchor = a;
            const now = trustedNow(wall, a.nowFloorMs);
            expect(now).toBeGreaterThanOrEqual(prev); // never backwards, with the time acted on checkpointed
            prev = now;
            floor = { ...floor, highWaterMs: Math.max(floor.highWaterMs, now) };
            if (elapsed >= grace * 1000) expect(isStale(lease.leaseExpiresAt, now)).toBe(true);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('lockout', () => {
  const policy = { limit: 3, cooldownSeconds: 60 };
  it('locks out after the limit of wrong credentials and lifts after the cool-down', () => {
    let s = noLockout;
    for (let i = 0; i < 3; i++) s = recordAttempt(s, 'UNKNOWN_CREDENTIAL', T0, policy);
    expect(isLockedOut(s, T0)).toBe(true);
    expect(isLockedOut(s, T0 + 60_000)).toBe(false);
    s = recordAttempt(s, 'UNKNOWN_CREDENTIAL', T0 + 60_000, policy);
    expect(s).toEqual({ failures: 1, lockedOutUntil: null });
  });
  it('resets on a right credential and ignores refusals of a real key', () => {
    let s = recordAttempt(noLockout, 'UNKNOWN_CREDENTIAL', T0, policy);
    s = recordAttempt(s, 'OUTSIDE_SCHEDULE', T0, policy);
    expect(s.failures).toBe(1);
    expect(recordAttempt(s, 'ALLOWED', T0, policy)).toEqual(noLockout);
  });
});

describe('site-wide lockout (per credential type)', () => {
  const policy = { limit: 4, windowSeconds: 600, cooldownSeconds: 300 };
  const wrong = (s: SiteLockoutState, at: number) => recordSiteAttempt(s, 'UNKNOWN_CREDENTIAL', at, policy);

  it('locks the type out after the limit of wrong credentials inside the window, and lifts after the cool-down', () => {
    let s = noSiteLockout;
    for (let i = 0; i < 3; i++) s = wrong(s, T0 + i * 1000);
    expect(s).toEqual({ failures: 3, windowStart: T0, lockedOutUntil: null });
    s = wrong(s, T0 + 3000);
    expect(isLockedOut(s, T0 + 3000)).toBe(true);
    expect(isLockedOut(s, T0 + 3000 + 299_999)).toBe(true);
    expect(isLockedOut(s, T0 + 3000 + 300_000)).toBe(false);
    expect(wrong(s, T0 + 10_000)).toBe(s); // wrong tries during the cool-down change nothing
    expect(wrong(s, T0 + 303_000)).toEqual({ failures: 1, windowStart: T0 + 303_000, lockedOutUntil: null });
  });

  it('is not reset by a right credential (one valid card must not wipe a guesser tally), nor by refusals of a real key', () => {
    let s = wrong(wrong(noSiteLockout, T0), T0 + 1);
    s = recordSiteAttempt(s, 'ALLOWED', T0 + 2, policy);
    s = recordSiteAttempt(s, 'OUTSIDE_SCHEDULE', T0 + 3, policy);
    expect(s).toEqual({ failures: 2, windowStart: T0, lockedOutUntil: null });
    s = wrong(wrong(s, T0 + 4), T0 + 5);
    expect(isLockedOut(s, T0 + 5)).toBe(true);
  });

  it('starts a new count when the window has passed, and when the clock went back before the window', () => {
    const s = wrong(wrong(wrong(noSiteLockout, T0), T0), T0);
    expect(wrong(s, T0 + 600_000)).toEqual({ failures: 1, windowStart: T0 + 600_000, lockedOutUntil: null });
    expect(wrong(s, T0 - 1)).toEqual({ failures: 1, windowStart: T0 - 1, lockedOutUntil: null });
  });

  it('is off with limit 0', () => {
    let s = noSiteLockout;
    for (let i = 0; i < 50; i++) s = recordSiteAttempt(s, 'UNKNOWN_CREDENTIAL', T0, { ...policy, limit: 0 });
    expect(s).toBe(noSiteLockout);
  });
});

describe('request rate limit (token bucket)', () => {
  const policy = { burst: 3, perSecond: 2 };

  it('lets a burst through, refuses the rest, and flags only the first refusal of a flood', () => {
    let b: Bucket = fullBucket(policy, T0);
    const results = [];
    for (let i = 0; i < 6; i++) {
      const t = takeToken(b, T0, policy);
      b = t.bucket;
      results.push(t.ok ? 'ok' : t.first ? 'first' : 'refused');
    }
    expect(results).toEqual(['ok', 'ok', 'ok', 'first', 'refused', 'refused']);
    const after = takeToken(b, T0 + 500, policy); // one token back after 0.5 s at 2/s
    expect(after).toMatchObject({ ok: true, refusedBefore: 3 });
    expect(takeToken(after.bucket, T0 + 500, policy)).toMatchObject({ ok: false, first: true });
  });

  it('never lets more than burst + rate x time through, whatever the clock does', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -5_000, max: 5_000 }), { minLength: 1, maxLength: 200 }), (steps) => {
        let b = fullBucket(policy, T0);
        let now = T0;
        let maxNow = T0;
        let passed = 0;
        for (const step of steps) {
          now += step;
          maxNow = Math.max(maxNow, now);
          const t = takeToken(b, now, policy);
          b = t.bucket;
          if (t.ok) passed++;
        }
        // A clock going backwards refills nothing: only forward progress of the newest time counts.
        expect(passed).toBeLessThanOrEqual(policy.burst + Math.floor(((maxNow - T0) * policy.perSecond) / 1000));
      }),
      { numRuns: 300 },
    );
  });
});
