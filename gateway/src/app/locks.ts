import {
  LockEvent,
  LockState,
  Presence,
  asLockId,
  newCorrelationId,
  newId,
  parsePayload,
  topics,
  withCorrelation,
  type LockChannel,
  type Logger,
  type RatePolicy,
} from '@tobira/shared';
import { endOpenAlarm, recordAlarm } from '../adapters/sqlite/alarms.js';
import { recordLockRefusal as insertLockRefusal, type LockRefusal } from '../adapters/sqlite/diagnostics.js';
import { allLocks, lockById, setLockOnline } from '../adapters/sqlite/locks.js';
import { recordStateWithPrivacy, reportPrivacy, setPrivacy } from '../adapters/sqlite/modes.js';
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
 *. A refusal a lock reported (origin 'lock') is logged and
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
 * What became of one lock message: `taken` (within the budget, handled),
 * `throttled` (dropped, and it started an episode: an alarm was raised),
 * `dropped` (dropped and only counted). The site router tells the staff page
 * of the first two only, so a flood does not become a flood of notices.
 */
export type LockMessageOutcome = 'taken' | 'throttled' | 'dropped';

/** Lock ids that are not paired share one budget, so made-up ids can neither grow the map nor dodge it. */
const UNPAIRED = '\u0000unpaired';

/** Whether a lock message says the guest's privacy is on (a state carrying it, or a privacy event). */
function saysPrivacyOn(lockId: string, channel: 'presence' | 'state' | 'event', payload: unknown): boolean {
  if (channel === 'state') {
    const s = parsePayload(LockState, payload);
    return s.ok && s.value.lockId === lockId && s.value.privacy === true;
  }
  if (channel !== 'event') return false;
  const e = parsePayload(LockEvent, payload);
  return e.ok && e.value.lockId === lockId && e.value.kind === 'privacy' && e.value.active;
}

/**
 * A message over the lock's event budget: dropped before anything is
 * written, and only counted, except the first of an episode, which is
 * recorded in lock_refusals, logged, and raises the lock's
 * LOCK_EVENTS_THROTTLED alarm (sent up like any alarm; one open alarm per
 * lock, so a later episode while it is open is counted on it). One thing
 * still passes: privacy turning on, the fail-closed direction (staff keys are
 * refused while it is on), which writes only when it changes. Privacy turning
 * off is dropped like the rest: the lock stays private until it is heard
 * under budget.
 */
function throttled(
  ctx: AppContext,
  log: Logger,
  m: { lockId: string; paired: boolean; channel: 'presence' | 'state' | 'event'; topic: string; payload: unknown; first: boolean },
  p: RatePolicy,
  now: number,
): void {
  const { db } = ctx.store;
  if (m.first) {
    recordLockRefusal(ctx, log, {
      origin: 'gateway',
      lockId: m.lockId,
      channel: m.channel,
      topic: m.topic,
      code: 'LOCK_EVENTS_THROTTLED',
      detail: `over ${p.burst} messages at once or ${p.perSecond}/s; further ones until it slows down are dropped and only counted`,
      payload: m.payload,
    });
    if (m.paired) {
      const cid = newCorrelationId();
      const r = recordAlarm(db, ctx.store.limits, { alarmId: newId(), lockId: m.lockId, kind: 'lock_events_throttled', at: now }, cid, now);
      withCorrelation(ctx.log, cid, { lockId: m.lockId }).warn({ kind: 'lock_events_throttled', result: r }, 'lock alarm');
      if (r === 'recorded') ctx.outboxWritten();
    }
  } else ctx.metrics.lockMessagesRefused.inc({ channel: m.channel, code: 'LOCK_EVENTS_THROTTLED' });
  if (m.paired && saysPrivacyOn(m.lockId, m.channel, m.payload)) {
    if (setPrivacy(db, m.lockId, true, now)) log.info({ privacy: true }, 'privacy on (over the event budget): staff keys refused');
    ctx.watch?.privacyHeard(m.lockId);
  }
}

