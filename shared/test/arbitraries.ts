import fc from 'fast-check';
import {
  AlarmKind,
  CredentialType,
  DECISION_CODES,
  OFFLINE_MAX_SECONDS_LIMIT,
  REVOKE_REASONS,
  type DownlinkMessage,
  type KeyGrant,
  type UplinkMessage,
} from '../src/index.js';

const T0 = Date.UTC(2026, 0, 1);
const slug = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_-]{0,20}$/);
const entity = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}$/);
const millis = fc.integer({ min: T0, max: T0 + 10 * 365 * 86_400_000 });
const version = fc.integer({ min: 1, max: 1_000_000 });
const seq = fc.integer({ min: 1, max: 2 ** 40 });
const digest = fc.stringMatching(/^[A-Za-z0-9_-]{43}$/);
const hhmm = fc
  .tuple(fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }))
  .map(([h, m]) => `${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`);
const nullable = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: null });

export const keyGrant: fc.Arbitrary<KeyGrant> = fc.record(
  {
    keyId: entity,
    version,
    personId: entity,
    credential: fc.record({ type: fc.constantFrom(...CredentialType.options), digest }),
    doors: fc.array(entity, { minLength: 1, maxLength: 5 }),
    validFrom: millis,
    validUntil: millis,
    schedule: nullable(
      fc.record({
        timeZone: fc.constantFrom('Asia/Tokyo', 'UTC', 'Europe/Berlin'),
        windows: fc.array(
          fc
            .record(
              {
                days: fc.uniqueArray(fc.integer({ min: 0, max: 6 }), { minLength: 1, maxLength: 7 }),
                dates: fc.array(
                  fc.integer({ min: 0, max: 3650 }).map((d) => new Date(Date.UTC(2026, 0, 1 + d)).toISOString().slice(0, 10)),
                  { minLength: 1, maxLength: 3 },
                ),
                start: hhmm,
                end: hhmm,
              },
              { requiredKeys: ['start', 'end'] },
            )
            // the schedule rules (shared/src/schedule.ts): days or dates, and a window is not empty
            .filter((w) => (w.days !== undefined || w.dates !== undefined) && w.start !== w.end),
          {
            minLength: 1,
            maxLength: 3,
          },
        ),
      }),
    ),
    offlineCapable: fc.boolean(),
    offlineMaxSeconds: fc.integer({ min: 1, max: OFFLINE_MAX_SECONDS_LIMIT }),
    oneTime: fc.constant(true as const),
  },
  { requiredKeys: ['keyId', 'version', 'personId', 'credential', 'doors', 'validFrom', 'validUntil', 'schedule', 'offlineCapable'] },
) as fc.Arbitrary<KeyGrant>;

const reason = fc.constantFrom(...(Object.keys(REVOKE_REASONS) as (keyof typeof REVOKE_REASONS)[]));
const decision = fc.constantFrom(...(Object.keys(DECISION_CODES) as (keyof typeof DECISION_CODES)[]));

type DownDraft = {
  [K in DownlinkMessage['type']]: Pick<Extract<DownlinkMessage, { type: K }>, 'type' | 'body'> & { seq?: number };
}[DownlinkMessage['type']];
type UpDraft = {
  [K in UplinkMessage['type']]: Pick<Extract<UplinkMessage, { type: K }>, 'type' | 'body'> & { seq?: number };
}[UplinkMessage['type']];

export const downlinkDraft: fc.Arbitrary<DownDraft> = fc.oneof(
  fc.record({ type: fc.constant('key.grant' as const), seq, body: fc.record({ key: keyGrant }) }),
  fc.record({ type: fc.constant('key.revoke' as const), seq, body: fc.record({ keyId: entity, version, reason }) }),
  fc.record({
    type: fc.constant('heartbeat' as const),
    body: fc.record({ lastSeq: fc.nat(), intervalMs: fc.integer({ min: 1, max: 3_600_000 }) }),
  }),
  fc.record({
    type: fc.constant('resync.answer' as const),
    body: fc.record({
      requestId: fc.uuid(),
      mode: fc.constantFrom('replay' as const, 'snapshot' as const, 'up_to_date' as const),
      fromSeq: fc.nat(),
      toSeq: fc.nat(),
      snapshotId: nullable(fc.uuid()),
    }),
  }),
  fc
    .record({
      snapshotId: fc.uuid(),
      asOfSeq: fc.nat(),
      parts: fc.integer({ min: 1, max: 5 }),
      keys: fc.array(keyGrant, { maxLength: 3 }),
      revoked: fc.array(fc.record({ keyId: entity, version }), { maxLength: 3 }),
    })
    .chain((b) => fc.integer({ min: 1, max: b.parts }).map((part) => ({ type: 'keyset.snapshot' as const, body: { ...b, part } }))),
) as fc.Arbitrary<DownDraft>;

const upBase = { lockId: slug, doorId: nullable(entity), at: millis };
export const uplinkDraft: fc.Arbitrary<UpDraft> = fc.oneof(
  fc.record({
    type: fc.constant('ack' as const),
    seq,
    body: fc.record({
      ackOf: fc.uuid(),
      ackSeq: nullable(seq),
      result: fc.constantFrom('applied' as const, 'noop' as const, 'refused' as const),
      code: fc.constantFrom('MESSAGE_APPLIED', 'DUPLICATE_MESSAGE', 'STALE_VERSION', 'MESSAGE_REJECTED'),
      keyId: nullable(entity),
      keyVersion: nullable(version),
    }),
  }),
  fc.record({
    type: fc.constant('access.event' as const),
    seq,
    body: fc.record({
      eventId: fc.uuid(),
      requestId: slug,
      ...upBase,
      allowed: fc.boolean(),
      code: decision,
      keyId: nullable(entity),
      keyVersion: nullable(version),
      personId: nullable(entity),
      credentialType: nullable(fc.constantFrom(...CredentialType.options)),
      commandId: nullable(fc.uuid()),
    }),
  }),
  fc.record({
    type: fc.constant('alarm' as const),
    seq,
    body: fc.record({ alarmId: fc.uuid(), ...upBase, kind: fc.constantFrom(...AlarmKind.options) }),
  }),
  fc.record({
    type: fc.constant('gateway.status' as const),
    seq,
    body: fc.record({
      mode: fc.constantFrom('normal' as const, 'lockdown' as const),
      appliedSeq: fc.nat(),
      leaseExpiresAt: nullable(millis),
      outboxDepth: fc.nat(),
      locks: fc.array(
        fc.record({
          lockId: slug,
          online: fc.boolean(),
          bolt: nullable(fc.constantFrom('locked' as const, 'unlocked' as const, 'jammed' as const)),
          door: nullable(fc.constantFrom('open' as const, 'closed' as const)),
          battery: nullable(fc.integer({ min: 0, max: 100 })),
          at: nullable(millis),
        }),
        { maxLength: 4 },
      ),
    }),
  }),
  fc.record({
    type: fc.constant('resync.request' as const),
    body: fc.record({
      requestId: fc.uuid(),
      lastAppliedSeq: fc.nat(),
      reason: fc.constantFrom('gap' as const, 'startup' as const, 'stale' as const, 'operator' as const),
    }),
  }),
) as fc.Arbitrary<UpDraft>;
