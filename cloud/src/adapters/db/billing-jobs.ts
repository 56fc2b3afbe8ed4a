import { z } from 'zod';
import { CorrelationId, decodeCursor, pageOf, parseRow, type Page } from '@tobira/shared';
import { backoffMs, type BackoffPolicy } from '../outbox/fail.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * The billing outbox (`billing_jobs`): the effects stay and payment verbs
 * emit that leave the database — Stripe calls, the stay's key, guest
 * notices — written in the verb's transaction and run by a worker:
 * claim (lease) → run → mark done, or fail with capped backoff / dead.
 * Delivery is at-least-once, so every job's effect is idempotent by itself
 * (a Stripe idempotency key stored before the call, a key id fixed at
 * confirm, a notice dedupe key).
 */

export const BILLING_JOB_KINDS = [
  'create_intent',
  'cancel_intent',
  'refund',
  'issue_stay_key',
  'notify',
  'walk_in_refund',
  'reconcile_membership',
  // money that landed for an application after its checkout deadline ended it: refunded in full
  'membership_refund',
] as const;
export type BillingJobKind = (typeof BILLING_JOB_KINDS)[number];

export interface BillingJob {
  readonly id: number;
  readonly kind: BillingJobKind;
  readonly subjectId: string;
  readonly dedupeKey: string;
  readonly body: unknown;
  readonly cid: string;
  readonly status: 'pending' | 'running' | 'done' | 'dead';
  readonly attempts: number;
  readonly nextAttemptAt: number;
  readonly leaseToken: string | null;
  readonly lastError: string | null;
  readonly lastCode: string | null;
  readonly createdAt: number;
  readonly doneAt: number | null;
}

const JobRow = z.object({
  id: z.number().int().positive(),
  kind: z.enum(BILLING_JOB_KINDS),
  subject_id: z.string().min(1),
  dedupe_key: z.string().min(1),
  body: z.unknown(),
  cid: CorrelationId,
  status: z.enum(['pending', 'running', 'done', 'dead']),
  attempts: z.number().int().nonnegative(),
  next_attempt_at: z.number().int(),
  lease_token: z.string().nullable(),
  last_error: z.string().nullable(),
  last_code: z.string().nullable(),
  created_at: z.number().int(),
  done_at: z.number().int().nullable(),
});

function jobOf(raw: unknown): BillingJob {
  const r = parseRow('billing_jobs', JobRow, raw);
  return {
    id: r.id,
    kind: r.kind,
    subjectId: r.subject_id,
    dedupeKey: r.dedupe_key,
    body: r.body,
    cid: r.cid,
    status: r.status,
    attempts: r.attempts,
    nextAttemptAt: r.next_attempt_at,
    leaseToken: r.lease_token,
    lastError: r.last_error,
    lastCode: r.last_code,
    createdAt: r.created_at,
    doneAt: r.done_at,
  };
}

/**
 * Enqueue, in the caller's transaction. Guarantee: one job per dedupe key,
 * ever — a verb retried after a lost race enqueues nothing new (0 rows).
 */
export async function enqueueBillingJob(
  q: Queryable,
  j: { kind: BillingJobKind; subjectId: string; dedupeKey: string; body: unknown; cid: string; now: number; notBefore?: number },
): Promise<number> {
  const r = await q.query(
    `INSERT INTO billing_jobs (kind, subject_id, dedupe_key, body, cid, next_attempt_at, created_at)
     VALUES ($1,$2,$3,$4::jsonb,$5,$6,$7) ON CONFLICT (dedupe_key) DO NOTHING`,
    [j.kind, j.subjectId, j.dedupeKey, JSON.stringify(j.body), j.cid, j.notBefore ?? j.now, j.now],
  );
  return r.rowCount;
}

/**
 * Claim: up to `limit` due jobs (pending and due, or running with a lapsed
 * lease), FOR UPDATE SKIP LOCKED, stamped with this claim's lease token,
 * oldest due first. Guarantee: while a lease holds nobody else runs the job;
 * after it lapses someone may (at-least-once).
 */
export async function claimBillingJobs(
  q: Queryable,
  o: { token: string; now: number; leaseMs: number; limit: number; kinds?: readonly BillingJobKind[] },
): Promise<BillingJob[]> {
  const r = await q.query(
    `UPDATE billing_jobs j
        SET status = 'running', lease_token = $1, lease_until = $2 + $3, attempts = j.attempts + 1
       FROM (SELECT id FROM billing_jobs
              WHERE ((status = 'pending' AND next_attempt_at <= $2) OR (status = 'running' AND lease_until <= $2))
                AND ($5::text[] IS NULL OR kind = ANY($5::text[]))
              ORDER BY next_attempt_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) c
      WHERE j.id = c.id
      RETURNING j.*`,
    [o.token, o.now, o.leaseMs, o.limit, o.kinds === undefined ? null : [...o.kinds]],
  );
  return r.rows.map(jobOf).sort((a, b) => a.id - b.id);
}

/** Done: names the lease token, so a worker that lost its lease changes nothing (0 rows). */
export async function markBillingJobDone(
  q: Queryable,
  j: { id: number; leaseToken: string },
  now: number,
  code: string | null = null,
): Promise<number> {
  const r = await q.query(
    `UPDATE billing_jobs SET status = 'done', done_at = $3, lease_token = NULL, lease_until = NULL, last_code = $4
      WHERE id = $1 AND lease_token = $2 AND status = 'running'`,
    [j.id, j.leaseToken, now, code],
  );
  return r.rowCount;
}

