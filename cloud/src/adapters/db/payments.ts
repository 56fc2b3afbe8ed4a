import { z } from 'zod';
import { CorrelationId, parseRow } from '@tobira/shared';
import type { Payment } from '../../domain/payments.js';
import { PAYMENT_STATUSES } from '../../domain/stay-states.js';
import { Int8 } from './columns.js';
import type { Queryable } from './db.js';

/**
 * The payments ledger and refunds. Every function takes the caller's
 * `Queryable`: the use case owns the transaction. A payment row (with its
 * idempotency key) and a refund row (with its own) are written BEFORE the
 * Stripe call they stand for, so a retry after a crash reuses the key.
 */

const Money = z.number().int().nonnegative();
const Currency = z.string().regex(/^[a-z]{3}$/);

const PaymentRow = z.object({
  id: z.string().min(1),
  stay_id: z.string().min(1),
  purpose: z.enum(['stay_balance', 'stay_deposit']),
  amount: Money,
  currency: Currency,
  status: z.enum(PAYMENT_STATUSES),
  version: z.number().int().positive(),
  attempt: z.number().int().positive(),
  idempotency_key: z.string().min(1),
  intent_id: z.string().nullable(),
  client_secret: z.string().nullable(),
  amount_received: Money,
  amount_refunded: Money,
  last_code: z.string(),
  cid: CorrelationId,
  created_at: z.number().int(),
  updated_at: z.number().int(),
});

