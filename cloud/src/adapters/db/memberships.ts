import { z } from 'zod';
import { CorrelationId, PersonId, SiteId, pageOf, parseRow, type Page, type PageQuery } from '@tobira/shared';
import { END_REASONS, MEMBERSHIP_STATUSES } from '../../domain/membership-states.js';
import type { Membership } from '../../domain/memberships.js';
import { Int8 } from './columns.js';
import { enterVerb, type Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * Memberships (migration 0019). The status column is written by two
 * functions only: `casMembership` for the statuses a membership lives in
 * (applied, active, past_due: its SQL cannot write another), and
 * `endMembershipRow`, the repository half of endMembership, for every status
 * that ends one (ending, ended, rejected). Only `endMembershipRow` names the
 * endMembership verb to the database guard; a test greps for both rules.
 */

const Ms = Int8;
const MembershipRow = z.object({
  id: z.string().min(1),
  site_id: SiteId,
  plan_id: z.string().min(1),
  person_id: PersonId,
  status: z.enum(MEMBERSHIP_STATUSES),
  version: z.number().int().positive(),
  approved_at: Ms.nullable(),
  approved_by: z.string().nullable(),
  attempt: z.number().int().positive(),
  idempotency_key: z.string().min(1),
  stripe_customer_id: z.string().nullable(),
  subscription_id: z.string().nullable(),
  first_invoice_id: z.string().nullable(),
  current_period_end: Ms.nullable(),
  cancel_at_period_end: z.boolean(),
  past_due_since: Ms.nullable(),
  suspended: z.boolean(),
  key_id: z.string().nullable(),
  key_seq: z.number().int().nonnegative(),
  credential_type: z.enum(['pin', 'card']).nullable(),
  credential_digest: z.string().min(1).nullable(),
  end_reason: z.enum(END_REASONS).nullable(),
  ended_by: z.string().nullable(),
  end_note: z.string().nullable(),
  ended_at: Ms.nullable(),
  billing_stop_pending: z.enum(['cancel_now', 'cancel_at_period_end']).nullable(),
  last_code: z.string(),
  cid: CorrelationId,
  created_at: Ms,
  updated_at: Ms,
});

function membershipOf(raw: unknown): Membership {
  const r = parseRow('memberships', MembershipRow, raw);
  return {
    id: r.id,
    siteId: r.site_id,
    planId: r.plan_id,
    personId: r.person_id,
    status: r.status,
    version: r.version,
    approvedAt: r.approved_at,
    approvedBy: r.approved_by,
    attempt: r.attempt,
    idempotencyKey: r.idempotency_key,
    stripeCustomerId: r.stripe_customer_id,
    subscriptionId: r.subscription_id,
    firstInvoiceId: r.first_invoice_id,
    currentPeriodEnd: r.current_period_end,
    cancelAtPeriodEnd: r.cancel_at_period_end,
    pastDueSince: r.past_due_since,
    suspended: r.suspended,
    keyId: r.key_id,
    keySeq: r.key_seq,
    credential:
      r.credential_type !== null && r.credential_digest !== null ? { type: r.credential_type, digest: r.credential_digest } : null,
    endReason: r.end_reason,
    endedBy: r.ended_by,
    endNote: r.end_note,
    endedAt: r.ended_at,
    billingStopPending: r.billing_stop_pending,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export async function loadMembership(q: Queryable, id: string, scope: SiteScope = null, forUpdate = false): Promise<Membership | null> {
  const r = await q.query(
    `SELECT * FROM memberships WHERE id = $1 AND ($2::text[] IS NULL OR site_id = ANY($2))${forUpdate ? ' FOR UPDATE' : ''}`,
    [id, scopeParam(scope)],
  );
  return r.rows[0] === undefined ? null : membershipOf(r.rows[0]);
}

export async function loadMembershipBySubscription(q: Queryable, subscriptionId: string): Promise<Membership | null> {
  const r = await q.query('SELECT * FROM memberships WHERE subscription_id = $1', [subscriptionId]);
  return r.rows[0] === undefined ? null : membershipOf(r.rows[0]);
}

/** A new application (status `applied`; needs tobira.verb). 0 when the id exists. */
export async function insertMembership(q: Queryable, m: Membership): Promise<number> {
  const r = await q.query(
    `INSERT INTO memberships (id, site_id, plan_id, person_id, status, version, attempt, idempotency_key,
       credential_type, credential_digest, last_code, cid, created_at, updated_at)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) ON CONFLICT (id) DO NOTHING`,
    [
      m.id,
      m.siteId,
      m.planId,
      m.personId,
      m.status,
      m.version,
      m.attempt,
      m.idempotencyKey,
      m.credential?.type ?? null,
      m.credential?.digest ?? null,
      m.lastCode,
      m.cid,
      m.createdAt,
      m.updatedAt,
    ],
  );
  return r.rowCount;
}

const LIVING = ['applied', 'active', 'past_due'];
/** The statuses whose member may hold a key. */
const KEY_HOLDING = ['active', 'past_due', 'ending'];

/**
 * Compare-and-set of every column a living membership changes (approval,
 * payments, grace, keys). Its SQL cannot end a membership: a status other
 * than applied/active/past_due, or a row already ending, matches no row.
 */
export async function casMembership(q: Queryable, m: Membership, expectedVersion: number): Promise<number> {
  const r = await q.query(
    `UPDATE memberships SET status = $3, version = $4, approved_at = $5, approved_by = $6, current_period_end = $7,
       past_due_since = $8, suspended = $9, key_id = $10, key_seq = $11, credential_type = $12, credential_digest = $13,
       last_code = $14, cid = $15, updated_at = $16
      WHERE id = $1 AND version = $2 AND $3::text = ANY($17::text[]) AND status = ANY($17::text[])`,
    [
      m.id,
      expectedVersion,
      m.status,
      m.version,
      m.approvedAt,
      m.approvedBy,
      m.currentPeriodEnd,
      m.pastDueSince,
      m.suspended,
      m.keyId,
      m.keySeq,
      m.credential?.type ?? null,
      m.credential?.digest ?? null,
      m.lastCode,
      m.cid,
      m.updatedAt,
      LIVING,
    ],
  );
  return r.rowCount;
}

/**
 * A member's door access changed (restoreAccess gives a key back, the grace sweep suspends): the key
 * columns and the suspension alone, with compare-and-set on the version, in any status a member may
 * hold a key in, `ending` too (a self-cancelled member keeps the paid-for rest of the period, and one
 * who left owing is still suspended when the grace ends). The status is not written, so this cannot
 * end or revive a membership. Rows affected: 0 is a lost race.
 */
export async function casMembershipAccess(q: Queryable, m: Membership, expectedVersion: number): Promise<number> {
  const r = await q.query(
    `UPDATE memberships SET version = $3, key_id = $4, key_seq = $5, suspended = $11, last_code = $6, cid = $7, updated_at = $8
      WHERE id = $1 AND version = $2 AND status = $9 AND status = ANY($10::text[])`,
    [m.id, expectedVersion, m.version, m.keyId, m.keySeq, m.lastCode, m.cid, m.updatedAt, m.status, KEY_HOLDING, m.suspended],
  );
  return r.rowCount;
}

/**
 * THE write of a membership's end (ending, ended, rejected): the repository
 * half of endMembership. It names the verb to the database's verb guard
 * (which refuses these statuses under any other `tobira.verb`) and writes
 * with compare-and-set on the version. Rows affected: 0 is a lost race.
 */
export async function endMembershipRow(q: Queryable, m: Membership, expectedVersion: number): Promise<number> {
  await enterVerb(q, 'endMembership');
  const r = await q.query(
    `UPDATE memberships SET status = $3, version = $4, end_reason = $5, ended_by = $6, end_note = $7, ended_at = $8,
       cancel_at_period_end = $9, last_code = $10, cid = $11, updated_at = $12, billing_stop_pending = NULL
      WHERE id = $1 AND version = $2 AND $3::text IN ('ending', 'ended', 'rejected')`,
    [
      m.id,
      expectedVersion,
      m.status,
      m.version,
      m.endReason,
      m.endedBy,
      m.endNote,
      m.endedAt,
      m.cancelAtPeriodEnd,
      m.lastCode,
      m.cid,
      m.updatedAt,
    ],
  );
  return r.rowCount;
}

/**
 * A billing stop whose outcome at Stripe is unknown, recorded on a living
 * membership (`stop`), or the record cleared when Stripe refused it for good
 * (`null`); the status does not change. Compare-and-set on the version (the
 * caller's transaction names its verb). Writing an end clears it too
 * (`endMembershipRow`).
 */
export async function recordBillingStopPending(
  q: Queryable,
  m: Membership,
  stop: 'cancel_now' | 'cancel_at_period_end' | null,
  expectedVersion: number,
): Promise<number> {
  const r = await q.query(
    `UPDATE memberships SET billing_stop_pending = $3, version = $4, last_code = $5, cid = $6, updated_at = $7
      WHERE id = $1 AND version = $2 AND status IN ('applied', 'active', 'past_due', 'ending')`,
    [m.id, expectedVersion, stop, m.version, m.lastCode, m.cid, m.updatedAt],
  );
  return r.rowCount;
}

/** The checkout's Stripe ids, recorded once (the same idempotency keys give the same objects on a retry). */
export async function recordCheckout(
  q: Queryable,
  id: string,
  c: { customerId: string; subscriptionId: string; invoiceId: string | null; periodEnd: number },
  now: number,
): Promise<number> {
  const r = await q.query(
    `UPDATE memberships SET stripe_customer_id = $2, subscription_id = $3, first_invoice_id = $4, current_period_end = $5, updated_at = $6
      WHERE id = $1 AND (subscription_id IS NULL OR subscription_id = $3)`,
    [id, c.customerId, c.subscriptionId, c.invoiceId, c.periodEnd, now],
  );
  return r.rowCount;
}

export async function recordCustomer(q: Queryable, id: string, customerId: string, now: number): Promise<number> {
  const r = await q.query(
    'UPDATE memberships SET stripe_customer_id = $2, updated_at = $3 WHERE id = $1 AND (stripe_customer_id IS NULL OR stripe_customer_id = $2)',
    [id, customerId, now],
  );
  return r.rowCount;
}

/** Past-due memberships whose access is not suspended yet, oldest first (the grace sweep decides per plan). */
/**
 * A person's memberships at a site that may get their key back after an unblock, oldest first: `active`,
 * `past_due` and `ending` (a self-cancelled member's paid-for rest of the period).
 */
export async function listLivingMembershipsOfPerson(q: Queryable, siteId: string, personId: string): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT id FROM memberships WHERE site_id = $1 AND person_id = $2 AND status IN ('active', 'past_due', 'ending') ORDER BY created_at, id`,
    [siteId, personId],
  );
  return r.rows.map((x) => x.id);
}

export async function listPastDue(q: Queryable, limit: number): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT id FROM memberships WHERE status IN ('past_due', 'ending') AND past_due_since IS NOT NULL AND NOT suspended
      ORDER BY past_due_since LIMIT $1`,
    [limit],
  );
  return r.rows.map((x) => x.id);
}

/** Approved applications whose first invoice is still unpaid and whose checkout was approved at or before `approvedBy` (ms). */
export async function listCheckoutsApprovedBefore(q: Queryable, approvedBy: number, limit: number): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT id FROM memberships
      WHERE status = 'applied' AND approved_at IS NOT NULL AND subscription_id IS NOT NULL AND approved_at <= $1
        AND billing_stop_pending IS NULL
      ORDER BY approved_at, id LIMIT $2`,
    [approvedBy, limit],
  );
  return r.rows.map((x) => x.id);
}

/**
 * Open checkouts due a re-read (the checkout recheck): approved at least `minAgeMs` ago and not read since
 * `intervalMs`, the longest unread first. Each is claimed by setting `checkout_checked_at` in the same
 * statement, so two replicas' passes do not read the same subscription twice.
 */
export async function claimCheckoutsToRecheck(
  q: Queryable,
  o: { readonly now: number; readonly minAgeMs: number; readonly intervalMs: number; readonly limit: number },
): Promise<{ id: string; subscriptionId: string }[]> {
  const r = await q.query<{ id: string; subscription_id: string }>(
    `UPDATE memberships SET checkout_checked_at = $1
      WHERE id IN (
        SELECT id FROM memberships
         WHERE status = 'applied' AND approved_at IS NOT NULL AND subscription_id IS NOT NULL
           AND billing_stop_pending IS NULL AND approved_at <= $2
           AND (checkout_checked_at IS NULL OR checkout_checked_at <= $3)
         ORDER BY checkout_checked_at NULLS FIRST, approved_at, id
         LIMIT $4 FOR UPDATE SKIP LOCKED)
      RETURNING id, subscription_id`,
    [o.now, o.now - o.minAgeMs, o.now - o.intervalMs, o.limit],
  );
  return r.rows.map((x) => ({ id: x.id, subscriptionId: x.subscription_id }));
}

/**
 * Living memberships (`active`, `past_due`, `ending`) whose subscription was not re-read for `intervalMs`,
 * the longest unread first, claimed by setting `subscription_checked_at` in the same statement (replicas
 * and passes spread the reads). One whose billing stop is pending is its reconcile job's.
 */
export async function claimLivingToRecheck(
  q: Queryable,
  o: { readonly now: number; readonly intervalMs: number; readonly limit: number },
): Promise<{ id: string; subscriptionId: string }[]> {
  const r = await q.query<{ id: string; subscription_id: string }>(
    `UPDATE memberships SET subscription_checked_at = $1
      WHERE id IN (
        SELECT id FROM memberships
         WHERE status IN ('active', 'past_due', 'ending') AND subscription_id IS NOT NULL AND billing_stop_pending IS NULL
           AND updated_at <= $2 AND (subscription_checked_at IS NULL OR subscription_checked_at <= $2)
         ORDER BY subscription_checked_at NULLS FIRST, id
         LIMIT $3 FOR UPDATE SKIP LOCKED)
      RETURNING id, subscription_id`,
    [o.now, o.now - o.intervalMs, o.limit],
  );
  return r.rows.map((x) => ({ id: x.id, subscriptionId: x.subscription_id }));
}

/** The memberships of a plan that have not ended (a retired plan ends them). */
export async function listLivingOfPlan(q: Queryable, planId: string): Promise<string[]> {
  const r = await q.query<{ id: string }>(
    `SELECT id FROM memberships WHERE plan_id = $1 AND status NOT IN ('ended', 'rejected') ORDER BY created_at, id`,
    [planId],
  );
  return r.rows.map((x) => x.id);
}

export type MembershipFilter = PageQuery<{ siteId: string; planId: string; personId: string; status: string }, [number, string]>;

/** Memberships oldest first, keyset-paginated on (created_at, id), within the caller's sites. */
export async function listMemberships(q: Queryable, scope: SiteScope, f: MembershipFilter): Promise<Page<Membership>> {
  const r = await q.query(
    `SELECT * FROM memberships
      WHERE ($1::text[] IS NULL OR site_id = ANY($1)) AND ($2::text IS NULL OR site_id = $2) AND ($3::text IS NULL OR plan_id = $3)
        AND ($4::text IS NULL OR person_id = $4) AND ($5::text IS NULL OR status = $5)
        AND ($6::bigint IS NULL OR (created_at, id) > ($6::bigint, $7::text))
      ORDER BY created_at, id LIMIT $8`,
    [
      scopeParam(scope),
      f.siteId ?? null,
      f.planId ?? null,
      f.personId ?? null,
      f.status ?? null,
      f.cursor?.[0] ?? null,
      f.cursor?.[1] ?? null,
      f.limit + 1,
    ],
  );
  return pageOf(r.rows.map(membershipOf), f.limit, (m) => [m.createdAt, m.id]);
}
