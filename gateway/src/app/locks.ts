import {
  LockEvent,
  LockState,
  Presence,
  asDoorId,
  asLockId,
  newCorrelationId,
  parsePayload,
  withCorrelation,
  type LockChannel,
} from '@tobira/shared';
import { nowOf, type AppContext } from './context.js';

/**
 * What locks report on the site broker: availability (retained presence with
 * a last will), state (retained), and events. Alarms are recorded once (by
 * alarm id) and sent up through the outbox in the same transaction.
 */
export function handleLockMessage(ctx: AppContext, lockId: string, channel: Exclude<LockChannel, 'request' | 'decision' | 'command'>, payload: unknown): void {
  const { store } = ctx;
  // Each lock message is its own unit of work (alarms get theirs below, carried up with the alarm).
  const log = withCorrelation(ctx.log, newCorrelationId(), { lockId, channel });
  if (store.lock(lockId) === null) {
    ctx.metrics.lockMessagesRefused.inc({ channel, code: 'UNKNOWN_LOCK' });
    return;
  }
  const refuse = (code: string, detail: string) => {
    ctx.metrics.lockMessagesRefused.inc({ channel, code });
    log.warn({ code, detail }, 'lock message refused');
  };
  const now = nowOf(ctx);
  switch (channel) {
    case 'presence': {
      // An empty retained payload clears the topic: treat it as offline.
      const p = payload instanceof Uint8Array && payload.byteLength === 0 ? { ok: true as const, value: { online: false } } : parsePayload(Presence, payload);
      if (!p.ok) return refuse(p.code, p.detail);
      if (store.setLockOnline(lockId, p.value.online, now)) log.info({ online: p.value.online }, 'lock availability changed');
      return;
    }
    case 'state': {
      if (payload instanceof Uint8Array && payload.byteLength === 0) return;
      const s = parsePayload(LockState, payload);
      if (!s.ok) return refuse(s.code, s.detail);
      if (s.value.lockId !== lockId) return refuse('WRONG_LOCK', 'state names another lock');
      store.setLockState(lockId, s.value, now);
      return;
    }
    case 'event': {
      const e = parsePayload(LockEvent, payload);
      if (!e.ok) return refuse(e.code, e.detail);
      const ev = e.value;
      if (ev.lockId !== lockId) return refuse('WRONG_LOCK', 'event names another lock');
      if (ev.kind === 'command_result') {
        log.info({ commandId: ev.commandId, result: ev.result, code: ev.code }, 'lock command result');
        return;
      }
      const cid = newCorrelationId();
      const recorded = store.db
        .transaction(() => {
          if (!store.insertAlarm({ alarmId: ev.eventId, lockId, kind: ev.kind, at: ev.at }, now)) return false;
          const doorId = store.lock(lockId)?.doorId ?? null;
          store.enqueue('alarm', { alarmId: ev.eventId, lockId: asLockId(lockId), doorId: doorId === null ? null : asDoorId(doorId), kind: ev.kind, at: ev.at }, cid, true, now);
          return true;
        })
        .immediate();
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
  const { store } = ctx;
  const now = nowOf(ctx);
  const cid = newCorrelationId();
  const r = store.db
    .transaction(() => {
      const s = store.settings();
      return store.enqueue(
        'gateway.status',
        {
          mode: s.mode,
          appliedSeq: s.appliedSeq,
          leaseExpiresAt: s.leaseExpiresAt,
          outboxDepth: store.outboxDepth(),
          locks: store.locks().slice(0, 256).map((l) => ({
            lockId: asLockId(l.lockId),
            online: l.online,
            bolt: (l.bolt as 'locked' | 'unlocked' | 'jammed' | null) ?? null,
            door: (l.door as 'open' | 'closed' | null) ?? null,
            battery: l.battery,
            at: l.stateAt,
          })),
        },
        cid,
        false,
        now,
      );
    })
    .immediate();
  if ('refused' in r) {
    ctx.metrics.outboxRefused.inc({ type: 'gateway.status' });
    withCorrelation(ctx.log, cid).warn({ depth: store.outboxDepth() }, 'outbox full: gateway.status not queued');
    return false;
  }
  ctx.outboxWritten();
  return true;
}
