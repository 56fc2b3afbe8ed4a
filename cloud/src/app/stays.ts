import { randomInt } from 'node:crypto';
import type Stripe from 'stripe';
import {
  applied,
  conflict,
  newCorrelationId,
  newId,
  noop,
  refused,
  withCorrelation,
  type CorrelationId,
  type Logger,
  type Outcome,
  type OutcomeCode,
  credentialDigest,
  DoorId,
  PresentedCredential,
  PersonId,
  SiteId,
  summarizeIssues,
} from '@tobira/shared';
import { z } from 'zod';
import { enqueueBillingJob } from '../adapters/db/billing-jobs.js';
import { enterVerb, pgErrorCode, withVerb, type Queryable, type Tx } from '../adapters/db/db.js';
import {
  casPayment,
  insertPayment,
  insertRefund,
  listPaymentsOfStay,
  listRefundsOfPayment,
  loadPayment,
  insertStripeRefund,
  loadRefund,
  noteRefundError,
  recordIntent,
  setRefundStatus,
  type Refund,
} from '../adapters/db/payments.js';
import { deadLetterRefundJob, settleDeadJobs } from '../adapters/db/billing-jobs.js';
import type { RefundObservation } from '../adapters/stripe/refunds.js';
import type { SiteScope } from '../adapters/db/scope.js';
import {
  casStay,
  doorsAtSite,
  insertRoom,
  insertStayWithNights,
  loadRoom,
  loadStay,
  loadStayForUpdate,
  loadStaySettings,
  releaseNights,
  saveStaySettings,
} from '../adapters/db/stays.js';
import { credentialInUse, issueTargets } from '../adapters/db/keys.js';
import type { SecretBox } from '../adapters/kek.js';
import { loadMembership } from '../adapters/db/memberships.js';
import { storeWebhookEvent } from '../adapters/db/webhook-events.js';
import { verifyWebhook } from '../adapters/stripe/webhook.js';
import { withdrawUnpaidStay } from '../adapters/db/withdraw.js';
import { createPaymentIntent } from '../adapters/stripe/payment-intents.js';
import type { BillingFailure } from '../adapters/stripe/errors.js';
import * as pay from '../domain/payments.js';
import type { IntentObservation, Payment } from '../domain/payments.js';
import { validatePolicy, type CancelReason, type CancellationPolicy, type Paid } from '../domain/cancellation-policy.js';
import { holdsMoney } from '../domain/stay-states.js';
import { givesDoorAccess } from '../domain/membership-states.js';
import * as domain from '../domain/stays.js';
import { stayWindow, type Room, type Stay, type StayEffect, type StayOutcome } from '../domain/stays.js';
import type { AppDeps } from './deps.js';
import { issueKey, revokeKey } from './keys.js';
import { notifyPaymentReceived, notifyRefundMade, notifyStay } from './notifications.js';
import { stayCheckInGate } from './check-in.js';

/**
 * The stay use cases (docs/payments.md): each is one transaction
 * that loads the stay with its row locked, decides with the pure verb,
 * writes with compare-and-set and runs the verb's effects in the same
 * transaction (nights, the key through the key verbs, ledger rows, billing
 * jobs). Stripe is only ever called outside a transaction, with an
 * idempotency key that was committed before the call.
 */
export interface StayDeps extends AppDeps {
  /** The Stripe client; null when STRIPE_SECRET_KEY is unset (the stay verbs answer BILLING_NOT_CONFIGURED). */
  readonly stripe: Stripe | null;
  /** A fresh PIN for a stay key (8 digits; injectable so tests know it). */
  readonly newPin?: () => string;
  /** Wakes this process's billing worker (a webhook was stored); its poll is the fallback. */
  readonly wakeBilling?: () => void;
}

/** A stay with its payments: what the API and the return page show. */
export interface StayView {
  readonly stay: Stay;
  readonly payments: readonly Payment[];
}

export type StayResult = Outcome<StayView> & { readonly cid: CorrelationId };

/** A repair `create_intent` job waits this long, so it does not race the booking's own call (same key either way). */
export const INTENT_REPAIR_DELAY_MS = 60_000;

/** A failure that a job or webhook event cannot get past by retrying (dead-lettered with its code), or one it can. */
export class BillingStepFailed extends Error {
  constructor(
    readonly code: OutcomeCode,
    readonly permanent: boolean,
    detail: string,
  ) {
    super(`${code}: ${detail}`);
    this.name = 'BillingStepFailed';
  }
}

const defaultPin = (): string => String(randomInt(0, 100_000_000)).padStart(8, '0');

/** Runs `fn` in one transaction as the verb `verb` (the marker the verb guard checks each write against). */
export function inBilling<T>(deps: AppDeps, verb: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return deps.db.transaction(async (tx) => {
    await enterVerb(tx, verb);
    return fn(tx);
  });
}

const inScope = (scope: SiteScope | undefined, siteId: string): boolean => scope === null || scope === undefined || scope.includes(siteId);

/** Net money held for a stay per purpose, from the ledger (never from a client). */
export function paidOf(payments: readonly Payment[]): Paid {
  const held = (purpose: Payment['purpose']) =>
    payments.filter((p) => p.purpose === purpose && holdsMoney(p.status)).reduce((n, p) => n + p.amountReceived - p.amountRefunded, 0);
  return { deposit: held('stay_deposit'), balance: held('stay_balance') };
}

async function viewOf(q: Tx, stay: Stay): Promise<StayView> {
  return { stay, payments: await listPaymentsOfStay(q, stay.id) };
}

/** Reads a stay with its payments; null when absent or outside the caller's sites. */
export async function getStay(deps: AppDeps, stayId: string, scope: SiteScope = null): Promise<StayView | null> {
  const stay = await loadStay(deps.db, stayId);
  if (!stay || !inScope(scope, stay.siteId)) return null;
  return viewOf(deps.db, stay);
}

// ---------------------------------------------------------------- effects

interface EffectContext {
  readonly deps: StayDeps;
  readonly tx: Tx;
  readonly stay: Stay;
  readonly cid: CorrelationId;
  readonly now: number;
  readonly log: Logger;
  /** Automatic check-out at the end of the stay: the key ends by its own validity, nothing to revoke. */
  readonly keyExpiresAlone?: boolean;
}

/**
 * Runs a stay verb's effects inside its transaction: nights released, the
 * key issued or revoked through the key verbs (in this transaction: a
 * confirmed stay always has its key, a cancelled one never keeps it live),
 * refunds and intent cancellations queued with their idempotency keys.
 */
