import { pageOf, parseRows, type Page, type PageQuery } from '@tobira/shared';
import { z } from 'zod';
import { prepared, type ReadableDb, type WritableDb } from './db.js';

/**
 * The staff action audit (`staff_actions`): who did what from the staff UI or
 * API (sign-in/out, lockdown, alarm ack, remote unlock, account changes).
 * Written in the transaction of the action it records.
 */

export const STAFF_ACTIONS = [
  'setup',
  'sign_in',
  'sign_out',
  'set_mode',
  'ack_alarm',
  'remote_unlock',
  'account_create',
  'account_disable',
  'account_enable',
  'account_password_reset',
  'set_passage',
  'account_totp_enrol',
  'account_totp_reset',
] as const;
export type StaffActionKind = (typeof STAFF_ACTIONS)[number];

export interface StaffActionRow {
  readonly actionId: string;
  readonly at: number;
  /** null: the API token (automation), which is no account. */
  readonly actorId: string | null;
  readonly actorName: string;
  readonly action: StaffActionKind;
  readonly target: string | null;
  readonly detail: string | null;
  readonly result: 'applied' | 'noop' | 'refused';
  readonly code: string | null;
  readonly cid: string;
}

/** Inserts one row (a repeated action id is ignored). Joins the caller's transaction. */
export function insertStaffAction(db: WritableDb, a: StaffActionRow): boolean {
  return (
    prepared(
      db,
      `INSERT INTO staff_actions (action_id, at, actor_id, actor_name, action, target, detail, result, code, cid)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
    ).run(a.actionId, a.at, a.actorId, a.actorName, a.action, a.target, a.detail, a.result, a.code, a.cid).changes === 1
  );
}

const Row = z
  .object({
    id: z.int(),
    action_id: z.string(),
    at: z.int(),
    actor_id: z.string().nullable(),
    actor_name: z.string(),
    action: z.enum(STAFF_ACTIONS),
    target: z.string().nullable(),
    detail: z.string().nullable(),
    result: z.enum(['applied', 'noop', 'refused']),
    code: z.string().nullable(),
    cid: z.string(),
  })
  .transform((r) => ({
    id: r.id,
    actionId: r.action_id,
    at: r.at,
    actorId: r.actor_id,
    actorName: r.actor_name,
    action: r.action,
    target: r.target,
    detail: r.detail,
    result: r.result,
    code: r.code,
    cid: r.cid,
  }));
export type StaffActionView = z.output<typeof Row>;

export type StaffActionFilter = PageQuery<{ action: StaffActionKind }, [number, number]>;

/** Newest first, keyset-paginated on (at, id). */
export function listStaffActions(db: ReadableDb, f: StaffActionFilter): Page<StaffActionView> {
  const c = f.cursor ?? null;
  const rows = parseRows(
    'staff_actions',
    Row,
    prepared(
      db,
      `SELECT id, action_id, at, actor_id, actor_name, action, target, detail, result, code, cid FROM staff_actions
       WHERE (@action IS NULL OR action = @action) AND (@at IS NULL OR (at, id) < (@at, @id))
       ORDER BY at DESC, id DESC LIMIT @limit`,
    ).all({ action: f.action ?? null, at: c?.[0] ?? null, id: c?.[1] ?? null, limit: f.limit + 1 }),
  );
  return pageOf(rows, f.limit, (r) => [r.at, r.id]);
}

/**
 * Retention of the staff audit, as the access log's (access-log.ts
 * purgeAccessLog): rows older than `maxAgeMs`, and beyond the newest
 * `maxRows`, are deleted, but never one whose `staff.action` uplink the
 * cloud has not acknowledged yet (the cloud's copy is the lasting audit).
 * Returns the rows deleted.
 */
export function purgeStaffActions(db: WritableDb, now: number, bounds: { readonly maxRows: number; readonly maxAgeMs: number }): number {
  const overflow: unknown = prepared(db, 'SELECT id FROM staff_actions ORDER BY id DESC LIMIT 1 OFFSET ?').get(bounds.maxRows);
  const overflowId = overflow === undefined ? -1 : z.object({ id: z.int() }).parse(overflow).id;
  return prepared(
    db,
    `DELETE FROM staff_actions WHERE (at < @cutoff OR id <= @overflowId)
       AND action_id NOT IN (
         SELECT json_extract(body, '$.actionId') FROM outbox WHERE type = 'staff.action' AND acked_at IS NULL)`,
  ).run({ cutoff: now - bounds.maxAgeMs, overflowId }).changes;
}