/** An episode over the event budget ended: summed up in one line, and the lock's LOCK_EVENTS_THROTTLED alarm marked ended. */
function episodeOver(ctx: AppContext, key: string, dropped: number, now: number): void {
  const lockId = key === UNPAIRED ? null : key;
  withCorrelation(ctx.log, newCorrelationId(), { lockId }).info(
    { code: 'LOCK_EVENTS_THROTTLED', dropped, paired: lockId !== null },
    'lock event flood over: messages dropped by the lock event budget',
  );
  if (lockId !== null) endOpenAlarm(ctx.store.db, lockId, 'lock_events_throttled', now);
}

/** Ends the budget episodes of locks that went quiet (the daemon's tick): their alarm is marked ended without a message from them. */
export function endQuietEpisodes(ctx: AppContext): void {
  const budget = ctx.eventBudget;
  if (budget === undefined) return;
  const now = nowOf(ctx);
  for (const { key, dropped } of budget.endQuiet(now)) episodeOver(ctx, key, dropped, now);
}

/**
 * What locks report on the site broker: availability (retained presence with
 * a last will), state (retained), and events, each within the lock's event
 * budget (app/lock-budget.ts). Alarms are recorded once (by alarm id), a
 * repeat while one of its kind is open is counted on it, and a new one is
 * sent up through the outbox in the same transaction.
 */
export function handleLockMessage(
  ctx: AppContext,
  lockId: string,
  channel: Exclude<LockChannel, 'request' | 'decision' | 'command'>,
  payload: unknown,
): LockMessageOutcome {
  // Each lock message is its own unit of work (alarms get theirs below, carried up with the alarm).
  const log = withCorrelation(ctx.log, newCorrelationId(), { lockId, channel });
  const topic = topics.lock(ctx.gatewayId, lockId, channel);
  const paired = lockById(ctx.store.db, lockId) !== null;
  const now = nowOf(ctx);
  // The budget comes before anything is written, the refusal of an unknown lock's message included.
  const budget = ctx.eventBudget;
  if (budget !== undefined) {
    const key = paired ? lockId : UNPAIRED;
    const t = budget.take(key, now);
    if (!t.ok) {
      throttled(ctx, log, { lockId, paired, channel, topic, payload, first: t.first }, budget.policy, now);
      return t.first && paired ? 'throttled' : 'dropped';
    }
    if (t.ended > 0) episodeOver(ctx, key, t.ended, now);
  }
  handleTaken(ctx, log, { lockId, paired, channel, topic, payload }, now);
  return 'taken';
}

/** A lock message within its budget. */
function handleTaken(
  ctx: AppContext,
  log: Logger,
  m: { lockId: string; paired: boolean; channel: 'presence' | 'state' | 'event'; topic: string; payload: unknown },
  now: number,
): void {
  const { db } = ctx.store;
  const { lockId, channel, topic, payload } = m;
  const refuse = (code: string, detail: string) =>
    recordLockRefusal(ctx, log, { origin: 'gateway', lockId, channel, topic, code, detail, payload });
  if (!m.paired) return refuse('UNKNOWN_LOCK', 'no lock with this id is paired with this gateway');
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
        const r = reportPrivacy(db, lockId, ev.active, ev.at, now);
        if (r.changed) log.info({ privacy: ev.active }, ev.active ? 'privacy on: staff keys refused' : 'privacy off');
        else if (!r.recorded)
          log.info({ privacy: ev.active, at: ev.at }, "privacy off older than the lock's newest privacy report: ignored");
        ctx.watch?.privacyHeard(lockId);
        return;
      }
      const cid = newCorrelationId();
      const recorded = recordAlarm(db, ctx.store.limits, { alarmId: ev.eventId, lockId, kind: ev.kind, at: ev.at }, cid, now);
      if (recorded === 'recorded') {
        withCorrelation(ctx.log, cid, { lockId }).warn({ kind: ev.kind, alarmId: ev.eventId }, 'lock alarm');
        ctx.outboxWritten();
      } else if (recorded === 'coalesced') log.info({ kind: ev.kind, alarmId: ev.eventId }, 'lock alarm repeated: counted on the open one');
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
