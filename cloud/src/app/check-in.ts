import type { SiteId } from '@tobira/shared';
import type { Tx } from '../adapters/db/db.js';
import { loadMembership } from '../adapters/db/memberships.js';
import { loadPlan } from '../adapters/db/plans.js';
import { checkInGates, type GateFacts, type GatePass } from '../domain/check-in-gates.js';
import type { Plan } from '../domain/plans.js';
import type { Checked } from '../domain/nights.js';
import type { SiteStaySettings, Stay } from '../domain/stays.js';
import { quotaMonthOf } from '../domain/walk-ins.js';
import { hasAccessMembership, loadBlock, quotaUsed } from '../adapters/db/walk-ins.js';

/**
 * The gates of a stay, in the caller's transaction: the site's
 * block on the guest, and for a members' booking (booked under a
 * membership) that its membership still gives door access — the plan is
 * members-only for such a booking whatever its flag. Stays use no quota.
 * They run at booking, when the key is issued (confirmation) and at the
 * administrative check-in: entering needs only the key, so the key's issue
 * is where a gate must hold.
 */
export async function stayCheckInGate(
  tx: Tx,
  s: Pick<Stay, 'siteId' | 'personId' | 'membershipId'>,
  settings: SiteStaySettings,
  now: number,
): Promise<Checked<GatePass>> {
  const m = s.membershipId ? await loadMembership(tx, s.membershipId) : null;
  const plan = m ? await loadPlan(tx, m.planId) : null;
  const facts = await gateFacts(tx, {
    siteId: s.siteId,
    personId: s.personId,
    plan,
    walkInsAllowed: settings.walkInsAllowed,
    month: quotaMonthOf(now, settings.timeZone),
  });
  return checkInGates({ ...facts, kind: 'stay', plan: plan === null ? null : { ...plan, membersOnly: true } });
}

/** The facts the check-in gates decide on, loaded in the caller's transaction. */
export async function gateFacts(
  tx: Tx,
  f: { siteId: SiteId; personId: string; plan: Plan | null; walkInsAllowed: boolean; month: string },
): Promise<Omit<GateFacts, 'kind' | 'plan'>> {
  const block = await loadBlock(tx, f.siteId, f.personId);
  return {
    siteId: f.siteId,
    blocked: block === null ? null : { reason: block.reason },
    walkInsAllowed: f.walkInsAllowed,
    member: f.plan === null ? false : await hasAccessMembership(tx, f.plan.id, f.personId),
    usedThisMonth: f.plan === null ? 0 : await quotaUsed(tx, f.plan.id, f.personId, f.month),
  };
}
