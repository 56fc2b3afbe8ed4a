import {
  applied,
  asSiteId,
  credentialDigest,
  newCorrelationId,
  newId,
  noop,
  PersonId,
  PresentedCredential,
  refused,
  SiteId,
  withCorrelation,
  type CorrelationId,
  type Logger,
  type Outcome,
  type OutcomeCode,
  type Page,
} from '@tobira/shared';
import { pgErrorCode, type Tx } from '../adapters/db/db.js';
import { credentialInUse, issueTargets, liveKeysOfPersonAtSite } from '../adapters/db/keys.js';
import { loadPlan } from '../adapters/db/plans.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { loadStaySettings } from '../adapters/db/stays.js';
import {
  casWalkIn,
  deleteBlock,
  insertBlock,
  lockPersonForBlock,
  insertWalkIn,
  insertWalkInRefund,
  listBlocks,
  listExpiredWalkIns,
  listQuotaUsage,
  listWalkIns as listWalkInRows,
  loadBlock,
  loadWalkIn,
  loadWalkInRefund,
  dropWalkInRefund,
  failWalkInRefundAttempt,
  nextWalkInRefundAttempt,
  recordWalkInStripeRefund,
  refundedInStripeDirectly,
  setWalkInRefundStatus,
  type WalkInRefund,
  recordWalkInIntent,
  returnQuota,
  useQuota,
  type Block,
  type QuotaUsage,
  type WalkInFilter,
} from '../adapters/db/walk-ins.js';
import type { BillingFailure } from '../adapters/stripe/errors.js';
import { cancelPaymentIntent, createPaymentIntent, retrievePaymentIntent } from '../adapters/stripe/payment-intents.js';
import { createRefund, listRefundsOfIntent, type RefundObservation } from '../adapters/stripe/refunds.js';
import type { CancelReason } from '../domain/cancellation-policy.js';
import { checkInGates, type GatePass } from '../domain/check-in-gates.js';
import type { Checked } from '../domain/nights.js';
import { deadLetterWalkInRefundJob, enqueueBillingJob } from '../adapters/db/billing-jobs.js';
import type { IntentObservation } from '../domain/payments.js';
import type { Plan } from '../domain/plans.js';
import * as domain from '../domain/walk-ins.js';
import { quotaMonthOf, type WalkIn, type WalkInEffect, type WalkInOutcome } from '../domain/walk-ins.js';
import { gateFacts } from './check-in.js';
import { issueKey, revokeKey } from './keys.js';
import { restoreAccessAfterUnblock } from './memberships.js';
import { BillingStepFailed, BookingRaced, inBilling, type StayDeps } from './stays.js';
import { withdrawUnpaidWalkIn } from '../adapters/db/withdraw.js';

/**
 * Walk-ins at the front desk, the check-in gates and monthly quotas (issue
 * #13, docs/memberships.md "Check-in gates"). A walk-in passes the gates
 * and takes its quota use in one transaction with its idempotency key
 * (`walk_in:<id>:1`), THEN the PaymentIntent is made by the one factory
 * (`metadata.purpose = walk_in`); only the verified, deduplicated webhook
 * (re-read from Stripe) settles it into a key, through the key verb. An
 * unpaid walk-in is released when its hold ends: the intent is cancelled in
 * Stripe first, and the quota use goes back to the month it was taken from.
 */
export type WalkInDeps = StayDeps;

export type WalkInResult = Outcome<WalkIn> & { readonly cid: CorrelationId };

const plain = (o: WalkInOutcome): Outcome<WalkIn> => (o.status === 'applied' ? applied(o.code, o.state) : o);
const failureOutcome = (f: BillingFailure): Outcome<never> =>
  refused(f.code === 'BILLING_UNAVAILABLE' ? 'BILLING_UNAVAILABLE' : f.code, f.message);
const inScope = (scope: SiteScope | undefined, siteId: string): boolean => scope === null || scope === undefined || scope.includes(siteId);

/** Runs a walk-in verb's effects in its transaction: the key through the key verbs, quota uses back to their month. */
async function runEffects(deps: WalkInDeps, tx: Tx, w: WalkIn, effects: readonly WalkInEffect[], cid: CorrelationId): Promise<void> {
  const keyDeps = { ...deps, db: tx };
  for (const e of effects) {
    switch (e.type) {
      case 'use_quota':
        // written by createWalkIn before the row (its 0 rows is the refusal)
        break;
      case 'return_quota':
        await returnQuota(tx, { planId: w.planId, personId: w.personId, month: e.month, now: deps.clock.now() });
        break;
      case 'issue_key': {
        const plan = await loadPlan(tx, w.planId);
        if (!plan) throw new Error(`walk-in ${w.id} has no plan`);
        const o = await issueKey(keyDeps, {
          keyId: e.keyId,
          personId: w.personId,
          doors: plan.doors,
          credential: w.credential,
          validFrom: e.validFrom,
          validUntil: e.validUntil,
          cid,
        });
        if (o.status !== 'applied' && o.status !== 'noop')
          throw new BillingStepFailed(o.code, true, `the walk-in key could not be issued (${o.status})`);
        break;
      }
      case 'revoke_key': {
        const o = await revokeKey(keyDeps, { keyId: e.keyId, reason: 'walk_in_cancelled', cid });
        if (o.status === 'refused' && o.code !== 'KEY_NOT_FOUND')
          throw new BillingStepFailed(o.code, true, 'the walk-in key could not be revoked');
        break;
      }
      case 'refund':
        await queueWalkInRefund(tx, w, e.amount, cid, deps.clock.now());
        break;
      default: {
        const never: never = e;
        throw new Error(`unhandled walk-in effect ${JSON.stringify(never)}`);
      }
    }
  }
}

