import type { OutcomeCode, SiteId } from '@tobira/shared';
import { no, ok, type Checked } from './nights.js';
import type { Plan } from './plans.js';

/**
 * The check-in gates: checking in — a stay's check-in through
 * the admin API, or a walk-in at the front desk — passes these on the
 * server, each a coded refusal shown to staff. Pure: the use case loads the
 * facts in its transaction and decides here.
 */
export const GATE_CODES = ['GUEST_BLOCKED', 'PLAN_NOT_IN_CONFIG', 'WALK_IN_NOT_ALLOWED', 'MEMBERS_ONLY_PLAN', 'QUOTA_EXHAUSTED'] as const;
export type GateCode = (typeof GATE_CODES)[number] & OutcomeCode;

export type CheckInKind = 'walk_in' | 'stay';

/** What the plan says at the gate. */
export type GatePlan = Pick<Plan, 'id' | 'siteId' | 'status' | 'membersOnly' | 'monthlyEntryQuota' | 'walkInAmount'>;

export interface GateFacts {
  readonly kind: CheckInKind;
  /** the site the person checks in at */
  readonly siteId: SiteId;
  /** the site's block on the person, if any */
  readonly blocked: { readonly reason: string } | null;
  /** the site's setting: its front desk sells walk-ins */
  readonly walkInsAllowed: boolean;
  /** a walk-in: the plan sold; a stay: the plan of the membership it was booked under (null: none) */
  readonly plan: GatePlan | null;
  /** the person holds a membership of `plan` that gives door access now (active, ending, or past due within grace) */
  readonly member: boolean;
  /** the person's uses of the plan's quota in the current month of the site */
  readonly usedThisMonth: number;
}

export interface GatePass {
  /** uses left this month after this one; null when the plan has no quota (or the check-in uses none) */
  readonly quotaLeft: number | null;
}

/**
 * The gates, in the order staff act on them: a blocked person first (whatever else holds), then whether the
 * plan is offered here at all, whether walk-ins are sold, members only, and last the monthly quota.
 * Invariant: a pass is returned only when every gate that applies to the kind of check-in holds.
 */
export function checkInGates(f: GateFacts): Checked<GatePass> {
  if (f.blocked !== null) return no('GUEST_BLOCKED', `blocked at this site: ${f.blocked.reason}`);
  const plan = f.plan;
  if (f.kind === 'walk_in') {
    if (plan === null) return no('PLAN_NOT_IN_CONFIG', 'a walk-in names a plan of this site');
    if (plan.siteId !== f.siteId) return no('PLAN_NOT_IN_CONFIG', `plan ${plan.id} is not offered at ${f.siteId}`);
    if (plan.status !== 'active') return no('PLAN_NOT_IN_CONFIG', `plan ${plan.id} is retired`);
    if (!f.walkInsAllowed) return no('WALK_IN_NOT_ALLOWED', 'the site sells no walk-ins');
    if (plan.walkInAmount === null) return no('WALK_IN_NOT_ALLOWED', `plan ${plan.id} is not sold at the front desk`);
  }
  if (plan !== null && plan.membersOnly && !f.member) return no('MEMBERS_ONLY_PLAN', `plan ${plan.id} is for its members only`);
  if (f.kind === 'walk_in' && plan !== null && plan.monthlyEntryQuota !== null) {
    if (f.usedThisMonth >= plan.monthlyEntryQuota)
      return no('QUOTA_EXHAUSTED', `${f.usedThisMonth} of ${plan.monthlyEntryQuota} used this month`);
    return ok({ quotaLeft: plan.monthlyEntryQuota - f.usedThisMonth - 1 });
  }
  return ok({ quotaLeft: null });
}