/**
 * Fail: transient errors (BILLING_UNAVAILABLE) go back to pending after
 * capped backoff with jitter; a permanent error or the last attempt is dead
 * with its code, visible in the dead-letter list. Names the lease token.
 * Returns the new status, or null when the lease was lost.
 */
export async function failBillingJob(
  q: Queryable,
  j: { id: number; leaseToken: string; attempts: number },
  err: { error: string; code: string; permanent: boolean },
  now: number,
  p: BackoffPolicy,
  random: number,
): Promise<'pending' | 'dead' | null> {
  const status = err.permanent || j.attempts >= p.maxAttempts ? 'dead' : 'pending';
  const r = await q.query(
    `UPDATE billing_jobs SET status = $3, next_attempt_at = $4, lease_token = NULL, lease_until = NULL, last_error = $5, last_code = $6
      WHERE id = $1 AND lease_token = $2 AND status = 'running'`,
    [j.id, j.leaseToken, status, status === 'dead' ? now : now + backoffMs(j.attempts, p, random), err.error.slice(0, 500), err.code],
  );
  return r.rowCount === 1 ? status : null;
}

/**
 * A refund Stripe failed after its job was done (`refund.failed`): the job goes to the dead-letter list
 * with the code, so an operator sees it and retries it (a new attempt with a new key). A running job is
 * left to finish: it reads the failed refund itself.
 */
export async function deadLetterRefundJob(q: Queryable, refundId: string, code: string, error: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE billing_jobs SET status = 'dead', last_code = $2, last_error = $3, done_at = $4
      WHERE kind = 'refund' AND dedupe_key = $1 AND status = 'done'`,
    [`refund:${refundId}`, code, error.slice(0, 500), now],
  );
  return r.rowCount;
}

/** A walk-in's refund Stripe failed after its job was done: its job dead with the code, as a stay's is. */
export async function deadLetterWalkInRefundJob(q: Queryable, walkInId: string, code: string, error: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE billing_jobs SET status = 'dead', last_code = $2, last_error = $3, done_at = $4
      WHERE kind = 'walk_in_refund' AND dedupe_key = $1 AND status = 'done'`,
    [`walk_in_refund:${walkInId}`, code, error.slice(0, 500), now],
  );
  return r.rowCount;
}

/**
 * Dead jobs of a subject whose outcome a sweep has since read from Stripe and settled (a `cancel_intent`
 * that gave up while Stripe was unreachable): done, under the code that settled them, so the dead-letter
 * list shows only what is still an operator's to act on.
 */
export async function settleDeadJobs(q: Queryable, kind: BillingJobKind, subjectId: string, code: string, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE billing_jobs SET status = 'done', last_code = $3, done_at = $4 WHERE kind = $1 AND subject_id = $2 AND status = 'dead'`,
    [kind, subjectId, code, now],
  );
  return r.rowCount;
}

/** Operator retry of a dead job: due at once, attempts counted afresh. */
export async function retryDeadBillingJob(q: Queryable, id: number, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE billing_jobs SET status = 'pending', attempts = 0, next_attempt_at = $2 WHERE id = $1 AND status = 'dead'`,
    [id, now],
  );
  return r.rowCount;
}

const DeadCursor = z.tuple([z.number().int()]);

/** The dead-letter list, oldest first, keyset-paginated on id. */
/**
 * The site a job's subject (a stay, a payment, a refund, a membership or a walk-in: the ids do not overlap)
 * belongs to; null for none.
 */
const JOB_SITE = `(SELECT COALESCE(
    (SELECT s.site_id FROM stays s WHERE s.id = j.subject_id),
    (SELECT s.site_id FROM payments p JOIN stays s ON s.id = p.stay_id WHERE p.id = j.subject_id),
    (SELECT s.site_id FROM refunds r JOIN payments p ON p.id = r.payment_id JOIN stays s ON s.id = p.stay_id WHERE r.id = j.subject_id),
    (SELECT m.site_id FROM memberships m WHERE m.id = j.subject_id),
    (SELECT w.site_id FROM walk_ins w WHERE w.id = j.subject_id)))`;

/**
 * Dead jobs, oldest first, each with the site of its subject. Scoped like every list: a caller limited to
 * some sites sees only jobs whose subject is at one of them (a job with no site only by an unscoped caller).
 */
export async function listDeadBillingJobs(
  q: Queryable,
  scope: SiteScope,
  o: { limit: number; cursor?: string; siteId?: string },
): Promise<Page<BillingJob & { readonly siteId: string | null }> | 'bad_cursor'> {
  const after = decodeCursor(DeadCursor, o.cursor);
  if (after === 'bad') return 'bad_cursor';
  const r = await q.query(
    `SELECT * FROM (SELECT j.*, ${JOB_SITE} AS site_id FROM billing_jobs j WHERE j.status = 'dead' AND ($1::bigint IS NULL OR j.id > $1)) x
      WHERE ($2::text[] IS NULL OR x.site_id = ANY($2)) AND ($3::text IS NULL OR x.site_id = $3) ORDER BY x.id LIMIT $4`,
    [after?.[0] ?? null, scopeParam(scope), o.siteId ?? null, o.limit + 1],
  );
  const Site = z.object({ site_id: z.string().nullable() });
  const rows = r.rows.map((raw) => ({ ...jobOf(raw), siteId: parseRow('billing_jobs', Site, raw).site_id }));
  return pageOf(rows, o.limit, (j) => [j.id]);
}