async function runEffects(c: EffectContext, effects: readonly StayEffect[]): Promise<void> {
  const keyDeps: AppDeps = { ...c.deps, db: c.tx };
  let pin: string | undefined;
  for (const e of effects) {
    switch (e.type) {
      case 'reserve_nights':
      case 'create_intents':
        // the booking writes these itself (insertStayWithNights, the payment rows)
        break;
      case 'release_nights':
        await releaseNights(c.tx, c.stay.id);
        break;
      case 'cancel_intents':
        for (const p of await listPaymentsOfStay(c.tx, c.stay.id)) {
          await enqueueBillingJob(c.tx, {
            kind: 'cancel_intent',
            subjectId: p.id,
            dedupeKey: `cancel_intent:${p.id}:${p.attempt}`,
            body: { paymentId: p.id },
            cid: c.cid,
            now: c.now,
          });
        }
        break;
      case 'issue_key': {
        const chosen = c.stay.guestCredential;
        if (chosen !== null) {
          // checked free at booking; a key issued since then may hold it: the stay cannot get its key, dead-lettered with the code
          const o = await issueKey(keyDeps, {
            keyId: e.key.keyId,
            personId: e.key.personId,
            doors: e.key.doors,
            credential: chosen,
            validFrom: e.key.validFrom,
            validUntil: e.key.validUntil,
            cid: c.cid,
          });
          if (o.status === 'applied' || o.status === 'noop') break;
          throw new BillingStepFailed(o.code, true, `the stay key could not be issued with the booked credential (${o.status})`);
        }
        const newPin = c.deps.newPin ?? defaultPin;
        for (let attempt = 1; ; attempt++) {
          const drawn = newPin();
          const o = await issueKey(keyDeps, {
            keyId: e.key.keyId,
            personId: e.key.personId,
            doors: e.key.doors,
            credential: { type: 'pin', value: drawn },
            validFrom: e.key.validFrom,
            validUntil: e.key.validUntil,
            cid: c.cid,
          });
          // only a key issued now holds the PIN just drawn (a noop is a key, and its notice, from before)
          if (o.status === 'applied') pin = drawn;
          if (o.status === 'applied' || o.status === 'noop') break;
          // a PIN another live key at the gateway holds: draw again (a few times; then it is a site with no PINs left)
          if (o.code === 'CREDENTIAL_IN_USE' && attempt < 5) continue;
          throw new BillingStepFailed(o.code, true, `the stay key could not be issued (${o.status})`);
        }
        break;
      }
      case 'revoke_key': {
        if (c.keyExpiresAlone) break;
        const o = await revokeKey(keyDeps, { keyId: e.keyId, reason: e.reason, cid: c.cid });
        if (o.status === 'refused' && o.code !== 'KEY_NOT_FOUND')
          throw new BillingStepFailed(o.code, true, 'the stay key could not be revoked');
        break;
      }
      case 'refund':
        await queueRefunds(c, { stay_deposit: e.split.deposit, stay_balance: e.split.balance });
        break;
      case 'notify':
        await enqueueBillingJob(c.tx, {
          kind: 'notify',
          subjectId: c.stay.id,
          dedupeKey: e.dedupeKey,
          // Never the PIN: a job body is a database row kept for days, and secrets are stored only as
          // digests. The guest's key notice carries a drawn PIN, held only until its delivery.
          body: { notice: e.notice, stayId: c.stay.id },
          cid: c.cid,
          now: c.now,
        });
        // the guest's message: a PIN drawn for a stay booked without a credential goes with its key notice
        await notifyStay(c.deps, c.tx, c.stay, e.notice, c.cid, c.now, pin);
        break;
      default: {
        const never: never = e;
        throw new Error(`unhandled stay effect ${JSON.stringify(never)}`);
      }
    }
  }
}

/** Moves each payment with money to give back to refund_pending, with a refund row (its key stored now) and one refund job. */
/**
 * The number of a payment's next refund key (`refund:<paymentId>:<n>`): past every one its refunds used,
 * retries and later requests alike, so no two refunds of ours ever share a key (nor a row id).
 */
async function nextRefundAttempt(q: Queryable, paymentId: string): Promise<number> {
  const used = (await listRefundsOfPayment(q, paymentId)).map((r) => ourRefundAttempt(r, paymentId)).filter((n) => n !== null);
  return used.length === 0 ? 1 : Math.max(...used) + 1;
}

/** The number of our refund key (`refund:<paymentId>:<n>`) a refund of the payment was made under; null for one made in Stripe directly. */
function ourRefundAttempt(r: Refund, paymentId: string): number | null {
  return r.source === 'tobira' && r.idempotencyKey.startsWith(`refund:${paymentId}:`)
    ? Number(r.idempotencyKey.split(':').pop() ?? '0')
    : null;
}

async function queueRefunds(c: EffectContext, amounts: Record<Payment['purpose'], number>): Promise<void> {
  for (const p of await listPaymentsOfStay(c.tx, c.stay.id)) {
    const amount = amounts[p.purpose];
    if (amount <= 0) continue;
    // a payment partly refunded in Stripe directly may have refunds of ours already: the rest gets a key of its own
    const o = pay.requestRefund(p, { amount, cid: c.cid, attempt: await nextRefundAttempt(c.tx, p.id) }, c.now);
    if (o.status !== 'applied') {
      c.log.warn({ code: o.code, paymentId: p.id, amount }, 'refund not queued');
      continue;
    }
    if ((await casPayment(c.tx, o.state, p.version)) !== 1) throw new Error(`payment ${p.id} changed under a locked stay`);
    for (const r of o.emits) {
      const refundId = `rf_${r.paymentId}_${r.idempotencyKey.split(':').pop() ?? '1'}`;
      await insertRefund(c.tx, {
        id: refundId,
        paymentId: r.paymentId,
        amount: r.amount,
        currency: p.currency,
        idempotencyKey: r.idempotencyKey,
        cid: c.cid,
        now: c.now,
      });
      await enqueueBillingJob(c.tx, {
        kind: 'refund',
        subjectId: refundId,
        dedupeKey: `refund:${refundId}`,
        body: { refundId },
        cid: c.cid,
        now: c.now,
      });
      c.log.info({ code: o.code, paymentId: p.id, refundId, amount: r.amount }, 'refund queued');
    }
  }
}

/**
 * The common shape of a verb on an existing stay: lock, decide, CAS, effects,
 * in one transaction. `decide` gets the stay and its payments.
 */
async function stayStep(
  deps: StayDeps,
  verb: string,
  stayId: string,
  cid: CorrelationId,
  scope: SiteScope | undefined,
  decide: (
    s: Stay,
    payments: readonly Payment[],
    settings: domain.SiteStaySettings,
    now: number,
    tx: Tx,
  ) => Promise<StayOutcome> | StayOutcome,
  opts: { keyExpiresAlone?: boolean } = {},
): Promise<StayResult> {
  const log = withCorrelation(deps.log, cid, { verb, stayId });
  const r = await inBilling(deps, verb, (tx) => stayStepIn(deps, tx, stayId, cid, scope, decide, log, opts));
  // the sweeps ask about stays that are not due yet on every pass: those answers are not news
  const quiet = r.status === 'noop' && (verb === 'endStay' || verb === 'expireStay');
  log[quiet ? 'debug' : 'info']({ status: r.status, code: r.code }, 'stay verb done');
  return { ...r, cid };
}

