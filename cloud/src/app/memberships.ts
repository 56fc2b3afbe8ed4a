import { randomInt } from 'node:crypto';
import {
  applied,
  conflict,
  credentialDigest,
  DoorId,
  newCorrelationId,
  newId,
  noop,
  PersonId,
  PresentedCredential,
  refused,
  SiteId,
  summarizeIssues,
  withCorrelation,
  type CorrelationId,
  type Outcome,
  type OutcomeCode,
} from '@tobira/shared';
import { z } from 'zod';
import { pgErrorCode, type Tx } from '../adapters/db/db.js';
import { credentialInUse, issueTargets, liveKeysOfPersonAtSite } from '../adapters/db/keys.js';
import {
  casMembership,
  casMembershipAccess,
  endMembershipRow,
  insertMembership,
  claimCheckoutsToRecheck,
  claimLivingToRecheck,
  listCheckoutsApprovedBefore,
  listLivingMembershipsOfPerson,
  listLivingOfPlan,
  listMemberships as listMembershipRows,
  listPastDue,
  loadMembership,
  loadMembershipBySubscription,
  recordBillingStopPending,
  recordCheckout,
  type MembershipFilter,
} from '../adapters/db/memberships.js';
import { enqueueBillingJob } from '../adapters/db/billing-jobs.js';
import { insertPlan, listPlans as listPlanRows, loadPlan, recordPlanPrice, retirePlanRow, type PlanFilter } from '../adapters/db/plans.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { doorsAtSite, listOpenStaysOfMembership } from '../adapters/db/stays.js';
import { loadBlock } from '../adapters/db/walk-ins.js';
import type { BillingFailure } from '../adapters/stripe/errors.js';
import {
  cancelSubscriptionNow,
  createMemberCustomer,
  createPlanPrice,
  createSubscription,
  listPaidInvoicePayments,
  refundInvoicePayment,
  retrieveSubscription,
  scheduleSubscriptionEnd,
} from '../adapters/stripe/subscriptions.js';
import type { EndReason } from '../domain/membership-states.js';
import * as domain from '../domain/memberships.js';
import type { Membership, MembershipEffect, MembershipNotice, MembershipOutcome } from '../domain/memberships.js';
import * as plans from '../domain/plans.js';
import type { BillingInterval, Plan } from '../domain/plans.js';
import type { Page } from '@tobira/shared';
import { issueKey, revokeKey } from './keys.js';
import { notifyMembership } from './membership-notices.js';
import { enqueueNotification } from './notifications.js';
import { BillingStepFailed, cancelStayInTx, inBilling, type StayDeps } from './stays.js';

/**
 * The membership use cases (docs/memberships.md). Stripe is
 * called outside any transaction, and where an external leg must stop
 * first (I3) it is called BEFORE the local write: billing stops, then the
 * membership ends; Stripe unreachable → `refused BILLING_UNAVAILABLE` and
 * nothing changed here. Keys are issued and revoked only through the key
 * verbs, in the transaction of the membership's change.
 */
export type MembershipDeps = StayDeps;

/** A notice a verb raised for the member (the seam of the notification outbox, built apart: the caller hands these on). */
export interface RaisedNotice {
  readonly notice: MembershipNotice;
  readonly membershipId: string;
  readonly personId: string;
  readonly dedupeKey: string;
}

export type MembershipResult = Outcome<Membership> & { readonly cid: CorrelationId; readonly notices: readonly RaisedNotice[] };
export type PlanResult = Outcome<Plan> & { readonly cid: CorrelationId };

/** A member key runs until a membership verb revokes it; this is only its outer bound. */
export const MEMBER_KEY_VALID_MS = 10 * 366 * 86_400_000;

const defaultPin = (): string => String(randomInt(0, 100_000_000)).padStart(8, '0');
/** The caller's view of an outcome: the effects ran in the verb's transaction, its notices are listed apart. */
const plain = (o: MembershipOutcome): Outcome<Membership> => (o.status === 'applied' ? applied(o.code, o.state) : o);
const result = (o: MembershipOutcome, cid: CorrelationId, notices: readonly RaisedNotice[] = []): MembershipResult => ({
  ...plain(o),
  cid,
  notices,
});

function noticesOf(m: Membership, effects: readonly MembershipEffect[]): RaisedNotice[] {
  return effects.flatMap((e) =>
    e.type === 'notify' ? [{ notice: e.notice, membershipId: m.id, personId: m.personId, dedupeKey: e.dedupeKey }] : [],
  );
}

/**
 * Runs a membership verb's effects in its transaction: the key issued (the
 * plan's doors, the member's credential digest, or a fresh PIN whose digest
 * is then kept) or revoked, through the key verbs so the gateway gets it.
 * Returns the membership as finally written (an issued PIN's digest).
 */
