import { asDoorId, asLockId, type AlarmKind } from '@tobira/shared';
import { prepared, type WritableDb } from './db.js';
import { lockById } from './locks.js';
import { enqueue, type OutboxLimits } from './outbox.js';

/** Lock alarms (`alarms`), unique by alarm (event) id; open while `closed_at` is null. */
export interface LockAlarm {
  readonly alarmId: string;
  readonly lockId: string;
  readonly kind: AlarmKind;
  /** The lock's time of the alarm. */
  readonly at: number;
}

/** Records an alarm once (by alarm id). Returns false for a redelivered alarm. Joins the caller's transaction. */
export function insertAlarm(db: WritableDb, a: { alarmId: string; lockId: string; kind: string; at: number }, now: number): boolean {
  return (
    prepared(db, 'INSERT INTO alarms (alarm_id, lock_id, kind, at, received_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING').run(
      a.alarmId,
      a.lockId,
      a.kind,
      a.at,
      now,
    ).changes === 1
  );
}

/**
 * A lock's alarm, in one transaction: recorded once, and its `alarm` uplink
 * (with the lock's door) enqueued with it, so the cloud hears of every alarm
 * exactly once in effect. False for a redelivered alarm (nothing written).
 */
export function recordAlarm(db: WritableDb, limits: OutboxLimits, a: LockAlarm, cid: string, now: number): boolean {
  return db
    .transaction(() => {
      if (!insertAlarm(db, a, now)) return false;
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
      return true;
    })
    .immediate();
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
