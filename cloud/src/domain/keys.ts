import {
  DisplayName,
  applied,
  conflict,
  noop,
  refused,
  scheduleProblems,
  type CorrelationId,
  type CredentialType,
  type DoorId,
  type GatewayId,
  type KeyGrant,
  type KeyId,
  type KeyRevoke,
  type Outcome,
  type PersonId,
  type RevokeReason,
  type Schedule,
} from '@tobira/shared';
import { KEY_TRANSITIONS, noopOf, transitionOf, type KeyEvent, type KeyStatus } from './key-states.js';

/** What an issue names and a key then holds: who, which credential (a keyed digest, never the clear value), which doors, when. */
export interface KeyTerms {
  readonly personId: PersonId;
  readonly gatewayId: GatewayId;
  readonly credential: { readonly type: CredentialType; readonly digest: string };
  readonly doors: readonly DoorId[];
  readonly validFrom: number;
  readonly validUntil: number;
  readonly schedule: Schedule | null;
  readonly offlineCapable: boolean;
  /**
   * How long after the gateway's last proven-fresh sync an offline-capable key
   * still opens; null for other keys. An issue's caller has already bounded it
   * by the cloud's cap.
   */
  readonly offlineMaxSeconds: number | null;
  /** A one-time key: its first entry at the door uses it up (status `used`). Absent: false. */
  readonly oneTime?: boolean;
  /**
   * A staff key (`staff: true` on issue, and every offline-capable key): the
   * gateway keeps it out of a room whose guest has privacy on. Absent: false.
   */
  readonly staff?: boolean;
}