/**
 * The refund row (its key `refund:walk_in:<id>:1` stored now) and the one job that calls Stripe with it. What
 * was already given back in Stripe directly counts toward it: only the rest is owed (none: nothing queued).
 */
async function queueWalkInRefund(tx: Tx, w: WalkIn, amount: number, cid: CorrelationId, now: number): Promise<void> {
  const rest = amount - (await refundedInStripeDirectly(tx, w.id));
  if (rest <= 0) return;
  if ((await insertWalkInRefund(tx, { walkInId: w.id, amount: rest, currency: w.currency, cid, now })) !== 1) return;
  await enqueueBillingJob(tx, {
    kind: 'walk_in_refund',
    subjectId: w.id,
    dedupeKey: `walk_in_refund:${w.id}`,
    body: { walkInId: w.id },
    cid,
    now,
  });
}

/**
 * The gates again when the key is issued (the desk's check happened before the payment): blocked, the plan
 * still offered here, walk-ins still sold, members only. The quota use was taken at creation and is held by
 * this walk-in, so it is not counted against it twice.
 */
async function walkInKeyGate(tx: Tx, w: WalkIn, walkInsAllowed: boolean): Promise<Checked<GatePass>> {
  const plan = await loadPlan(tx, w.planId);
  const facts = await gateFacts(tx, {
    siteId: asSiteId(w.siteId),
    personId: w.personId,
    plan,
    walkInsAllowed,
    month: w.quotaMonth ?? '',
  });
  return checkInGates({ ...facts, kind: 'walk_in', plan, usedThisMonth: 0 });
}

/** Lock, decide, compare-and-set, effects: one transaction. */
async function walkInStep(
  deps: WalkInDeps,
  verb: string,
  walkInId: string,
  cid: CorrelationId,
  scope: SiteScope | undefined,
  decide: (w: WalkIn, timeZone: string, tx: Tx, now: number) => Promise<WalkInOutcome> | WalkInOutcome,
): Promise<Outcome<WalkIn>> {
  return inBilling(deps, verb, async (tx) => {
    const w = await loadWalkIn(tx, walkInId, scope ?? null, true);
    if (!w) return refused('WALK_IN_NOT_FOUND');
    const settings = await loadStaySettings(tx, w.siteId);
    if (!settings) throw new Error(`walk-in ${w.id} has no site`);
    const now = deps.clock.now();
    const o = await decide(w, settings.timeZone, tx, now);
    if (o.status !== 'applied') return o;
    if ((await casWalkIn(tx, o.state, w.version)) !== 1) throw new Error(`walk-in ${w.id} changed under its lock`);
    await runEffects(deps, tx, o.state, o.emits, cid);
    return applied(o.code, o.state);
  });
}

// ---------------------------------------------------------------- create

