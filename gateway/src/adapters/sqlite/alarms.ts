import { asDoorId, asLockId, type AlarmUplinkKind } from '@tobira/shared';
import { prepared, type WritableDb } from './db.js';
import { lockById } from './locks.js';
import { enqueue, type OutboxLimits } from './outbox.js';

/**
 * Lock alarms (`alarms`), unique by alarm (event) id; open while `closed_at`
 * is null. One open alarm per lock and kind: a repeat while it is open is
 * counted on it (`count`, `last_seen_at`), so a lock repeating an alarm cannot
 * grow the table, the uplink or the cloud's webhooks.
 */
export interface LockAlarm {
  readonly alarmId: string;
  readonly lockId: string;
  readonly kind: AlarmUplinkKind;
  /** The lock's time of the alarm (the gateway's trusted time for its own kind, lock_events_throttled). */
  readonly at: number;
}

/** Records an alarm once (by alarm id). Returns false for a redelivered alarm. Joins the caller's transaction. */
export function insertAlarm(db: WritableDb, a: { alarmId: string; lockId: string; kind: string; at: number }, now: number): boolean {
  return (
    prepared(
      db,
      'INSERT INTO alarms (alarm_id, lock_id, kind, at, received_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
    ).run(a.alarmId, a.lockId, a.kind, a.at, now, now).changes === 1
  );
}

/**
 * What recording an alarm did: `recorded` (a new open alarm, sent up),
 * `coalesced` (counted on the open alarm of its lock and kind; nothing sent
 * up, the cloud has that alarm), `redelivered` (its id is known: nothing).
 */
export type AlarmRecorded = 'recorded' | 'coalesced' | 'redelivered';

/**
 * A lock's alarm, in one transaction: recorded once, and its `alarm` uplink
 * (with the lock's door) enqueued with it, so the cloud hears of every open
 * alarm exactly once in effect; a repeat while one of its lock and kind is
 * open is counted on that one. A repeat's own id is not kept: a broker
 * redelivering a repeat counts it again (the count is at least once).
 */
export function recordAlarm(db: WritableDb, limits: OutboxLimits, a: LockAlarm, cid: string, now: number): AlarmRecorded {
  return db
    .transaction((): AlarmRecorded => {
      if (prepared(db, 'SELECT 1 FROM alarms WHERE alarm_id = ?').get(a.alarmId) !== undefined) return 'redelivered';
      const repeat = prepared(
        db,
        `UPDATE alarms SET count = count + 1, last_seen_at = ?, ended_at = NULL WHERE alarm_id = (
           SELECT alarm_id FROM alarms WHERE lock_id = ? AND kind = ? AND closed_at IS NULL ORDER BY received_at DESC LIMIT 1)`,
      ).run(now, a.lockId, a.kind);
      if (repeat.changes === 1) return 'coalesced';
      if (!insertAlarm(db, a, now)) return 'redelivered';
      const doorId = lockById(db, a.lockId)?.doorId ?? null;
      enqueue(
        db,
        limits,
        'alarm',
        { alarmId: a.alarmId, lockId: asLockId(a.lockId), doorId: doorId === null ? null : asDoorId(doorId), kind: a.kind, at: a.at },
        cid,
        true,
        now,
      );
      return 'recorded';
    })
    .immediate();
}

/**
 * The condition of the lock's open alarm of this kind ended on its own (a
 * lock back under its event budget): `ended_at` set once; the alarm stays
 * open for staff to acknowledge. False when there was none to end.
 */
export function endOpenAlarm(db: WritableDb, lockId: string, kind: AlarmUplinkKind, now: number): boolean {
  return (
    prepared(db, 'UPDATE alarms SET ended_at = ? WHERE lock_id = ? AND kind = ? AND closed_at IS NULL AND ended_at IS NULL').run(
      now,
      lockId,
      kind,
    ).changes > 0
  );
}

/**
 * Acknowledges (closes) an alarm: sets closed_at/closed_by once. Judged by
 * rows affected: 1 is applied, 0 on an existing alarm is a noop (already
 * closed; the first acknowledgement is kept), 0 on no alarm is not_found.
 */
export function ackAlarm(db: WritableDb, alarmId: string, by: string, now: number): 'applied' | 'noop' | 'not_found' {
  return db
    .transaction(() => {
      const r = prepared(db, 'UPDATE alarms SET closed_at = ?, closed_by = ? WHERE alarm_id = ? AND closed_at IS NULL').run(
        now,
        by.slice(0, 200),
        alarmId,
      );
      if (r.changes === 1) return 'applied' as const;
      return prepared(db, 'SELECT 1 FROM alarms WHERE alarm_id = ?').get(alarmId) === undefined
        ? ('not_found' as const)
        : ('noop' as const);
    })
    .immediate();
}