/** The body of a stay verb inside the caller's transaction (which has set tobira.verb): lock, decide, CAS, effects. */
async function stayStepIn(
  deps: StayDeps,
  tx: Tx,
  stayId: string,
  cid: CorrelationId,
  scope: SiteScope | undefined,
  decide: Parameters<typeof stayStep>[5],
  log: Logger,
  opts: { keyExpiresAlone?: boolean } = {},
): Promise<Outcome<StayView>> {
  const s = await loadStayForUpdate(tx, stayId);
  if (!s || !inScope(scope, s.siteId)) return refused('STAY_NOT_FOUND');
  const settings = await loadStaySettings(tx, s.siteId);
  if (!settings) throw new Error(`stay ${s.id} has no site ${s.siteId}`);
  const now = deps.clock.now();
  const o = await decide(s, await listPaymentsOfStay(tx, s.id), settings, now, tx);
  if (o.status === 'refused') return o;
  if (o.status === 'conflict') return conflict(o.code, await viewOf(tx, o.current));
  if (o.status === 'noop') return noop(o.code, await viewOf(tx, o.state));
  // the row is locked: a lost CAS here is a bug, not a race
  if ((await casStay(tx, o.state, s.version)) !== 1) throw new Error(`stay ${s.id} changed under its lock`);
  await runEffects({ deps, tx, stay: o.state, cid, now, log, ...opts }, o.emits);
  return applied(o.code, await viewOf(tx, o.state));
}

/**
 * The stay verb `cancelStay` inside another verb's transaction: ending a membership cancels its
 * members' bookings this way, in the transaction that ends it. The stay's writes are made as
 * `cancelStay` (the verb guard checks them against the stay verbs), then the caller's verb is back.
 */
export function cancelStayInTx(
  deps: StayDeps,
  tx: Tx,
  stayId: string,
  reason: CancelReason,
  cid: CorrelationId,
): Promise<Outcome<StayView>> {
  const log = withCorrelation(deps.log, cid, { verb: 'cancelStay', stayId });
  return withVerb(tx, 'cancelStay', () =>
    stayStepIn(
      deps,
      tx,
      stayId,
      cid,
      null,
      (s, payments, settings, now) => domain.cancelStay(s, { reason, settings, paid: paidOf(payments), cid }, now),
      log,
    ),
  );
}

// ---------------------------------------------------------------- book