/** An entry key as the cloud holds it. */
export interface EntryKey extends KeyTerms {
  readonly id: KeyId;
  readonly oneTime: boolean;
  /** Key version on the wire: grows on issue and revoke, never shrinks. */
  readonly version: number;
  /** Row revision for compare-and-set: grows on every write. */
  readonly revision: number;
  readonly status: KeyStatus;
  readonly revokeReason: RevokeReason | null;
  readonly lastCode: string;
  /** A one-time key's entry (the gateway's decision time), once its access event is in; null before and for other keys. */
  readonly usedAt: number | null;
  /** Correlation id of the command that last changed the key. */
  readonly cid: CorrelationId;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** What a key verb asks the outbox to send to the key's gateway (seq and jti are assigned by the adapter). */
export type KeyDownlink =
  { readonly type: 'key.grant'; readonly body: { readonly key: KeyGrant } } | { readonly type: 'key.revoke'; readonly body: KeyRevoke };

export type KeyOutcome = Outcome<EntryKey, KeyDownlink>;

/**
 * Display names a grant carries for the gateway's staff UI (never used to
 * decide): the person's and those of the key's doors, as the cloud holds them
 * when the grant is sent (issue, resync snapshot, re-sign).
 */
export interface GrantNames {
  readonly people: ReadonlyMap<string, string>;
  readonly doors: ReadonlyMap<string, string>;
}

/** A name the wire takes (DisplayName: 1–80 characters, no control characters), else nothing: a grant is never refused for its name. */
function wireName(name: string | undefined): string | undefined {
  if (name === undefined) return undefined;
  const r = DisplayName.safeParse(name);
  return r.success ? r.data : undefined;
}

/** The grant a gateway receives for a key (the wire form of the key's current version), with display names when known. */
export function toGrant(k: EntryKey, names?: GrantNames): KeyGrant {
  const personName = wireName(names?.people.get(k.personId));
  const doorNames = Object.fromEntries(
    k.doors.flatMap((d) => {
      const n = wireName(names?.doors.get(d));
      return n === undefined ? [] : [[d, n]];
    }),
  );
  return {
    keyId: k.id,
    version: k.version,
    personId: k.personId,
    credential: { type: k.credential.type, digest: k.credential.digest },
    doors: [...k.doors],
    validFrom: k.validFrom,
    validUntil: k.validUntil,
    schedule: k.schedule,
    offlineCapable: k.offlineCapable,
    ...(k.offlineCapable && k.offlineMaxSeconds !== null ? { offlineMaxSeconds: k.offlineMaxSeconds } : {}),
    ...(k.oneTime ? { oneTime: true } : {}),
    // the privacy marker; an offline-capable key is a staff key whatever was asked (nothing opens that did not before)
    ...(k.staff === true || k.offlineCapable ? { staff: true } : {}),
    ...(personName === undefined ? {} : { personName }),
    ...(Object.keys(doorNames).length === 0 ? {} : { doorNames }),
  } as KeyGrant;
}

/** The history event of an applied outcome, read back from the state table (codes are unique per row). */
export function eventOfCode(code: string): KeyEvent {
  const row = KEY_TRANSITIONS.find((r) => r.code === code);
  if (!row) throw new Error(`no transition has code ${code}`);
  return row.event;
}

function move(k: EntryKey, event: KeyEvent, patch: Partial<EntryKey>, cid: CorrelationId, now: number): EntryKey | undefined {
  const row = transitionOf(k.status, event);
  if (!row) return undefined;
  return { ...k, ...patch, status: row.to, revision: k.revision + 1, lastCode: row.code, cid, updatedAt: now };
}

// ---------------------------------------------------------------- issue

export interface IssueKeyCommand extends KeyTerms {
  readonly keyId: KeyId;
  readonly cid: CorrelationId;
  /** Display names for the grant (not part of the key: a rename is not a new key). */
  readonly names?: GrantNames;
}

function sameContent(k: EntryKey, c: IssueKeyCommand): boolean {
  return (
    k.personId === c.personId &&
    k.gatewayId === c.gatewayId &&
    k.credential.type === c.credential.type &&
    k.credential.digest === c.credential.digest &&
    JSON.stringify([...k.doors].sort()) === JSON.stringify([...c.doors].sort()) &&
    k.validFrom === c.validFrom &&
    k.validUntil === c.validUntil &&
    JSON.stringify(k.schedule) === JSON.stringify(c.schedule) &&
    k.offlineCapable === c.offlineCapable &&
    k.offlineMaxSeconds === c.offlineMaxSeconds &&
    k.oneTime === (c.oneTime ?? false) &&
    (k.staff === true || k.offlineCapable) === (c.staff === true || c.offlineCapable)
  );
}

/**
 * Issue: a new key starts `issuing` at version 1 and emits its grant.
 * Invariant: an existing key id is never overwritten (same content → noop, other content → conflict).
 */
export function issueKey(existing: EntryKey | null, cmd: IssueKeyCommand, now: number): KeyOutcome {
  if (existing) {
    return sameContent(existing, cmd) ? noop('KEY_ALREADY_ISSUED', existing) : conflict('KEY_ALREADY_EXISTS', existing);
  }
  if (!(cmd.validFrom < cmd.validUntil) || cmd.validUntil <= now) {
    return refused('INVALID_VALIDITY_WINDOW', 'validFrom must be before validUntil and validUntil in the future');
  }
  // the shared rules the gateway evaluates by (overnight windows and dates included): one validator for both sides
  const problems = cmd.schedule ? scheduleProblems(cmd.schedule.windows) : [];
  if (problems.length > 0) return refused('INVALID_SCHEDULE', problems.join('; '));
  if (!cmd.offlineCapable && cmd.offlineMaxSeconds !== null) {
    return refused('INVALID_REQUEST', 'offlineMaxSeconds is only for offline-capable keys');
  }
  const row = transitionOf(null, 'issue');
  if (!row) throw new Error('state table has no issue row');
  const key: EntryKey = {
    id: cmd.keyId,
    personId: cmd.personId,
    gatewayId: cmd.gatewayId,
    credential: cmd.credential,
    doors: [...new Set(cmd.doors)],
    validFrom: cmd.validFrom,
    validUntil: cmd.validUntil,
    schedule: cmd.schedule,
    offlineCapable: cmd.offlineCapable,
    offlineMaxSeconds: cmd.offlineMaxSeconds,
    oneTime: cmd.oneTime ?? false,
    staff: cmd.staff === true || cmd.offlineCapable,
    usedAt: null,
    version: 1,
    revision: 1,
    status: row.to,
    revokeReason: null,
    lastCode: row.code,
    cid: cmd.cid,
    createdAt: now,
    updatedAt: now,
  };
  return applied(row.code, key, [{ type: 'key.grant', body: { key: toGrant(key, cmd.names) } }]);
}

// ---------------------------------------------------------------- revoke

export interface RevokeKeyCommand {
  readonly reason: RevokeReason;
  readonly cid: CorrelationId;
  /** Optional optimistic check by the caller: the revision it last saw. */
  readonly expectedRevision?: number;
}

/**
 * Revoke: `issuing`/`active` → `revoking` with a higher version, and the
 * revoke is queued. Invariant: the key version grows, so a late grant cannot revive the key.
 */
export function revokeKey(key: EntryKey | null, cmd: RevokeKeyCommand, now: number): KeyOutcome {
  if (!key) return refused('KEY_NOT_FOUND');
  if (cmd.expectedRevision !== undefined && cmd.expectedRevision !== key.revision) return conflict('KEY_STATE_CHANGED', key);
  const same = noopOf(key.status, 'revoke');
  if (same) return noop(same.code, key);
  const next = move(key, 'revoke', { version: key.version + 1, revokeReason: cmd.reason }, cmd.cid, now);
  if (!next) return refused('INVALID_TRANSITION', `revoke from ${key.status}`);
  return applied(next.lastCode as 'KEY_REVOKE_QUEUED', next, [
    { type: 'key.revoke', body: { keyId: next.id, version: next.version, reason: cmd.reason } },
  ]);
}

// ---------------------------------------------------------------- expire

/**
 * Expire: a live key whose validity window has ended becomes `expired`.
 * Nothing is sent: the gateway enforces validUntil itself. Invariant: never before validUntil.
 */
export function expireKey(key: EntryKey | null, cmd: { readonly cid: CorrelationId }, now: number): KeyOutcome {
  if (!key) return refused('KEY_NOT_FOUND');
  if (key.validUntil > now) return noop('KEY_NOT_EXPIRED', key);
  const next = move(key, 'validity_ended', {}, cmd.cid, now);
  if (!next) return noop('KEY_ALREADY_REVOKED', key);
  return applied('KEY_EXPIRED', next, []);
}

// ---------------------------------------------------------------- gateway report

export interface GatewayReport {
  readonly gatewayId: GatewayId;
  readonly keyVersion: number;
  readonly result: 'applied' | 'noop' | 'refused';
  readonly code: string;
  readonly cid: CorrelationId;
}

/**
 * A gateway's ack for (keyId, keyVersion) moves `issuing` → `active`/`failed`
 * and `revoking` → `revoked`. Invariant: a report for another version or from
 * another gateway changes nothing (REPORT_IGNORED).
 */
export function recordGatewayReport(key: EntryKey | null, report: GatewayReport, now: number): KeyOutcome {
  if (!key) return refused('KEY_NOT_FOUND');
  if (report.gatewayId !== key.gatewayId || report.keyVersion !== key.version) return noop('REPORT_IGNORED', key);
  const event = reportEvent(key.status, report.result);
  if (!event) return noop('REPORT_IGNORED', key);
  const same = noopOf(key.status, event);
  if (same) return noop(same.code, key);
  const next = move(key, event, {}, report.cid, now);
  if (!next) return noop('REPORT_IGNORED', key);
  return applied(next.lastCode as 'KEY_ACTIVATED', next, []);
}

// ---------------------------------------------------------------- use (one-time keys)

export interface KeyUseReport {
  readonly gatewayId: GatewayId;
  /** When the gateway allowed the entry (its decision time). */
  readonly at: number;
  readonly cid: CorrelationId;
}

/**
 * A gateway's access event allowed a one-time key: `issuing`/`active` →
 * `used` at a higher version, and a `key.revoke` (reason `key_used`) is
 * queued. The gateway consumed the key at the door already, but its
 * consumed_keys row is the only other record of that: a gateway restored
 * from a backup taken before the entry would let the key in again. The
 * sequenced revoke moves the seq, so such a gateway is behind, resyncs and
 * gets it. Invariant: only a one-time key of the reporting gateway is ever
 * used; any other report changes nothing (REPORT_IGNORED).
 */
export function recordKeyUse(key: EntryKey | null, report: KeyUseReport, now: number): KeyOutcome {
  if (!key) return refused('KEY_NOT_FOUND');
  if (!key.oneTime || report.gatewayId !== key.gatewayId) return noop('REPORT_IGNORED', key);
  const same = noopOf(key.status, 'used_at_door');
  if (same) return noop(same.code, key);
  const next = move(key, 'used_at_door', { usedAt: report.at, version: key.version + 1 }, report.cid, now);
  // revoking, revoked, expired, failed: the key is already dead here; the audit row has the entry
  if (!next) return noop('REPORT_IGNORED', key);
  return applied('KEY_USED_RECORDED', next, [{ type: 'key.revoke', body: { keyId: next.id, version: next.version, reason: 'key_used' } }]);
}

function reportEvent(status: KeyStatus, result: GatewayReport['result']): KeyEvent | undefined {
  switch (status) {
    case 'issuing':
      return result === 'refused' ? 'grant_rejected' : 'grant_applied';
    case 'active':
      return result === 'refused' ? undefined : 'grant_applied';
    case 'revoking':
      // a gateway that refuses a revoke leaves the key dead in the cloud; a resync settles it
      return result === 'refused' ? undefined : 'revoke_applied';
    case 'revoked':
    case 'expired':
    case 'failed':
    case 'used':
      return undefined;
    default:
      return assertNeverStatus(status);
  }
}

function assertNeverStatus(s: never): never {
  throw new Error(`unhandled key status ${String(s)}`);
}