function paymentOf(raw: unknown): Payment {
  const r = parseRow('payments', PaymentRow, raw);
  return {
    id: r.id,
    stayId: r.stay_id,
    purpose: r.purpose,
    amount: r.amount,
    currency: r.currency,
    status: r.status,
    version: r.version,
    attempt: r.attempt,
    idempotencyKey: r.idempotency_key,
    intentId: r.intent_id,
    clientSecret: r.client_secret,
    amountReceived: r.amount_received,
    amountRefunded: r.amount_refunded,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

/** Insert of a new payment with its idempotency key; 0 rows = the id exists. Needs tobira.verb. */
export async function insertPayment(q: Queryable, p: Payment): Promise<number> {
  const r = await q.query(
    `INSERT INTO payments (id, stay_id, purpose, amount, currency, status, version, attempt, idempotency_key, intent_id, client_secret,
       amount_received, amount_refunded, last_code, cid, created_at, updated_at)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)
     ON CONFLICT (id) DO NOTHING`,
    [
      p.id,
      p.stayId,
      p.purpose,
      p.amount,
      p.currency,
      p.status,
      p.version,
      p.attempt,
      p.idempotencyKey,
      p.intentId,
      p.clientSecret,
      p.amountReceived,
      p.amountRefunded,
      p.lastCode,
      p.cid,
      p.createdAt,
      p.updatedAt,
    ],
  );
  return r.rowCount;
}

export async function loadPayment(q: Queryable, id: string, forUpdate = false): Promise<Payment | null> {
  const r = await q.query(`SELECT * FROM payments WHERE id = $1${forUpdate ? ' FOR UPDATE' : ''}`, [id]);
  return r.rows[0] === undefined ? null : paymentOf(r.rows[0]);
}

/** The payment a PaymentIntent belongs to (webhook events name the intent). */
export async function loadPaymentByIntent(q: Queryable, intentId: string): Promise<Payment | null> {
  const r = await q.query('SELECT * FROM payments WHERE intent_id = $1', [intentId]);
  return r.rows[0] === undefined ? null : paymentOf(r.rows[0]);
}

export async function listPaymentsOfStay(q: Queryable, stayId: string): Promise<Payment[]> {
  const r = await q.query('SELECT * FROM payments WHERE stay_id = $1 ORDER BY purpose DESC, id', [stayId]);
  return r.rows.map(paymentOf);
}

/** Compare-and-set on the version: 1 row = we won, 0 rows = the payment changed first. Needs tobira.verb for a status change. */
export async function casPayment(q: Queryable, p: Payment, expectedVersion: number): Promise<number> {
  const r = await q.query(
    `UPDATE payments SET status = $3, version = $4, intent_id = $5, client_secret = $6, amount_received = $7, amount_refunded = $8,
            last_code = $9, cid = $10, updated_at = $11
      WHERE id = $1 AND version = $2`,
    [
      p.id,
      expectedVersion,
      p.status,
      p.version,
      p.intentId,
      p.clientSecret,
      p.amountReceived,
      p.amountRefunded,
      p.lastCode,
      p.cid,
      p.updatedAt,
    ],
  );
  return r.rowCount;
}

/**
 * Records the PaymentIntent Stripe answered for the payment's idempotency
 * key. Idempotent: the same intent again is 1 row, another intent is 0 rows
 * (the ledger never swaps an intent silently).
 */
export async function recordIntent(q: Queryable, paymentId: string, intentId: string, clientSecret: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE payments SET intent_id = $2, client_secret = $3, updated_at = $4
      WHERE id = $1 AND (intent_id IS NULL OR intent_id = $2)`,
    [paymentId, intentId, clientSecret, now],
  );
  return r.rowCount;
}

// ---------------------------------------------------------------- refunds

export interface Refund {
  readonly id: string;
  readonly paymentId: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: 'pending' | 'succeeded' | 'failed';
  /** `tobira`: made by a verb, with its key stored first; `stripe`: made in Stripe directly, recorded from Stripe */
  readonly source: 'tobira' | 'stripe';
  readonly idempotencyKey: string;
  readonly stripeRefundId: string | null;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly cid: string;
  readonly createdAt: number;
  readonly updatedAt: number;
}

const RefundRow = z.object({
  id: z.string().min(1),
  payment_id: z.string().min(1),
  amount: z.number().int().positive(),
  currency: Currency,
  status: z.enum(['pending', 'succeeded', 'failed']),
  source: z.enum(['tobira', 'stripe']),
  idempotency_key: z.string().min(1),
  stripe_refund_id: z.string().nullable(),
  attempts: z.number().int().nonnegative(),
  last_error: z.string().nullable(),
  cid: CorrelationId,
  created_at: z.number().int(),
  updated_at: z.number().int(),
});

function refundOf(raw: unknown): Refund {
  const r = parseRow('refunds', RefundRow, raw);
  return {
    id: r.id,
    paymentId: r.payment_id,
    amount: r.amount,
    currency: r.currency,
    status: r.status,
    source: r.source,
    idempotencyKey: r.idempotency_key,
    stripeRefundId: r.stripe_refund_id,
    attempts: r.attempts,
    lastError: r.last_error,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

/** Insert of a pending refund with its idempotency key; 0 rows = this id or this key exists (one refund per key, ever). */
export async function insertRefund(
  q: Queryable,
  r: { id: string; paymentId: string; amount: number; currency: string; idempotencyKey: string; cid: string; now: number },
): Promise<number> {
  const res = await q.query(
    `INSERT INTO refunds (id, payment_id, amount, currency, status, idempotency_key, cid, created_at, updated_at)
     VALUES ($1,$2,$3,$4,'pending',$5,$6,$7,$7)
     ON CONFLICT DO NOTHING`,
    [r.id, r.paymentId, r.amount, r.currency, r.idempotencyKey, r.cid, r.now],
  );
  return res.rowCount;
}

export async function loadRefund(q: Queryable, id: string): Promise<Refund | null> {
  const r = await q.query('SELECT * FROM refunds WHERE id = $1', [id]);
  return r.rows[0] === undefined ? null : refundOf(r.rows[0]);
}

export async function listRefundsOfPayment(q: Queryable, paymentId: string): Promise<Refund[]> {
  const r = await q.query('SELECT * FROM refunds WHERE payment_id = $1 ORDER BY created_at, id', [paymentId]);
  return r.rows.map(refundOf);
}

/** Stripe made the refund: pending → succeeded with its id; 0 rows when it was already recorded. */
export async function markRefundSucceeded(q: Queryable, id: string, stripeRefundId: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE refunds SET status = 'succeeded', stripe_refund_id = $2, attempts = attempts + 1, last_error = NULL, updated_at = $3
      WHERE id = $1 AND status = 'pending'`,
    [id, stripeRefundId, now],
  );
  return r.rowCount;
}

/**
 * What Stripe says one of our refunds is now (pending, succeeded or failed), with its Stripe id. Rows
 * affected: 0 when it already says so. Stripe can fail a refund it had reported succeeded, so any move is
 * taken; the payment's refunded total follows Stripe's list, not these rows.
 */
export async function setRefundStatus(
  q: Queryable,
  id: string,
  status: Refund['status'],
  stripeRefundId: string,
  now: number,
): Promise<number> {
  const r = await q.query(
    `UPDATE refunds SET status = $2, stripe_refund_id = $3, updated_at = $4
      WHERE id = $1 AND (status <> $2 OR stripe_refund_id IS DISTINCT FROM $3)`,
    [id, status, stripeRefundId, now],
  );
  return r.rowCount;
}

/** A refund made in Stripe directly, recorded from Stripe's object once (key `stripe:<refund id>`); 0 rows when known. */
export async function insertStripeRefund(
  q: Queryable,
  r: { paymentId: string; stripeRefundId: string; amount: number; currency: string; status: Refund['status']; cid: string; now: number },
): Promise<number> {
  const res = await q.query(
    `INSERT INTO refunds (id, payment_id, amount, currency, status, source, idempotency_key, stripe_refund_id, cid, created_at, updated_at)
     VALUES ($1,$2,$3,$4,$5,'stripe',$6,$7,$8,$9,$9)
     ON CONFLICT DO NOTHING`,
    [`rf_${r.stripeRefundId}`, r.paymentId, r.amount, r.currency, r.status, `stripe:${r.stripeRefundId}`, r.stripeRefundId, r.cid, r.now],
  );
  return res.rowCount;
}

/** A refund call failed: counted and described for the operator; `failed` only when the error is permanent. */
export async function noteRefundError(q: Queryable, id: string, error: string, permanent: boolean, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE refunds SET attempts = attempts + 1, last_error = $2, status = CASE WHEN $3 THEN 'failed' ELSE status END, updated_at = $4
      WHERE id = $1 AND status = 'pending'`,
    [id, error.slice(0, 500), permanent, now],
  );
  return r.rowCount;
}

// ---------------------------------------------------------------- outcomes whose webhook was lost

/**
 * Our refunds Stripe holds `pending` (its id recorded) unchanged for `minAgeMs` and not re-read for
 * `intervalMs`, the longest unread first; each is claimed by setting `checked_at` in the same statement, so
 * replicas and passes spread the reads (a refund that stays pending for days is re-read every interval).
 */
export async function claimPendingRefundsToRecheck(
  q: Queryable,
  o: { readonly now: number; readonly minAgeMs: number; readonly intervalMs: number; readonly limit: number },
): Promise<Refund[]> {
  const r = await q.query(
    `UPDATE refunds SET checked_at = $1
      WHERE id IN (
        SELECT id FROM refunds
         WHERE status = 'pending' AND stripe_refund_id IS NOT NULL AND updated_at <= $2
           AND (checked_at IS NULL OR checked_at <= $3)
         ORDER BY checked_at NULLS FIRST, updated_at, id
         LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING *`,
    [o.now, o.now - o.minAgeMs, o.now - o.intervalMs, o.limit],
  );
  return r.rows.map(refundOf);
}

/**
 * Payments of stays that have ended (expired, failed, cancelled) whose intent the ledger still holds open
 * (`requires_payment` or `processing`): their cancellation may never have reached Stripe, or the guest paid
 * and the webhook was lost. Only once the stay has been over `minAgeMs` (its own `cancel_intent` job goes
 * first); claimed like `claimPendingRefundsToRecheck`.
 */
export async function claimOpenIntentsOfEndedStays(
  q: Queryable,
  o: { readonly now: number; readonly minAgeMs: number; readonly intervalMs: number; readonly limit: number },
): Promise<Payment[]> {
  const r = await q.query(
    `UPDATE payments SET checked_at = $1
      WHERE id IN (
        SELECT p.id FROM payments p JOIN stays s ON s.id = p.stay_id
         WHERE p.status IN ('requires_payment', 'processing') AND p.intent_id IS NOT NULL
           AND s.status IN ('expired', 'failed', 'cancelled') AND GREATEST(p.updated_at, s.updated_at) <= $2
           AND (p.checked_at IS NULL OR p.checked_at <= $3)
         ORDER BY p.checked_at NULLS FIRST, p.updated_at, p.id
         LIMIT $4 FOR UPDATE OF p SKIP LOCKED)
      RETURNING *`,
    [o.now, o.now - o.minAgeMs, o.now - o.intervalMs, o.limit],
  );
  return r.rows.map(paymentOf);
}

const PendingGaugeRow = z.object({ n: Int8, oldest: Int8.nullable() });

/** Refunds Stripe holds pending and when the oldest of them was last changed (GET /metrics). */
export async function pendingRefundGauge(q: Queryable): Promise<{ readonly count: number; readonly oldestAt: number | null }> {
  const r = await q.query(
    `SELECT count(*) AS n, min(updated_at) AS oldest FROM refunds WHERE status = 'pending' AND stripe_refund_id IS NOT NULL`,
  );
  const row = parseRow('refunds', PendingGaugeRow, r.rows[0]);
  return { count: row.n, oldestAt: row.oldest };
}
