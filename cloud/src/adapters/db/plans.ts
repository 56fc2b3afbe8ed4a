import { z } from 'zod';
import { DoorId, SiteId, pageOf, parseRow, type Page, type PageQuery } from '@tobira/shared';
import { BILLING_INTERVALS, type Plan } from '../../domain/plans.js';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/** Plans and their doors (migration 0019). The use case owns the transaction. */

const PlanRow = z.object({
  id: z.string().min(1),
  site_id: SiteId,
  name: z.string(),
  amount: Int8.pipe(z.number().positive()),
  currency: z.string().regex(/^[a-z]{3}$/),
  billing_interval: z.enum(BILLING_INTERVALS),
  interval_count: z.number().int().positive(),
  members_only: z.boolean(),
  monthly_entry_quota: z.number().int().nonnegative().nullable(),
  grace_seconds: z.number().int().nonnegative(),
  walk_in_amount: Int8.pipe(z.number().positive()).nullable(),
  status: z.enum(['active', 'retired']),
  stripe_price_id: z.string().nullable(),
  created_at: Int8,
  updated_at: Int8,
  retired_at: Int8.nullable(),
  doors: z.array(DoorId),
});

function planOf(raw: unknown): Plan {
  const r = parseRow('plans', PlanRow, raw);
  return {
    id: r.id,
    siteId: r.site_id,
    name: r.name,
    amount: r.amount,
    currency: r.currency,
    interval: r.billing_interval,
    intervalCount: r.interval_count,
    doors: r.doors,
    membersOnly: r.members_only,
    monthlyEntryQuota: r.monthly_entry_quota,
    graceSeconds: r.grace_seconds,
    walkInAmount: r.walk_in_amount,
    status: r.status,
    stripePriceId: r.stripe_price_id,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    retiredAt: r.retired_at,
  };
}

const COLUMNS = `p.*, ARRAY(SELECT door_id FROM plan_doors d WHERE d.plan_id = p.id ORDER BY door_id) AS doors`;

export async function loadPlan(q: Queryable, id: string, scope: SiteScope = null): Promise<Plan | null> {
  const r = await q.query(`SELECT ${COLUMNS} FROM plans p WHERE p.id = $1 AND ($2::text[] IS NULL OR p.site_id = ANY($2))`, [
    id,
    scopeParam(scope),
  ]);
  return r.rows[0] === undefined ? null : planOf(r.rows[0]);
}

/** Inserts a plan with its doors; 0 when the id (or the site's name) is taken. */
export async function insertPlan(q: Queryable, p: Plan): Promise<number> {
  const r = await q.query(
    `INSERT INTO plans (id, site_id, name, amount, currency, billing_interval, interval_count, members_only, monthly_entry_quota,
       grace_seconds, status, stripe_price_id, created_at, updated_at, retired_at, walk_in_amount)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16) ON CONFLICT DO NOTHING`,
    [
      p.id,
      p.siteId,
      p.name,
      p.amount,
      p.currency,
      p.interval,
      p.intervalCount,
      p.membersOnly,
      p.monthlyEntryQuota,
      p.graceSeconds,
      p.status,
      p.stripePriceId,
      p.createdAt,
      p.updatedAt,
      p.retiredAt,
      p.walkInAmount,
    ],
  );
  if (r.rowCount !== 1) return 0;
  for (const d of p.doors) await q.query('INSERT INTO plan_doors (plan_id, door_id) VALUES ($1, $2)', [p.id, d]);
  return 1;
}

export async function retirePlanRow(q: Queryable, p: Plan): Promise<number> {
  const r = await q.query(`UPDATE plans SET status = 'retired', retired_at = $2, updated_at = $2 WHERE id = $1 AND status = 'active'`, [
    p.id,
    p.retiredAt,
  ]);
  return r.rowCount;
}

/** Records the plan's Stripe Price once (the first answer wins; the same idempotency key gives the same Price anyway). */
export async function recordPlanPrice(q: Queryable, planId: string, priceId: string, now: number): Promise<number> {
  const r = await q.query('UPDATE plans SET stripe_price_id = $2, updated_at = $3 WHERE id = $1 AND stripe_price_id IS NULL', [
    planId,
    priceId,
    now,
  ]);
  return r.rowCount;
}

export type PlanFilter = PageQuery<{ siteId: string; status: string }, [number, string]>;

export async function listPlans(q: Queryable, scope: SiteScope, f: PlanFilter): Promise<Page<Plan>> {
  const r = await q.query(
    `SELECT ${COLUMNS} FROM plans p
      WHERE ($1::text[] IS NULL OR p.site_id = ANY($1)) AND ($2::text IS NULL OR p.site_id = $2) AND ($3::text IS NULL OR p.status = $3)
        AND ($4::bigint IS NULL OR (p.created_at, p.id) > ($4::bigint, $5::text))
      ORDER BY p.created_at, p.id LIMIT $6`,
    [scopeParam(scope), f.siteId ?? null, f.status ?? null, f.cursor?.[0] ?? null, f.cursor?.[1] ?? null, f.limit + 1],
  );
  return pageOf(r.rows.map(planOf), f.limit, (p) => [p.createdAt, p.id]);
}
