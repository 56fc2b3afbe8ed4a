import {
  asDoorId,
  asLockId,
  newCorrelationId,
  newId,
  signLockCommand,
  withCorrelation,
  type AccessEvent,
  type LockCommand,
} from '@tobira/shared';
import { commitDecisions, insertAccess, type StoredAccessEvent } from '../adapters/sqlite/access-log.js';
import { allPassage, lockModes, setPassageSince } from '../adapters/sqlite/modes.js';
import { enqueue } from '../adapters/sqlite/outbox.js';
import { raiseTimeFloor, readSettings } from '../adapters/sqlite/settings.js';
import { passageStep, passageWanted, type PassageBlock } from '../domain/passage.js';
import type { AccessDeps } from './access.js';
import { failClosedReasonOf } from './staff-status.js';

/**
 * Passage mode at run time (domain/passage.ts has the rules): evaluated on
 * every tick, at start (so a restart re-evaluates what it held before: a
 * door it held outside its schedule now is relocked, one still in its
 * schedule is renewed at once), and right after anything that can change
 * the answer (lockdown set, a site.mode downlink, privacy). Starting and
 * stopping a hold write the access-log row and its access.event outbox row
 * (PASSAGE_UNLOCK / PASSAGE_RELOCK) and the lock's `passage_since` in ONE
 * transaction; the HMAC commands (the same `signLockCommand` path as a key
 * decision) are published after the commit. Renewals are commands only.
 */
export interface PassageOptions {
  readonly holdMs: number;
  readonly renewAfterMs: number;
}

export interface PassageDeps extends AccessDeps {
  readonly passage: PassageOptions;
  /** When this process last sent each lock a passage unlock (in memory: after a restart every held lock is renewed at once). */
  readonly lastUnlock: Map<string, number>;
  /** Publishes a command to a lock (after the commit). */
  readonly sendCommand: (lockId: string, command: LockCommand, cid: string) => void;
}

export interface PassageChange {
  readonly lockId: string;
  readonly step: 'start' | 'renew' | 'stop';
  readonly command: LockCommand;
  readonly why: PassageBlock | null;
  readonly cid: string;
}

/** Evaluates every lock once; returns what it did (tests and logs). */
export function evaluatePassage(deps: PassageDeps): PassageChange[] {
  const { db } = deps.store;
  const changes = commitDecisions(db, (): PassageChange[] => {
    const settings = readSettings(db);
    const now = deps.time.now(db, settings);
    const failClosedReason = failClosedReasonOf(settings, deps.time, now);
    const schedules = new Map(allPassage(db).map((p) => [p.doorId, p.schedule]));
    const out: PassageChange[] = [];
    for (const l of lockModes(db)) {
      const secret = deps.access.pairingSecrets.get(l.lockId);
      if (secret === undefined || l.doorId === null) continue;
      const want = passageWanted(
        { schedule: schedules.get(l.doorId) ?? null, mode: settings.mode, failClosedReason, privacy: l.privacySince !== null },
        now,
      );
      const held = l.passageSince !== null;
      const step = passageStep(held, want.hold, deps.lastUnlock.get(l.lockId) ?? null, now, deps.passage.renewAfterMs);
      if (step === 'none') continue;
      const command = signLockCommand(secret, {
        commandId: newId(),
        lockId: asLockId(l.lockId),
        action: step === 'stop' ? 'lock' : 'unlock',
        holdMs: step === 'stop' ? 0 : deps.passage.holdMs,
        expiresAt: now + deps.access.commandTtlMs,
      });
      const cid = newCorrelationId();
      const why = want.hold ? null : want.why;
      if (step !== 'renew') {
        setPassageSince(db, l.lockId, step === 'start' ? now : null);
        const event: AccessEvent = {
          eventId: newId(),
          requestId: `passage-${newId()}`,
          lockId: asLockId(l.lockId),
          doorId: asDoorId(l.doorId),
          at: now,
          allowed: step === 'start',
          code: step === 'start' ? 'PASSAGE_UNLOCK' : 'PASSAGE_RELOCK',
          keyId: null,
          keyVersion: null,
          personId: null,
          credentialType: null,
          commandId: command.commandId,
        };
        const row: StoredAccessEvent = { ...event, commandExpiresAt: command.expiresAt, holdMs: command.holdMs, cid };
        const queued = enqueue(db, deps.store.limits, 'access.event', event, cid, true, now);
        insertAccess(db, row, 'seq' in queued ? queued.seq : null);
      }
      out.push({ lockId: l.lockId, step, command, why, cid });
    }
    if (out.some((c) => c.step !== 'renew')) raiseTimeFloor(db, 0, now);
    return out;
  });
  for (const c of changes) {
    if (c.step === 'stop') deps.lastUnlock.delete(c.lockId);
    else deps.lastUnlock.set(c.lockId, c.command.expiresAt - deps.access.commandTtlMs);
    const log = withCorrelation(deps.log, c.cid, { lockId: c.lockId });
    if (c.step === 'start') {
      deps.metrics.decisions.inc({ code: 'PASSAGE_UNLOCK' });
      log.warn({ code: 'PASSAGE_UNLOCK', commandId: c.command.commandId }, 'passage mode: door held unlocked');
    } else if (c.step === 'stop') {
      deps.metrics.decisions.inc({ code: 'PASSAGE_RELOCK' });
      log.warn({ code: 'PASSAGE_RELOCK', why: c.why, commandId: c.command.commandId }, 'passage mode ended: door relocked');
    } else log.debug({ commandId: c.command.commandId }, 'passage mode: hold renewed');
    deps.sendCommand(c.lockId, c.command, c.cid);
  }
  if (changes.some((c) => c.step !== 'renew')) deps.outboxWritten();
  return changes;
}