async function runEffects(
  deps: MembershipDeps,
  tx: Tx,
  m: Membership,
  plan: Plan,
  effects: readonly MembershipEffect[],
  cid: CorrelationId,
): Promise<Membership> {
  const keyDeps = { ...deps, db: tx };
  let current = m;
  for (const e of effects) {
    switch (e.type) {
      case 'issue_key': {
        // the key is the member's authority at the door: a person the site has blocked gets none, whatever
        // billing says (blocking revoked the keys they had)
        if ((await loadBlock(tx, plan.siteId, m.personId)) !== null) {
          withCorrelation(deps.log, cid, { membershipId: m.id, keyId: e.keyId }).warn(
            { code: 'GUEST_BLOCKED', siteId: plan.siteId },
            'the member is blocked at the site: no key is issued, the membership moves as billed',
          );
          break;
        }
        const now = deps.clock.now();
        const terms = {
          keyId: e.keyId,
          personId: m.personId,
          doors: plan.doors,
          validFrom: now,
          validUntil: now + MEMBER_KEY_VALID_MS,
          cid,
        };
        if (current.credential !== null) {
          const o = await issueKey(keyDeps, { ...terms, credential: current.credential });
          if (o.status === 'applied' || o.status === 'noop') break;
          throw new BillingStepFailed(o.code, true, `the member key could not be issued (${o.status})`);
        }
        const newPin = deps.newPin ?? defaultPin;
        for (let attempt = 1; ; attempt++) {
          const o = await issueKey(keyDeps, { ...terms, credential: { type: 'pin', value: newPin() } });
          if (o.status === 'applied' || o.status === 'noop') {
            // the same PIN again when access is restored: kept as the key's digest only
            const next = { ...current, credential: { type: 'pin' as const, digest: o.state.credential.digest } };
            if ((await casMembership(tx, { ...next, version: current.version + 1 }, current.version)) !== 1)
              throw new Error(`membership ${m.id} changed under its lock`);
            current = { ...next, version: current.version + 1 };
            break;
          }
          if (o.code === 'CREDENTIAL_IN_USE' && attempt < 5) continue;
          throw new BillingStepFailed(o.code, true, `the member key could not be issued (${o.status})`);
        }
        break;
      }
      case 'revoke_key': {
        const o = await revokeKey(keyDeps, { keyId: e.keyId, reason: e.reason, cid });
        if (o.status === 'refused' && o.code !== 'KEY_NOT_FOUND')
          throw new BillingStepFailed(o.code, true, 'the member key could not be revoked');
        break;
      }
      case 'notify':
        // the member's message, in this transaction (and raised to the caller as a RaisedNotice)
        await notifyMembership(deps, tx, current, plan, e.notice, e.dedupeKey, cid);
        break;
      default: {
        const never: never = e;
        throw new Error(`unhandled membership effect ${JSON.stringify(never)}`);
      }
    }
  }
  return current;
}

const failureOutcome = (f: BillingFailure): Outcome<never> =>
  refused(f.code === 'BILLING_UNAVAILABLE' ? 'BILLING_UNAVAILABLE' : f.code, f.message);

// ---------------------------------------------------------------- plans

