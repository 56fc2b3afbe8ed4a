import { z } from 'zod';
import { CorrelationId, PersonId, SiteId, pageOf, parseRow, type Page, type PageQuery } from '@tobira/shared';
import { CANCEL_REASONS } from '../../domain/cancellation-policy.js';
import { WALK_IN_STATUSES, type WalkIn } from '../../domain/walk-ins.js';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * Blocked people, monthly quota uses and walk-ins (migration 0022). The use
 * case owns the transaction; writes are judged by rows affected.
 */

// ---------------------------------------------------------------- blocked people

export interface Block {
  readonly siteId: string;
  readonly personId: string;
  readonly reason: string;
  readonly blockedBy: string;
  readonly blockedAt: number;
}

const BlockRow = z.object({ site_id: z.string(), person_id: z.string(), reason: z.string(), blocked_by: z.string(), blocked_at: Int8 });
const blockOf = (raw: unknown): Block => {
  const r = parseRow('blocked_people', BlockRow, raw);
  return { siteId: r.site_id, personId: r.person_id, reason: r.reason, blockedBy: r.blocked_by, blockedAt: r.blocked_at };
};

/**
 * Whether the person is blocked at the site, read under a share lock on the person's row: a block being
 * written (`lockPersonForBlock`, an update lock on the same row) is waited for, so a key issued now cannot
 * miss a block whose transaction had not committed yet, and a block cannot miss the key (it lists the
 * person's live keys only once it holds the row).
 */
export async function loadBlock(q: Queryable, siteId: string, personId: string): Promise<Block | null> {
  await q.query('SELECT 1 FROM people WHERE id = $1 FOR SHARE', [personId]);
  const r = await q.query('SELECT * FROM blocked_people WHERE site_id = $1 AND person_id = $2', [siteId, personId]);
  return r.rows[0] === undefined ? null : blockOf(r.rows[0]);
}

/** The update lock a block takes on the person's row before writing it (see `loadBlock`). */
export async function lockPersonForBlock(q: Queryable, personId: string): Promise<void> {
  await q.query('SELECT 1 FROM people WHERE id = $1 FOR UPDATE', [personId]);
}

/** 1 when the block was written, 0 when the person was already blocked there. */
export async function insertBlock(q: Queryable, b: Block): Promise<number> {
  const r = await q.query(
    `INSERT INTO blocked_people (site_id, person_id, reason, blocked_by, blocked_at) VALUES ($1,$2,$3,$4,$5)
     ON CONFLICT (site_id, person_id) DO NOTHING`,
    [b.siteId, b.personId, b.reason, b.blockedBy, b.blockedAt],
  );
  return r.rowCount;
}

export async function deleteBlock(q: Queryable, siteId: string, personId: string): Promise<number> {
  const r = await q.query('DELETE FROM blocked_people WHERE site_id = $1 AND person_id = $2', [siteId, personId]);
  return r.rowCount;
}

export async function listBlocks(q: Queryable, siteId: string): Promise<Block[]> {
  const r = await q.query('SELECT * FROM blocked_people WHERE site_id = $1 ORDER BY blocked_at, person_id', [siteId]);
  return r.rows.map(blockOf);
}

// ---------------------------------------------------------------- quota uses

/** The person's uses of the plan's quota in a month (0 when none). */
export async function quotaUsed(q: Queryable, planId: string, personId: string, month: string): Promise<number> {
  const r = await q.query<{ used: number }>('SELECT used FROM quota_usage WHERE plan_id = $1 AND person_id = $2 AND month = $3', [
    planId,
    personId,
    month,
  ]);
  return r.rows[0]?.used ?? 0;
}

/**
 * One use of the month's quota, as one statement: compare-and-set in SQL
 * (`used < quota`), so concurrent uses never pass the quota (and the CHECK
 * `used <= quota` holds it too). 1 = used, 0 = exhausted.
 */
