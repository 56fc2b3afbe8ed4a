import { pageOf, parseRows, type MessageOf, type Page, type PageQuery, type UplinkMessage } from '@tobira/shared';
import { z } from 'zod';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, timePageParams, type SiteScope } from './scope.js';

/**
 * What gateway staff did (`staff_actions`): one row per `staff.action`
 * uplink, written by the uplink inbox in the transaction that dedupes the
 * message; read, site-scoped, by the admin API (`GET /staff-actions`).
 */

export type StaffActionBody = MessageOf<UplinkMessage, 'staff.action'>['body'];

export interface StaffActionRecord {
  readonly gatewayId: string;
  readonly seq: number;
  readonly cid: string;
  readonly receivedAt: number;
  readonly body: StaffActionBody;
}

/** Records a staff action once per action id: true when inserted, false for a duplicate. */
export async function insertStaffAction(q: Queryable, r: StaffActionRecord): Promise<boolean> {
  const b = r.body;
  const res = await q.query(
    `INSERT INTO staff_actions (action_id, gateway_id, seq, at, actor_id, actor_name, action, target, detail, result, code, cid, received_at)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13) ON CONFLICT (action_id) DO NOTHING`,
    [
      b.actionId,
      r.gatewayId,
      r.seq,
      b.at,
      b.actor.accountId,
      b.actor.name,
      b.action,
      b.target,
      b.detail,
      b.result,
      b.code,
      r.cid,
      r.receivedAt,
    ],
  );
  return res.rowCount === 1;
}

const Row = z
  .object({
    action_id: z.string(),
    gateway_id: z.string(),
    site_id: z.string(),
    at: Int8,
    actor_id: z.string().nullable(),
    actor_name: z.string(),
    action: z.string(),
    target: z.string().nullable(),
    detail: z.string().nullable(),
    result: z.enum(['applied', 'noop', 'refused']),
    code: z.string().nullable(),
    cid: z.string(),
    received_at: Int8,
  })
  .transform((r) => ({
    actionId: r.action_id,
    siteId: r.site_id,
    gatewayId: r.gateway_id,
    at: r.at,
    actor: { accountId: r.actor_id, name: r.actor_name },
    action: r.action,
    target: r.target,
    detail: r.detail,
    result: r.result,
    code: r.code,
    cid: r.cid,
    receivedAt: r.received_at,
  }));
export type StaffActionView = z.output<typeof Row>;

/** `from` inclusive, `to` exclusive (ms); the sort key is (at, action_id), newest first. */
export type StaffActionFilter = PageQuery<
  { siteId: string; gatewayId: string; action: string; actorId: string; from: number; to: number },
  [number, string]
>;

/** Staff actions newest first, keyset-paginated on (at, action_id), only of the caller's sites. */
export async function listStaffActions(q: Queryable, scope: SiteScope, f: StaffActionFilter): Promise<Page<StaffActionView>> {
  const r = await q.query(
    `SELECT s.action_id::text AS action_id, s.gateway_id, g.site_id, s.at, s.actor_id, s.actor_name, s.action, s.target, s.detail,
            s.result, s.code, s.cid, s.received_at
       FROM staff_actions s JOIN gateways g ON g.id = s.gateway_id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) AND ($3::text IS NULL OR s.gateway_id = $3)
        AND ($4::text IS NULL OR s.action = $4) AND ($5::text IS NULL OR s.actor_id = $5)
        AND ($6::bigint IS NULL OR s.at >= $6) AND ($7::bigint IS NULL OR s.at < $7)
        AND ($8::bigint IS NULL OR (s.at, s.action_id::text) < ($8::bigint, $9::text))
      ORDER BY s.at DESC, s.action_id::text DESC LIMIT $10`,
    [scopeParam(scope), f.siteId ?? null, f.gatewayId ?? null, f.action ?? null, f.actorId ?? null, ...timePageParams(f)],
  );
  return pageOf(parseRows('staff_actions', Row, r.rows), f.limit, (a) => [a.at, a.actionId]);
}
