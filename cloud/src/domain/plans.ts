import { applied, noop, refused, type DoorId, type Outcome, type SiteId } from '@tobira/shared';

/** How often a plan bills (Stripe's `recurring.interval`). */
export const BILLING_INTERVALS = ['day', 'week', 'month', 'year'] as const;
export type BillingInterval = (typeof BILLING_INTERVALS)[number];

/** A past-due member keeps door access this long unless the plan says otherwise (3 days). */
export const DEFAULT_GRACE_SECONDS = 3 * 86_400;

/** What a site sells as a membership. */
export interface Plan {
  readonly id: string;
  readonly siteId: SiteId;
  readonly name: string;
  /** per period, minor units */
  readonly amount: number;
  /** ISO 4217, lower case as Stripe writes it */
  readonly currency: string;
  readonly interval: BillingInterval;
  readonly intervalCount: number;
  /** the doors (zones) a member's key opens; all behind one gateway */
  readonly doors: readonly DoorId[];
  /** only members may check in (check-in gate MEMBERS_ONLY_PLAN) */
  readonly membersOnly: boolean;
  /** entries (walk-in day passes) per person per calendar month of the site (gate QUOTA_EXHAUSTED); null: no limit */
  readonly monthlyEntryQuota: number | null;
  /** the price of a walk-in day pass at the front desk, minor units; null: not sold at the desk (WALK_IN_NOT_ALLOWED) */
  readonly walkInAmount: number | null;
  /** how long a past-due member keeps door access before the key is suspended */
  readonly graceSeconds: number;
  readonly status: 'active' | 'retired';
  /** the Stripe Price, created once (idempotency key `price:<planId>`) */
  readonly stripePriceId: string | null;
  readonly createdAt: number;
  readonly updatedAt: number;
  readonly retiredAt: number | null;
}

export type PlanInput = Omit<Plan, 'status' | 'stripePriceId' | 'createdAt' | 'updatedAt' | 'retiredAt'>;

/** Validates a new plan: a positive price, a sane interval, doors, a non-negative quota and grace. */
export function createPlan(existing: Plan | null, input: PlanInput, now: number): Outcome<Plan> {
  if (!Number.isInteger(input.amount) || input.amount <= 0) return refused('PLAN_INVALID', 'amount must be a positive integer');
  if (!/^[a-z]{3}$/.test(input.currency)) return refused('PLAN_INVALID', 'currency must be a lower-case ISO 4217 code');
  if (!Number.isInteger(input.intervalCount) || input.intervalCount < 1 || input.intervalCount > 12)
    return refused('PLAN_INVALID', 'intervalCount must be 1..12');
  if (input.doors.length === 0) return refused('PLAN_INVALID', 'a plan opens at least one door');
  if (input.monthlyEntryQuota !== null && (!Number.isInteger(input.monthlyEntryQuota) || input.monthlyEntryQuota < 0))
    return refused('PLAN_INVALID', 'monthlyEntryQuota must be a non-negative integer');
  if (!Number.isInteger(input.graceSeconds) || input.graceSeconds < 0) return refused('PLAN_INVALID', 'graceSeconds must be >= 0');
  if (input.walkInAmount !== null && (!Number.isSafeInteger(input.walkInAmount) || input.walkInAmount <= 0))
    return refused('PLAN_INVALID', 'walkInAmount must be a positive integer');
  const plan: Plan = { ...input, status: 'active', stripePriceId: null, createdAt: now, updatedAt: now, retiredAt: null };
  if (existing) {
    const same =
      existing.siteId === plan.siteId &&
      existing.name === plan.name &&
      existing.amount === plan.amount &&
      existing.currency === plan.currency &&
      existing.interval === plan.interval &&
      existing.intervalCount === plan.intervalCount &&
      [...existing.doors].sort().join() === [...plan.doors].sort().join();
    return same ? noop('PLAN_ALREADY_EXISTS', existing) : refused('PLAN_ALREADY_EXISTS', 'another plan has this id');
  }
  return applied('PLAN_CREATED', plan);
}

/** Retiring stops new applications; its memberships end through endMembership(plan_retired). */
export function retirePlan(plan: Plan | null, now: number): Outcome<Plan> {
  if (!plan) return refused('PLAN_NOT_FOUND');
  if (plan.status === 'retired') return noop('PLAN_ALREADY_RETIRED', plan);
  return applied('PLAN_RETIRED', { ...plan, status: 'retired', retiredAt: now, updatedAt: now });
}
