import { asDoorId, asGatewayId, asKeyId, asPersonId, KeyGrant, newCorrelationId } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { KEY_STATUSES } from '../src/domain/key-states.js';
import {
  eventOfCode,
  expireKey,
  issueKey,
  recordGatewayReport,
  recordKeyUse,
  revokeKey,
  toGrant,
  type EntryKey,
  type GatewayReport,
  type IssueKeyCommand,
} from '../src/domain/keys.js';

/** The entry-key verbs through a key's whole life: what each one writes, sends, and refuses to change. */
const NOW = Date.UTC(2027, 2, 10, 9);
const DAY = 86_400_000;
const cid = newCorrelationId();
const cid2 = newCorrelationId();
const gw = asGatewayId('gw-1');

const cmd = (over: Partial<IssueKeyCommand> = {}): IssueKeyCommand => ({
  keyId: asKeyId('key-1'),
  personId: asPersonId('p-1'),
  gatewayId: gw,
  credential: { type: 'pin', digest: 'A'.repeat(43) },
  doors: [asDoorId('d-1'), asDoorId('d-2')],
  validFrom: NOW,
  validUntil: NOW + DAY,
  schedule: null,
  offlineCapable: false,
  offlineMaxSeconds: null,
  cid,
  ...over,
});

function issued(over: Partial<IssueKeyCommand> = {}): EntryKey {
  const o = issueKey(null, cmd(over), NOW);
  if (o.status !== 'applied') throw new Error(`issue: ${o.code}`);
  return o.state;
}
const inStatus = (status: EntryKey['status'], over: Partial<EntryKey> = {}): EntryKey => ({ ...issued(), status, ...over });
const report = (over: Partial<GatewayReport> = {}): GatewayReport => ({
  gatewayId: gw,
  keyVersion: 1,
  result: 'applied',
  code: 'MESSAGE_APPLIED',
  cid: cid2,
  ...over,
});

