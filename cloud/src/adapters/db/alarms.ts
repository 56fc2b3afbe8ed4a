import { z } from 'zod';
import { pageOf, parseRow, parseRows, type Page } from '@tobira/shared';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, timePageParams, type SiteScope } from './scope.js';

/**
 * The operator's reads and the one write of the `alarms` table (the uplink
 * inbox inserts alarms, audit.ts insertAlarm): list newest first, and
 * acknowledge once (migration 0015).
 */
export interface AlarmView {
  readonly alarmId: string;
  readonly siteId: string;
  readonly gatewayId: string;
  readonly lockId: string;
  readonly doorId: string | null;
  readonly kind: string;
  readonly at: number;
  readonly receivedAt: number;
  readonly cid: string;
  readonly ackedAt: number | null;
  /** The name of the API token that acknowledged it. */
  readonly ackedBy: string | null;
}

const AlarmRow = z
  .object({
    alarm_id: z.string(),
    site_id: z.string(),
    gateway_id: z.string(),
    lock_id: z.string(),
    door_id: z.string().nullable(),
    kind: z.string(),
    at: Int8,
    received_at: Int8,
    cid: z.string(),
    acked_at: Int8.nullable(),
    acked_by: z.string().nullable(),
  })
  .transform((r): AlarmView => ({
    alarmId: r.alarm_id,
    siteId: r.site_id,
    gatewayId: r.gateway_id,
    lockId: r.lock_id,
    doorId: r.door_id,
    kind: r.kind,
    at: r.at,
    receivedAt: r.received_at,
    cid: r.cid,
    ackedAt: r.acked_at,
    ackedBy: r.acked_by,
  }));
const ALARM_COLUMNS =
  'a.alarm_id::text AS alarm_id, g.site_id, a.gateway_id, a.lock_id, a.door_id, a.kind, a.at, a.received_at, a.cid, a.acked_at, a.acked_by';

export interface AlarmFilter {
  readonly siteId?: string | undefined;
  readonly gatewayId?: string | undefined;
  readonly lockId?: string | undefined;
  readonly kind?: string | undefined;
  /** `open`: not acknowledged yet; `acknowledged`: acknowledged; absent: both. */
  readonly state?: 'open' | 'acknowledged' | undefined;
  readonly from?: number | undefined;
  readonly to?: number | undefined;
  /** The last row's (at, alarm id) of the previous page. */
  readonly cursor: readonly [number, string] | null;
  readonly limit: number;
}

/** Alarms newest first, keyset-paginated on (at, alarm_id) descending; `from` inclusive, `to` exclusive. */
export async function listAlarms(q: Queryable, scope: SiteScope, f: AlarmFilter): Promise<Page<AlarmView>> {
  const r = await q.query(
    `SELECT ${ALARM_COLUMNS} FROM alarms a JOIN gateways g ON g.id = a.gateway_id
      WHERE ($1::text[] IS NULL OR g.site_id = ANY($1)) AND ($2::text IS NULL OR g.site_id = $2) AND ($3::text IS NULL OR a.gateway_id = $3)
        AND ($4::text IS NULL OR a.lock_id = $4) AND ($5::text IS NULL OR a.kind = $5)
        AND ($6::text IS NULL OR ($6 = 'open') = (a.acked_at IS NULL))
        AND ($7::bigint IS NULL OR a.at >= $7) AND ($8::bigint IS NULL OR a.at < $8)
        AND ($9::bigint IS NULL OR (a.at, a.alarm_id::text) < ($9::bigint, $10::text))
      ORDER BY a.at DESC, a.alarm_id::text DESC LIMIT $11`,
    [scopeParam(scope), f.siteId ?? null, f.gatewayId ?? null, f.lockId ?? null, f.kind ?? null, f.state ?? null, ...timePageParams(f)],
  );
  return pageOf(parseRows('alarms', AlarmRow, r.rows), f.limit, (a) => [a.at, a.alarmId]);
}

/** An alarm visible to the scope, or null. */
export async function getAlarm(q: Queryable, scope: SiteScope, alarmId: string): Promise<AlarmView | null> {
  const r = await q.query(
    `SELECT ${ALARM_COLUMNS} FROM alarms a JOIN gateways g ON g.id = a.gateway_id
      WHERE a.alarm_id::text = $2 AND ($1::text[] IS NULL OR g.site_id = ANY($1))`,
    [scopeParam(scope), alarmId],
  );
  return r.rows[0] === undefined ? null : parseRow('alarms', AlarmRow, r.rows[0]);
}

/** What acknowledging did: `acknowledged` (this call set it), `already` (it was before; unchanged), `not_found` (none in scope). */
export type AckResult =
  | { readonly kind: 'acknowledged'; readonly alarm: AlarmView }
  | { readonly kind: 'already'; readonly alarm: AlarmView }
  | { readonly kind: 'not_found' };

/**
 * Acknowledges an alarm once: the UPDATE requires it still open, so two
 * acknowledgements racing leave the first one's name and time, and the
 * second learns it was already (0 rows), never overwriting it.
 */
export async function acknowledgeAlarm(
  q: Queryable,
  scope: SiteScope,
  a: { alarmId: string; by: string; byToken: string; cid: string; at: number },
): Promise<AckResult> {
  const r = await q.query(
    `UPDATE alarms SET acked_at = $3, acked_by = $4, acked_by_token = $5, acked_cid = $6
      WHERE alarm_id::text = $2 AND acked_at IS NULL
        AND ($1::text[] IS NULL OR gateway_id IN (SELECT id FROM gateways WHERE site_id = ANY($1)))`,
    [scopeParam(scope), a.alarmId, a.at, a.by, a.byToken, a.cid],
  );
  const alarm = await getAlarm(q, scope, a.alarmId);
  if (alarm === null) return { kind: 'not_found' };
  return r.rowCount === 1 ? { kind: 'acknowledged', alarm } : { kind: 'already', alarm };
}
