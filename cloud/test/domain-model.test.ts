import fc from 'fast-check';
import { asDoorId, asGatewayId, asKeyId, asPersonId, codesOf, newCorrelationId, REVOKE_REASONS, type RevokeReason } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { KEY_TRANSITIONS, isLive } from '../src/domain/key-states.js';
import { expireKey, issueKey, recordGatewayReport, revokeKey, type EntryKey, type KeyOutcome } from '../src/domain/keys.js';

const T0 = Date.UTC(2026, 0, 1);
const cid = newCorrelationId();
const gw = asGatewayId('gw-1');

type Cmd =
  | { kind: 'issue' }
  | { kind: 'revoke'; reason: RevokeReason }
  | { kind: 'report'; version: number; result: 'applied' | 'noop' | 'refused'; otherGateway: boolean }
  | { kind: 'advance'; ms: number }
  | { kind: 'expire' };

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  fc.constant<Cmd>({ kind: 'issue' }),
  fc.constantFrom(...codesOf(REVOKE_REASONS)).map((reason): Cmd => ({ kind: 'revoke', reason })),
  fc
    .record({ version: fc.integer({ min: 0, max: 3 }), result: fc.constantFrom('applied', 'noop', 'refused'), otherGateway: fc.boolean() })
    .map((r): Cmd => ({ kind: 'report', ...r })),
  fc.integer({ min: 0, max: 3_600_000 }).map((ms): Cmd => ({ kind: 'advance', ms })),
  fc.constant<Cmd>({ kind: 'expire' }),
);

describe('entry-key verbs (model-based)', () => {
  it('keep every invariant over any sequence of commands, reports and time', () => {
    fc.assert(
      fc.property(fc.array(cmdArb, { maxLength: 40 }), (cmds) => {
        let key: EntryKey | null = null;
        let now = T0;
        let wasDead = false;
        for (const c of cmds) {
          let o: KeyOutcome;
          switch (c.kind) {
            case 'issue':
              o = issueKey(
                key,
                {
                  keyId: asKeyId('k'),
                  personId: asPersonId('p'),
                  gatewayId: gw,
                  credential: { type: 'pin', digest: 'A'.repeat(43) },
                  doors: [asDoorId('d')],
                  validFrom: T0,
                  validUntil: T0 + 7_200_000,
                  schedule: null,
                  offlineCapable: false,
                  offlineMaxSeconds: null,
                  cid,
                },
                now,
              );
              break;
            case 'revoke':
              o = revokeKey(key, { reason: c.reason, cid }, now);
              break;
            case 'report':
              o = recordGatewayReport(
                key,
                {
                  gatewayId: c.otherGateway ? asGatewayId('gw-2') : gw,
                  keyVersion: c.version || (key?.version ?? 1),
                  result: c.result,
                  code: 'X',
                  cid,
                },
                now,
              );
              break;
            case 'advance':
              now += c.ms;
              continue;
            case 'expire':
              o = expireKey(key, { cid }, now);
              break;
          }
          if (o.status === 'applied') {
            const before = key;
            const after = o.state;
            // the transition is a row of the table
            expect(KEY_TRANSITIONS.some((r) => r.code === o.code && r.to === after.status && r.from.includes(before?.status ?? null))).toBe(
              true,
            );
            // versions only grow, revisions grow by one per write
            if (before) {
              expect(after.version).toBeGreaterThanOrEqual(before.version);
              expect(after.revision).toBe(before.revision + 1);
            }
            // only issue and revoke emit, and they emit the new version
            const emitted = o.emits;
            if (o.code === 'KEY_ISSUED' || o.code === 'KEY_REVOKE_QUEUED') expect(emitted).toHaveLength(1);
            else expect(emitted).toHaveLength(0);
            for (const m of emitted) expect(m.type === 'key.grant' ? m.body.key.version : m.body.version).toBe(after.version);
            // a report from another gateway never changes the key
            if (c.kind === 'report') expect(c.otherGateway).toBe(false);
            // expiry never before validUntil
            if (o.code === 'KEY_EXPIRED') expect(now).toBeGreaterThanOrEqual(after.validUntil);
            key = after;
          } else if (o.status === 'noop' || o.status === 'conflict') {
            // nothing changed
            expect(o.status === 'noop' ? o.state : o.current).toBe(key);
          }
          // a dead key never comes back to life
          if (key && !isLive(key.status)) wasDead = true;
          if (wasDead && key) expect(isLive(key.status)).toBe(false);
        }
      }),
      { numRuns: 500 },
    );
  });
});
