import { describe, expect, it } from 'vitest';
import {
  AlarmKind,
  AlarmUplinkKind,
  DECISION_CODES,
  DecisionCode,
  LOCK_COMMAND_CODES,
  LOCK_MESSAGE_CODES,
  MIGRATION_CODES,
  OUTCOME_CODES,
  REVOKE_REASONS,
  UPLINK_BATCH_CODES,
  VERIFY_CODES,
  applied,
  conflict,
  noop,
  refused,
} from '../src/index.js';

describe('code tables', () => {
  it.each([
    ['OUTCOME_CODES', OUTCOME_CODES],
    ['DECISION_CODES', DECISION_CODES],
    ['VERIFY_CODES', VERIFY_CODES],
    ['LOCK_COMMAND_CODES', LOCK_COMMAND_CODES],
    ['LOCK_MESSAGE_CODES', LOCK_MESSAGE_CODES],
    ['UPLINK_BATCH_CODES', UPLINK_BATCH_CODES],
    ['MIGRATION_CODES', MIGRATION_CODES],
  ])('%s is frozen, upper snake case, each with a one-line meaning', (_n, table) => {
    expect(Object.isFrozen(table)).toBe(true);
    for (const [code, meaning] of Object.entries(table)) {
      expect(code).toMatch(/^[A-Z][A-Z0-9_]+$/);
      expect(meaning.length).toBeGreaterThan(5);
      expect(meaning).not.toContain('\n');
    }
  });

  it('has exactly the access decision codes of docs/protocol.md, plus the flood bounds of the gateway, its remote unlock, signing-key rotation, passage and privacy (docs/gateway.md), one-time keys and mobile tokens', () => {
    expect(Object.keys(DECISION_CODES).sort()).toEqual(
      [
        'ALLOWED',
        'UNKNOWN_CREDENTIAL',
        'KEY_REVOKED',
        'KEY_NOT_YET_VALID',
        'KEY_EXPIRED',
        'OUTSIDE_SCHEDULE',
        'DOOR_NOT_PERMITTED',
        'SITE_LOCKDOWN',
        'CLOUD_STALE',
        'LOCKED_OUT',
        'BAD_REQUEST',
        'REQUEST_STALE',
        'LOCK_CLOCK_AHEAD',
        'RATE_LIMITED',
        'STORAGE_FULL',
        'REMOTE_UNLOCK',
        'SIGNER_RETIRED',
        'KEY_USED',
        'MOBILE_TOKEN_INVALID',
        'MOBILE_TOKEN_UNKNOWN_SIGNER',
        'MOBILE_TOKEN_EXPIRED',
        'MOBILE_TOKEN_WRONG_SITE',
        'MOBILE_TOKEN_MISMATCH',
        'MOBILE_TOKEN_REPLAYED',
        'MOBILE_TOKEN_BEFORE_START',
        'PASSAGE_UNLOCK',
        'PASSAGE_RELOCK',
        'PRIVACY_ACTIVE',
        'PRIVACY_OVERRIDE',
      ].sort(),
    );
    expect(DecisionCode.options).toEqual(Object.keys(DECISION_CODES));
  });

  it('names the lock event budget code, whose alarm kind the alarm uplink carries (and a lock cannot send)', () => {
    expect(Object.keys(LOCK_MESSAGE_CODES)).toEqual(['LOCK_EVENTS_THROTTLED']);
    expect(AlarmUplinkKind.options).toContain('lock_events_throttled');
    expect(AlarmKind.options).not.toContain('lock_events_throttled');
  });

  it('revoke reasons are lower snake case', () => {
    for (const r of Object.keys(REVOKE_REASONS)) expect(r).toMatch(/^[a-z]+(_[a-z]+)*$/);
  });
});

describe('Outcome constructors', () => {
  it('build each status with its code', () => {
    expect(applied('KEY_ISSUED', { v: 1 }, ['m'])).toEqual({ status: 'applied', code: 'KEY_ISSUED', state: { v: 1 }, emits: ['m'] });
    expect(noop('KEY_ALREADY_REVOKED', { v: 2 })).toEqual({ status: 'noop', code: 'KEY_ALREADY_REVOKED', state: { v: 2 } });
    expect(conflict('KEY_STATE_CHANGED', { v: 3 })).toEqual({ status: 'conflict', code: 'KEY_STATE_CHANGED', current: { v: 3 } });
    expect(refused('KEY_NOT_FOUND')).toEqual({ status: 'refused', code: 'KEY_NOT_FOUND' });
    expect(refused('KEY_NOT_FOUND', 'k1')).toEqual({ status: 'refused', code: 'KEY_NOT_FOUND', detail: 'k1' });
  });
});