export interface BookStayInput {
  readonly stayId?: string;
  readonly personId: string;
  readonly roomId: string;
  readonly checkIn: string;
  readonly checkOut: string;
  readonly amount: number;
  readonly currency: string;
  readonly deposit?: number;
  /**
   * The guest's credential, chosen by the caller (the property system tells its guest). Only its digest is
   * kept; without it the key gets a random PIN at confirmation.
   */
  readonly credential?: { readonly type: 'pin' | 'card'; readonly value: string };
  /** A members' booking: the guest's membership at the site (it must give door access now; its end cancels the stay). */
  readonly membershipId?: string;
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/**
 * The digest of a booked credential with the pepper of the one gateway the room's doors and the shared doors
 * are behind, refused when they span gateways or another live key there holds it (so a paid stay does not
 * fail for it at confirmation).
 */
async function guestCredentialOf(
  tx: Tx,
  secrets: SecretBox,
  stayId: string,
  personId: PersonId,
  doors: readonly string[],
  credential: { readonly type: 'pin' | 'card'; readonly value: string },
): Promise<domain.GuestCredentialDigest | 'DOORS_SPAN_GATEWAYS' | 'DOOR_NOT_FOUND' | 'CREDENTIAL_IN_USE'> {
  const targets = await issueTargets(tx, secrets, null, personId, doors);
  const gateways = new Set(targets.doors.map((d) => d.gatewayId));
  if (gateways.size !== 1) return 'DOORS_SPAN_GATEWAYS';
  const first = targets.doors[0];
  if (first === undefined) return 'DOOR_NOT_FOUND';
  const digest = credentialDigest(Buffer.from(first.pepper, 'base64url'), credential.type, credential.value);
  if (await credentialInUse(tx, first.gatewayId, digest, `key_${stayId}`)) return 'CREDENTIAL_IN_USE';
  return { type: credential.type, digest };
}

/**
 * Book: one transaction inserts the stay, its nights (a clash is
 * ROOM_UNAVAILABLE with nothing created) and its payment rows with their
 * idempotency keys, plus a delayed `create_intent` repair job per payment;
 * then, outside it, the PaymentIntents are created with those keys and
 * recorded. Stripe unreachable → the stay fails at once (nights released)
 * and the answer is BILLING_UNAVAILABLE. A repeat of the same booking (same
 * stay id) answers the same stay and the same intents, creating any that a
 * crash left unrecorded.
 */
export async function bookStay(deps: StayDeps, input: BookStayInput): Promise<StayResult> {
  const cid = input.cid ?? newCorrelationId();
  const stayId = input.stayId ?? `st_${newId()}`;
  const log = withCorrelation(deps.log, cid, { verb: 'bookStay', stayId });
  const stripe = deps.stripe;
  if (!stripe) return { ...refused('BILLING_NOT_CONFIGURED'), cid };
  const personId = PersonId.safeParse(input.personId);
  if (!personId.success) return { ...refused('INVALID_REQUEST', 'personId'), cid };
  if (input.credential !== undefined && !PresentedCredential.safeParse(input.credential).success) {
    return { ...refused('INVALID_CREDENTIAL'), cid };
  }
  const person = personId.data;
  let booked: Outcome<StayView> | undefined;
  // a concurrent repeat under the same stay id that committed first makes this one its repeat: decided again, as a noop
  for (let attempt = 1; booked === undefined; attempt += 1) {
    try {
      booked = await bookOnce();
    } catch (e) {
      if (!(e instanceof BookingRaced) || attempt >= 3) throw e;
    }
  }
  if (booked.status === 'refused' || booked.status === 'conflict') {
    log.info({ status: booked.status, code: booked.code }, 'stay verb done');
    return { ...booked, cid };
  }
  if (booked.state.stay.status !== 'pending') return { ...booked, cid };
  const made = await ensureIntents(deps, stripe, booked.state, cid, log);
  if (made !== null) {
    const code = made.code === 'BILLING_UNAVAILABLE' ? 'BILLING_UNAVAILABLE' : made.code;
    if (booked.status !== 'applied') {
      // a repeat does not undo what another request booked: the stay stays pending for the next repeat or the repair job
      log.warn({ code, stripeCode: made.stripeCode, detail: made.message }, 'repeated booking: still no PaymentIntent');
      return { ...refused(code, made.message), cid };
    }
    // no stay may hold the room while nobody can pay for it, and a refusal changes nothing: the booking is withdrawn,
    // so a retry under the same Idempotency-Key books again (same stay id, same Stripe keys)
    const w = await inBilling(deps, 'withdrawBooking', async (tx) =>
      (await loadStayForUpdate(tx, stayId)) === null ? 'withdrawn' : withdrawUnpaidStay(tx, stayId),
    );
    if (w === 'withdrawn') {
      log.warn({ code, stripeCode: made.stripeCode, detail: made.message }, 'booking withdrawn: no PaymentIntent');
      return { ...refused(code, made.message), cid };
    }
    // the repair job recorded the intent meanwhile: the booking stands
    log.info({ code: 'INTENT_RECORDED' }, 'booking kept: its PaymentIntent was recorded meanwhile');
  }
  const view = await getStay(deps, stayId);
  if (!view) throw new Error(`stay ${stayId} vanished`);
  log.info({ status: booked.status, code: booked.code }, 'stay verb done');
  return booked.status === 'applied' ? { ...applied(booked.code, view), cid } : { ...noop(booked.code, view), cid };

  async function bookOnce(): Promise<Outcome<StayView>> {
    try {
      return await inBilling(deps, 'bookStay', async (tx): Promise<Outcome<StayView>> => {
        const room = await loadRoom(tx, input.roomId);
        if (!room || !inScope(input.siteScope, room.siteId)) return refused('ROOM_NOT_FOUND');
        const settings = await loadStaySettings(tx, room.siteId);
        if (!settings) return refused('ROOM_NOT_FOUND');
        // the gates first (a blocked guest, a members' booking without a membership giving access): staff see the gate's code
        const gate = await stayCheckInGate(
          tx,
          { siteId: room.siteId, personId: person, membershipId: input.membershipId ?? null },
          settings,
          deps.clock.now(),
        );
        if (gate.status === 'refused') return refused(gate.code, gate.detail);
        let guestCredential: domain.GuestCredentialDigest | null = null;
        if (input.credential !== undefined) {
          const g = await guestCredentialOf(tx, deps.secrets, stayId, person, [...room.doors, ...settings.sharedDoors], input.credential);
          if (typeof g === 'string') return refused(g);
          guestCredential = g;
        }
        if (input.membershipId !== undefined) {
          const m = await loadMembership(tx, input.membershipId);
          const gives = m !== null && givesDoorAccess(m);
          if (!m || m.personId !== person || m.siteId !== room.siteId || !gives)
            return refused('MEMBERS_ONLY_PLAN', "a members' booking needs the guest's membership at this site, giving access now");
        }
        const existing = await loadStayForUpdate(tx, stayId);
        const now = deps.clock.now();
        const o = domain.bookStay(
          existing,
          {
            stayId,
            personId: person,
            room,
            settings,
            checkIn: input.checkIn,
            checkOut: input.checkOut,
            amount: input.amount,
            currency: input.currency,
            deposit: input.deposit ?? 0,
            guestCredential,
            membershipId: input.membershipId ?? null,
            cid,
          },
          now,
        );
        if (o.status === 'refused') return o;
        if (o.status === 'conflict') return conflict(o.code, await viewOf(tx, o.current));
        if (o.status === 'noop') return noop(o.code, await viewOf(tx, o.state));
        const ins = await insertStayWithNights(tx, o.state);
        if (ins === 'ROOM_UNAVAILABLE') return refused('ROOM_UNAVAILABLE');
        if (ins === 'exists') throw new BookingRaced();
        for (const e of o.emits) {
          if (e.type !== 'create_intents') continue;
          for (const p of e.payments) {
            const payment: Payment = {
              id: `pay_${stayId}_${p.purpose === 'stay_deposit' ? 'deposit' : 'balance'}`,
              stayId,
              purpose: p.purpose,
              amount: p.amount,
              currency: o.state.currency,
              status: 'requires_payment',
              version: 1,
              attempt: 1,
              idempotencyKey: pay.intentIdempotencyKey(p.purpose, stayId, 1),
              intentId: null,
              clientSecret: null,
              amountReceived: 0,
              amountRefunded: 0,
              lastCode: o.code,
              cid,
              createdAt: now,
              updatedAt: now,
            };
            await insertPayment(tx, payment);
            await enqueueBillingJob(tx, {
              kind: 'create_intent',
              subjectId: payment.id,
              dedupeKey: `create_intent:${payment.idempotencyKey}`,
              body: { paymentId: payment.id },
              cid,
              now,
              notBefore: now + INTENT_REPAIR_DELAY_MS,
            });
          }
        }
        return applied(o.code, await viewOf(tx, o.state));
      });
    } catch (e) {
      // the person is checked by its foreign key (the insert is in a savepoint: nothing is left)
      if (pgErrorCode(e) === '23503') return refused('PERSON_NOT_FOUND');
      throw e;
    }
  }
}

/** Another transaction inserted the same id first: this one rolls back and decides again on what it committed. */
export class BookingRaced extends Error {
  constructor() {
    super('a concurrent request under the same id committed first');
    this.name = 'BookingRaced';
  }
}

/**
 * Creates (or gets back, by the stored key) the PaymentIntent of every
 * payment that has none recorded, and records it. Null when all are there,
 * else the first failure.
 */
async function ensureIntents(
  deps: StayDeps,
  stripe: Stripe,
  view: StayView,
  cid: CorrelationId,
  log: Logger,
): Promise<BillingFailure | null> {
  for (const p of view.payments) {
    if (p.intentId !== null) continue;
    const res = await createPaymentIntent(stripe, {
      purpose: p.purpose,
      subjectId: p.stayId,
      paymentId: p.id,
      amount: p.amount,
      currency: p.currency,
      idempotencyKey: p.idempotencyKey,
      description: `stay ${p.stayId}`,
    });
    if (!res.ok) return res.failure;
    deps.crash('afterIntentCreatedBeforeRecord');
    const n = await deps.db.transaction((tx) => recordIntent(tx, p.id, res.value.intentId, res.value.clientSecret, deps.clock.now()));
    if (n !== 1)
      log.error({ code: 'PAYMENT_INTENT_MISMATCH', paymentId: p.id, intentId: res.value.intentId }, 'payment already has another intent');
    else log.info({ code: 'INTENT_RECORDED', paymentId: p.id, intentId: res.value.intentId }, 'PaymentIntent recorded');
  }
  return null;
}

/** The `create_intent` repair job: a pending stay's payment with no recorded intent gets it (same key: the same intent). */
export async function repairIntent(deps: StayDeps, paymentId: string, cid: CorrelationId): Promise<OutcomeCode> {
  const stripe = deps.stripe;
  if (!stripe) throw new BillingStepFailed('BILLING_NOT_CONFIGURED', false, 'no Stripe client');
  const p = await loadPayment(deps.db, paymentId);
  if (!p) return 'PAYMENT_NOT_FOUND';
  const view = await getStay(deps, p.stayId);
  if (!view || view.stay.status !== 'pending' || p.intentId !== null) return 'STAY_NOT_PENDING';
  const failure = await ensureIntents(deps, stripe, view, cid, withCorrelation(deps.log, cid, { job: 'create_intent', paymentId }));
  if (failure) throw new BillingStepFailed(failure.code, failure.kind === 'permanent', failure.message);
  return 'PAYMENT_PROCESSING';
}

// ---------------------------------------------------------------- settle (webhook, cancel job)

/**
 * Settles a payment on what Stripe says its intent is now (ranked, never by
 * arrival order), and moves the stay on in the same transaction: paid in
 * full → confirmed with its key issued; failed → failed, nights released,
 * intents cancelled; money for a stay that already ended → refunded. An
 * amount or currency that is not the ledger's is refused with
 * PAYMENT_AMOUNT_MISMATCH (an alarm; the caller dead-letters the event).
 */
export async function settleFromObservation(
  deps: StayDeps,
  paymentId: string,
  obs: IntentObservation,
  cid: CorrelationId,
): Promise<{ readonly payment: OutcomeCode; readonly stay: OutcomeCode | null }> {
  const log = withCorrelation(deps.log, cid, { verb: 'settlePayment', paymentId, intentId: obs.intentId });
  const out = await inBilling(deps, 'settlePayment', async (tx) => {
    const before = await loadPayment(tx, paymentId);
    // the stay first, then the payment: the lock order every stay verb uses
    const stay = before ? await loadStayForUpdate(tx, before.stayId) : null;
    const p = await loadPayment(tx, paymentId, true);
    const now = deps.clock.now();
    const o = pay.settlePayment(p, obs, { cid }, now);
    if (o.status === 'refused') {
      if (o.code === 'PAYMENT_AMOUNT_MISMATCH')
        log.error({ alarm: true, code: o.code, detail: o.detail }, 'ALARM: Stripe and the ledger disagree');
      throw new BillingStepFailed(o.code, true, o.detail ?? 'refused');
    }
    if (o.status !== 'applied' || !p || !stay) return { payment: o.code, stay: null };
    if ((await casPayment(tx, o.state, p.version)) !== 1) throw new Error(`payment ${p.id} changed under its lock`);
    // the intent's outcome is known now (a webhook, a sweep, a re-read): its cancel job that gave up while Stripe
    // could not be reached is no longer an operator's to act on
    if (o.state.status === 'succeeded' || o.state.status === 'failed') await settleDeadJobs(tx, 'cancel_intent', p.id, o.code, now);
    if (o.state.status === 'succeeded') await notifyPaymentReceived(deps, tx, stay, o.state, cid, now);
    const payments = await listPaymentsOfStay(tx, stay.id);
    const settings = await loadStaySettings(tx, stay.siteId);
    const room = await loadRoom(tx, stay.roomId);
    if (!settings || !room) throw new Error(`stay ${stay.id} lost its room or site`);
    let so: StayOutcome;
    if (o.state.status === 'succeeded') {
      so = domain.confirmStay(stay, { room, settings, paid: paidOf(payments), keyId: `key_${stay.id}`, cid }, now);
      if (so.status === 'applied') {
        // the key is the guest's authority at the door: every gate runs again before it is issued, and a stay
        // that may no longer have it is cancelled and refunded in full instead (the site did not deliver it)
        const gate = await stayCheckInGate(tx, stay, settings, now);
        if (gate.status === 'refused') {
          const reason: CancelReason = gate.code === 'GUEST_BLOCKED' ? 'guest_blocked' : 'membership_ended';
          log.warn({ code: gate.code, reason, detail: gate.detail }, 'a gate refused the key at confirmation: the stay is cancelled');
          so = domain.cancelStay(stay, { reason, settings, paid: paidOf(payments), cid }, now);
        }
      }
      if (so.status === 'refused' && so.code === 'PAYMENT_AFTER_STAY_ENDED') {
        log.warn({ code: so.code, stayStatus: stay.status }, 'money arrived for a stay that has ended: refunding it');
        const amounts: Record<Payment['purpose'], number> = { stay_deposit: 0, stay_balance: 0 };
        amounts[o.state.purpose] = o.state.amountReceived - o.state.amountRefunded;
        await queueRefunds({ deps, tx, stay, cid, now, log }, amounts);
        return { payment: o.code, stay: so.code };
      }
    } else if (o.state.status === 'failed') {
      so = domain.failStay(stay, { paid: paidOf(payments), cid }, now);
    } else {
      return { payment: o.code, stay: null };
    }
    if (so.status !== 'applied') return { payment: o.code, stay: so.code };
    if ((await casStay(tx, so.state, stay.version)) !== 1) throw new Error(`stay ${stay.id} changed under its lock`);
    await runEffects({ deps, tx, stay: so.state, cid, now, log }, so.emits);
    return { payment: o.code, stay: so.code };
  });
  log.info({ code: out.payment, stayCode: out.stay }, 'payment settled');
  return out;
}

/**
 * Records a payment's refunds as Stripe holds them now — re-read, whoever made them (a verb here, the
 * dashboard, support), never the amounts an event carried: each of our refund rows follows its Stripe
 * status (pending, succeeded, failed), one made in Stripe directly is added (source `stripe`), and the
 * payment's refunded total is what Stripe says succeeded. A stay whose money is then all refunded ends
 * (cancelled `payment_refunded` through the stay verb: its key revoked, its nights released); a partial
 * refund made outside this system is recorded and raised as an operator alarm; a refund of ours that
 * Stripe failed goes to the dead-letter list for an operator (I8: every page tells the truth about money).
 */
export async function reconcileRefunds(
  deps: StayDeps,
  paymentId: string,
  observed: readonly RefundObservation[],
  cid: CorrelationId,
): Promise<OutcomeCode> {
  const log = withCorrelation(deps.log, cid, { verb: 'recordRefund', paymentId });
  return inBilling(deps, 'recordRefund', async (tx) => {
    const before = await loadPayment(tx, paymentId);
    // the stay first, then the payment: the lock order every stay verb uses
    const stay = before ? await loadStayForUpdate(tx, before.stayId) : null;
    const p = await loadPayment(tx, paymentId, true);
    if (!p || !stay) return 'PAYMENT_NOT_FOUND';
    const now = deps.clock.now();
    const rows = await listRefundsOfPayment(tx, p.id);
    let externalSucceeded = false;
    const failedExternal: Refund[] = [];
    for (const r of observed) {
      const row =
        rows.find((x) => x.stripeRefundId === r.stripeRefundId) ??
        (r.refundId === null ? undefined : rows.find((x) => x.id === r.refundId && x.stripeRefundId === null));
      if (!row) {
        // made in Stripe directly: recorded from Stripe's own object
        const id = `rf_${r.stripeRefundId}`;
        const n = await insertStripeRefund(tx, {
          paymentId: p.id,
          stripeRefundId: r.stripeRefundId,
          amount: r.amount,
          currency: r.currency,
          status: r.status,
          cid,
          now,
        });
        const made = n === 1 ? await loadRefund(tx, id) : null;
        if (made && r.status === 'succeeded') {
          externalSucceeded = true;
          await notifyRefundMade(deps, tx, stay, made, cid, now);
        }
        log.warn(
          { code: 'REFUND_RECONCILED', stripeRefundId: r.stripeRefundId, amount: r.amount, status: r.status },
          'a refund made in Stripe directly recorded',
        );
        continue;
      }
      if ((await setRefundStatus(tx, row.id, r.status, r.stripeRefundId, now)) !== 1) continue;
      if (r.status === 'failed' && row.source === 'stripe') failedExternal.push(row);
      if (r.status === 'succeeded') {
        if (row.source === 'stripe') externalSucceeded = true;
        await notifyRefundMade(deps, tx, stay, row, cid, now);
      }
      if (r.status === 'failed' && row.source === 'tobira') {
        await deadLetterRefundJob(tx, row.id, 'REFUND_FAILED', `Stripe failed refund ${r.stripeRefundId}`, now);
        log.error(
          { alarm: true, code: 'REFUND_FAILED', refundId: row.id, stripeRefundId: r.stripeRefundId },
          'ALARM: Stripe failed a refund',
        );
      }
    }
    const total = observed.filter((r) => r.status === 'succeeded').reduce((n, r) => n + r.amount, 0);
    if (total < p.amountRefunded)
      log.error(
        { alarm: true, code: 'PAYMENT_AMOUNT_MISMATCH', recorded: p.amountRefunded, stripe: total },
        'ALARM: Stripe counts less refunded than the ledger (a refund failed after it succeeded)',
      );
    const code = await recordRefundTotal(deps, tx, p, total, p.currency, cid, now);
    if (failedExternal.length > 0) await giveBackAfterFailedRefunds({ deps, tx, stay, cid, now, log }, p.id, failedExternal);
    if (code !== 'PAYMENT_REFUNDED' && code !== 'PAYMENT_PARTIALLY_REFUNDED') return code;
    const held = paidOf(await listPaymentsOfStay(tx, stay.id));
    const live = stay.status === 'confirmed' || stay.status === 'checked_in';
    if (live && held.deposit + held.balance === 0) {
      // all of the stay's money is back with the guest: the stay ends and its key is revoked
      const c = await stayStepIn(
        deps,
        tx,
        stay.id,
        cid,
        null,
        (s, payments, settings, at) => domain.cancelStay(s, { reason: 'payment_refunded', settings, paid: paidOf(payments), cid }, at),
        log,
      );
      log.warn({ code: c.code, stayId: stay.id }, 'the stay was refunded in full: ended');
    } else if (live && externalSucceeded) {
      log.error(
        { alarm: true, code: 'PAYMENT_PARTIALLY_REFUNDED', stayId: stay.id, refunded: total, received: p.amountReceived },
        'ALARM: part of a live stay was refunded in Stripe directly; the stay and its key are kept',
      );
    }
    return code;
  });
}

/**
 * Refunds made in Stripe directly that Stripe then failed: an operator alarm always (their refund did not
 * happen), and, for a stay that has ended, what ours was cut by because Stripe counted them as given is
 * queued again under the payment's next key (domain refundOwedAfterFailedRefunds), so the guest gets back
 * all the policy gives (I8) instead of the page saying the money was kept.
 */
async function giveBackAfterFailedRefunds(c: EffectContext, paymentId: string, failed: readonly Refund[]): Promise<void> {
  const view = (r: Refund): pay.RefundView => ({
    amount: r.amount,
    status: r.status,
    source: r.source,
    stripeRefundId: r.stripeRefundId,
    attempt: ourRefundAttempt(r, paymentId),
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  });
  const p = await loadPayment(c.tx, paymentId);
  const live = c.stay.status === 'confirmed' || c.stay.status === 'checked_in' || c.stay.status === 'pending';
  const owed =
    p === null || live
      ? 0
      : pay.refundOwedAfterFailedRefunds((await listRefundsOfPayment(c.tx, paymentId)).map(view), failed.map(view), p.amountReceived);
  c.log.error(
    {
      alarm: true,
      code: 'REFUND_FAILED',
      source: 'stripe',
      stripeRefundIds: failed.map((r) => r.stripeRefundId),
      amount: failed.reduce((n, r) => n + r.amount, 0),
      givenBack: owed,
    },
    owed > 0
      ? 'ALARM: a refund made in Stripe directly failed; the part of ours it stood for is refunded again'
      : 'ALARM: a refund made in Stripe directly failed; the money is still held',
  );
  if (owed === 0 || p === null) return;
  const amounts: Record<Payment['purpose'], number> = { stay_deposit: 0, stay_balance: 0 };
  amounts[p.purpose] = owed;
  await queueRefunds(c, amounts);
}

async function recordRefundTotal(
  deps: StayDeps,
  tx: Tx,
  p: Payment,
  amountRefunded: number,
  currency: string,
  cid: CorrelationId,
  now: number,
): Promise<OutcomeCode> {
  const o = pay.recordRefund(p, { amountRefunded, currency, cid }, now);
  if (o.status === 'refused') {
    withCorrelation(deps.log, cid, { paymentId: p.id }).error(
      { alarm: true, code: o.code, detail: o.detail },
      'ALARM: refund disagrees with the ledger',
    );
    throw new BillingStepFailed(o.code, true, o.detail ?? 'refused');
  }
  if (o.status === 'applied' && (await casPayment(tx, o.state, p.version)) !== 1) throw new Error(`payment ${p.id} changed under its lock`);
  return o.code;
}

/**
 * The refund of a payment to make now: the latest attempt of its chain (`refund:<paymentId>:<n>`), or,
 * when that one failed at Stripe for good, a new attempt with the next key — a key Stripe refused keeps
 * answering its stored error, so retrying it could never succeed.
 */
export async function currentRefundAttempt(deps: StayDeps, first: Refund, cid: CorrelationId): Promise<Refund> {
  const attemptOf = (r: Refund) => Number(r.idempotencyKey.split(':').pop() ?? '0');
  const chain = (await listRefundsOfPayment(deps.db, first.paymentId)).filter(
    (r) => r.source === 'tobira' && r.idempotencyKey.startsWith(`refund:${first.paymentId}:`),
  );
  const latest = chain.reduce((a, b) => (attemptOf(b) > attemptOf(a) ? b : a), first);
  if (latest.status !== 'failed') return latest;
  const n = await nextRefundAttempt(deps.db, first.paymentId);
  const id = `rf_${first.paymentId}_${n}`;
  await inBilling(deps, 'retryRefund', (tx) =>
    insertRefund(tx, {
      id,
      paymentId: first.paymentId,
      amount: latest.amount,
      currency: latest.currency,
      idempotencyKey: pay.refundIdempotencyKey(first.paymentId, n),
      cid,
      now: deps.clock.now(),
    }),
  );
  withCorrelation(deps.log, cid, { paymentId: first.paymentId }).info(
    { code: 'REFUND_QUEUED', refundId: id, attempt: n },
    'refund retried as a new attempt',
  );
  const made = await loadRefund(deps.db, id);
  if (!made) throw new Error(`refund ${id} was not stored`);
  return made;
}

/**
 * Our refund that Stripe refused (`charge_already_refunded`, `amount_too_large`, an idempotency
 * mismatch, ...), settled against the intent's refunds as Stripe holds them now — already recorded by
 * `reconcileRefunds` from the same list. Money given back in Stripe directly while ours waited (the
 * dashboard, support; its webhooks maybe lost) counts toward ours, so the guest is never refunded twice:
 * `satisfied` when nothing is left to give back (our attempt is closed, counting for nothing), `rest`
 * with a new, smaller attempt under the next key when only part was (the refused key keeps answering its
 * stored error), `unsettled` when what Stripe holds covers none of it (the refusal stands).
 */
export async function settleRefusedRefund(
  deps: StayDeps,
  refund: Refund,
  amountReceived: number,
  observed: readonly RefundObservation[],
  error: string,
  cid: CorrelationId,
): Promise<{ readonly outcome: 'satisfied' | 'unsettled' } | { readonly outcome: 'rest'; readonly refund: Refund }> {
  const log = withCorrelation(deps.log, cid, { verb: 'settleRefusedRefund', paymentId: refund.paymentId, refundId: refund.id });
  // what the charge still holds at Stripe: a pending refund has left it too (Stripe refuses to refund it again)
  const given = observed.filter((r) => r.status !== 'failed').reduce((n, r) => n + r.amount, 0);
  const left = Math.max(0, amountReceived - given);
  if (left >= refund.amount) return { outcome: 'unsettled' };
  const now = deps.clock.now();
  const n = await nextRefundAttempt(deps.db, refund.paymentId);
  const id = `rf_${refund.paymentId}_${n}`;
  // the refused attempt is closed by the one verb that may fail a refund; the rest is queued as an operator's
  // retry is (a crash between the two leaves a failed attempt, which the next run of the job retries the same way)
  await inBilling(deps, 'noteRefundError', (tx) => noteRefundError(tx, refund.id, error, true, now));
  if (left > 0)
    await inBilling(deps, 'retryRefund', (tx) =>
      insertRefund(tx, {
        id,
        paymentId: refund.paymentId,
        amount: left,
        currency: refund.currency,
        idempotencyKey: pay.refundIdempotencyKey(refund.paymentId, n),
        cid,
        now,
      }),
    );
  if (left === 0) {
    log.info(
      { code: 'REFUND_ALREADY_RECORDED', amount: refund.amount, refundedAtStripe: given },
      'Stripe had already given the money back',
    );
    return { outcome: 'satisfied' };
  }
  log.info({ code: 'REFUND_QUEUED', refundId: id, attempt: n, amount: left, was: refund.amount }, 'only the rest is refunded');
  const rest = await loadRefund(deps.db, id);
  if (!rest) throw new Error(`refund ${id} was not stored`);
  return { outcome: 'rest', refund: rest };
}

// ---------------------------------------------------------------- cancel / check in / check out / expire

export interface CancelStayInput {
  readonly stayId: string;
  readonly reason: CancelReason;
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/**
 * Cancel: in one transaction the stay is cancelled, its key revoked at once
 * through the key verb, its nights released, and the refund the site's
 * policy allows queued with its idempotency key. Revoking never waits on billing.
 */
export function cancelStay(deps: StayDeps, input: CancelStayInput): Promise<StayResult> {
  const cid = input.cid ?? newCorrelationId();
  return stayStep(deps, 'cancelStay', input.stayId, cid, input.siteScope, (s, payments, settings, now) =>
    domain.cancelStay(s, { reason: input.reason, settings, paid: paidOf(payments), cid }, now),
  );
}

/**
 * Check in: the check-in gates first (`GUEST_BLOCKED`, and
 * `MEMBERS_ONLY_PLAN` for a members' booking whose membership no longer
 * gives access), decided in the transaction that writes the check-in.
 */
export function checkInStay(deps: StayDeps, input: { stayId: string; siteScope?: SiteScope; cid?: CorrelationId }): Promise<StayResult> {
  const cid = input.cid ?? newCorrelationId();
  return stayStep(deps, 'checkInStay', input.stayId, cid, input.siteScope, async (s, _p, settings, now, tx) => {
    if (s.status === 'confirmed') {
      const gate = await stayCheckInGate(tx, s, settings, now);
      if (gate.status === 'refused') return refused(gate.code, gate.detail);
    }
    return domain.checkInStay(s, { settings, cid }, now);
  });
}

/** Check out: the key ends now (revoked with stay_checked_out) and the nights are released. */
export function checkOutStay(deps: StayDeps, input: { stayId: string; siteScope?: SiteScope; cid?: CorrelationId }): Promise<StayResult> {
  const cid = input.cid ?? newCorrelationId();
  return stayStep(deps, 'checkOutStay', input.stayId, cid, input.siteScope, (s, _p, settings, now) => {
    // a guest who never checked in is checked in and out in the same transaction
    if (s.status === 'confirmed') {
      const i = domain.checkInStay(s, { settings, cid }, now);
      if (i.status !== 'applied') return i;
      return domain.checkOutStay({ ...i.state, version: s.version }, { cid }, now);
    }
    return domain.checkOutStay(s, { cid }, now);
  });
}

/** The automatic check-out at the end of a stay: marked checked_out; its key ends by its own validity. */
export function endStay(deps: StayDeps, stayId: string, cid: CorrelationId): Promise<StayResult> {
  return stayStep(
    deps,
    'endStay',
    stayId,
    cid,
    null,
    (s, _p, settings, now) => {
      // not over yet (a sweep that raced a change of the site's check-out time): nothing to do
      if (stayWindow(s, settings).validUntil > now) return noop('STAY_NOT_OVER', s);
      if (s.status === 'confirmed') {
        const i = domain.checkInStay(s, { settings, cid }, now);
        if (i.status !== 'applied') return i;
        return domain.checkOutStay({ ...i.state, version: s.version }, { cid }, now);
      }
      return domain.checkOutStay(s, { cid }, now);
    },
    { keyExpiresAlone: true },
  );
}

/**
 * Hold expiry: a pending stay past its hold → expired, nights released, its intents cancelled through the
 * billing queue, a deposit already paid refunded; a payment still processing keeps it pending until it settles.
 */
export function expireStay(deps: StayDeps, stayId: string, cid: CorrelationId): Promise<StayResult> {
  return stayStep(deps, 'expireStay', stayId, cid, null, (s, payments, _settings, now) =>
    domain.expireStay(s, { paid: paidOf(payments), processing: payments.some((p) => p.status === 'processing'), cid }, now),
  );
}

// ---------------------------------------------------------------- webhook ingress

export type WebhookReceipt =
  | { readonly status: 'stored' | 'duplicate'; readonly eventId: string; readonly type: string }
  | { readonly status: 'refused'; readonly code: OutcomeCode; readonly detail?: string };

/**
 * `POST /webhooks/stripe`: verifies the signature on the raw body and stores
 * the event in the inbox in one transaction (the worker processes it).
 * A refusal changes nothing.
 */
export async function receiveStripeWebhook(
  deps: StayDeps,
  webhookSecret: string | undefined,
  raw: Buffer,
  header: string | undefined,
  cid: CorrelationId,
): Promise<WebhookReceipt> {
  const log = withCorrelation(deps.log, cid, { verb: 'receiveStripeWebhook' });
  if (!deps.stripe || webhookSecret === undefined) return { status: 'refused', code: 'BILLING_NOT_CONFIGURED' };
  const v = verifyWebhook(deps.stripe, raw, header, webhookSecret, deps.clock.now());
  if (v.status === 'refused') {
    log.warn({ code: v.code, detail: v.detail }, 'Stripe webhook refused');
    return { status: 'refused', code: v.code, detail: v.detail };
  }
  const e = v.event;
  const stored = await deps.db.transaction((tx) =>
    storeWebhookEvent(tx, { eventId: e.eventId, type: e.type, objectId: e.objectId, payload: e.event, cid, now: deps.clock.now() }),
  );
  log.info(
    { code: stored === 'stored' ? 'WEBHOOK_STORED' : 'WEBHOOK_DUPLICATE', eventId: e.eventId, type: e.type },
    'Stripe webhook received',
  );
  // committed: the worker may process it now rather than at its next poll
  if (stored === 'stored') deps.wakeBilling?.();
  return { status: stored, eventId: e.eventId, type: e.type };
}

// ---------------------------------------------------------------- rooms and site settings

export interface CreateRoomInput {
  readonly id?: string;
  readonly siteId: string;
  readonly name: string;
  readonly doors: readonly string[];
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/** A room: a named set of the site's doors that one stay books. Its doors must be at its site. */
export async function createRoom(deps: AppDeps, input: CreateRoomInput): Promise<Outcome<Room> & { readonly cid: CorrelationId }> {
  const cid = input.cid ?? newCorrelationId();
  if (!inScope(input.siteScope, input.siteId)) return { ...refused('SITE_NOT_FOUND'), cid };
  const ids = z.object({ siteId: SiteId, doors: z.array(DoorId) }).safeParse(input);
  if (!ids.success) return { ...refused('INVALID_REQUEST', summarizeIssues(ids.error)), cid };
  const room: Room = { id: input.id ?? `room_${newId()}`, siteId: ids.data.siteId, name: input.name, doors: ids.data.doors };
  const r = await deps.db
    .transaction(async (tx): Promise<Outcome<Room>> => {
      if ((await loadStaySettings(tx, input.siteId)) === null) return refused('SITE_NOT_FOUND');
      const found = await doorsAtSite(tx, input.siteId, input.doors);
      const missing = input.doors.filter((d) => !found.includes(d));
      if (input.doors.length === 0 || missing.length > 0) return refused('DOOR_NOT_FOUND', missing.join(','));
      if ((await insertRoom(tx, room, deps.clock.now())) === 1) return applied('ROOM_CREATED', room);
      const existing = await loadRoom(tx, room.id);
      if (!existing) return refused('ROOM_NAME_TAKEN', `a room named ${room.name} exists at the site`);
      const same =
        existing.siteId === room.siteId &&
        existing.name === room.name &&
        [...existing.doors].sort().join() === [...room.doors].sort().join();
      return same ? noop('ROOM_ALREADY_EXISTS', existing) : conflict('ROOM_ALREADY_EXISTS', existing);
    })
    .catch((e: unknown) => {
      // UNIQUE (site_id, name)
      if (pgErrorCode(e) === '23505') return refused('ROOM_NAME_TAKEN', `a room named ${room.name} exists at the site`);
      throw e;
    });
  withCorrelation(deps.log, cid, { verb: 'createRoom', roomId: room.id }).info({ status: r.status, code: r.code }, 'room verb done');
  return { ...r, cid };
}

export interface StaySettingsInput {
  readonly siteId: string;
  readonly holdMinutes?: number;
  readonly checkInTime?: string;
  readonly checkOutTime?: string;
  readonly sharedDoors?: readonly string[];
  readonly cancellationPolicy?: CancellationPolicy;
  readonly currency?: string;
  readonly maxNights?: number;
  readonly walkInsAllowed?: boolean;
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/** A site's stay settings: what the input names replaces the current (or default) value; the policy must be monotone. */
export async function setStaySettings(
  deps: AppDeps,
  input: StaySettingsInput,
): Promise<Outcome<domain.SiteStaySettings> & { readonly cid: CorrelationId }> {
  const cid = input.cid ?? newCorrelationId();
  if (!inScope(input.siteScope, input.siteId)) return { ...refused('SITE_NOT_FOUND'), cid };
  const shared = z.array(DoorId).optional().safeParse(input.sharedDoors);
  if (!shared.success) return { ...refused('INVALID_REQUEST', summarizeIssues(shared.error)), cid };
  const sharedDoors = shared.data;
  const r = await deps.db.transaction(async (tx): Promise<Outcome<domain.SiteStaySettings>> => {
    const current = await loadStaySettings(tx, input.siteId);
    if (!current) return refused('SITE_NOT_FOUND');
    const next: domain.SiteStaySettings = {
      ...current,
      ...(input.holdMinutes === undefined ? {} : { holdMinutes: input.holdMinutes }),
      ...(input.checkInTime === undefined ? {} : { checkInTime: input.checkInTime }),
      ...(input.checkOutTime === undefined ? {} : { checkOutTime: input.checkOutTime }),
      ...(sharedDoors === undefined ? {} : { sharedDoors }),
      ...(input.cancellationPolicy === undefined ? {} : { cancellationPolicy: input.cancellationPolicy }),
      ...(input.currency === undefined ? {} : { currency: input.currency }),
      ...(input.maxNights === undefined ? {} : { maxNights: input.maxNights }),
      ...(input.walkInsAllowed === undefined ? {} : { walkInsAllowed: input.walkInsAllowed }),
    };
    const policy = validatePolicy(next.cancellationPolicy);
    if (policy.status === 'refused') return refused(policy.code, policy.detail);
    const found = await doorsAtSite(tx, input.siteId, next.sharedDoors);
    const missing = next.sharedDoors.filter((d) => !found.includes(d));
    if (missing.length > 0) return refused('DOOR_NOT_FOUND', missing.join(','));
    await saveStaySettings(tx, next, deps.clock.now());
    return applied('STAY_SETTINGS_SAVED', next);
  });
  withCorrelation(deps.log, cid, { verb: 'setStaySettings', siteId: input.siteId }).info(
    { status: r.status, code: r.code },
    'settings verb done',
  );
  return { ...r, cid };
}