describe('issueKey', () => {
  it('holds exactly the terms it was issued with, each door once, as a fresh issuing key', () => {
    const o = issueKey(null, cmd({ doors: [asDoorId('d-2'), asDoorId('d-1'), asDoorId('d-2')] }), NOW);
    expect(o).toMatchObject({ status: 'applied', code: 'KEY_ISSUED' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({
      id: 'key-1',
      personId: 'p-1',
      gatewayId: 'gw-1',
      credential: { type: 'pin', digest: 'A'.repeat(43) },
      doors: ['d-2', 'd-1'],
      validFrom: NOW,
      validUntil: NOW + DAY,
      schedule: null,
      offlineCapable: false,
      offlineMaxSeconds: null,
      oneTime: false,
      staff: false,
      usedAt: null,
      version: 1,
      revision: 1,
      status: 'issuing',
      revokeReason: null,
      lastCode: 'KEY_ISSUED',
      cid,
      createdAt: NOW,
      updatedAt: NOW,
    });
    expect(o.emits).toEqual([{ type: 'key.grant', body: { key: toGrant(o.state) } }]);
  });

  it('the window must start before it ends and end after now; a window already under way is fine', () => {
    expect(issueKey(null, cmd({ validFrom: NOW - DAY, validUntil: NOW + 1 }), NOW)).toMatchObject({ status: 'applied' });
    expect(issueKey(null, cmd({ validFrom: NOW - DAY, validUntil: NOW }), NOW)).toMatchObject({ code: 'INVALID_VALIDITY_WINDOW' });
    expect(issueKey(null, cmd({ validFrom: NOW + 2 * DAY, validUntil: NOW + DAY }), NOW)).toMatchObject({
      code: 'INVALID_VALIDITY_WINDOW',
    });
    expect(issueKey(null, cmd({ validFrom: NOW + DAY - 1, validUntil: NOW + DAY }), NOW)).toMatchObject({ status: 'applied' });
  });

  it('a bad schedule is refused with what is wrong in it', () => {
    const o = issueKey(null, cmd({ schedule: { timeZone: 'Asia/Tokyo', windows: [{ start: '09:00', end: '10:00' }] } }), NOW);
    expect(o).toMatchObject({ status: 'refused', code: 'INVALID_SCHEDULE' });
    if (o.status === 'refused') expect(o.detail).toContain('windows[0]');
    const good = { timeZone: 'Asia/Tokyo', windows: [{ days: [1, 2], start: '09:00', end: '18:00' }] };
    expect(issueKey(null, cmd({ schedule: good }), NOW)).toMatchObject({ status: 'applied', state: { schedule: good } });
  });

  it('only an offline-capable key may carry an offline cap', () => {
    expect(issueKey(null, cmd({ offlineMaxSeconds: 60 }), NOW)).toMatchObject({ status: 'refused', code: 'INVALID_REQUEST' });
    expect(issueKey(null, cmd({ offlineCapable: true, offlineMaxSeconds: 60 }), NOW)).toMatchObject({
      status: 'applied',
      state: { offlineCapable: true, offlineMaxSeconds: 60 },
    });
    expect(issueKey(null, cmd({ offlineCapable: true }), NOW)).toMatchObject({ status: 'applied', state: { offlineMaxSeconds: null } });
  });

  it('a staff key is one asked as staff or any offline-capable key; a one-time key is one asked so', () => {
    expect(issued({ staff: true })).toMatchObject({ staff: true });
    expect(issued({ staff: false, offlineCapable: true })).toMatchObject({ staff: true });
    expect(issued({ staff: false })).toMatchObject({ staff: false });
    expect(issued({ oneTime: true })).toMatchObject({ oneTime: true });
    expect(issued({ oneTime: false })).toMatchObject({ oneTime: false });
  });

  it('the same id again: a noop when every term is the same (door order aside), a conflict when any differs', () => {
    const k = issued();
    expect(issueKey(k, cmd({ doors: [asDoorId('d-2'), asDoorId('d-1')] }), NOW + 1)).toEqual({
      status: 'noop',
      code: 'KEY_ALREADY_ISSUED',
      state: k,
    });
    const sched = { timeZone: 'Asia/Tokyo', windows: [{ days: [1], start: '09:00', end: '10:00' }] };
    const differing: Partial<IssueKeyCommand>[] = [
      { personId: asPersonId('p-2') },
      { gatewayId: asGatewayId('gw-2') },
      { credential: { type: 'card', digest: 'A'.repeat(43) } },
      { credential: { type: 'pin', digest: 'B'.repeat(43) } },
      { doors: [asDoorId('d-1')] },
      { doors: [asDoorId('d-1'), asDoorId('d-3')] },
      { validFrom: NOW + 1 },
      { validUntil: NOW + DAY + 1 },
      { schedule: sched },
      { offlineCapable: true },
      { oneTime: true },
      { staff: true },
    ];
    for (const over of differing)
      expect(issueKey(k, cmd(over), NOW), JSON.stringify(over)).toEqual({ status: 'conflict', code: 'KEY_ALREADY_EXISTS', current: k });
    const off = issued({ offlineCapable: true, offlineMaxSeconds: 60 });
    expect(issueKey(off, cmd({ offlineCapable: true, offlineMaxSeconds: 120 }), NOW)).toMatchObject({ status: 'conflict' });
    // an offline-capable key is staff whatever was asked: asking staff again is the same key
    expect(issueKey(off, cmd({ offlineCapable: true, offlineMaxSeconds: 60, staff: true }), NOW)).toMatchObject({ status: 'noop' });
    const scheduled = issued({ schedule: sched });
    expect(issueKey(scheduled, cmd({ schedule: sched }), NOW)).toMatchObject({ status: 'noop' });
    expect(issueKey(scheduled, cmd({ schedule: null }), NOW)).toMatchObject({ status: 'conflict' });
    // an existing key is answered as it is, even where a new issue would now be refused
    expect(issueKey(k, cmd(), NOW + 2 * DAY)).toMatchObject({ status: 'noop' });
  });
});

describe('toGrant', () => {
  it("is the key's current version on the wire, and valid wire", () => {
    const k = { ...issued(), version: 3 };
    const g = toGrant(k);
    expect(g).toEqual({
      keyId: 'key-1',
      version: 3,
      personId: 'p-1',
      credential: { type: 'pin', digest: 'A'.repeat(43) },
      doors: ['d-1', 'd-2'],
      validFrom: NOW,
      validUntil: NOW + DAY,
      schedule: null,
      offlineCapable: false,
    });
    expect(KeyGrant.parse(g)).toEqual(g);
  });

  it('carries the staff marker for a staff key and for every offline-capable key', () => {
    expect(toGrant(issued({ staff: true }))).toMatchObject({ staff: true });
    expect(toGrant({ ...issued(), offlineCapable: true, staff: false })).toMatchObject({ staff: true });
    expect(toGrant(issued())).not.toHaveProperty('staff');
  });

  it('an offline cap goes only with an offline-capable key', () => {
    expect(toGrant({ ...issued(), offlineMaxSeconds: 60 })).not.toHaveProperty('offlineMaxSeconds');
    expect(toGrant({ ...issued(), offlineCapable: true, offlineMaxSeconds: null })).not.toHaveProperty('offlineMaxSeconds');
  });

  it('carries the display names it knows and the wire accepts; a bad name is left out, never a refusal', () => {
    const k = issued();
    const names = {
      people: new Map([['p-1', '  Aiko Tanaka ']]),
      doors: new Map([
        ['d-1', 'Front door'],
        ['d-2', 'bad\u0007name'],
        ['d-9', 'Not on this key'],
      ]),
    };
    const g = toGrant(k, names);
    expect(g).toMatchObject({ personName: 'Aiko Tanaka', doorNames: { 'd-1': 'Front door' } });
    expect(g.doorNames).toEqual({ 'd-1': 'Front door' });
    expect(KeyGrant.parse(g)).toEqual(g);
    const none = toGrant(k, { people: new Map([['p-1', 'x'.repeat(81)]]), doors: new Map([['d-1', '']]) });
    expect(none).not.toHaveProperty('personName');
    expect(none).not.toHaveProperty('doorNames');
    expect(toGrant(k, { people: new Map(), doors: new Map() })).toEqual(toGrant(k));
  });

  it('the names go into the grant an issue sends', () => {
    const o = issueKey(null, cmd({ names: { people: new Map([['p-1', 'Aiko']]), doors: new Map([['d-2', 'Back']]) } }), NOW);
    expect(o).toMatchObject({ emits: [{ body: { key: { personName: 'Aiko', doorNames: { 'd-2': 'Back' } } } }] });
  });
});

describe('eventOfCode', () => {
  it('reads the event of an applied code back from the machine', () => {
    expect(eventOfCode('KEY_ISSUED')).toBe('issue');
    expect(eventOfCode('KEY_ACTIVATED')).toBe('grant_applied');
    expect(eventOfCode('KEY_DELIVERY_FAILED')).toBe('grant_rejected');
    expect(eventOfCode('KEY_REVOKE_QUEUED')).toBe('revoke');
    expect(eventOfCode('KEY_REVOKE_CONFIRMED')).toBe('revoke_applied');
    expect(eventOfCode('KEY_EXPIRED')).toBe('validity_ended');
    expect(eventOfCode('KEY_USED_RECORDED')).toBe('used_at_door');
  });
  it('a code that is no transition is an error', () => {
    expect(() => eventOfCode('KEY_ALREADY_ACTIVE')).toThrow(/KEY_ALREADY_ACTIVE/);
  });
});

describe('revokeKey', () => {
  it('writes one revision and one version on, with the reason, and queues the revoke of that version', () => {
    const k = { ...inStatus('active'), version: 4, revision: 6 };
    const o = revokeKey(k, { reason: 'staff_revoked', cid: cid2, expectedRevision: 6 }, NOW + 5);
    expect(o).toEqual({
      status: 'applied',
      code: 'KEY_REVOKE_QUEUED',
      state: {
        ...k,
        status: 'revoking',
        version: 5,
        revision: 7,
        revokeReason: 'staff_revoked',
        lastCode: 'KEY_REVOKE_QUEUED',
        cid: cid2,
        updatedAt: NOW + 5,
      },
      emits: [{ type: 'key.revoke', body: { keyId: 'key-1', version: 5, reason: 'staff_revoked' } }],
    });
  });

  it('a stale revision is a conflict even for a key already dead', () => {
    const k = inStatus('revoked');
    expect(revokeKey(k, { reason: 'staff_revoked', cid, expectedRevision: 2 }, NOW)).toEqual({
      status: 'conflict',
      code: 'KEY_STATE_CHANGED',
      current: k,
    });
  });
});

describe('expireKey', () => {
  it('an unknown key is refused', () => {
    expect(expireKey(null, { cid }, NOW)).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
  });

  it('never before validUntil; at validUntil a live key expires one revision on, version unchanged, nothing sent', () => {
    for (const status of ['issuing', 'active'] as const) {
      const k = inStatus(status);
      expect(expireKey(k, { cid }, NOW + DAY - 1)).toEqual({ status: 'noop', code: 'KEY_NOT_EXPIRED', state: k });
      expect(expireKey(k, { cid: cid2 }, NOW + DAY)).toEqual({
        status: 'applied',
        code: 'KEY_EXPIRED',
        state: { ...k, status: 'expired', revision: 2, lastCode: 'KEY_EXPIRED', cid: cid2, updatedAt: NOW + DAY },
        emits: [],
      });
    }
  });

  it('a key no longer live is left as it is', () => {
    for (const status of ['revoking', 'revoked', 'expired', 'failed', 'used'] as const) {
      const k = inStatus(status);
      expect(expireKey(k, { cid }, NOW + 2 * DAY), status).toEqual({ status: 'noop', code: 'KEY_ALREADY_REVOKED', state: k });
    }
  });
});

describe('recordGatewayReport', () => {
  it('an unknown key is refused', () => {
    expect(recordGatewayReport(null, report(), NOW)).toMatchObject({ status: 'refused', code: 'KEY_NOT_FOUND' });
  });

  it('an ack (applied or noop) of the grant activates an issuing key, one revision on', () => {
    for (const result of ['applied', 'noop'] as const) {
      const k = inStatus('issuing');
      expect(recordGatewayReport(k, report({ result }), NOW + 3), result).toEqual({
        status: 'applied',
        code: 'KEY_ACTIVATED',
        state: { ...k, status: 'active', revision: 2, lastCode: 'KEY_ACTIVATED', cid: cid2, updatedAt: NOW + 3 },
        emits: [],
      });
    }
  });

  it('an ack of the revoke (applied or noop) confirms it; a refused revoke leaves the key revoking', () => {
    const k = inStatus('revoking', { version: 2 });
    for (const result of ['applied', 'noop'] as const)
      expect(recordGatewayReport(k, report({ keyVersion: 2, result }), NOW), result).toMatchObject({
        status: 'applied',
        code: 'KEY_REVOKE_CONFIRMED',
        state: { status: 'revoked', version: 2 },
      });
    expect(recordGatewayReport(k, report({ keyVersion: 2, result: 'refused' }), NOW)).toEqual({
      status: 'noop',
      code: 'REPORT_IGNORED',
      state: k,
    });
  });

  it('an active key is not failed by a late refusal of its grant, and a repeated ack is a noop', () => {
    const k = inStatus('active');
    expect(recordGatewayReport(k, report({ result: 'refused' }), NOW)).toEqual({ status: 'noop', code: 'REPORT_IGNORED', state: k });
    expect(recordGatewayReport(k, report({ result: 'noop' }), NOW)).toMatchObject({ status: 'noop', code: 'KEY_ALREADY_ACTIVE' });
  });

  it('a dead key ignores every report', () => {
    for (const status of ['revoked', 'expired', 'failed', 'used'] as const)
      for (const result of ['applied', 'noop', 'refused'] as const) {
        const k = inStatus(status);
        expect(recordGatewayReport(k, report({ result }), NOW), `${status} ${result}`).toEqual({
          status: 'noop',
          code: 'REPORT_IGNORED',
          state: k,
        });
      }
  });

  it('a report for another version, newer or older, changes nothing', () => {
    const k = inStatus('issuing', { version: 2 });
    for (const keyVersion of [1, 3]) expect(recordGatewayReport(k, report({ keyVersion }), NOW)).toMatchObject({ code: 'REPORT_IGNORED' });
  });
});

describe('recordKeyUse', () => {
  it('writes the entry time, one version and one revision on, and queues a revoke for key_used', () => {
    const k = { ...inStatus('active'), oneTime: true, version: 2, revision: 3 };
    const o = recordKeyUse(k, { gatewayId: gw, at: NOW + 10, cid: cid2 }, NOW + 20);
    expect(o).toEqual({
      status: 'applied',
      code: 'KEY_USED_RECORDED',
      state: {
        ...k,
        status: 'used',
        usedAt: NOW + 10,
        version: 3,
        revision: 4,
        lastCode: 'KEY_USED_RECORDED',
        cid: cid2,
        updatedAt: NOW + 20,
      },
      emits: [{ type: 'key.revoke', body: { keyId: 'key-1', version: 3, reason: 'key_used' } }],
    });
  });
});

describe('the key life as a whole', () => {
  it('the wire version never shrinks and the revision grows on every write, whatever verbs follow', () => {
    const steps = [
      (k: EntryKey) => recordGatewayReport(k, report({ keyVersion: k.version }), NOW + 1),
      (k: EntryKey) => revokeKey(k, { reason: 'staff_revoked', cid }, NOW + 2),
      (k: EntryKey) => recordGatewayReport(k, report({ keyVersion: k.version }), NOW + 3),
      (k: EntryKey) => expireKey(k, { cid }, NOW + 2 * DAY),
    ];
    for (const status of KEY_STATUSES) {
      let k = inStatus(status, { oneTime: true });
      for (const step of steps) {
        const o = step(k);
        if (o.status === 'applied') {
          expect(o.state.version).toBeGreaterThanOrEqual(k.version);
          expect(o.state.revision).toBe(k.revision + 1);
          k = o.state;
        }
      }
    }
  });
});
