import {
  LockEvent,
  LockState,
  Presence,
  asLockId,
  newCorrelationId,
  parsePayload,
  topics,
  withCorrelation,
  type LockChannel,
  type Logger,
} from '@tobira/shared';
import { recordAlarm } from '../adapters/sqlite/alarms.js';
import { recordLockRefusal as insertLockRefusal, type LockRefusal } from '../adapters/sqlite/diagnostics.js';
import { allLocks, lockById, setLockOnline } from '../adapters/sqlite/locks.js';
import { recordStateWithPrivacy, setPrivacy } from '../adapters/sqlite/modes.js';
import { enqueueBuilt, outboxDepth } from '../adapters/sqlite/outbox.js';
import { readSettings } from '../adapters/sqlite/settings.js';
import { nowOf, type AppContext } from './context.js';

/** What one refused lock message is recorded as (lock_refusals; never the payload). */
export type RefusedLockMessage = Omit<LockRefusal, 'bytes'> & { readonly payload: unknown };

const byteLength = (payload: unknown): number =>
  payload instanceof Uint8Array ? payload.byteLength : typeof payload === 'string' ? Buffer.byteLength(payload, 'utf8') : 0;

/**
 * Every refused lock message goes through here: counted, logged with the
 * caller's correlation id, and stored in `lock_refusals` for operators
 * (DESIGN.md I5). A refusal a lock reported (origin 'lock') is logged and
 * stored but not counted as a message the gateway refused.
 */
export function recordLockRefusal(ctx: Pick<AppContext, 'store' | 'time' | 'metrics'>, log: Logger, r: RefusedLockMessage): void {
  if (r.origin === 'gateway') ctx.metrics.lockMessagesRefused.inc({ channel: r.channel, code: r.code });
  log.warn(
    { origin: r.origin, lockId: r.lockId, channel: r.channel, code: r.code, detail: r.detail },
    r.origin === 'gateway' ? 'lock message refused' : 'lock refused a command',
  );
  try {
    insertLockRefusal(
      ctx.store.db,
      ctx.store.retention.lockRefusalsMaxRows,
      {
        origin: r.origin,
        lockId: r.lockId,
        channel: r.channel,
        topic: r.topic,
        code: r.code,
        detail: r.detail,
        bytes: byteLength(r.payload),
      },
      nowOf(ctx),
    );
  } catch (e) {
    // Diagnostics only: a full disk must not turn a refused message into a crash of the site handler.
    log.error({ err: e }, 'lock refusal not recorded');
  }
}

/**
 * What locks report on the site broker: availability (retained presence with
 * a last will), state (retained), and events. Alarms are recorded once (by
 * alarm id) and sent up through the outbox in the same transaction.
 */
export function handleLockMessage(
  ctx: AppContext,
  lockId: string,
  channel: Exclude<LockChannel, 'request' | 'decision' | 'command'>,
  payload: unknown,
): void {
  const { db } = ctx.store;
  // Each lock message is its own unit of work (alarms get theirs below, carried up with the alarm).
  const log = withCorrelation(ctx.log, newCorrelationId(), { lockId, channel });
  const topic = topics.lock(ctx.gatewayId, lockId, channel);
  const refuse = (code: string, detail: string) =>
    recordLockRefusal(ctx, log, { origin: 'gateway', lockId, channel, topic, code, detail, payload });
  if (lockById(db, lockId) === null) return refuse('UNKNOWN_LOCK', 'no lock with this id is paired with this gateway');
  const now = nowOf(ctx);
  switch (channel) {
    case 'presence': {
      // An empty retained payload clears the topic: treat it as offline.
      const p =
        payload instanceof Uint8Array && payload.byteLength === 0
          ? { ok: true as const, value: { online: false } }
          : parsePayload(Presence, payload);
      if (!p.ok) return refuse(p.code, p.detail);
      if (setLockOnline(db, lockId, p.value.online, now)) log.info({ online: p.value.online }, 'lock availability changed');
      return;
    }
    case 'state': {
      if (payload instanceof Uint8Array && payload.byteLength === 0) return;
      const s = parsePayload(LockState, payload);
      if (!s.ok) return refuse(s.code, s.detail);
      if (s.value.lockId !== lockId) return refuse('WRONG_LOCK', 'state names another lock');
      const r = recordStateWithPrivacy(db, lockId, s.value, now);
      if (r.privacyChanged)
        log.info(
          { privacy: s.value.privacy },
          s.value.privacy === true ? 'privacy on (lock state): staff keys refused' : 'privacy off (lock state)',
        );
      // an older state (by the lock's own time) says nothing about privacy now
      if (r.recorded && s.value.privacy !== undefined) ctx.watch?.privacyHeard(lockId);
      return;
    }
    case 'event': {
      const e = parsePayload(LockEvent, payload);
      if (!e.ok) return refuse(e.code, e.detail);
      const ev = e.value;
      if (ev.lockId !== lockId) return refuse('WRONG_LOCK', 'event names another lock');
      if (ev.kind === 'command_result') {
        if (ev.result === 'refused') {
          // The lock refused one of our commands (bad MAC, replayed, expired, jammed...): an operator must see it.
          recordLockRefusal(ctx, log, {
            origin: 'lock',
            lockId,
            channel,
            topic,
            code: ev.code ?? 'UNSPECIFIED',
            detail: `command ${ev.commandId}`,
            payload,
          });
        } else log.info({ commandId: ev.commandId, result: ev.result, code: ev.code }, 'lock command result');
        return;
      }
      if (ev.kind === 'privacy') {
        // The guest's privacy (thumb-turn / do-not-disturb): staff keys are refused while it is on (domain/decide.ts).
        if (setPrivacy(db, lockId, ev.active, now))
          log.info({ privacy: ev.active }, ev.active ? 'privacy on: staff keys refused' : 'privacy off');
        ctx.watch?.privacyHeard(lockId);
        return;
      }
      const cid = newCorrelationId();
      const recorded = recordAlarm(db, ctx.store.limits, { alarmId: ev.eventId, lockId, kind: ev.kind, at: ev.at }, cid, now);
      if (recorded) {
        withCorrelation(ctx.log, cid, { lockId }).warn({ kind: ev.kind, alarmId: ev.eventId }, 'lock alarm');
        ctx.outboxWritten();
      }
      return;
    }
    default: {
      const never: never = channel;
      return never;
    }
  }
}

/** Enqueues a gateway.status report. Non-essential: refused (and counted) when the outbox is full. */
export function enqueueStatus(ctx: AppContext): boolean {
  const { db } = ctx.store;
  const now = nowOf(ctx);
  const cid = newCorrelationId();
  const status = () => {
    const s = readSettings(db);
    return {
      mode: s.mode,
      appliedSeq: s.appliedSeq,
      leaseExpiresAt: ctx.time.lease(s),
      outboxDepth: outboxDepth(db),
      locks: allLocks(db)
        .slice(0, 256)
        .map((l) => ({ lockId: asLockId(l.lockId), online: l.online, bolt: l.bolt, door: l.door, battery: l.battery, at: l.stateAt })),
    };
  };
  const r = enqueueBuilt(db, ctx.store.limits, 'gateway.status', status, cid, false, now);
  if ('refused' in r) {
    ctx.metrics.outboxRefused.inc({ type: 'gateway.status' });
    withCorrelation(ctx.log, cid).warn({ depth: outboxDepth(db) }, 'outbox full: gateway.status not queued');
    return false;
  }
  ctx.outboxWritten();
  return true;
}