export interface CreateWalkInInput {
  readonly walkInId?: string;
  readonly siteId: string;
  readonly planId: string;
  readonly personId: string;
  /** the PIN or card the desk gives the guest; kept only as its digest */
  readonly credential: { readonly type: 'pin' | 'card'; readonly value: string };
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/**
 * A walk-in: gates → quota use → pending row with its idempotency key (one
 * transaction), then the PaymentIntent from the one factory, recorded. A
 * gate's refusal changes nothing. Stripe unreachable → the walk-in fails at
 * once (its quota use released) and the answer is BILLING_UNAVAILABLE. A
 * repeat with the same id answers the same walk-in and the same intent.
 */
export async function createWalkIn(deps: WalkInDeps, input: CreateWalkInInput): Promise<WalkInResult> {
  const cid = input.cid ?? newCorrelationId();
  const id = input.walkInId ?? `wi_${newId()}`;
  const log = withCorrelation(deps.log, cid, { verb: 'createWalkIn', walkInId: id });
  const personId = PersonId.safeParse(input.personId);
  if (!personId.success) return { ...refused('INVALID_REQUEST', 'personId'), cid };
  const siteId = SiteId.safeParse(input.siteId);
  if (!siteId.success) return { ...refused('INVALID_REQUEST', 'siteId'), cid };
  if (!PresentedCredential.safeParse(input.credential).success) return { ...refused('INVALID_CREDENTIAL'), cid };
  const person = personId.data;
  const site = siteId.data;
  let created: Outcome<WalkIn> | undefined;
  // a concurrent repeat under the same id that committed first makes this one its repeat (its quota use rolled back)
  for (let attempt = 1; created === undefined; attempt += 1) {
    try {
      created = await createOnce();
    } catch (e) {
      if (!(e instanceof BookingRaced) || attempt >= 3) throw e;
    }
  }
  if (created.status === 'refused' || created.status === 'conflict') {
    log.info({ status: created.status, code: created.code }, 'walk-in verb done');
    return { ...created, cid };
  }
  const w = created.state;
  if (w.status !== 'pending' || w.intentId !== null) return { ...created, cid };
  const made = await ensureIntent(deps, w, log);
  if (!made.ok) {
    if (created.status !== 'applied') {
      // a repeat does not undo the sale another request made: it stays pending for the next repeat or the hold sweep
      log.warn({ code: made.failure.code, stripeCode: made.failure.stripeCode }, 'repeated walk-in: still no PaymentIntent');
      return { ...failureOutcome(made.failure), cid };
    }
    // nobody can pay a walk-in whose intent was never shown, and a refusal changes nothing: the sale is withdrawn and
    // its quota use given back, so a retry under the same Idempotency-Key sells again (same id, same Stripe key)
    const gone = await inBilling(deps, 'withdrawWalkIn', async (tx) => {
      const row = await withdrawUnpaidWalkIn(tx, w.id);
      if (row?.quota_month && !row.quota_returned)
        await returnQuota(tx, { planId: row.plan_id, personId: row.person_id, month: row.quota_month, now: deps.clock.now() });
      return row !== null || (await loadWalkIn(tx, w.id)) === null;
    });
    if (gone) {
      log.warn({ code: made.failure.code, stripeCode: made.failure.stripeCode }, 'walk-in withdrawn: no PaymentIntent');
      return { ...failureOutcome(made.failure), cid };
    }
  }
  const now = await loadWalkIn(deps.db, w.id);
  if (!now) throw new Error(`walk-in ${w.id} vanished`);
  log.info({ status: created.status, code: created.code, intentId: now.intentId }, 'walk-in verb done');
  return created.status === 'applied' ? { ...applied(created.code, now), cid } : { ...noop(created.code, now), cid };

  /** The repeat's credential as the digest the sale stored it under (the pepper of its plan's gateway). */
  async function repeatedCredential(tx: Tx, existing: WalkIn): Promise<{ type: 'pin' | 'card'; digest: string } | null> {
    const plan = await loadPlan(tx, existing.planId);
    if (!plan) return null;
    const first = (await issueTargets(tx, deps.secrets, null, existing.personId, plan.doors)).doors[0];
    if (first === undefined) return null;
    return {
      type: input.credential.type,
      digest: credentialDigest(Buffer.from(first.pepper, 'base64url'), input.credential.type, input.credential.value),
    };
  }

  async function createOnce(): Promise<Outcome<WalkIn>> {
    try {
      return await inBilling(deps, 'createWalkIn', async (tx): Promise<Outcome<WalkIn>> => {
        if (!inScope(input.siteScope, input.siteId)) return refused('SITE_NOT_FOUND');
        const settings = await loadStaySettings(tx, input.siteId);
        if (!settings) return refused('SITE_NOT_FOUND');
        const existing = await loadWalkIn(tx, id, null, true);
        if (existing) return plain(domain.repeatWalkIn(existing, input.planId, person, await repeatedCredential(tx, existing)));
        const now = deps.clock.now();
        const plan = await loadPlan(tx, input.planId);
        const month = quotaMonthOf(now, settings.timeZone);
        const facts = await gateFacts(tx, {
          siteId: site,
          personId: person,
          plan,
          walkInsAllowed: settings.walkInsAllowed,
          month,
        });
        // the gates before anything else is looked at: staff see the gate's code
        const gate = checkInGates({ ...facts, kind: 'walk_in', plan });
        if (gate.status === 'refused') return refused(gate.code, gate.detail);
        if (!plan) return refused('PLAN_NOT_IN_CONFIG');
        // the gates need no payment provider; selling the pass does
        if (!deps.stripe) return refused('BILLING_NOT_CONFIGURED');
        const targets = await issueTargets(tx, deps.secrets, null, person, plan.doors);
        if (!targets.personFound) return refused('PERSON_NOT_FOUND');
        const first = targets.doors[0];
        if (new Set(targets.doors.map((d) => d.gatewayId)).size !== 1 || first === undefined) return refused('DOORS_SPAN_GATEWAYS');
        const digest = credentialDigest(Buffer.from(first.pepper, 'base64url'), input.credential.type, input.credential.value);
        if (await credentialInUse(tx, first.gatewayId, digest, domain.walkInKeyId(id))) return refused('CREDENTIAL_IN_USE');
        const o = domain.createWalkIn(
          null,
          {
            walkInId: id,
            plan,
            personId: person,
            timeZone: settings.timeZone,
            holdMinutes: settings.holdMinutes,
            credential: { type: input.credential.type, digest },
            gates: facts,
            cid,
          },
          now,
        );
        if (o.status !== 'applied') return plain(o);
        for (const e of o.emits) {
          // the SQL compare-and-set is the guard under concurrency: the gate above read a count that may have moved
          if (
            e.type === 'use_quota' &&
            (await useQuota(tx, { planId: plan.id, personId: person, month: e.month, quota: e.quota, now })) !== 1
          )
            return refused('QUOTA_EXHAUSTED', `the quota of ${e.quota} for ${e.month} is used up`);
        }
        // the quota use above rolls back with this transaction
        if ((await insertWalkIn(tx, o.state)) !== 1) throw new BookingRaced();
        return plain(o);
      });
    } catch (e) {
      if (pgErrorCode(e) === '23503') return refused('PERSON_NOT_FOUND');
      throw e;
    }
  }
}

/** The intent of the walk-in from THE factory with its stored key (a repeat gets the same intent back), recorded. */
async function ensureIntent(
  deps: WalkInDeps,
  w: WalkIn,
  log: Logger,
): Promise<{ ok: true; intentId: string } | { ok: false; failure: BillingFailure }> {
  const stripe = deps.stripe;
  if (!stripe) throw new Error('no Stripe client');
  const res = await createPaymentIntent(stripe, {
    purpose: 'walk_in',
    subjectId: w.id,
    paymentId: w.id,
    amount: w.amount,
    currency: w.currency,
    idempotencyKey: w.idempotencyKey,
    description: `walk-in ${w.id}`,
  });
  if (!res.ok) return { ok: false, failure: res.failure };
  deps.crash('afterIntentCreatedBeforeRecord');
  const n = await deps.db.transaction((tx) => recordWalkInIntent(tx, w.id, res.value.intentId, res.value.clientSecret, deps.clock.now()));
  if (n !== 1) log.error({ code: 'PAYMENT_INTENT_MISMATCH', intentId: res.value.intentId }, 'walk-in already has another intent');
  return { ok: true, intentId: res.value.intentId };
}

// ---------------------------------------------------------------- settle (webhook)

/**
 * A verified payment_intent event of a walk-in (metadata.purpose = walk_in),
 * the intent re-read from Stripe: paid → key issued in this transaction;
 * canceled → failed, quota use released. An amount that is not the walk-in's,
 * or money for a walk-in that ended, is an alarm and dead-letters the event.
 */
export async function settleWalkInPayment(
  deps: WalkInDeps,
  walkInId: string,
  obs: IntentObservation,
  cid: CorrelationId,
): Promise<OutcomeCode> {
  const log = withCorrelation(deps.log, cid, { verb: 'settleWalkIn', walkInId, intentId: obs.intentId });
  const o = await walkInStep(deps, 'settleWalkIn', walkInId, cid, null, async (w, timeZone, tx, now) => {
    const settings = await loadStaySettings(tx, w.siteId);
    const gate =
      obs.status === 'succeeded' && w.status === 'pending' ? await walkInKeyGate(tx, w, settings?.walkInsAllowed ?? false) : undefined;
    if (gate?.status === 'refused') log.warn({ code: gate.code, detail: gate.detail }, 'a gate refused the walk-in key: refunding');
    const decided = domain.settleWalkIn(w, obs, { timeZone, cid, ...(gate ? { gate } : {}) }, now);
    if (decided.status === 'refused' && decided.code === 'PAYMENT_AFTER_WALK_IN_ENDED') {
      // money for a pass that ended (the guest paid while its cancellation was on its way): all of it back
      await queueWalkInRefund(tx, { ...w, intentId: w.intentId ?? obs.intentId }, obs.amountReceived, cid, now);
      log.warn({ code: decided.code, walkInStatus: w.status }, 'money arrived for a walk-in that has ended: refunding it');
      return noop('PAYMENT_AFTER_WALK_IN_ENDED', w);
    }
    return decided;
  });
  if (o.status === 'refused' && o.code !== 'WALK_IN_NOT_FOUND') {
    log.error({ alarm: true, code: o.code, detail: o.detail }, 'ALARM: Stripe and the walk-in disagree');
    throw new BillingStepFailed(o.code, true, o.detail ?? 'refused');
  }
  log.info({ status: o.status, code: o.code }, 'walk-in payment settled');
  return o.code;
}

// ---------------------------------------------------------------- expire (billing pass)

/**
 * The hold sweep of walk-ins: for each pending walk-in past its hold, its
 * intent is RE-READ from Stripe first (never a webhook's amounts; a success
 * webhook may have been dropped): succeeded → paid as the webhook would have
 * done (its key issued once, the gates run again; the late webhook is then a
 * noop); processing → the hold waits (`WALK_IN_PAYMENT_PROCESSING`: most
 * intents in processing cannot be cancelled, and the money in flight
 * decides); anything else → the intent is cancelled in Stripe (an intent
 * whose answer a crash lost is fetched again with the stored key), then the
 * walk-in is expired and its quota use released — or paid, when the intent
 * succeeded between the read and the cancel. Stripe unreachable: it stays
 * pending until the next pass (nothing released while money may still
 * land). Money that lands after the end is refunded by the settle
 * (`PAYMENT_AFTER_WALK_IN_ENDED`).
 */
export async function expireWalkIns(deps: WalkInDeps, limit: number): Promise<number> {
  const stripe = deps.stripe;
  if (!stripe) return 0;
  const cid = newCorrelationId();
  const log = withCorrelation(deps.log, cid, { part: 'walk-in-hold-sweep' });
  let expired = 0;
  for (const id of await listExpiredWalkIns(deps.db, deps.clock.now(), limit)) {
    const w = await loadWalkIn(deps.db, id);
    if (!w) continue;
    let intentId = w.intentId;
    if (intentId === null) {
      const made = await ensureIntent(deps, w, log);
      if (!made.ok) {
        log.warn({ walkInId: id, code: made.failure.code }, 'walk-in hold over, Stripe unreachable: retried next pass');
        continue;
      }
      intentId = made.intentId;
    }
    const read = await retrievePaymentIntent(stripe, intentId);
    if (!read.ok) {
      log.warn({ walkInId: id, code: read.failure.code }, 'walk-in intent not read: retried next pass');
      continue;
    }
    let obs = read.value;
    if (obs.status !== 'succeeded' && obs.status !== 'processing' && obs.status !== 'canceled') {
      const c = await cancelPaymentIntent(stripe, intentId);
      if (!c.ok) {
        log.warn({ walkInId: id, code: c.failure.code }, 'walk-in intent not cancelled: retried next pass');
        continue;
      }
      obs = c.value;
    }
    const seen = obs;
    const o = await walkInStep(deps, 'expireWalkIn', id, cid, null, async (cur, timeZone, tx, now) => {
      // paid (its webhook not read, or dropped): the key is issued only if the gates still hold
      if (seen.status === 'succeeded' && cur.status === 'pending' && now >= cur.holdUntil) {
        const settings = await loadStaySettings(tx, cur.siteId);
        const gate = await walkInKeyGate(tx, cur, settings?.walkInsAllowed ?? false);
        return domain.settleWalkIn(cur, seen, { timeZone, cid, gate }, now);
      }
      return domain.expireWalkIn(cur, seen, { timeZone, cid }, now);
    });
    if (o.status === 'applied' && o.code === 'WALK_IN_EXPIRED') expired += 1;
    log.info({ walkInId: id, intentStatus: seen.status, status: o.status, code: o.code }, 'walk-in hold over');
  }
  return expired;
}

// ---------------------------------------------------------------- cancel

/**
 * Cancel a walk-in at the desk. Paid: key revoked now; its quota use back to ITS month when the site's
 * cancellation policy says so; the policy's refund. Pending: its intent is cancelled in Stripe FIRST (outside
 * the transaction; Stripe unreachable → BILLING_UNAVAILABLE, nothing changed), then the walk-in is cancelled on
 * Stripe's answer: canceled → nothing charged, its use given back; succeeded meanwhile → no key, the money
 * refunded per policy; processing → refused WALK_IN_PAYMENT_PROCESSING.
 */
export async function cancelWalkIn(
  deps: WalkInDeps,
  input: { walkInId: string; reason: CancelReason; siteScope?: SiteScope; cid?: CorrelationId },
): Promise<WalkInResult> {
  const cid = input.cid ?? newCorrelationId();
  const log = withCorrelation(deps.log, cid, { verb: 'cancelWalkIn', walkInId: input.walkInId });
  let intent: IntentObservation | null | undefined;
  const before = await loadWalkIn(deps.db, input.walkInId, input.siteScope ?? null);
  if (before?.status === 'pending') {
    const stripe = deps.stripe;
    if (!stripe) return { ...refused('BILLING_NOT_CONFIGURED'), cid };
    if (before.intentId === null) intent = null;
    else {
      const c = await cancelPaymentIntent(stripe, before.intentId);
      if (!c.ok) {
        log.warn({ code: c.failure.code, stripeCode: c.failure.stripeCode }, 'pending walk-in: intent not cancelled');
        return { ...failureOutcome(c.failure), cid };
      }
      intent = c.value;
    }
  }
  const o = await walkInStep(deps, 'cancelWalkIn', input.walkInId, cid, input.siteScope, async (w, _tz, tx, now) => {
    const settings = await loadStaySettings(tx, w.siteId);
    if (!settings) throw new Error(`walk-in ${w.id} has no site`);
    // the intent cancelled above was of this walk-in while it was pending; one created since (a repeat's) is not known
    const known =
      w.status === 'pending' && intent !== undefined && (intent === null ? w.intentId === null : w.intentId === intent.intentId);
    return domain.cancelWalkIn(w, { reason: input.reason, policy: settings.cancellationPolicy, cid, ...(known ? { intent } : {}) }, now);
  });
  log.info({ status: o.status, code: o.code }, 'walk-in verb done');
  return { ...o, cid };
}

// ---------------------------------------------------------------- reads

export function getWalkIn(deps: WalkInDeps, id: string, scope: SiteScope = null): Promise<WalkIn | null> {
  return loadWalkIn(deps.db, id, scope);
}

export function listWalkIns(deps: WalkInDeps, scope: SiteScope, f: WalkInFilter): Promise<Page<WalkIn>> {
  return listWalkInRows(deps.db, scope, f);
}

/** A plan's quota uses per person and month (the site's calendar), within the caller's sites. */
export async function quotaView(
  deps: WalkInDeps,
  input: { planId: string; personId?: string | undefined; month?: string | undefined; siteScope?: SiteScope },
): Promise<{ readonly plan: Plan; readonly usage: readonly QuotaUsage[]; readonly currentMonth: string } | null> {
  const plan = await loadPlan(deps.db, input.planId, input.siteScope ?? null);
  if (!plan) return null;
  const settings = await loadStaySettings(deps.db, plan.siteId);
  const currentMonth = quotaMonthOf(deps.clock.now(), settings?.timeZone ?? 'UTC');
  const usage = await listQuotaUsage(deps.db, input.siteScope ?? null, { planId: plan.id, personId: input.personId, month: input.month });
  return { plan, usage, currentMonth };
}

// ---------------------------------------------------------------- blocked people

/** A block and how many of the person's live keys at the site it revoked. */
export type BlockView = Block & { readonly keysRevoked: number };
export type BlockResult = Outcome<BlockView> & { readonly cid: CorrelationId };

/**
 * Block a person at a site: their bookings, walk-ins and check-ins there are refused with GUEST_BLOCKED, and
 * every key of theirs still live at the site's gateways is revoked (reason `person_blocked`) in the same
 * transaction — a key is the authority at the door, and the door does not ask the desk. A repeat (already
 * blocked) revokes any live key it still finds.
 */
export async function blockPerson(
  deps: WalkInDeps,
  input: { siteId: string; personId: string; reason: string; actor: string; siteScope?: SiteScope; cid?: CorrelationId },
): Promise<BlockResult> {
  const cid = input.cid ?? newCorrelationId();
  if (!inScope(input.siteScope, input.siteId)) return { ...refused('SITE_NOT_FOUND'), cid };
  const block: Block = {
    siteId: input.siteId,
    personId: input.personId,
    reason: input.reason,
    blockedBy: input.actor,
    blockedAt: deps.clock.now(),
  };
  const o = await deps.db
    .transaction(async (tx): Promise<Outcome<BlockView>> => {
      // a key being issued for the person holds their row until it commits: the live keys read below include it
      await lockPersonForBlock(tx, input.personId);
      const fresh = (await insertBlock(tx, block)) === 1;
      const cur = fresh ? block : await loadBlock(tx, input.siteId, input.personId);
      if (!cur) return refused('PERSON_NOT_FOUND');
      let keysRevoked = 0;
      for (const keyId of await liveKeysOfPersonAtSite(tx, input.siteId, input.personId)) {
        const r = await revokeKey({ ...deps, db: tx }, { keyId, reason: 'person_blocked', cid });
        if (r.status === 'applied') keysRevoked += 1;
        else if (r.status !== 'noop') throw new Error(`key ${keyId} of a blocked person could not be revoked: ${r.code}`);
      }
      const view = { ...cur, keysRevoked };
      return fresh ? applied('PERSON_BLOCKED', view) : noop('PERSON_ALREADY_BLOCKED', view);
    })
    .catch((e: unknown): Outcome<BlockView> => {
      if (pgErrorCode(e) === '23503') return refused('PERSON_NOT_FOUND', 'no such person or site');
      throw e;
    });
  withCorrelation(deps.log, cid, { verb: 'blockPerson', siteId: input.siteId, personId: input.personId }).info(
    {
      status: o.status,
      code: o.code,
      actor: input.actor,
      keysRevoked: o.status === 'applied' || o.status === 'noop' ? o.state.keysRevoked : 0,
    },
    'block verb done',
  );
  return { ...o, cid };
}

/** A lifted block and how many member keys it gave back. */
export interface UnblockView {
  readonly siteId: string;
  readonly personId: string;
  readonly keysIssued: number;
}

/**
 * Lift a person's block at a site. The keys the block revoked do not come back (a revoked key stays
 * revoked), but a membership of theirs there that gives door access now gets a fresh key with the same
 * credential (`restoreAccessAfterUnblock`): the member kept paying. A stay or walk-in is the desk's to
 * decide again (a new key through `POST /keys`, or a cancellation that refunds it).
 */
export async function unblockPerson(
  deps: WalkInDeps,
  input: { siteId: string; personId: string; actor: string; siteScope?: SiteScope; cid?: CorrelationId },
): Promise<Outcome<UnblockView> & { readonly cid: CorrelationId }> {
  const cid = input.cid ?? newCorrelationId();
  if (!inScope(input.siteScope, input.siteId)) return { ...refused('SITE_NOT_FOUND'), cid };
  const n = await deleteBlock(deps.db, input.siteId, input.personId);
  // only a block that was lifted gives keys back: a repeat, or a person never blocked, changes nothing
  const keysIssued = n === 1 ? await restoreAccessAfterUnblock(deps, { siteId: input.siteId, personId: input.personId, cid }) : 0;
  const state = { siteId: input.siteId, personId: input.personId, keysIssued };
  const o: Outcome<UnblockView> = n === 1 ? applied('PERSON_UNBLOCKED', state) : noop('PERSON_NOT_BLOCKED', state);
  withCorrelation(deps.log, cid, { verb: 'unblockPerson', siteId: input.siteId, personId: input.personId }).info(
    { status: o.status, code: o.code, actor: input.actor, keysIssued },
    'block verb done',
  );
  return { ...o, cid };
}

export function listBlockedPeople(deps: WalkInDeps, siteId: string, scope: SiteScope = null): Promise<Block[]> {
  if (!inScope(scope, siteId)) return Promise.resolve([]);
  return listBlocks(deps.db, siteId);
}

// ---------------------------------------------------------------- refund (billing job)

/**
 * The walk-in refund job. The intent's refunds are re-read from Stripe and recorded first, and only what the
 * charge still holds of ours is asked for: money given back in Stripe directly (the dashboard, support; its
 * webhooks maybe lost) counts toward it, so the guest is never refunded twice. The call carries the attempt's
 * key, stored before it (a retry after a lost answer gets the same refund). A refusal re-reads and records the
 * intent's refunds again: nothing left owed → done; less owed than was asked → at once a new, smaller attempt
 * under the next key; otherwise the attempt is failed and the job dead with Stripe's code, and the operator's
 * retry is a new attempt under the next key (a refused key keeps answering its stored error). A refund Stripe
 * fails later (`refund.failed`) puts the job back on the dead-letter list the same way.
 */
export async function refundWalkIn(deps: WalkInDeps, walkInId: string, cid: CorrelationId, depth = 0): Promise<OutcomeCode> {
  const stripe = deps.stripe;
  if (!stripe) throw new BillingStepFailed('BILLING_NOT_CONFIGURED', false, 'no Stripe client');
  const log = withCorrelation(deps.log, cid, { verb: 'refundWalkIn', walkInId });
  const first = await loadWalkInRefund(deps.db, walkInId);
  const w = await loadWalkIn(deps.db, walkInId);
  if (!first || !w) return 'PAYMENT_NOT_FOUND';
  if (first.status === 'succeeded') return 'REFUND_ALREADY_RECORDED';
  if (w.intentId === null) throw new BillingStepFailed('PAYMENT_NOT_FOUND', true, 'the walk-in has no intent');
  const intentId = w.intentId;
  const settled = await settleAgainstStripe(deps, w, intentId, cid);
  if (typeof settled === 'string') return settled;
  const r = settled;
  const made = await createRefund(stripe, {
    intentId,
    amount: r.amount,
    idempotencyKey: r.idempotencyKey,
    refundId: ourRefundId(walkInId, r.attempt),
    reason: 'requested_by_customer',
  });
  if (!made.ok) {
    if (made.failure.kind !== 'permanent') throw new BillingStepFailed(made.failure.code, false, made.failure.message);
    log.warn(
      { code: made.failure.code, stripeCode: made.failure.stripeCode, attempt: r.attempt, amount: r.amount },
      'walk-in refund refused',
    );
    // a refusal may only mean Stripe already gave (some of) the money back: re-read before judging it
    const again = await settleAgainstStripe(deps, w, intentId, cid);
    if (typeof again === 'string') return again;
    if (again.idempotencyKey !== r.idempotencyKey && depth < 2) return refundWalkIn(deps, walkInId, cid, depth + 1);
    await inBilling(deps, 'failWalkInRefund', (tx) => failWalkInRefundAttempt(tx, walkInId, again.idempotencyKey, deps.clock.now()));
    log.error(
      { alarm: true, code: made.failure.code, stripeCode: made.failure.stripeCode, amount: again.amount },
      'ALARM: Stripe refused a walk-in refund: the guest is owed the money (an operator retry is a new attempt)',
    );
    throw new BillingStepFailed(made.failure.code, true, made.failure.message);
  }
  const status = refundStatusOf(made.value.status);
  await deps.db.transaction((tx) => setWalkInRefundStatus(tx, walkInId, status, made.value.stripeRefundId, deps.clock.now()));
  const line = { amount: r.amount, attempt: r.attempt, stripeRefundId: made.value.stripeRefundId, refundStatus: status };
  if (status === 'failed') {
    log.error({ ...line, alarm: true, code: 'REFUND_FAILED' }, 'ALARM: Stripe failed a walk-in refund');
    throw new BillingStepFailed('REFUND_FAILED', true, `Stripe failed refund ${made.value.stripeRefundId}`);
  }
  log.info({ ...line, code: status === 'succeeded' ? 'PAYMENT_REFUNDED' : 'REFUND_PENDING' }, 'walk-in refund made');
  return status === 'succeeded' ? 'PAYMENT_REFUNDED' : 'REFUND_PENDING';
}

/**
 * The walk-in's refund against the intent's refunds as Stripe holds them now (re-read and recorded): a code
 * when there is nothing to call Stripe for (ours made, pending, or nothing left owed), else the attempt to
 * make — the current one, or a new one under the next key when the amount owed changed or the current one
 * failed (Stripe answers a used key with its first answer, whatever the amount).
 */
async function settleAgainstStripe(deps: WalkInDeps, w: WalkIn, intentId: string, cid: CorrelationId): Promise<WalkInRefund | OutcomeCode> {
  const stripe = deps.stripe;
  if (!stripe) throw new BillingStepFailed('BILLING_NOT_CONFIGURED', false, 'no Stripe client');
  const all = await listRefundsOfIntent(stripe, intentId);
  if (!all.ok) throw new BillingStepFailed(all.failure.code, all.failure.kind === 'permanent', all.failure.message);
  await reconcileWalkInRefunds(deps, w.id, all.value, cid);
  const r = await loadWalkInRefund(deps.db, w.id);
  if (!r) return 'REFUND_ALREADY_RECORDED';
  if (r.status === 'succeeded') return 'REFUND_ALREADY_RECORDED';
  if (r.status === 'pending' && r.stripeRefundId !== null) return 'REFUND_PENDING';
  // what the charge still holds: a pending refund has left it too (Stripe refuses to refund it again)
  const given = all.value.filter((x) => x.status !== 'failed').reduce((n, x) => n + x.amount, 0);
  const owed = Math.min(r.amount, Math.max(0, w.amountReceived - given));
  const log = withCorrelation(deps.log, cid, { verb: 'refundWalkIn', walkInId: w.id });
  if (owed === 0) {
    await inBilling(deps, 'dropWalkInRefund', (tx) => dropWalkInRefund(tx, w.id, r.idempotencyKey));
    log.info({ code: 'REFUND_ALREADY_RECORDED', amount: r.amount, refundedAtStripe: given }, 'Stripe had already given the money back');
    return 'REFUND_ALREADY_RECORDED';
  }
  if (owed === r.amount && r.status === 'pending') return r;
  const attempt = r.attempt + 1;
  await inBilling(deps, 'retryWalkInRefund', (tx) =>
    nextWalkInRefundAttempt(tx, { walkInId: w.id, fromKey: r.idempotencyKey, attempt, amount: owed, now: deps.clock.now() }),
  );
  log.info({ code: 'REFUND_QUEUED', attempt, amount: owed, was: r.amount }, 'walk-in refund as a new attempt');
  const next = await loadWalkInRefund(deps.db, w.id);
  if (next?.attempt !== attempt) throw new BillingStepFailed('BILLING_UNAVAILABLE', false, 'the walk-in refund moved under this run');
  return next;
}

/** Our refund's `metadata.refund_id` for an attempt (the first keeps the id it always had). */
const ourRefundId = (walkInId: string, attempt: number): string => (attempt === 1 ? `rf_${walkInId}` : `rf_${walkInId}_${attempt}`);
/** The attempt of ours a refund of the walk-in's intent was made under; null for one made in Stripe directly. */
const ourAttemptOf = (walkInId: string, refundId: string | null): number | null => {
  if (refundId === null) return null;
  if (refundId === `rf_${walkInId}`) return 1;
  const tail = refundId.startsWith(`rf_${walkInId}_`) ? refundId.slice(`rf_${walkInId}_`.length) : '';
  return /^[0-9]+$/.test(tail) ? Number(tail) : null;
};
const refundStatusOf = (s: string): 'pending' | 'succeeded' | 'failed' =>
  s === 'succeeded' ? 'succeeded' : s === 'failed' || s === 'canceled' ? 'failed' : 'pending';

/**
 * Refunds of a walk-in's intent from any source, as Stripe holds them now (re-read, never an event's
 * amounts): the desk's refund takes Stripe's status; one made in Stripe directly (the dashboard, support) is
 * recorded from Stripe's object. A paid pass whose money is all on its way back (pending or succeeded) ends
 * `payment_refunded` with its key revoked and nothing more refunded: a door does not open on money the guest
 * has back. Less than all of it: recorded, the pass kept, and an operator alarm.
 */
export async function reconcileWalkInRefunds(
  deps: WalkInDeps,
  walkInId: string,
  observed: readonly RefundObservation[],
  cid: CorrelationId,
): Promise<OutcomeCode> {
  const log = withCorrelation(deps.log, cid, { verb: 'recordWalkInRefund', walkInId });
  const outside = observed.filter((r) => ourAttemptOf(walkInId, r.refundId) === null);
  const changed = await inBilling(deps, 'recordWalkInRefund', async (tx) => {
    const w = await loadWalkIn(tx, walkInId, null, true);
    if (!w) return null;
    const ours = await loadWalkInRefund(tx, walkInId, true);
    const now = deps.clock.now();
    let n = 0;
    for (const r of observed) {
      const attempt = ourAttemptOf(walkInId, r.refundId);
      if (attempt !== null) {
        // an earlier attempt of ours at Stripe is one that failed there (a new one is made only then)
        if (attempt !== ours?.attempt) continue;
        const m = await setWalkInRefundStatus(tx, walkInId, r.status, r.stripeRefundId, now);
        if (r.status === 'failed' && m === 1) {
          // the guest is owed the money: the operator sees the job dead with the code, and its retry is a new attempt
          await deadLetterWalkInRefundJob(tx, walkInId, 'REFUND_FAILED', `Stripe failed refund ${r.stripeRefundId}`, now);
          log.error({ alarm: true, code: 'REFUND_FAILED', stripeRefundId: r.stripeRefundId }, 'ALARM: Stripe failed a walk-in refund');
        }
        n += m;
      } else {
        const m = await recordWalkInStripeRefund(tx, { walkInId, ...r, cid, now });
        if (m === 1)
          log.warn(
            { code: 'REFUND_RECONCILED', stripeRefundId: r.stripeRefundId, amount: r.amount, refundStatus: r.status },
            'a walk-in refund made in Stripe directly recorded',
          );
        n += m;
      }
    }
    return { w, n };
  });
  if (changed === null) return 'PAYMENT_NOT_FOUND';
  const back = outside.filter((r) => r.status !== 'failed').reduce((sum, r) => sum + r.amount, 0);
  const w = changed.w;
  if (w.status === 'paid' && back > 0 && back >= w.amountReceived) {
    const o = await walkInStep(deps, 'cancelWalkIn', walkInId, cid, null, async (cur, _tz, tx) => {
      const settings = await loadStaySettings(tx, cur.siteId);
      if (!settings) throw new Error(`walk-in ${cur.id} has no site`);
      return domain.cancelWalkIn(cur, { reason: 'payment_refunded', policy: settings.cancellationPolicy, cid }, deps.clock.now());
    });
    log.warn({ code: o.code, status: o.status, refunded: back }, 'a walk-in refunded in full in Stripe directly: the pass ends');
    return o.code;
  }
  if (w.status === 'paid' && back > 0)
    log.error(
      { alarm: true, code: 'PAYMENT_PARTIALLY_REFUNDED', refunded: back, received: w.amountReceived },
      'ALARM: part of a walk-in refunded in Stripe directly: the pass is kept',
    );
  return changed.n > 0 ? 'REFUND_RECONCILED' : 'REFUND_ALREADY_RECORDED';
}
