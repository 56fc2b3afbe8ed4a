import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { DownlinkMessage, asDoorId, asGatewayId, asKeyId, asLockId, asPersonId, newCorrelationId, newMessageId } from '@tobira/shared';
import { parseIssue } from '../../cloud/src/app/inputs.js';
import { issueKey } from '../../cloud/src/domain/keys.js';
import { openDatabase } from '../../gateway/src/adapters/sqlite/db.js';
import { loadSlot, saveSlot } from '../../gateway/src/adapters/sqlite/keyset.js';
import { decide } from '../../gateway/src/domain/decide.js';
import { applyGrant, emptySlot } from '../../gateway/src/domain/keyset.js';

/**
 * Issue #17 part 2: the cloud's validation of a schedule (issue input and
 * the issue verb) and the gateway's acceptance and evaluation of it (the
 * signed grant's schema, the key-set rule, the SQLite row read back on every
 * decision, the decision itself) agree on every schedule, valid or not:
 * the cloud never issues a key the gateway refuses or cannot evaluate, and
 * the gateway accepts nothing the cloud would refuse.
 */
const NOW = Date.UTC(2026, 10, 30, 3);
const DAY = 86_400_000;
const dir = mkdtempSync(join(tmpdir(), 'tobira-schedule-'));
const db = openDatabase(join(dir, 'gateway.sqlite'));
afterAll(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const pad = (n: number) => String(n).padStart(2, '0');
const hhmm = fc.oneof(
  {
    arbitrary: fc.tuple(fc.integer({ min: 0, max: 23 }), fc.constantFrom(0, 15, 30, 45)).map(([h, m]) => `${pad(h)}:${pad(m)}`),
    weight: 8,
  },
  { arbitrary: fc.constantFrom('24:00', '00:00', '24:15', '25:00', '12:60', '9:00', ''), weight: 2 },
);
const date = fc.oneof(
  { arbitrary: fc.integer({ min: 0, max: 800 }).map((d) => new Date(NOW + (d - 30) * DAY).toISOString().slice(0, 10)), weight: 8 },
  { arbitrary: fc.constantFrom('2026-02-29', '2026-02-30', '2026-13-01', '2026-1-1', '2028-02-29', 'tomorrow'), weight: 2 },
);
const window = fc.record(
  {
    days: fc.oneof(
      { arbitrary: fc.uniqueArray(fc.integer({ min: 0, max: 6 }), { minLength: 1, maxLength: 7 }), weight: 6 },
      { arbitrary: fc.array(fc.integer({ min: -1, max: 7 }), { maxLength: 8 }), weight: 1 },
    ),
    dates: fc.array(date, { minLength: 1, maxLength: 3 }),
    start: hhmm,
    end: hhmm,
  },
  { requiredKeys: ['start', 'end'] },
);
const scheduleArb = fc.record({
  timeZone: fc.constantFrom('Asia/Tokyo', 'Europe/Berlin', 'UTC', 'America/New_York', 'Asia/Tokyo', 'Europe/Berlin', 'Mars/Olympus', ''),
  windows: fc.array(window, { minLength: 1, maxLength: 3 }),
});

/** The cloud: the issue input's parse, then the issue verb. True when the key would be issued. */
function cloudAccepts(schedule: unknown): boolean {
  const input = {
    personId: 'person-1',
    doors: ['door-1'],
    credential: { type: 'pin', value: '123456' },
    validFrom: NOW,
    validUntil: NOW + 365 * DAY,
    schedule,
  };
  const p = parseIssue(input);
  if (!p.ok) {
    expect(p.refusal.code).toBe('INVALID_SCHEDULE');
    return false;
  }
  const o = issueKey(
    null,
    {
      keyId: asKeyId('key-1'),
      personId: asPersonId('person-1'),
      gatewayId: asGatewayId('gw-1'),
      credential: { type: 'pin', digest: 'A'.repeat(43) },
      doors: [asDoorId('door-1')],
      validFrom: NOW,
      validUntil: NOW + 365 * DAY,
      schedule: p.value.schedule,
      offlineCapable: false,
      offlineMaxSeconds: null,
      cid: newCorrelationId(),
    },
    NOW,
  );
  if (o.status === 'refused') expect(o.code).toBe('INVALID_SCHEDULE');
  return o.status === 'applied';
}

/** The gateway: the signed grant's schema, the key-set rule, the stored row read back, a decision. True when it would apply and evaluate it. */
function gatewayAccepts(schedule: unknown): boolean {
  const claims = {
    jti: newMessageId(),
    iss: 'tobira-cloud',
    aud: 'gw-1',
    iat: Math.floor(NOW / 1000),
    exp: Math.floor(NOW / 1000) + 60,
    cid: newCorrelationId(),
    type: 'key.grant',
    seq: 1,
    body: {
      key: {
        keyId: 'key-1',
        version: 1,
        personId: 'person-1',
        credential: { type: 'pin', digest: 'A'.repeat(43) },
        doors: ['door-1'],
        validFrom: NOW,
        validUntil: NOW + 365 * DAY,
        schedule,
        offlineCapable: false,
      },
    },
  };
  const m = DownlinkMessage.safeParse(claims);
  if (!m.success || m.data.type !== 'key.grant') return false;
  const applied = applyGrant(emptySlot, m.data.body.key);
  if (applied.status !== 'applied') return false;
  // the row every decision reads back (a structural check, not zod): it must take what the schema took
  saveSlot(db, 'key-1', applied.state, 'cid', NOW);
  const slot = loadSlot(db, 'key-1');
  db.prepare('DELETE FROM keys').run();
  const key = slot.key!;
  const d = decide(
    { lockId: asLockId('lock-1'), credentialType: 'pin', digest: 'A'.repeat(43) },
    { byCredential: () => [key] },
    { doorId: asDoorId('door-1'), failures: 0, lockedOutUntil: null },
    { mode: 'normal', leaseExpiresAt: NOW + DAY },
    NOW + 3_600_000,
  );
  expect(['ALLOWED', 'OUTSIDE_SCHEDULE']).toContain(d.code);
  return true;
}

describe('schedules: the cloud and the gateway agree', () => {
  it('accept exactly the same schedules (fast-check over valid and broken ones)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(scheduleArb, (s) => {
        const cloud = cloudAccepts(s);
        expect(gatewayAccepts(s), JSON.stringify(s)).toBe(cloud);
        if (cloud) accepted++;
      }),
      { numRuns: 400 },
    );
    // not vacuous: both kinds were generated
    expect(accepted).toBeGreaterThan(20);
    expect(accepted).toBeLessThan(380);
  });

  it('every window the cloud accepts opens at its start on its day at the door (zones without daylight saving)', () => {
    const offsets: Record<string, number> = { 'Asia/Tokyo': 9 * 3_600_000, UTC: 0 };
    const validWindow = fc
      .record({
        day: fc.integer({ min: 0, max: 6 }),
        dated: fc.boolean(),
        start: fc.tuple(fc.integer({ min: 0, max: 23 }), fc.constantFrom(0, 15, 30, 45)),
        length: fc.integer({ min: 1, max: 95 }).map((q) => q * 15),
        timeZone: fc.constantFrom('Asia/Tokyo', 'UTC'),
      })
      .filter(({ start: [h, m], length }) => length !== 1440 - 0 && (h * 60 + m + length) % 1440 !== h * 60 + m);
    fc.assert(
      fc.property(validWindow, ({ day, dated, start: [h, m], length, timeZone }) => {
        const startMin = h * 60 + m;
        const endMin = (startMin + length) % 1440;
        const end = endMin === 0 ? '24:00' : `${pad(Math.floor(endMin / 60))}:${pad(endMin % 60)}`;
        // 2026-11-29 is a Sunday: the day-th day after it is week day `day`
        const localMidnight = Date.UTC(2026, 10, 29 + day);
        const w = dated
          ? { dates: [new Date(localMidnight).toISOString().slice(0, 10)], start: `${pad(h)}:${pad(m)}`, end }
          : { days: [day], start: `${pad(h)}:${pad(m)}`, end };
        const schedule = { timeZone, windows: [w] };
        expect(cloudAccepts(schedule)).toBe(true);
        const opensAt = localMidnight + startMin * 60_000 - offsets[timeZone]!;
        const lastMinute = opensAt + (length - 1) * 60_000;
        const closesAt = opensAt + length * 60_000;
        const grantKey = {
          grant: {
            keyId: asKeyId('key-1'),
            version: 1,
            personId: asPersonId('person-1'),
            credential: { type: 'pin' as const, digest: 'A'.repeat(43) },
            doors: [asDoorId('door-1')],
            validFrom: 0,
            validUntil: NOW + 365 * DAY,
            schedule,
            offlineCapable: false,
          },
          version: 1,
          status: 'active' as const,
        };
        const at = (t: number) =>
          decide(
            { lockId: asLockId('lock-1'), credentialType: 'pin', digest: 'A'.repeat(43) },
            { byCredential: () => [grantKey] },
            { doorId: asDoorId('door-1'), failures: 0, lockedOutUntil: null },
            { mode: 'normal', leaseExpiresAt: t + 60_000 },
            t,
          ).code;
        expect(at(opensAt)).toBe('ALLOWED');
        expect(at(lastMinute)).toBe('ALLOWED');
        expect(at(opensAt - 60_000)).toBe('OUTSIDE_SCHEDULE');
        expect(at(closesAt)).toBe('OUTSIDE_SCHEDULE');
      }),
      { numRuns: 300 },
    );
  });
});
