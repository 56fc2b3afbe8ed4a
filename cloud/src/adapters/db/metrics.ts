import { parseRows } from '@tobira/shared';
import { z } from 'zod';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { FAIL_CLOSED_REASONS, type FailClosedReason } from './gateways.js';

/**
 * What GET /metrics reads from the database at scrape time: the same on
 * every replica, since it is the shared state and not one process's view.
 */

/** Per gateway: its downlink outbox, presence, skew and whether its last status report says it fails closed. */
export interface GatewayGauges {
  readonly gatewayId: string;
  /** Presence (retained last will); null: never heard. */
  readonly online: boolean | null;
  readonly clockSkewMs: number | null;
  /** Downlinks not delivered yet (pending or being sent), and when the oldest of them was committed (null: none). */
  readonly openDownlinks: number;
  readonly oldestOpenAt: number | null;
  readonly deadLetters: number;
  /** The last seq handed out, and the last one it reported applied (null: no status report yet). */
  readonly lastSeq: number;
  readonly appliedSeq: number | null;
  /** null: no status report yet (unknown), else whether it denies ordinary keys, judged at `now` on its clock. */
  readonly failingClosed: boolean | null;
  readonly failClosedReason: FailClosedReason | null;
}
const GaugeRow = z
  .object({
    id: z.string(),
    online: z.boolean().nullable(),
    clock_skew_ms: Int8.nullable(),
    open_rows: Int8,
    oldest_open_at: Int8.nullable(),
    dead: Int8,
    last_seq: Int8,
    applied_seq: Int8.nullable(),
    reported: z.boolean(),
    fail_closed_reason: z.enum(FAIL_CLOSED_REASONS).nullable(),
  })
  .transform((r): GatewayGauges => ({
    gatewayId: r.id,
    online: r.online,
    clockSkewMs: r.clock_skew_ms,
    openDownlinks: r.open_rows,
    oldestOpenAt: r.oldest_open_at,
    deadLetters: r.dead,
    lastSeq: r.last_seq,
    appliedSeq: r.applied_seq,
    failingClosed: r.reported ? r.fail_closed_reason !== null : null,
    failClosedReason: r.fail_closed_reason,
  }));

/**
 * Every gateway's gauges, by id. Failing closed is the function the
 * gateway.failing_closed webhook and GET /gateways/{id}/health use (migration
 * 0015), at `now` plus the gateway's measured skew, on the lease it last
 * reported (a heartbeat since may have extended it: the health route says the same).
 */
export async function gatewayGauges(q: Queryable, now: number): Promise<GatewayGauges[]> {
  const r = await q.query(
    `SELECT g.id, g.online, g.clock_skew_ms,
            COALESCE(o.open_rows, 0) AS open_rows, o.oldest_open_at, COALESCE(o.dead, 0) AS dead,
            s.last_seq, (g.last_status->>'appliedSeq')::bigint AS applied_seq, g.last_status IS NOT NULL AS reported,
            gateway_fail_closed_reason(g.last_status, $1::bigint + COALESCE(g.clock_skew_ms, 0), s.last_seq) AS fail_closed_reason
       FROM gateways g
       CROSS JOIN LATERAL (SELECT COALESCE((SELECT last_seq FROM gateway_seq WHERE gateway_id = g.id), 0) AS last_seq) s
       LEFT JOIN (SELECT gateway_id,
                         count(*) FILTER (WHERE status IN ('pending', 'sending')) AS open_rows,
                         min(created_at) FILTER (WHERE status IN ('pending', 'sending')) AS oldest_open_at,
                         count(*) FILTER (WHERE status = 'dead') AS dead
                    FROM outbox WHERE status IN ('pending', 'sending', 'dead') GROUP BY gateway_id) o ON o.gateway_id = g.id
      ORDER BY g.id`,
    [now],
  );
  return parseRows('gateways', GaugeRow, r.rows);
}

/** The two other queues the cloud drains: webhooks out and notifications to people. */
export const QUEUES = ['webhook', 'notification'] as const;
export const QUEUE_STATUSES = ['pending', 'sending', 'dead'] as const;

export interface QueueGauge {
  readonly queue: (typeof QUEUES)[number];
  readonly status: (typeof QUEUE_STATUSES)[number];
  readonly rows: number;
  /** When the oldest row in this status was queued. */
  readonly oldestAt: number;
}
const QueueRow = z
  .object({ queue: z.enum(QUEUES), status: z.enum(QUEUE_STATUSES), n: Int8, oldest: Int8 })
  .transform((r): QueueGauge => ({ queue: r.queue, status: r.status, rows: r.n, oldestAt: r.oldest }));

/** Rows of the webhook and notification queues by status (delivered and sent rows left out); a status with no row is absent. */
export async function queueGauges(q: Queryable): Promise<QueueGauge[]> {
  const r = await q.query(
    `SELECT 'webhook' AS queue, status, count(*) AS n, min(created_at) AS oldest
       FROM webhook_outbox WHERE status IN ('pending', 'sending', 'dead') GROUP BY status
     UNION ALL
     SELECT 'notification', status, count(*), min(created_at)
       FROM notification_outbox WHERE status IN ('pending', 'sending', 'dead') GROUP BY status`,
  );
  return parseRows('queues', QueueRow, r.rows);
}