export async function useQuota(
  q: Queryable,
  u: { planId: string; personId: string; month: string; quota: number; now: number },
): Promise<number> {
  const r = await q.query(
    `INSERT INTO quota_usage (plan_id, person_id, month, quota, used, updated_at)
     SELECT $1, $2, $3, $4, 1, $5 WHERE $4::int > 0
     ON CONFLICT (plan_id, person_id, month) DO UPDATE SET used = quota_usage.used + 1, updated_at = EXCLUDED.updated_at
      WHERE quota_usage.used < quota_usage.quota`,
    [u.planId, u.personId, u.month, u.quota, u.now],
  );
  return r.rowCount;
}

/**
 * Gives one use back to THE month named (the month it was used in, never
 * "now"), as one statement that cannot go below zero. 1 = returned, 0 = nothing to return.
 */
export async function returnQuota(q: Queryable, u: { planId: string; personId: string; month: string; now: number }): Promise<number> {
  const r = await q.query(
    `UPDATE quota_usage SET used = used - 1, updated_at = $4 WHERE plan_id = $1 AND person_id = $2 AND month = $3 AND used > 0`,
    [u.planId, u.personId, u.month, u.now],
  );
  return r.rowCount;
}

export interface QuotaUsage {
  readonly planId: string;
  readonly personId: string;
  readonly month: string;
  readonly quota: number;
  readonly used: number;
  readonly updatedAt: number;
}

/** A plan's quota uses (optionally of one person and/or month), within the caller's sites. */
export async function listQuotaUsage(
  q: Queryable,
  scope: SiteScope,
  f: { planId: string; personId?: string | undefined; month?: string | undefined },
): Promise<QuotaUsage[]> {
  const r = await q.query<{ plan_id: string; person_id: string; month: string; quota: number; used: number; updated_at: string | number }>(
    `SELECT u.* FROM quota_usage u JOIN plans p ON p.id = u.plan_id
      WHERE u.plan_id = $1 AND ($2::text IS NULL OR u.person_id = $2) AND ($3::text IS NULL OR u.month = $3)
        AND ($4::text[] IS NULL OR p.site_id = ANY($4))
      ORDER BY u.month DESC, u.person_id LIMIT 500`,
    [f.planId, f.personId ?? null, f.month ?? null, scopeParam(scope)],
  );
  return r.rows.map((x) => ({
    planId: x.plan_id,
    personId: x.person_id,
    month: x.month,
    quota: x.quota,
    used: x.used,
    updatedAt: Number(x.updated_at),
  }));
}

// ---------------------------------------------------------------- memberships at the gate

/**
 * The person holds a membership of the plan that gives door access now (`givesDoorAccess` in SQL): active,
 * past due or ending, and not suspended — a suspended member who self-cancels is `ending` and still suspended.
 */
export async function hasAccessMembership(q: Queryable, planId: string, personId: string): Promise<boolean> {
  const r = await q.query(
    `SELECT 1 FROM memberships WHERE plan_id = $1 AND person_id = $2
        AND status IN ('active', 'past_due', 'ending') AND NOT suspended LIMIT 1`,
    [planId, personId],
  );
  return r.rows.length > 0;
}

// ---------------------------------------------------------------- walk-ins

const WalkInRow = z.object({
  id: z.string().min(1),
  site_id: SiteId,
  plan_id: z.string().min(1),
  person_id: PersonId,
  day: z.string().regex(/^\d{4}-\d{2}-\d{2}$/),
  quota_month: z.string().nullable(),
  quota_returned: z.boolean(),
  status: z.enum(WALK_IN_STATUSES),
  version: z.number().int().positive(),
  amount: Int8,
  currency: z.string(),
  idempotency_key: z.string().min(1),
  intent_id: z.string().nullable(),
  client_secret: z.string().nullable(),
  amount_received: Int8,
  hold_until: Int8,
  key_id: z.string().nullable(),
  credential_type: z.enum(['pin', 'card']),
  credential_digest: z.string().min(1),
  cancel_reason: z.enum(CANCEL_REASONS).nullable(),
  last_code: z.string(),
  cid: CorrelationId,
  created_at: Int8,
  updated_at: Int8,
});