export interface CreatePlanInput {
  readonly id?: string;
  readonly siteId: string;
  readonly name: string;
  readonly amount: number;
  readonly currency: string;
  readonly interval: BillingInterval;
  readonly intervalCount?: number;
  readonly doors: readonly string[];
  readonly membersOnly?: boolean;
  readonly monthlyEntryQuota?: number | null;
  /** the price of a walk-in day pass; null or absent: not sold at the front desk */
  readonly walkInAmount?: number | null;
  readonly graceSeconds?: number;
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/** A plan: its doors must be at its site; the Stripe Price is made at the first approval. */
export async function createPlan(deps: MembershipDeps, input: CreatePlanInput): Promise<PlanResult> {
  const cid = input.cid ?? newCorrelationId();
  const scope = input.siteScope ?? null;
  if (scope !== null && !scope.includes(input.siteId)) return { ...refused('SITE_NOT_FOUND'), cid };
  const ids = z.object({ siteId: SiteId, doors: z.array(DoorId) }).safeParse(input);
  if (!ids.success) return { ...refused('INVALID_REQUEST', summarizeIssues(ids.error)), cid };
  const id = input.id ?? `plan_${newId()}`;
  const r = await deps.db
    .transaction(async (tx): Promise<Outcome<Plan>> => {
      const found = await doorsAtSite(tx, input.siteId, input.doors);
      const missing = input.doors.filter((d) => !found.includes(d));
      if (missing.length > 0) return refused('DOOR_NOT_FOUND', missing.join(','));
      const o = plans.createPlan(
        await loadPlan(tx, id),
        {
          id,
          siteId: ids.data.siteId,
          name: input.name,
          amount: input.amount,
          currency: input.currency.toLowerCase(),
          interval: input.interval,
          intervalCount: input.intervalCount ?? 1,
          doors: ids.data.doors,
          membersOnly: input.membersOnly ?? false,
          monthlyEntryQuota: input.monthlyEntryQuota ?? null,
          walkInAmount: input.walkInAmount ?? null,
          graceSeconds: input.graceSeconds ?? plans.DEFAULT_GRACE_SECONDS,
        },
        deps.clock.now(),
      );
      if (o.status !== 'applied') return o;
      if ((await insertPlan(tx, o.state)) !== 1) return refused('PLAN_ALREADY_EXISTS', `a plan named ${input.name} exists at the site`);
      return o;
    })
    .catch((e: unknown) => {
      if (pgErrorCode(e) === '23505') return refused('PLAN_ALREADY_EXISTS', `a plan named ${input.name} exists at the site`);
      if (pgErrorCode(e) === '23503') return refused('SITE_NOT_FOUND');
      throw e;
    });
  withCorrelation(deps.log, cid, { verb: 'createPlan', planId: id }).info({ status: r.status, code: r.code }, 'plan verb done');
  return { ...r, cid };
}

export function getPlan(deps: MembershipDeps, planId: string, scope: SiteScope = null): Promise<Plan | null> {
  return loadPlan(deps.db, planId, scope);
}

export function listPlans(deps: MembershipDeps, scope: SiteScope, f: PlanFilter): Promise<Page<Plan>> {
  return listPlanRows(deps.db, scope, f);
}

/**
 * Retire: the plan takes no new applications, and each of its memberships
 * ends through endMembership(plan_retired): a paying member keeps access to
 * the end of the period paid for (`ending`), an application is rejected.
 * A membership whose billing could not be stopped is listed in `pending`.
 */
export async function retirePlan(
  deps: MembershipDeps,
  input: { planId: string; actor: string; siteScope?: SiteScope; cid?: CorrelationId },
): Promise<PlanResult & { readonly ended: readonly string[]; readonly pending: readonly string[] }> {
  const cid = input.cid ?? newCorrelationId();
  const r = await deps.db.transaction(async (tx): Promise<Outcome<Plan>> => {
    const o = plans.retirePlan(await loadPlan(tx, input.planId, input.siteScope ?? null), deps.clock.now());
    if (o.status === 'applied' && (await retirePlanRow(tx, o.state)) !== 1) return noop('PLAN_ALREADY_RETIRED', o.state);
    return o;
  });
  const ended: string[] = [];
  const pending: string[] = [];
  if (r.status === 'applied' || r.status === 'noop') {
    for (const id of await listLivingOfPlan(deps.db, input.planId)) {
      const e = await endMembership(deps, { membershipId: id, reason: 'plan_retired', actor: input.actor, note: 'plan retired', cid });
      (e.status === 'applied' || e.status === 'noop' ? ended : pending).push(id);
    }
  }
  withCorrelation(deps.log, cid, { verb: 'retirePlan', planId: input.planId }).info(
    { status: r.status, code: r.code, ended: ended.length, pending: pending.length },
    'plan verb done',
  );
  return { ...r, cid, ended, pending };
}

// ---------------------------------------------------------------- apply / approve

export interface ApplyMembershipInput {
  readonly membershipId?: string;
  readonly planId: string;
  readonly personId: string;
  /** the member's credential; kept only as its digest. Without it the key gets a fresh PIN at activation. */
  readonly credential?: { readonly type: 'pin' | 'card'; readonly value: string };
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/** Apply: an `applied` membership under review, with its subscription's idempotency key stored now (before any Stripe call). */
export async function applyMembership(deps: MembershipDeps, input: ApplyMembershipInput): Promise<MembershipResult> {
  const cid = input.cid ?? newCorrelationId();
  const id = input.membershipId ?? `mem_${newId()}`;
  const personId = PersonId.safeParse(input.personId);
  if (!personId.success) return result(refused('INVALID_REQUEST', 'personId'), cid);
  if (input.credential !== undefined && !PresentedCredential.safeParse(input.credential).success)
    return result(refused('INVALID_CREDENTIAL'), cid);
  let o: Outcome<Membership>;
  try {
    o = await inBilling(deps, 'applyMembership', async (tx): Promise<Outcome<Membership>> => {
      const plan = await loadPlan(tx, input.planId, input.siteScope ?? null);
      if (!plan) return refused('PLAN_NOT_FOUND');
      let credential: domain.MemberCredential | null = null;
      if (input.credential !== undefined) {
        const targets = await issueTargets(tx, deps.secrets, null, personId.data, plan.doors);
        if (!targets.personFound) return refused('PERSON_NOT_FOUND');
        const gateways = new Set(targets.doors.map((d) => d.gatewayId));
        const first = targets.doors[0];
        if (gateways.size !== 1 || first === undefined) return refused('DOORS_SPAN_GATEWAYS');
        const digest = credentialDigest(Buffer.from(first.pepper, 'base64url'), input.credential.type, input.credential.value);
        if (await credentialInUse(tx, first.gatewayId, digest, domain.membershipKeyId(id, 1))) return refused('CREDENTIAL_IN_USE');
        credential = { type: input.credential.type, digest };
      }
      const d = domain.applyMembership(
        await loadMembership(tx, id, null, true),
        { membershipId: id, plan, personId: personId.data, credential, cid },
        deps.clock.now(),
      );
      if (d.status !== 'applied') return plain(d);
      if ((await insertMembership(tx, d.state)) !== 1) throw new Error(`membership ${id} appeared under its lock`);
      return plain(d);
    });
  } catch (e) {
    if (pgErrorCode(e) === '23503') return result(refused('PERSON_NOT_FOUND'), cid);
    throw e;
  }
  withCorrelation(deps.log, cid, { verb: 'applyMembership', membershipId: id }).info(
    { status: o.status, code: o.code },
    'membership verb done',
  );
  return result(o, cid);
}

/**
 * Approve: the checkout starts in Stripe FIRST — the plan's Price (once),
 * the member's customer, the subscription from THE factory with the key
 * stored at apply — then one transaction records the approval and the
 * subscription. Stripe unreachable → `refused BILLING_UNAVAILABLE`, nothing
 * changed (a retry uses the same keys and gets the same objects). An
 * application rejected meanwhile has its fresh subscription cancelled.
 */
export async function approveMembership(
  deps: MembershipDeps,
  input: { membershipId: string; actor: string; siteScope?: SiteScope; cid?: CorrelationId },
): Promise<MembershipResult & { readonly invoiceId?: string | null }> {
  const cid = input.cid ?? newCorrelationId();
  const log = withCorrelation(deps.log, cid, { verb: 'approveMembership', membershipId: input.membershipId });
  const stripe = deps.stripe;
  if (!stripe) return result(refused('BILLING_NOT_CONFIGURED'), cid);
  const m = await loadMembership(deps.db, input.membershipId, input.siteScope ?? null);
  const pre = domain.approveMembership(m, { actor: input.actor, cid }, deps.clock.now());
  if (pre.status !== 'applied' || !m) return result(pre, cid);
  const plan = await loadPlan(deps.db, m.planId);
  if (!plan) throw new Error(`membership ${m.id} has no plan ${m.planId}`);
  let priceId = plan.stripePriceId;
  if (priceId === null) {
    const p = await createPlanPrice(stripe, plan);
    if (!p.ok) return result(failureOutcome(p.failure), cid);
    priceId = p.value;
    await recordPlanPrice(deps.db, plan.id, priceId, deps.clock.now());
  }
  const customer = await createMemberCustomer(stripe, { membershipId: m.id, personId: m.personId });
  if (!customer.ok) return result(failureOutcome(customer.failure), cid);
  const sub = await createSubscription(stripe, {
    purpose: 'membership_initial',
    subjectId: m.id,
    customerId: customer.value,
    priceId,
    idempotencyKey: m.idempotencyKey,
  });
  if (!sub.ok) {
    log.warn({ code: sub.failure.code, stripeCode: sub.failure.stripeCode }, 'approval refused: no subscription');
    return result(failureOutcome(sub.failure), cid);
  }
  deps.crash('afterSubscriptionCreatedBeforeRecord');
  const o = await inBilling(deps, 'approveMembership', async (tx): Promise<Outcome<Membership>> => {
    const now = deps.clock.now();
    const cur = await loadMembership(tx, m.id, null, true);
    const d = domain.approveMembership(cur, { actor: input.actor, cid }, now);
    if (d.status !== 'applied' || !cur) return plain(d);
    if ((await casMembership(tx, d.state, cur.version)) !== 1) throw new Error(`membership ${m.id} changed under its lock`);
    await recordCheckout(
      tx,
      m.id,
      {
        customerId: customer.value,
        subscriptionId: sub.value.observation.subscriptionId,
        invoiceId: sub.value.invoiceId,
        periodEnd: sub.value.observation.currentPeriodEnd,
      },
      now,
    );
    return applied(d.code, {
      ...d.state,
      stripeCustomerId: customer.value,
      subscriptionId: sub.value.observation.subscriptionId,
      firstInvoiceId: sub.value.invoiceId,
    });
  });
  if (o.status !== 'applied') {
    const cur = o.status === 'conflict' ? o.current : o.status === 'noop' ? o.state : null;
    if (cur && cur.subscriptionId !== sub.value.observation.subscriptionId) {
      // the application ended while Stripe answered: nothing may bill for it
      const c = await cancelSubscriptionNow(stripe, sub.value.observation.subscriptionId);
      log.warn({ code: o.code, cancelled: c.ok }, 'approval lost a race: the fresh subscription is cancelled');
    }
  }
  log.info({ status: o.status, code: o.code }, 'membership verb done');
  return { ...result(o, cid), invoiceId: sub.value.invoiceId };
}

// ---------------------------------------------------------------- the one ending verb

export interface EndMembershipInput {
  readonly membershipId: string;
  readonly reason: EndReason;
  /** staff for force_cancel (with a note), `member` for a self-cancel, `stripe` when Stripe ended it */
  readonly actor?: string | null;
  readonly note?: string | null;
  readonly expectedVersion?: number;
  /** set by the billing worker when Stripe has already ended the subscription (no billing call) */
  readonly subscriptionEnded?: boolean;
  /** set when the subscription read back from Stripe shows the billing stop made (no billing call; the end is written) */
  readonly billingStopped?: boolean;
  /** `checkout_expired`: the checkout deadline (ms after the approval) the end is judged against */
  readonly checkoutDeadlineMs?: number;
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/**
 * endMembership(id, reason): THE verb for every way a membership ends.
 * 1. decide on the membership as it is (stale clicks → noop/conflict; an
 *    application under review or in checkout → refused);
 * 2. stop billing in Stripe FIRST (cancel now, or cancel at period end);
 *    unreachable → `refused BILLING_UNAVAILABLE`, and nothing changed here;
 * 3. one transaction: lock, decide again on the fresh row (two staff at once:
 *    one applied, the other noop/conflict), write through endMembershipRow
 *    (the only writer of ending/ended/rejected), revoke the key through the
 *    key verb when the end takes effect.
 * The notices it raises are returned (`notices`) for the notification outbox.
 */
export async function endMembership(deps: MembershipDeps, input: EndMembershipInput): Promise<MembershipResult> {
  const cid = input.cid ?? newCorrelationId();
  const log = withCorrelation(deps.log, cid, { verb: 'endMembership', membershipId: input.membershipId, reason: input.reason });
  const cmd: domain.EndCommand = {
    reason: input.reason,
    actor: input.actor ?? null,
    note: input.note ?? null,
    subscriptionEnded: input.subscriptionEnded ?? false,
    cid,
    ...(input.expectedVersion === undefined ? {} : { expectedVersion: input.expectedVersion }),
    ...(input.checkoutDeadlineMs === undefined ? {} : { checkoutDeadlineMs: input.checkoutDeadlineMs }),
  };
  const before = await loadMembership(deps.db, input.membershipId, input.siteScope ?? null);
  const pre = domain.decideEnd(before, cmd, deps.clock.now());
  if (pre.outcome.status !== 'applied' || !before) {
    log.info({ status: pre.outcome.status, code: pre.outcome.code }, 'membership verb done');
    return result(pre.outcome, cid);
  }
  let stoppedAs: domain.SubscriptionObservation | null = null;
  if (pre.billing !== 'none' && input.billingStopped !== true) {
    const stripe = deps.stripe;
    if (!stripe) return result(refused('BILLING_NOT_CONFIGURED'), cid);
    const subId = before.subscriptionId;
    if (subId === null) throw new Error('a billing stop without a subscription');
    const stop = pre.billing === 'cancel_now' ? await cancelSubscriptionNow(stripe, subId) : await scheduleSubscriptionEnd(stripe, subId);
    if (!stop.ok) {
      // no answer is not "nothing changed": Stripe may have stopped billing, so the stop is recorded as pending
      if (stop.failure.outcomeUnknown) return pendingStop(deps, input, pre.billing, cid);
      log.warn(
        { code: stop.failure.code, stripeCode: stop.failure.stripeCode, billing: pre.billing },
        'billing did not stop: nothing changed',
      );
      return result(failureOutcome(stop.failure), cid);
    }
    deps.crash('afterBillingStoppedBeforeEnd');
    stoppedAs = stop.value;
  }
  const stopped = pre.billing !== 'none';
  const out = await inBilling(deps, 'endMembershipTx', async (tx): Promise<{ o: Outcome<Membership>; notices: RaisedNotice[] }> => {
    const m = await loadMembership(tx, input.membershipId, null, true);
    const now = deps.clock.now();
    let d = domain.decideEnd(m, cmd, now);
    if (stopped && d.outcome.status === 'conflict' && cmd.expectedVersion !== undefined) {
      // Stripe has already stopped billing on this caller's word; a version that moved since must not leave
      // Stripe and the membership apart: the end is decided again on the row as it is now
      const { expectedVersion: _seen, ...fresh } = cmd;
      d = domain.decideEnd(m, fresh, now);
      log.warn(
        { code: d.outcome.code, seenVersion: _seen, version: m?.version },
        'billing stopped under a stale version: the end follows Stripe',
      );
    }
    const o: MembershipOutcome = d.outcome;
    if (o.status !== 'applied' || !m) return { o: plain(o), notices: [] };
    if (d.billing !== pre.billing && d.billing !== 'none') {
      // the membership moved between the Stripe call and the lock to a state that needs another stop: the caller retries
      return { o: conflict('MEMBERSHIP_STATE_CHANGED', m), notices: [] };
    }
    if ((await endMembershipRow(tx, o.state, m.version)) !== 1) throw new Error(`membership ${m.id} changed under its lock`);
    const plan = await loadPlan(tx, m.planId);
    if (!plan) throw new Error(`membership ${m.id} has no plan`);
    const written = await runEffects(deps, tx, o.state, plan, o.emits, cid);
    if (written.status === 'ended' || written.status === 'rejected') {
      // the end takes effect: the member's bookings not started (pending or confirmed) are cancelled through the stay verb
      for (const stayId of await listOpenStaysOfMembership(tx, m.id)) {
        const c = await cancelStayInTx(deps, tx, stayId, 'membership_ended', cid);
        log.info({ stayId, status: c.status, code: c.code }, "member's booking cancelled");
      }
    }
    return { o: applied(o.code, written), notices: noticesOf(m, o.emits) };
  });
  log.info({ status: out.o.status, code: out.o.code, billing: pre.billing }, 'membership verb done');
  if (input.reason === 'checkout_expired' && stopped) {
    // the subscription is cancelled, so nothing more can be charged; money paid in the moment before the
    // cancellation (whatever the local write decided: a payment that won the race makes it a noop) is refunded
    await inBilling(deps, 'queueCheckoutRefund', (tx) =>
      enqueueBillingJob(tx, {
        kind: 'membership_refund',
        subjectId: before.id,
        dedupeKey: `membership_refund:${before.id}`,
        body: { membershipId: before.id },
        cid,
        now: deps.clock.now(),
      }),
    );
  }
  if (stoppedAs?.status === 'canceled' && out.o.status === 'applied' && out.o.state.status === 'ending' && out.o.state.subscriptionId) {
    // the schedule found the subscription already ended in Stripe: the end takes effect now, not at a period end
    await reconcileSubscription(deps, out.o.state.subscriptionId, cid);
    const now = await loadMembership(deps.db, input.membershipId);
    if (now) return result(applied(out.o.code, now), cid, out.notices);
  }
  return result(out.o, cid, out.notices);
}

/** How long a pending stop waits before its reconcile job reads Stripe: the lost request has time to land. */
export const STOP_RECONCILE_DELAY_MS = 60_000;

/**
 * A billing stop whose outcome Stripe did not give (timeout, lost connection, 500): recorded on the
 * membership as pending with a `reconcile_membership` job, in one transaction, and answered
 * `MEMBERSHIP_END_PENDING` (202). The job reads the subscription and the membership converges on it.
 */
async function pendingStop(
  deps: MembershipDeps,
  input: EndMembershipInput,
  billing: domain.PendingStop,
  cid: CorrelationId,
): Promise<MembershipResult> {
  const log = withCorrelation(deps.log, cid, { verb: 'endMembership', membershipId: input.membershipId, reason: input.reason });
  const o = await inBilling(deps, 'recordPendingStop', async (tx): Promise<Outcome<Membership>> => {
    const cur = await loadMembership(tx, input.membershipId, null, true);
    const now = deps.clock.now();
    const d = domain.recordPendingStop(cur, billing, { cid }, now);
    if (d.status !== 'applied' || !cur) return plain(d);
    if ((await recordBillingStopPending(tx, d.state, billing, cur.version)) !== 1)
      throw new Error(`membership ${cur.id} changed under its lock`);
    await enqueueBillingJob(tx, {
      kind: 'reconcile_membership',
      subjectId: cur.id,
      dedupeKey: `reconcile_membership:${cur.id}:${d.state.version}`,
      body: { membershipId: cur.id, reason: input.reason, actor: input.actor ?? null, note: input.note ?? null, billing },
      cid,
      now,
      notBefore: now + STOP_RECONCILE_DELAY_MS,
    });
    return plain(d);
  });
  log.warn({ status: o.status, code: o.code, billing }, 'Stripe gave no answer to the billing stop: recorded as pending');
  return result(o, cid);
}

export interface PendingStopJob {
  readonly membershipId: string;
  readonly reason: EndReason;
  readonly actor: string | null;
  readonly note: string | null;
  readonly billing: domain.PendingStop;
}

/**
 * The `reconcile_membership` job: the subscription is read from Stripe. The stop is there → the end is
 * written (the one verb, no billing call). It is not → the request stands and is made again with its
 * own idempotency key (a request Stripe never ran runs now; one still running answers 409 and the job
 * retries). Stripe refusing it for good clears the pending record, with an alarm, and the job goes dead
 * with Stripe's code for an operator. Both directions converge: nothing is left half done.
 */
export async function reconcilePendingStop(deps: MembershipDeps, job: PendingStopJob, cid: CorrelationId): Promise<OutcomeCode> {
  const stripe = deps.stripe;
  if (!stripe) throw new BillingStepFailed('BILLING_NOT_CONFIGURED', false, 'no Stripe client');
  const log = withCorrelation(deps.log, cid, { verb: 'reconcilePendingStop', membershipId: job.membershipId });
  const m = await loadMembership(deps.db, job.membershipId);
  if (!m) return 'MEMBERSHIP_NOT_FOUND';
  // an end written meanwhile (the subscription's own events) cleared it: converged already
  if (m.billingStopPending === null || m.subscriptionId === null) return 'SUBSCRIPTION_STATUS_UNCHANGED';
  const subId = m.subscriptionId;
  const seen = await retrieveSubscription(stripe, subId);
  if (!seen.ok) throw new BillingStepFailed(seen.failure.code, seen.failure.kind === 'permanent', seen.failure.message);
  const ended = seen.value.status === 'canceled' || seen.value.status === 'incomplete_expired';
  const made = job.billing === 'cancel_now' ? ended : ended || seen.value.cancelAtPeriodEnd;
  if (!made) {
    const again = job.billing === 'cancel_now' ? await cancelSubscriptionNow(stripe, subId) : await scheduleSubscriptionEnd(stripe, subId);
    if (!again.ok) {
      if (again.failure.kind === 'transient') throw new BillingStepFailed(again.failure.code, false, again.failure.message);
      await inBilling(deps, 'recordPendingStop', async (tx) => {
        const cur = await loadMembership(tx, m.id, null, true);
        const d = domain.recordPendingStop(cur, null, { cid }, deps.clock.now());
        if (d.status === 'applied' && cur && (await recordBillingStopPending(tx, d.state, null, cur.version)) !== 1)
          throw new Error(`membership ${m.id} changed under its lock`);
      });
      log.error(
        { alarm: true, code: 'MEMBERSHIP_END_NOT_MADE', stripeCode: again.failure.stripeCode, billing: job.billing },
        'ALARM: Stripe refused the pending billing stop; the membership is as it was',
      );
      throw new BillingStepFailed(again.failure.code, true, again.failure.message);
    }
  }
  const r = await endMembership(deps, {
    membershipId: m.id,
    reason: job.reason,
    actor: job.actor,
    note: job.note,
    billingStopped: true,
    cid,
  });
  if (r.status === 'refused' || r.status === 'conflict')
    throw new BillingStepFailed(r.code, r.status === 'refused', 'the pending end could not be written');
  log.info({ status: r.status, code: r.code, billing: job.billing }, 'pending billing stop reconciled');
  return r.code;
}

/** Self-cancel on behalf of the member: billing is set to stop at period end first; the membership is `ending`, the key works until then. */
export function selfCancelMembership(
  deps: MembershipDeps,
  input: { membershipId: string; expectedVersion?: number; siteScope?: SiteScope; cid?: CorrelationId },
): Promise<MembershipResult> {
  return endMembership(deps, { ...input, reason: 'self_cancel', actor: 'member', note: null });
}

// ---------------------------------------------------------------- Stripe's word (billing worker)

/**
 * A subscription or invoice event: the subscription is RE-READ from Stripe
 * and the membership moved on what it says now — ranked by state, never by
 * which event arrived when, so `invoice.payment_failed` delivered after
 * `invoice.paid` (or twice) changes nothing. A canceled subscription goes
 * through endMembership with `subscriptionEnded`.
 */
export async function reconcileSubscription(
  deps: MembershipDeps,
  subscriptionId: string,
  cid: CorrelationId,
  /** the membership the subscription's metadata names (`subject_id`), when it says it is one of ours */
  subjectId?: string,
): Promise<OutcomeCode> {
  const stripe = deps.stripe;
  if (!stripe) throw new BillingStepFailed('BILLING_NOT_CONFIGURED', false, 'no Stripe client');
  const log = withCorrelation(deps.log, cid, { verb: 'reconcileSubscription', subscriptionId });
  const m = await loadMembershipBySubscription(deps.db, subscriptionId);
  if (!m) {
    if (subjectId === undefined) return 'MEMBERSHIP_NOT_FOUND'; // not one of ours (another system on the account)
    const named = await loadMembership(deps.db, subjectId);
    if (!named) return 'MEMBERSHIP_NOT_FOUND';
    // approved in Stripe, the approval's local write not landed yet: retried with backoff until it has
    if (named.subscriptionId === null && named.status === 'applied')
      throw new BillingStepFailed('MEMBERSHIP_NOT_FOUND', false, `membership ${subjectId} has not recorded ${subscriptionId} yet`);
    // a subscription the membership does not hold (an approval that lost a race was cancelled): nothing to do
    return 'SUBSCRIPTION_MISMATCH';
  }
  const now = await retrieveSubscription(stripe, subscriptionId);
  if (!now.ok) throw new BillingStepFailed(now.failure.code, now.failure.kind === 'permanent', now.failure.message);
  const first = domain.observeSubscription(m, now.value, { cid }, deps.clock.now());
  if (first.kind === 'end') {
    const r = await endMembership(deps, {
      membershipId: m.id,
      reason: first.reason,
      actor: first.actor,
      note: first.note,
      ...(first.stopped === 'ended' ? { subscriptionEnded: true } : { billingStopped: true }),
      cid,
    });
    if (r.status === 'refused') throw new BillingStepFailed(r.code, true, 'the membership could not end');
    return r.code;
  }
  if (first.kind === 'reassert') {
    // the membership is ending but Stripe would bill the next period: the stop is made again, under a key
    // of its own (the first stop's saved answer would be replayed and change nothing)
    const again = await scheduleSubscriptionEnd(stripe, subscriptionId, `cancel_at_period_end:${subscriptionId}:${m.version}`);
    if (!again.ok) throw new BillingStepFailed(again.failure.code, again.failure.kind === 'permanent', again.failure.message);
    log.warn(
      { alarm: true, code: 'MEMBERSHIP_ALREADY_ENDING' },
      'ALARM: the end was withdrawn in Stripe while the membership is ending: set again',
    );
    return 'MEMBERSHIP_ALREADY_ENDING';
  }
  const code = await inBilling(deps, 'observeSubscription', async (tx): Promise<OutcomeCode> => {
    const cur = await loadMembership(tx, m.id, null, true);
    if (!cur) return 'MEMBERSHIP_NOT_FOUND';
    const d = domain.observeSubscription(cur, now.value, { cid }, deps.clock.now());
    if (d.kind !== 'step') return 'MEMBERSHIP_STATE_CHANGED'; // moved meanwhile: the event is retried
    const o = d.outcome;
    if (o.status === 'refused') throw new BillingStepFailed(o.code, true, o.detail ?? 'refused');
    if (o.status !== 'applied') return o.code;
    if ((await casMembership(tx, o.state, cur.version)) !== 1) throw new Error(`membership ${cur.id} changed under its lock`);
    const plan = await loadPlan(tx, cur.planId);
    if (!plan) throw new Error(`membership ${cur.id} has no plan`);
    await runEffects(deps, tx, o.state, plan, o.emits, cid);
    return o.code;
  });
  log.info({ code, stripeStatus: now.value.status }, 'subscription reconciled');
  if (code === 'MEMBERSHIP_STATE_CHANGED') throw new BillingStepFailed(code, false, 'the membership moved while deciding');
  return code;
}

/**
 * How long an approved application's checkout stays open unpaid (config MEMBERSHIP_CHECKOUT_DEADLINE_MS):
 * 22 hours, an hour before Stripe expires an incomplete subscription on its own (23 hours), so the end is
 * ours — our reason, our notice, a refund of money that landed anyway — and not a race with Stripe's.
 */
export const DEFAULT_CHECKOUT_DEADLINE_MS = 22 * 3_600_000;

/**
 * The checkout sweep (each billing pass): every approved application still unpaid at its deadline ends
 * through THE ending verb with `checkout_expired` — the subscription cancelled at Stripe first (its open
 * invoice voided: nothing can be charged after the end), then `rejected`, the applicant told, and a
 * `membership_refund` job for money that landed anyway. Stripe unreachable → it stays open, and the next
 * pass tries again. Returns how many ended.
 */
export async function expireUnpaidCheckouts(deps: MembershipDeps, limit: number, deadlineMs: number): Promise<number> {
  let ended = 0;
  for (const id of await listCheckoutsApprovedBefore(deps.db, deps.clock.now() - deadlineMs, limit)) {
    const r = await endMembership(deps, {
      membershipId: id,
      reason: 'checkout_expired',
      actor: 'tobira',
      note: 'the first invoice was not paid by the checkout deadline',
      checkoutDeadlineMs: deadlineMs,
    });
    if (r.status === 'applied' && r.code === 'MEMBERSHIP_CHECKOUT_EXPIRED') ended += 1;
    else
      withCorrelation(deps.log, r.cid, { part: 'checkout-sweep', membershipId: id }).info(
        { status: r.status, code: r.code },
        'unpaid checkout not ended on this pass',
      );
  }
  return ended;
}

/**
 * How often an open checkout's subscription is re-read from Stripe (config MEMBERSHIP_CHECKOUT_RECHECK_MS):
 * the webhooks of a paid first invoice can all be lost, and the member should not wait for the deadline.
 */
export const DEFAULT_CHECKOUT_RECHECK_MS = 2 * 60_000;

/**
 * The checkout recheck (each billing pass): every approved application still `applied` after `intervalMs`,
 * and again every `intervalMs`, has its subscription re-read and decided through `reconcileSubscription` —
 * what a webhook would have done (paid → active with its key). Stripe unreachable → the next round tries
 * again. Returns how many it read.
 */
export async function recheckOpenCheckouts(deps: MembershipDeps, limit: number, intervalMs: number): Promise<number> {
  const now = deps.clock.now();
  const due = await claimCheckoutsToRecheck(deps.db, { now, minAgeMs: intervalMs, intervalMs, limit });
  for (const c of due) {
    const cid = newCorrelationId();
    const log = withCorrelation(deps.log, cid, { part: 'checkout-recheck', membershipId: c.id, subscriptionId: c.subscriptionId });
    try {
      const code = await reconcileSubscription(deps, c.subscriptionId, cid, c.id);
      if (code !== 'MEMBERSHIP_PAYMENT_PENDING')
        log.warn({ code }, 'an open checkout moved when re-read from Stripe (its webhooks were late or lost)');
    } catch (e) {
      const code = e instanceof BillingStepFailed ? e.code : 'INTERNAL';
      log.warn({ code, err: String(e) }, 'open checkout not re-read on this pass');
    }
  }
  return due.length;
}

/**
 * Living memberships re-read from Stripe every `intervalMs` (BILLING_RECONCILE_MS): a subscription Stripe
 * cancelled or moved (the dashboard, a renewal that failed, its retries given up) with every webhook lost
 * would otherwise leave the member's key opening for ever (a member key runs until a verb revokes it).
 * Each goes through `reconcileSubscription`, the verb its webhooks run. Returns how many were re-read.
 */
export async function recheckLivingMemberships(deps: MembershipDeps, limit: number, intervalMs: number): Promise<number> {
  const due = await claimLivingToRecheck(deps.db, { now: deps.clock.now(), intervalMs, limit });
  for (const c of due) {
    const cid = newCorrelationId();
    const log = withCorrelation(deps.log, cid, { part: 'membership-recheck', membershipId: c.id, subscriptionId: c.subscriptionId });
    try {
      const code = await reconcileSubscription(deps, c.subscriptionId, cid, c.id);
      if (code === 'SUBSCRIPTION_STATUS_UNCHANGED' || code === 'MEMBERSHIP_ALREADY_ENDING')
        log.info({ code }, 'membership re-read from Stripe');
      else log.warn({ code }, 'a membership moved when re-read from Stripe (its webhooks were late or lost)');
    } catch (e) {
      const code = e instanceof BillingStepFailed ? e.code : 'INTERNAL';
      log.warn({ code, err: String(e) }, 'membership not re-read on this pass');
    }
  }
  return due.length;
}

/**
 * The `membership_refund` job: every paid payment of the application's first invoice is refunded in full,
 * each with its own key stored with Stripe (`refund:membership:<id>:<intent>`: a retry, or a second run
 * of the job, gets the same refund back), and the applicant is told of each refund (`refund_made`).
 * Nothing paid → `NOTHING_TO_REFUND`.
 */
export async function refundLateCheckout(deps: MembershipDeps, membershipId: string, cid: CorrelationId): Promise<OutcomeCode> {
  const stripe = deps.stripe;
  if (!stripe) throw new BillingStepFailed('BILLING_NOT_CONFIGURED', false, 'no Stripe client');
  const log = withCorrelation(deps.log, cid, { verb: 'refundLateCheckout', membershipId });
  const m = await loadMembership(deps.db, membershipId);
  if (!m) return 'MEMBERSHIP_NOT_FOUND';
  if (m.firstInvoiceId === null) return 'NOTHING_TO_REFUND';
  const paid = await listPaidInvoicePayments(stripe, m.firstInvoiceId);
  if (!paid.ok) throw new BillingStepFailed(paid.failure.code, paid.failure.kind === 'permanent', paid.failure.message);
  if (paid.value.length === 0) return 'NOTHING_TO_REFUND';
  // the job exists only once the deadline's cancellation was made at Stripe: whatever the local write decided,
  // the subscription no longer runs, so the money is refunded. A payment that won the race locally made it a
  // membership for a moment (the subscription's deleted event ends it): worth an operator's look
  if (!(m.status === 'rejected' && m.endReason === 'checkout_expired'))
    log.warn(
      { alarm: true, code: 'MEMBERSHIP_CHECKOUT_PAID', status: m.status },
      'ALARM: a checkout paid as its deadline cancelled it: refunded; the membership follows its cancelled subscription',
    );
  for (const p of paid.value) {
    const r = await refundInvoicePayment(stripe, {
      intentId: p.intentId,
      idempotencyKey: `refund:membership:${m.id}:${p.intentId}`,
      membershipId: m.id,
    });
    if (!r.ok) throw new BillingStepFailed(r.failure.code, r.failure.kind === 'permanent', r.failure.message);
    await deps.db.transaction((tx) =>
      enqueueNotification(tx, {
        template: 'refund_made',
        subjectId: r.value.stripeRefundId,
        personId: m.personId,
        siteId: m.siteId,
        vars: { amount: r.value.amount, currency: r.value.currency },
        cid,
        now: deps.clock.now(),
        channel: deps.notificationChannel,
        log: deps.log,
      }),
    );
    log.info(
      { code: 'MEMBERSHIP_LATE_PAYMENT_REFUNDED', intentId: p.intentId, refundId: r.value.stripeRefundId, amount: r.value.amount },
      'late checkout payment refunded',
    );
  }
  return 'MEMBERSHIP_LATE_PAYMENT_REFUNDED';
}

/**
 * After a site lifted a person's block: each membership of theirs there that gives door access now and
 * holds no live key gets a fresh one (`domain.restoreAccess`), each in its own verb's transaction. Returns
 * how many keys were issued.
 */
export async function restoreAccessAfterUnblock(
  deps: MembershipDeps,
  input: { readonly siteId: string; readonly personId: string; readonly cid: CorrelationId },
): Promise<number> {
  const log = withCorrelation(deps.log, input.cid, { verb: 'restoreAccess', siteId: input.siteId, personId: input.personId });
  let issued = 0;
  for (const id of await listLivingMembershipsOfPerson(deps.db, input.siteId, input.personId)) {
    // the unblock is done whatever happens here: one membership that cannot be given its key is logged, not a 500
    const code = await inBilling(deps, 'restoreAccess', async (tx): Promise<OutcomeCode> => {
      const m = await loadMembership(tx, id, null, true);
      const plan = m ? await loadPlan(tx, m.planId) : null;
      if (!m || !plan) return 'MEMBERSHIP_NOT_FOUND';
      const live = m.keyId !== null && (await liveKeysOfPersonAtSite(tx, input.siteId, input.personId)).includes(m.keyId);
      const o = domain.restoreAccess(m, { cid: input.cid, keyLive: live }, deps.clock.now());
      if (o.status !== 'applied') return o.code;
      if ((await casMembershipAccess(tx, o.state, m.version)) !== 1) throw new Error(`membership ${m.id} changed under its lock`);
      await runEffects(deps, tx, o.state, plan, o.emits, input.cid);
      return o.code;
    }).catch((e: unknown): OutcomeCode => {
      log.error(
        { code: 'MEMBERSHIP_ACCESS_NOT_RESTORED', membershipId: id, err: String(e) },
        'member key not given back after the unblock',
      );
      return 'MEMBERSHIP_ACCESS_NOT_RESTORED';
    });
    log.info({ code, membershipId: id }, 'member access after the unblock');
    if (code === 'MEMBERSHIP_ACCESS_RESTORED') issued += 1;
  }
  return issued;
}

/** The grace sweep: each member owing past the plan's grace (past due, or ending since) loses door access (key revoked through the key verb). */
export async function suspendOverdueAccess(deps: MembershipDeps, limit: number): Promise<number> {
  const cid = newCorrelationId();
  const log = withCorrelation(deps.log, cid, { part: 'membership-grace' });
  let suspended = 0;
  for (const id of await listPastDue(deps.db, limit)) {
    const code = await inBilling(deps, 'suspendAccess', async (tx): Promise<OutcomeCode> => {
      const m = await loadMembership(tx, id, null, true);
      const plan = m ? await loadPlan(tx, m.planId) : null;
      if (!m || !plan) return 'MEMBERSHIP_NOT_FOUND';
      const o = domain.suspendAccess(m, plan, { cid }, deps.clock.now());
      if (o.status !== 'applied') return o.code;
      if ((await casMembershipAccess(tx, o.state, m.version)) !== 1) throw new Error(`membership ${m.id} changed under its lock`);
      await runEffects(deps, tx, o.state, plan, o.emits, cid);
      return o.code;
    });
    if (code === 'MEMBERSHIP_ACCESS_SUSPENDED') {
      suspended += 1;
      log.info({ code, membershipId: id }, 'door access suspended');
    }
  }
  return suspended;
}

// ---------------------------------------------------------------- reads

export function getMembership(deps: MembershipDeps, id: string, scope: SiteScope = null): Promise<Membership | null> {
  return loadMembership(deps.db, id, scope);
}

export function listMemberships(deps: MembershipDeps, scope: SiteScope, f: MembershipFilter): Promise<Page<Membership>> {
  return listMembershipRows(deps.db, scope, f);
}
