import { asDoorId, asLockId, newId, signLockCommand, withCorrelation, type AccessEvent, type LockCommand } from '@tobira/shared';
import { commitDecisions, insertAccess, type StoredAccessEvent } from '../adapters/sqlite/access-log.js';
import { lockById } from '../adapters/sqlite/locks.js';
import { lockModesOf } from '../adapters/sqlite/modes.js';
import { enqueue } from '../adapters/sqlite/outbox.js';
import { raiseTimeFloor, readSettings } from '../adapters/sqlite/settings.js';
import { decideRemoteUnlock, type RemoteUnlockCode } from '../domain/remote-unlock.js';
import type { AccessDeps } from './access.js';
import type { StaffActor, StaffAudit } from './staff-accounts.js';
import { failClosedReasonOf } from './staff-status.js';

/**
 * Remote unlock (docs/gateway.md "Remote unlock"): a supervisor opens one
 * door for one entry with a reason. Decided by `decideRemoteUnlock`; when
 * allowed, ONE transaction writes the access-log row (code REMOTE_UNLOCK,
 * `by` = the supervisor and the reason), its access.event outbox row (so the
 * cloud's audit gets it exactly once in effect, like every decision) and the
 * staff action row; only after that commit is the HMAC-signed unlock command
 * (the same `signLockCommand` as a key decision, the lock's pairing secret, a
 * fresh command id, the configured hold and expiry) published. A refusal is
 * audited too (staff action, result refused with its code).
 */
export type RemoteUnlockResult =
  | {
      readonly status: 'applied';
      readonly event: StoredAccessEvent;
      readonly command: LockCommand;
      readonly warning: 'FAILING_CLOSED' | null;
      readonly code: 'REMOTE_UNLOCK' | 'PRIVACY_OVERRIDE';
    }
  | { readonly status: 'refused'; readonly code: RemoteUnlockCode };

export function remoteUnlock(
  deps: AccessDeps,
  audit: StaffAudit,
  actor: StaffActor,
  lockId: string,
  reasonText: string,
  cid: string,
  emergency = false,
): RemoteUnlockResult {
  const db = deps.store.db;
  const log = withCorrelation(deps.log, cid, { lockId });
  const r = commitDecisions(db, (): RemoteUnlockResult => {
    const settings = readSettings(db);
    const now = deps.time.now(db, settings);
    const lock = lockById(db, lockId);
    const secret = deps.access.pairingSecrets.get(lockId);
    const d = decideRemoteUnlock({
      role: actor.role,
      reason: reasonText,
      lock: lock === null || secret === undefined ? null : { ...lock, privacy: (lockModesOf(db, lockId)?.privacySince ?? null) !== null },
      mode: settings.mode,
      emergency,
      failClosedReason: failClosedReasonOf(settings, deps.time, now),
    });
    if (!d.allowed) {
      audit({ actor, action: 'remote_unlock', target: lockId, detail: reasonText.trim() || null, result: 'refused', code: d.code, cid });
      return { status: 'refused', code: d.code };
    }
    if (secret === undefined || lock === null) throw new Error('unreachable: decided allowed without a lock');
    const command = signLockCommand(secret, {
      commandId: newId(),
      lockId: asLockId(lockId),
      action: 'unlock',
      holdMs: deps.access.holdMs,
      expiresAt: now + deps.access.commandTtlMs,
    });
    const event: AccessEvent = {
      eventId: newId(),
      requestId: `remote-${newId()}`,
      lockId: asLockId(lockId),
      doorId: lock.doorId === null ? null : asDoorId(lock.doorId),
      at: now,
      allowed: true,
      code: d.code ?? 'REMOTE_UNLOCK',
      keyId: null,
      keyVersion: null,
      personId: null,
      credentialType: null,
      commandId: command.commandId,
      by: { accountId: actor.accountId ?? actor.username, name: actor.displayName, reason: d.reason },
    };
    const row: StoredAccessEvent = { ...event, commandExpiresAt: command.expiresAt, holdMs: command.holdMs, cid };
    const queued = enqueue(db, deps.store.limits, 'access.event', event, cid, true, now);
    insertAccess(db, row, 'seq' in queued ? queued.seq : null);
    raiseTimeFloor(db, 0, now);
    audit({
      actor,
      action: 'remote_unlock',
      target: lockId,
      detail: d.reason,
      result: 'applied',
      // an emergency entry through privacy is flagged in the staff audit by its code
      code: d.code ?? d.warning,
      cid,
    });
    return { status: 'applied', event: row, command, warning: d.warning, code: d.code ?? 'REMOTE_UNLOCK' };
  });
  if (r.status === 'refused') {
    log.warn({ code: r.code, staff: actor.username }, 'remote unlock refused');
    return r;
  }
  deps.metrics.decisions.inc({ code: r.code });
  const line = { code: r.code, staff: actor.username, reason: r.event.by?.reason, commandId: r.command.commandId };
  if (r.warning === null) log.warn(line, 'remote unlock by a supervisor');
  else log.warn({ ...line, warning: r.warning }, 'remote unlock by a supervisor WHILE FAILING CLOSED (the key set may be stale)');
  deps.outboxWritten();
  return r;
}