function walkInOf(raw: unknown): WalkIn {
  const r = parseRow('walk_ins', WalkInRow, raw);
  return {
    id: r.id,
    siteId: r.site_id,
    planId: r.plan_id,
    personId: r.person_id,
    day: r.day,
    quotaMonth: r.quota_month,
    quotaReturned: r.quota_returned,
    status: r.status,
    version: r.version,
    amount: r.amount,
    currency: r.currency,
    idempotencyKey: r.idempotency_key,
    intentId: r.intent_id,
    clientSecret: r.client_secret,
    amountReceived: r.amount_received,
    holdUntil: r.hold_until,
    keyId: r.key_id,
    credential: { type: r.credential_type, digest: r.credential_digest },
    cancelReason: r.cancel_reason,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

const COLUMNS = `w.id, w.site_id, w.plan_id, w.person_id, w.day::text AS day, w.quota_month, w.quota_returned, w.status, w.version,
  w.amount, w.currency, w.idempotency_key, w.intent_id, w.client_secret, w.amount_received, w.hold_until, w.key_id,
  w.credential_type, w.credential_digest, w.cancel_reason, w.last_code, w.cid, w.created_at, w.updated_at`;

export async function loadWalkIn(q: Queryable, id: string, scope: SiteScope = null, forUpdate = false): Promise<WalkIn | null> {
  const r = await q.query(
    `SELECT ${COLUMNS} FROM walk_ins w WHERE w.id = $1 AND ($2::text[] IS NULL OR w.site_id = ANY($2))${forUpdate ? ' FOR UPDATE' : ''}`,
    [id, scopeParam(scope)],
  );
  return r.rows[0] === undefined ? null : walkInOf(r.rows[0]);
}

export async function insertWalkIn(q: Queryable, w: WalkIn): Promise<number> {
  const r = await q.query(
    `INSERT INTO walk_ins (id, site_id, plan_id, person_id, day, quota_month, quota_returned, status, version, amount, currency,
       idempotency_key, intent_id, client_secret, amount_received, hold_until, key_id, credential_type, credential_digest,
       cancel_reason, last_code, cid, created_at, updated_at)
     VALUES ($1,$2,$3,$4,$5::date,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24) ON CONFLICT (id) DO NOTHING`,
    [
      w.id,
      w.siteId,
      w.planId,
      w.personId,
      w.day,
      w.quotaMonth,
      w.quotaReturned,
      w.status,
      w.version,
      w.amount,
      w.currency,
      w.idempotencyKey,
      w.intentId,
      w.clientSecret,
      w.amountReceived,
      w.holdUntil,
      w.keyId,
      w.credential.type,
      w.credential.digest,
      w.cancelReason,
      w.lastCode,
      w.cid,
      w.createdAt,
      w.updatedAt,
    ],
  );
  return r.rowCount;
}

/** Compare-and-set on the version; 0 rows is a lost race (or a bug under a lock). */
export async function casWalkIn(q: Queryable, w: WalkIn, expectedVersion: number): Promise<number> {
  const r = await q.query(
    `UPDATE walk_ins SET status = $3, version = $4, quota_returned = $5, intent_id = $6, amount_received = $7, key_id = $8,
       cancel_reason = $9, last_code = $10, cid = $11, updated_at = $12
      WHERE id = $1 AND version = $2`,
    [
      w.id,
      expectedVersion,
      w.status,
      w.version,
      w.quotaReturned,
      w.intentId,
      w.amountReceived,
      w.keyId,
      w.cancelReason,
      w.lastCode,
      w.cid,
      w.updatedAt,
    ],
  );
  return r.rowCount;
}

/** Records the intent Stripe answered (once: the first answer wins; the same key gives the same intent anyway). */
export async function recordWalkInIntent(q: Queryable, id: string, intentId: string, clientSecret: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE walk_ins SET intent_id = $2, client_secret = $3, updated_at = $4 WHERE id = $1 AND (intent_id IS NULL OR intent_id = $2)`,
    [id, intentId, clientSecret, now],
  );
  return r.rowCount;
}

/** Pending walk-ins past their hold, oldest first. */
export async function listExpiredWalkIns(q: Queryable, now: number, limit: number): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT id FROM walk_ins WHERE status = 'pending' AND hold_until <= $1 ORDER BY hold_until, id LIMIT $2`,
    [now, limit],
  );
  return r.rows.map((x) => x.id);
}

export type WalkInFilter = PageQuery<{ siteId: string; personId: string; status: string }, [number, string]>;

export async function listWalkIns(q: Queryable, scope: SiteScope, f: WalkInFilter): Promise<Page<WalkIn>> {
  const r = await q.query(
    `SELECT ${COLUMNS} FROM walk_ins w
      WHERE ($1::text[] IS NULL OR w.site_id = ANY($1)) AND ($2::text IS NULL OR w.site_id = $2)
        AND ($3::text IS NULL OR w.person_id = $3) AND ($4::text IS NULL OR w.status = $4)
        AND ($5::bigint IS NULL OR (w.created_at, w.id) > ($5::bigint, $6::text))
      ORDER BY w.created_at, w.id LIMIT $7`,
    [scopeParam(scope), f.siteId ?? null, f.personId ?? null, f.status ?? null, f.cursor?.[0] ?? null, f.cursor?.[1] ?? null, f.limit + 1],
  );
  return pageOf(r.rows.map(walkInOf), f.limit, (w) => [w.createdAt, w.id]);
}

/** Our refund's idempotency key for the walk-in's nth attempt: `refund:walk_in:<id>:<n>`. */
export const walkInRefundKey = (walkInId: string, attempt: number): string => `refund:walk_in:${walkInId}:${attempt}`;

/** A walk-in's refund, its idempotency key stored before any call (one row per walk-in); 0 rows: already queued. */
export async function insertWalkInRefund(
  q: Queryable,
  r: { walkInId: string; amount: number; currency: string; cid: string; now: number },
): Promise<number> {
  const res = await q.query(
    `INSERT INTO walk_in_refunds (walk_in_id, amount, currency, idempotency_key, cid, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (walk_in_id) DO NOTHING`,
    [r.walkInId, r.amount, r.currency, walkInRefundKey(r.walkInId, 1), r.cid, r.now],
  );
  return res.rowCount;
}

export interface WalkInRefund {
  readonly walkInId: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: RefundStatus;
  readonly idempotencyKey: string;
  /** the attempt its key names (`refund:walk_in:<id>:<attempt>`) */
  readonly attempt: number;
  readonly stripeRefundId: string | null;
}

export async function loadWalkInRefund(q: Queryable, walkInId: string, forUpdate = false): Promise<WalkInRefund | null> {
  const r = await q.query(`SELECT * FROM walk_in_refunds WHERE walk_in_id = $1${forUpdate ? ' FOR UPDATE' : ''}`, [walkInId]);
  const row = r.rows[0];
  if (!row) return null;
  const v = parseRow(
    'walk_in_refunds',
    z.object({
      walk_in_id: z.string(),
      amount: Int8,
      currency: z.string(),
      status: z.enum(['pending', 'succeeded', 'failed']),
      idempotency_key: z.string(),
      stripe_refund_id: z.string().nullable(),
    }),
    row,
  );
  return {
    walkInId: v.walk_in_id,
    amount: v.amount,
    currency: v.currency,
    status: v.status,
    idempotencyKey: v.idempotency_key,
    attempt: Number(v.idempotency_key.slice(v.idempotency_key.lastIndexOf(':') + 1)) || 1,
    stripeRefundId: v.stripe_refund_id,
  };
}

/**
 * The walk-in's refund as a new attempt under the next key, for `amount`: pending, nothing at Stripe yet.
 * Only from the attempt named (`fromKey`) and only while Stripe holds no live refund of it (none made, or
 * the one made failed), so two runs cannot both move it and a refund made is never forgotten; 0 rows then.
 */
export async function nextWalkInRefundAttempt(
  q: Queryable,
  r: { walkInId: string; fromKey: string; attempt: number; amount: number; now: number },
): Promise<number> {
  const res = await q.query(
    `UPDATE walk_in_refunds SET idempotency_key = $3, amount = $4, status = 'pending', stripe_refund_id = NULL, checked_at = NULL,
       updated_at = $5
      WHERE walk_in_id = $1 AND idempotency_key = $2 AND (stripe_refund_id IS NULL OR status = 'failed')`,
    [r.walkInId, r.fromKey, walkInRefundKey(r.walkInId, r.attempt), r.amount, r.now],
  );
  return res.rowCount;
}

/** The attempt Stripe refused (it made no refund): failed, so the next run of its job makes a new attempt. */
export async function failWalkInRefundAttempt(q: Queryable, walkInId: string, key: string, now: number): Promise<number> {
  const res = await q.query(
    `UPDATE walk_in_refunds SET status = 'failed', updated_at = $3
      WHERE walk_in_id = $1 AND idempotency_key = $2 AND status = 'pending' AND stripe_refund_id IS NULL`,
    [walkInId, key, now],
  );
  return res.rowCount;
}

/** Our refund when nothing is owed any more and Stripe holds no refund of it: it stood for money never sent. */
export async function dropWalkInRefund(q: Queryable, walkInId: string, key: string): Promise<number> {
  const res = await q.query(`DELETE FROM walk_in_refunds WHERE walk_in_id = $1 AND idempotency_key = $2 AND stripe_refund_id IS NULL`, [
    walkInId,
    key,
  ]);
  return res.rowCount;
}

/** What refunds made in Stripe directly have given back of the walk-in (pending or succeeded), as recorded. */
export async function refundedInStripeDirectly(q: Queryable, walkInId: string): Promise<number> {
  const r = await q.query<{ n: string | number | null }>(
    `SELECT COALESCE(SUM(amount), 0) AS n FROM walk_in_stripe_refunds WHERE walk_in_id = $1 AND status <> 'failed'`,
    [walkInId],
  );
  return Number(r.rows[0]?.n ?? 0);
}

export type RefundStatus = 'pending' | 'succeeded' | 'failed';

/**
 * The desk's refund as Stripe holds it now: its Stripe id and status. A failed refund stays failed (a retry is
 * a new attempt), and a row already at that status is left alone: 0 rows then.
 */
export async function setWalkInRefundStatus(
  q: Queryable,
  walkInId: string,
  status: RefundStatus,
  stripeRefundId: string,
  now: number,
): Promise<number> {
  const r = await q.query(
    `UPDATE walk_in_refunds SET status = $2, stripe_refund_id = $3, updated_at = $4
      WHERE walk_in_id = $1 AND status <> 'failed' AND (status <> $2 OR stripe_refund_id IS DISTINCT FROM $3)`,
    [walkInId, status, stripeRefundId, now],
  );
  return r.rowCount;
}

/** A refund of the walk-in's intent made in Stripe directly: inserted, or its status moved to Stripe's; 1 when either happened. */
export async function recordWalkInStripeRefund(
  q: Queryable,
  r: { walkInId: string; stripeRefundId: string; amount: number; currency: string; status: RefundStatus; cid: string; now: number },
): Promise<number> {
  const res = await q.query(
    `INSERT INTO walk_in_stripe_refunds (stripe_refund_id, walk_in_id, amount, currency, status, cid, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
     ON CONFLICT (stripe_refund_id) DO UPDATE SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
      WHERE walk_in_stripe_refunds.status <> EXCLUDED.status AND walk_in_stripe_refunds.status <> 'failed'`,
    [r.stripeRefundId, r.walkInId, r.amount, r.currency, r.status, r.cid, r.now],
  );
  return res.rowCount;
}

export interface WalkInRefundView {
  readonly stripeRefundId: string | null;
  readonly amount: number;
  readonly currency: string;
  readonly status: RefundStatus;
  /** `tobira`: the desk's (or the policy's) refund; `stripe`: made in Stripe directly */
  readonly source: 'tobira' | 'stripe';
  readonly createdAt: number;
}

/** Every refund of a walk-in, ours and those made in Stripe directly, oldest first. */
export async function listWalkInRefunds(q: Queryable, walkInId: string): Promise<WalkInRefundView[]> {
  const r = await q.query(
    `SELECT stripe_refund_id, amount, currency, status, 'tobira' AS source, created_at FROM walk_in_refunds WHERE walk_in_id = $1
     UNION ALL
     SELECT stripe_refund_id, amount, currency, status, 'stripe', created_at FROM walk_in_stripe_refunds WHERE walk_in_id = $1
     ORDER BY created_at, stripe_refund_id`,
    [walkInId],
  );
  const Row = z.object({
    stripe_refund_id: z.string().nullable(),
    amount: Int8,
    currency: z.string(),
    status: z.enum(['pending', 'succeeded', 'failed']),
    source: z.enum(['tobira', 'stripe']),
    created_at: Int8,
  });
  return r.rows.map((raw) => {
    const v = parseRow('walk_in_refunds', Row, raw);
    return {
      stripeRefundId: v.stripe_refund_id,
      amount: v.amount,
      currency: v.currency,
      status: v.status,
      source: v.source,
      createdAt: v.created_at,
    };
  });
}

/** The walk-in whose PaymentIntent this is, if any. */
export async function walkInIdOfIntent(q: Queryable, intentId: string): Promise<string | null> {
  const r = await q.query<{ id: string }>('SELECT id FROM walk_ins WHERE intent_id = $1', [intentId]);
  return r.rows[0]?.id ?? null;
}

/**
 * A walk-in's refunds Stripe holds `pending` — the desk's own and those made in Stripe directly —
 * unchanged for `minAgeMs` and not re-read for `intervalMs`, with the walk-in's intent: claimed by
 * setting `checked_at`, as the stays' refunds are (`claimPendingRefundsToRecheck`).
 */
export async function claimPendingWalkInRefundsToRecheck(
  q: Queryable,
  o: { readonly now: number; readonly minAgeMs: number; readonly intervalMs: number; readonly limit: number },
): Promise<{ walkInId: string; stripeRefundId: string; intentId: string | null; cid: CorrelationId }[]> {
  const r = await q.query(
    `UPDATE walk_in_refunds r SET checked_at = $1
       FROM walk_ins w
      WHERE w.id = r.walk_in_id AND r.walk_in_id IN (
        SELECT walk_in_id FROM walk_in_refunds
         WHERE status = 'pending' AND stripe_refund_id IS NOT NULL AND updated_at <= $2
           AND (checked_at IS NULL OR checked_at <= $3)
         ORDER BY checked_at NULLS FIRST, updated_at, walk_in_id
         LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING r.walk_in_id, r.stripe_refund_id, w.intent_id, r.cid`,
    [o.now, o.now - o.minAgeMs, o.now - o.intervalMs, o.limit],
  );
  const direct = await q.query(
    `UPDATE walk_in_stripe_refunds r SET checked_at = $1
       FROM walk_ins w
      WHERE w.id = r.walk_in_id AND r.stripe_refund_id IN (
        SELECT stripe_refund_id FROM walk_in_stripe_refunds
         WHERE status = 'pending' AND updated_at <= $2 AND (checked_at IS NULL OR checked_at <= $3)
         ORDER BY checked_at NULLS FIRST, updated_at, stripe_refund_id
         LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING r.walk_in_id, r.stripe_refund_id, w.intent_id, r.cid`,
    [o.now, o.now - o.minAgeMs, o.now - o.intervalMs, Math.max(0, o.limit - r.rows.length)],
  );
  const Row = z.object({ walk_in_id: z.string(), stripe_refund_id: z.string(), intent_id: z.string().nullable(), cid: CorrelationId });
  return [...r.rows, ...direct.rows].map((raw) => {
    const v = parseRow('walk_in_refunds', Row, raw);
    return { walkInId: v.walk_in_id, stripeRefundId: v.stripe_refund_id, intentId: v.intent_id, cid: v.cid };
  });
}
