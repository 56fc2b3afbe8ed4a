import {
  LockRequest,
  asDoorId,
  asKeyId,
  asLockId,
  asPersonId,
  credentialDigest,
  newCorrelationId,
  newId,
  parseJson,
  parsePayload,
  decodeText,
  signLockCommand,
  withCorrelation,
  type CredentialType,
  type DecisionCode,
  type LockCommand,
  type LockDecision,
} from '@tobira/shared';
import { decide } from '../domain/decide.js';
import { recordAttempt, type LockoutPolicy } from '../domain/lockout.js';
import type { AccessRow } from '../adapters/sqlite/store.js';
import { nowOf, type AppContext } from './context.js';

/**
 * A lock asks; the gateway decides, records and answers. The decision, the
 * access-log row, the lockout update and the access.event outbox row commit
 * in ONE transaction before anything is published, so every decision reaches
 * the cloud exactly once in effect. A lock retrying the same request id gets
 * the recorded decision again (and the same command), never a second event.
 */
export interface AccessOptions {
  readonly pepper: Uint8Array;
  readonly lockout: LockoutPolicy;
  /** How long the bolt stays open. */
  readonly holdMs: number;
  /** Command lifetime; locks refuse more than 30 s (DEFAULT_MAX_COMMAND_TTL_MS). */
  readonly commandTtlMs: number;
  readonly pairingSecrets: ReadonlyMap<string, Uint8Array>;
}

export interface AccessDeps extends AppContext {
  readonly access: AccessOptions;
}

export interface AccessAnswer {
  readonly decision: LockDecision;
  readonly command: LockCommand | null;
  readonly replayed: boolean;
  readonly cid: string;
}

const REQUEST_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/** Best effort request id of a refused request, so the lock can match the BAD_REQUEST answer. */
function salvageRequestId(payload: unknown): string | null {
  const text = decodeText(payload);
  if (!text.ok) return null;
  const json = parseJson(text.value);
  if (!json.ok || typeof json.value !== 'object' || json.value === null) return null;
  const id = (json.value as { requestId?: unknown }).requestId;
  return typeof id === 'string' && REQUEST_ID.test(id) ? id : null;
}

/** Handles one lock request. Returns null when the lock is not paired with this gateway (nothing can be sent to it). */
export function handleLockRequest(deps: AccessDeps, lockId: string, payload: unknown): AccessAnswer | null {
  const { store, access } = deps;
  const secret = access.pairingSecrets.get(lockId);
  if (secret === undefined) {
    deps.metrics.lockMessagesRefused.inc({ channel: 'request', code: 'UNKNOWN_LOCK' });
    deps.log.warn({ lockId }, 'request from a lock that is not paired with this gateway');
    return null;
  }
  const parsed = parsePayload(LockRequest, payload);
  const requestId = parsed.ok ? parsed.value.requestId : (salvageRequestId(payload) ?? `invalid-${newId()}`);

  const earlier = store.findAccess(lockId, requestId);
  if (earlier !== null) return replay(deps, earlier, secret);

  const digest = parsed.ok ? credentialDigest(access.pepper, parsed.value.credential.type, parsed.value.credential.value) : null;
  const credentialType: CredentialType | null = parsed.ok ? parsed.value.credential.type : null;

  const answer = store.db
    .transaction((): { row: AccessRow; command: LockCommand | null } => {
      const now = nowOf(deps);
      const settings = store.settings();
      const lock = store.lock(lockId);
      const d =
        digest === null || credentialType === null
          ? ({ allowed: false, code: 'BAD_REQUEST' } as const)
          : decide({ lockId: asLockId(lockId), credentialType, digest }, store.keySet, lock === null ? null : { ...lock, doorId: lock.doorId === null ? null : asDoorId(lock.doorId) }, settings, now);
      if (lock !== null && d.code !== 'LOCKED_OUT') store.setLockout(lockId, recordAttempt(lock, d.code, now, access.lockout), now);
      store.raiseTimeFloor(0, now);
      const key = d.key ?? null;
      const cid = (key !== null ? store.keySet.grantCid(key.grant.keyId) : null) ?? newCorrelationId();
      const command = d.allowed
        ? signLockCommand(secret, { commandId: newId(), lockId: asLockId(lockId), action: 'unlock', holdMs: access.holdMs, expiresAt: now + access.commandTtlMs })
        : null;
      const row: AccessRow = {
        eventId: newId(),
        lockId,
        requestId,
        doorId: lock?.doorId ?? null,
        at: now,
        allowed: d.allowed,
        code: d.code,
        keyId: key?.grant.keyId ?? null,
        keyVersion: key?.version ?? null,
        personId: key?.grant.personId ?? null,
        credentialType,
        commandId: command?.commandId ?? null,
        commandExpiresAt: command?.expiresAt ?? null,
        holdMs: command?.holdMs ?? null,
        cid,
      };
      store.insertAccess(row);
      store.enqueue(
        'access.event',
        {
          eventId: row.eventId,
          requestId,
          lockId: asLockId(lockId),
          doorId: row.doorId === null ? null : asDoorId(row.doorId),
          at: now,
          allowed: row.allowed,
          code: d.code,
          keyId: row.keyId === null ? null : asKeyId(row.keyId),
          keyVersion: row.keyVersion,
          personId: row.personId === null ? null : asPersonId(row.personId),
          credentialType,
          commandId: row.commandId,
        },
        cid,
        true,
        now,
      );
      return { row, command };
    })
    .immediate();

  deps.metrics.decisions.inc({ code: answer.row.code });
  withCorrelation(deps.log, answer.row.cid, { lockId, requestId }).info(
    { allowed: answer.row.allowed, code: answer.row.code, keyId: answer.row.keyId, personId: answer.row.personId, commandId: answer.row.commandId },
    'door decision',
  );
  deps.outboxWritten();
  deps.crash('afterDecisionBeforePublish');
  return {
    decision: { requestId, allowed: answer.row.allowed, code: answer.row.code as DecisionCode, commandId: answer.row.commandId },
    command: answer.command,
    replayed: false,
    cid: answer.row.cid,
  };
}

/** The same answer again: same decision, same command id and expiry (so the same MAC); a lock refuses it if already executed. */
function replay(deps: AccessDeps, row: AccessRow, secret: Uint8Array): AccessAnswer {
  withCorrelation(deps.log, row.cid, { lockId: row.lockId, requestId: row.requestId }).info({ code: row.code }, 'repeated request: answering the recorded decision');
  const command =
    row.commandId !== null && row.commandExpiresAt !== null && row.holdMs !== null
      ? signLockCommand(secret, { commandId: row.commandId, lockId: asLockId(row.lockId), action: 'unlock', holdMs: row.holdMs, expiresAt: row.commandExpiresAt })
      : null;
  return { decision: { requestId: row.requestId, allowed: row.allowed, code: row.code as DecisionCode, commandId: row.commandId }, command, replayed: true, cid: row.cid };
}
