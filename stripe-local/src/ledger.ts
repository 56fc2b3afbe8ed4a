/**
 * The in-memory Stripe account: PaymentIntents, their charges, refunds and the
 * events they emit. Each verb checks the state it is given, changes it, and
 * returns the wire answer plus the events Stripe would emit for that change —
 * nothing here knows about HTTP, idempotency or faults. Ids and time come from
 * ports, so a run with the same seed and clock is byte-for-byte repeatable.
 */
import { createHash } from 'node:crypto';
import {
  errorAnswer,
  type ApiAnswer,
  type Charge,
  type EventType,
  type PaymentIntent,
  type PaymentIntentStatus,
  type Refund,
  type StripeEvent,
  type StripeObject,
} from './objects.js';
import type {
  CancelPaymentIntentParams,
  ConfirmPaymentIntentParams,
  CreatePaymentIntentParams,
  CreateRefundParams,
  ListEventsParams,
  ListRefundsParams,
} from './params.js';

/** Stripe's documented test PaymentMethods this server knows, and what the issuer says. */
export const TEST_CARDS = {
  pm_card_visa: { outcome: 'succeeds' },
  pm_card_mastercard: { outcome: 'succeeds' },
  pm_card_amex: { outcome: 'succeeds' },
  pm_card_jcb: { outcome: 'succeeds' },
  pm_card_chargeDeclined: { outcome: 'declined', declineCode: 'generic_decline' },
  pm_card_visa_chargeDeclined: { outcome: 'declined', declineCode: 'generic_decline' },
  pm_card_chargeDeclinedInsufficientFunds: { outcome: 'declined', declineCode: 'insufficient_funds' },
  pm_card_visa_chargeDeclinedInsufficientFunds: { outcome: 'declined', declineCode: 'insufficient_funds' },
} as const satisfies Record<string, { outcome: 'succeeds' } | { outcome: 'declined'; declineCode: string }>;

function isTestCard(pm: string): pm is keyof typeof TEST_CARDS {
  return Object.hasOwn(TEST_CARDS, pm);
}

export interface Clock {
  /** milliseconds since the epoch */
  now(): number;
}

/** Deterministic ids: `prefix_` + seed + a counter per prefix (Stripe ids are opaque; only the prefix is meaningful). */
export class Ids {
  private readonly counters = new Map<string, number>();
  constructor(private readonly seed: string) {}
  next(prefix: string): string {
    const n = (this.counters.get(prefix) ?? 0) + 1;
    this.counters.set(prefix, n);
    return `${prefix}_${this.seed}${n.toString(36).padStart(14 - this.seed.length, '0')}`;
  }
  secret(of: string): string {
    return createHash('sha256').update(`${this.seed}:${of}`).digest('base64url').replace(/[-_]/g, '').slice(0, 25);
  }
}

/** What a verb asks to be emitted; the caller stamps ids, api version and request. */
export interface EventDraft {
  type: EventType;
  object: StripeObject;
  previous_attributes?: Record<string, unknown>;
}

export interface VerbResult {
  answer: ApiAnswer;
  events: EventDraft[];
}

/** How a confirm ends when the card itself would succeed (fault knobs decide this). */
export type ConfirmMode = 'normal' | 'decline' | 'processing';
/** Asked only when a confirm actually reaches the card, so a knob like "decline the next confirm" is not used up by a create. */
export type ConfirmModeOf = () => ConfirmMode;

const CANCELABLE: readonly PaymentIntentStatus[] = [
  'requires_payment_method',
  'requires_capture',
  'requires_confirmation',
  'requires_action',
  'processing',
];
const CONFIRMABLE: readonly PaymentIntentStatus[] = ['requires_payment_method', 'requires_confirmation', 'requires_action'];

const snap = <T>(o: T): T => structuredClone(o);
const ok = (body: unknown, events: EventDraft[]): VerbResult => ({ answer: { status: 200, body }, events });
const fail = (answer: ApiAnswer): VerbResult => ({ answer, events: [] });

/** A missing object named in the URL is a 404; one named by a parameter is a 400 (as Stripe answers). */
function noSuch(kind: string, id: string, param?: string): ApiAnswer {
  return errorAnswer(param ? 400 : 404, {
    type: 'invalid_request_error',
    code: 'resource_missing',
    message: `No such ${kind}: '${id}'`,
    ...(param ? { param } : {}),
  });
}

export class Ledger {
  readonly paymentIntents = new Map<string, PaymentIntent>();
  readonly charges = new Map<string, Charge>();
  readonly refunds = new Map<string, Refund>();
  /** oldest first */
  readonly events: StripeEvent[] = [];

  constructor(
    private readonly ids: Ids,
    private readonly clock: Clock,
  ) {}

  private seconds(): number {
    return Math.floor(this.clock.now() / 1000);
  }

  newId(prefix: string): string {
    return this.ids.next(prefix);
  }

  createPaymentIntent(p: CreatePaymentIntentParams, mode: ConfirmModeOf): VerbResult {
    if (p.payment_method !== undefined && !isTestCard(p.payment_method))
      return fail(noSuch('PaymentMethod', p.payment_method, 'payment_method'));
    if (p.confirm === true && p.payment_method === undefined) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'parameter_missing',
          param: 'payment_method',
          message: 'You must provide a payment_method when confirm=true.',
        }),
      );
    }
    const id = this.ids.next('pi');
    const pi: PaymentIntent = {
      id,
      object: 'payment_intent',
      allowed_payment_method_types: p.allowed_payment_method_types ?? p.payment_method_types ?? null,
      amount: p.amount,
      amount_capturable: 0,
      amount_received: 0,
      automatic_payment_methods: p.automatic_payment_methods ? { enabled: p.automatic_payment_methods.enabled } : null,
      canceled_at: null,
      cancellation_reason: null,
      capture_method: 'automatic',
      client_secret: `${id}_secret_${this.ids.secret(id)}`,
      confirmation_method: 'automatic',
      created: this.seconds(),
      currency: p.currency,
      customer: p.customer ?? null,
      description: p.description ?? null,
      last_payment_error: null,
      latest_charge: null,
      livemode: false,
      metadata: p.metadata ?? {},
      next_action: null,
      payment_method: p.payment_method ?? null,
      payment_method_types: p.allowed_payment_method_types ?? p.payment_method_types ?? ['card'],
      receipt_email: p.receipt_email ?? null,
      status: p.payment_method === undefined ? 'requires_payment_method' : 'requires_confirmation',
    };
    this.paymentIntents.set(id, pi);
    const created: EventDraft = { type: 'payment_intent.created', object: snap(pi) };
    if (p.confirm !== true) return ok(snap(pi), [created]);
    const confirmed = this.confirmPaymentIntent(id, { payment_method: p.payment_method }, mode);
    return { answer: confirmed.answer, events: [created, ...confirmed.events] };
  }

  retrievePaymentIntent(id: string): ApiAnswer {
    const pi = this.paymentIntents.get(id);
    return pi ? { status: 200, body: snap(pi) } : noSuch('payment_intent', id);
  }

  confirmPaymentIntent(id: string, p: ConfirmPaymentIntentParams, modeOf: ConfirmModeOf): VerbResult {
    const pi = this.paymentIntents.get(id);
    if (!pi) return fail(noSuch('payment_intent', id));
    if (!CONFIRMABLE.includes(pi.status)) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'payment_intent_unexpected_state',
          message: `You cannot confirm this PaymentIntent because it has a status of ${pi.status}.`,
          payment_intent: snap(pi),
        }),
      );
    }
    const pm = p.payment_method ?? pi.payment_method;
    if (pm === null || pm === undefined) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'payment_intent_unexpected_state',
          param: 'payment_method',
          message: "You cannot confirm this PaymentIntent because it's missing a payment method.",
          payment_intent: snap(pi),
        }),
      );
    }
    if (!isTestCard(pm)) return fail(noSuch('PaymentMethod', pm, 'payment_method'));
    const card = TEST_CARDS[pm];
    const mode = modeOf();
    const declineCode = mode === 'decline' ? 'generic_decline' : card.outcome === 'declined' ? card.declineCode : null;
    const charge: Charge = {
      id: this.ids.next('ch'),
      object: 'charge',
      amount: pi.amount,
      amount_captured: 0,
      amount_refunded: 0,
      captured: false,
      created: this.seconds(),
      currency: pi.currency,
      failure_code: null,
      failure_message: null,
      livemode: false,
      metadata: { ...pi.metadata },
      outcome: null,
      paid: false,
      payment_intent: pi.id,
      payment_method: pm,
      refunded: false,
      status: 'pending',
    };
    this.charges.set(charge.id, charge);
    pi.latest_charge = charge.id;
    pi.payment_method = pm;
    pi.last_payment_error = null;
    if (declineCode !== null) return this.decline(pi, charge, declineCode);
    if (mode === 'processing') {
      pi.status = 'processing';
      return ok(snap(pi), [
        { type: 'charge.pending', object: snap(charge) },
        { type: 'payment_intent.processing', object: snap(pi) },
      ]);
    }
    const events = this.succeed(pi, charge);
    return ok(snap(pi), events);
  }

  /**
   * The PaymentIntent an invoice is paid through, succeeded with its charge (the card already
   * accepted by the invoice's charge attempt), so the invoice's money can be refunded as any
   * PaymentIntent's. Its own `payment_intent.*` / `charge.*` events are not emitted here: the
   * invoice's events stand for the payment.
   */
  succeededForInvoice(p: { invoice: string; amount: number; currency: string; customer: string; paymentMethod: string }): string {
    const created = this.createPaymentIntent(
      {
        amount: p.amount,
        currency: p.currency,
        customer: p.customer,
        metadata: {},
        description: `Payment for Invoice ${p.invoice}`,
      },
      () => 'normal',
    );
    const body: unknown = created.answer.body;
    const id = typeof body === 'object' && body !== null && 'id' in body && typeof body.id === 'string' ? body.id : null;
    if (id === null) throw new Error("the invoice's PaymentIntent was not created");
    const confirmed = this.confirmPaymentIntent(id, { payment_method: p.paymentMethod }, () => 'normal');
    if (confirmed.answer.status !== 200) throw new Error(`the invoice's PaymentIntent did not succeed: ${confirmed.answer.status}`);
    return id;
  }

  /** Ends a `processing` PaymentIntent (the asynchronous rail answered). */
  settle(id: string, outcome: 'succeeded' | 'failed'): VerbResult {
    const pi = this.paymentIntents.get(id);
    if (!pi) return fail(noSuch('payment_intent', id));
    const charge = pi.latest_charge === null ? undefined : this.charges.get(pi.latest_charge);
    if (pi.status !== 'processing' || !charge) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'payment_intent_unexpected_state',
          message: `PaymentIntent ${id} is ${pi.status}, not processing.`,
        }),
      );
    }
    if (outcome === 'failed') return this.decline(pi, charge, 'generic_decline');
    const events = this.succeed(pi, charge);
    return ok(snap(pi), events);
  }

  private succeed(pi: PaymentIntent, charge: Charge): EventDraft[] {
    Object.assign(charge, {
      status: 'succeeded',
      paid: true,
      captured: true,
      amount_captured: charge.amount,
      outcome: { network_status: 'approved_by_network', reason: null, type: 'authorized', seller_message: 'Payment complete.' },
    } satisfies Partial<Charge>);
    pi.status = 'succeeded';
    pi.amount_received = pi.amount;
    return [
      { type: 'charge.succeeded', object: snap(charge) },
      { type: 'payment_intent.succeeded', object: snap(pi) },
    ];
  }

  /** A declined card leaves the PaymentIntent reusable (`requires_payment_method`) and answers 402. */
  private decline(pi: PaymentIntent, charge: Charge, declineCode: string): VerbResult {
    const message = declineCode === 'insufficient_funds' ? 'Your card has insufficient funds.' : 'Your card was declined.';
    Object.assign(charge, {
      status: 'failed',
      failure_code: 'card_declined',
      failure_message: message,
      outcome: {
        network_status: 'declined_by_network',
        reason: declineCode,
        type: 'issuer_declined',
        seller_message: 'The bank did not return any further details with this decline.',
      },
    } satisfies Partial<Charge>);
    pi.status = 'requires_payment_method';
    pi.last_payment_error = {
      type: 'card_error',
      code: 'card_declined',
      decline_code: declineCode,
      message,
      charge: charge.id,
      payment_method: { id: charge.payment_method, object: 'payment_method', type: 'card' },
    };
    pi.payment_method = null;
    return {
      answer: errorAnswer(402, {
        type: 'card_error',
        code: 'card_declined',
        decline_code: declineCode,
        message,
        charge: charge.id,
        payment_intent: snap(pi),
      }),
      events: [
        { type: 'charge.failed', object: snap(charge) },
        { type: 'payment_intent.payment_failed', object: snap(pi) },
      ],
    };
  }

  cancelPaymentIntent(id: string, p: CancelPaymentIntentParams): VerbResult {
    const pi = this.paymentIntents.get(id);
    if (!pi) return fail(noSuch('payment_intent', id));
    if (!CANCELABLE.includes(pi.status)) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'payment_intent_unexpected_state',
          message: `You cannot cancel this PaymentIntent because it has a status of ${pi.status}. Only a PaymentIntent with one of the following statuses may be canceled: ${CANCELABLE.join(', ')}.`,
          payment_intent: snap(pi),
        }),
      );
    }
    pi.status = 'canceled';
    pi.canceled_at = this.seconds();
    pi.cancellation_reason = p.cancellation_reason ?? null;
    return ok(snap(pi), [{ type: 'payment_intent.canceled', object: snap(pi) }]);
  }

  createRefund(
    p: CreateRefundParams,
    mode: { pending: boolean; requireAction?: boolean; refuse: boolean } = { pending: false, refuse: false },
  ): VerbResult {
    let charge: Charge | undefined;
    if (p.charge !== undefined) {
      charge = this.charges.get(p.charge);
      if (!charge) return fail(noSuch('charge', p.charge, 'charge'));
    } else if (p.payment_intent !== undefined) {
      const pi = this.paymentIntents.get(p.payment_intent);
      if (!pi) return fail(noSuch('payment_intent', p.payment_intent, 'payment_intent'));
      charge = pi.latest_charge === null ? undefined : this.charges.get(pi.latest_charge);
      if (pi.status !== 'succeeded' || !charge) {
        return fail(
          errorAnswer(400, {
            type: 'invalid_request_error',
            code: 'charge_not_refundable',
            param: 'payment_intent',
            message: `This PaymentIntent (${pi.id}) does not have a successful charge to refund.`,
          }),
        );
      }
    } else {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'parameter_missing',
          message: 'One of the following params should be provided for this request: payment_intent or charge.',
        }),
      );
    }
    if (charge.status !== 'succeeded') {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'charge_not_refundable',
          message: `Charge ${charge.id} has not succeeded and cannot be refunded.`,
        }),
      );
    }
    const remaining = charge.amount_captured - charge.amount_refunded;
    if (remaining === 0) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'charge_already_refunded',
          message: `Charge ${charge.id} has already been refunded.`,
        }),
      );
    }
    const amount = p.amount ?? remaining;
    if (amount > remaining) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'amount_too_large',
          param: 'amount',
          message: `Refund amount (${amount} ${charge.currency}) is greater than unrefunded amount on charge (${remaining} ${charge.currency})`,
        }),
      );
    }
    if (mode.refuse) {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'balance_insufficient',
          message: 'This refund could not be processed because your Stripe balance is insufficient (stripe-local fault).',
        }),
      );
    }
    const previous = { amount_refunded: charge.amount_refunded, refunded: charge.refunded };
    const refund: Refund = {
      id: this.ids.next('re'),
      object: 'refund',
      amount,
      balance_transaction: null,
      charge: charge.id,
      created: this.seconds(),
      currency: charge.currency,
      customer: null,
      metadata: p.metadata ?? {},
      payment_intent: charge.payment_intent,
      payment_method: charge.payment_method,
      ...(mode.requireAction === true
        ? {
            next_action: {
              type: 'display_details' as const,
              display_details: {
                email_sent: { email_sent_at: this.seconds(), email_sent_to: 'customer@example.com' },
                expires_at: this.seconds() + 45 * 24 * 3600,
              },
            },
          }
        : mode.pending
          ? { pending_reason: 'processing' as const }
          : {}),
      reason: p.reason ?? null,
      receipt_number: null,
      source_transfer_reversal: null,
      // test-mode card refunds settle at once; the refundsPending knob keeps them pending like slower methods
      status: mode.requireAction === true ? 'requires_action' : mode.pending ? 'pending' : 'succeeded',
      transfer_reversal: null,
    };
    this.refunds.set(refund.id, refund);
    // as on Stripe, the charge counts a pending refund as refunded until it fails
    charge.amount_refunded += amount;
    charge.refunded = charge.amount_refunded === charge.amount_captured;
    return ok(snap(refund), [
      { type: 'refund.created', object: snap(refund) },
      { type: 'charge.refunded', object: snap(charge), previous_attributes: previous },
    ]);
  }

  /**
   * A pending refund ends: `refund.updated` and `charge.refund.updated` (both
   * carry the refund); a failed one also `refund.failed`, and its amount goes
   * back off the charge's `amount_refunded`.
   */
  settleRefund(id: string, outcome: 'succeeded' | 'failed' | 'canceled'): VerbResult {
    const refund = this.refunds.get(id);
    if (!refund) return fail(noSuch('refund', id));
    const from = refund.status;
    // a pending refund succeeds or fails; one waiting for the customer succeeds, or is canceled when its request runs out
    const may = from === 'pending' ? outcome !== 'canceled' : from === 'requires_action' ? outcome !== 'failed' : false;
    if (!may) return fail(errorAnswer(400, { type: 'invalid_request_error', message: `Refund ${id} is ${refund.status}.` }));
    refund.status = outcome;
    delete refund.pending_reason;
    delete refund.next_action;
    if (outcome === 'failed') refund.failure_reason = 'unknown';
    const events: EventDraft[] = [
      { type: 'refund.updated', object: snap(refund), previous_attributes: { status: from } },
      { type: 'charge.refund.updated', object: snap(refund), previous_attributes: { status: from } },
    ];
    if (outcome !== 'succeeded') {
      const charge = this.charges.get(refund.charge);
      if (charge) {
        charge.amount_refunded -= refund.amount;
        charge.refunded = charge.amount_refunded === charge.amount_captured;
      }
      if (outcome === 'failed') events.push({ type: 'refund.failed', object: snap(refund) });
    }
    return ok(snap(refund), events);
  }

  /** `POST /v1/refunds/:id/cancel`: only a refund waiting for the customer (`requires_action`) can be canceled. */
  cancelRefund(id: string): VerbResult {
    const refund = this.refunds.get(id);
    if (!refund) return fail(noSuch('refund', id));
    if (refund.status !== 'requires_action')
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          message: `You can't cancel refund ${id} because it has a status of ${refund.status}. Only refunds with a status of requires_action can be canceled.`,
        }),
      );
    return this.settleRefund(id, 'canceled');
  }

  /** Newest first, filtered by PaymentIntent or charge (`GET /v1/refunds`). */
  listRefunds(p: ListRefundsParams): ApiAnswer {
    let all = [...this.refunds.values()].reverse();
    if (p.payment_intent !== undefined) all = all.filter((r) => r.payment_intent === p.payment_intent);
    if (p.charge !== undefined) all = all.filter((r) => r.charge === p.charge);
    if (p.starting_after !== undefined) {
      const i = all.findIndex((r) => r.id === p.starting_after);
      if (i < 0) return noSuch('refund', p.starting_after, 'starting_after');
      all = all.slice(i + 1);
    }
    const limit = p.limit ?? 10;
    return {
      status: 200,
      body: { object: 'list', data: snap(all.slice(0, limit)), has_more: all.length > limit, url: '/v1/refunds' },
    };
  }

  retrieveRefund(id: string): ApiAnswer {
    const r = this.refunds.get(id);
    return r ? { status: 200, body: snap(r) } : noSuch('refund', id);
  }

  retrieveEvent(id: string): ApiAnswer {
    const e = this.events.find((x) => x.id === id);
    return e ? { status: 200, body: snap(e) } : noSuch('event', id);
  }

  /** Newest first, Stripe's cursor pagination (`starting_after` / `ending_before` are event ids). */
  listEvents(p: ListEventsParams): ApiAnswer {
    let all = [...this.events].reverse();
    if (p.type !== undefined) {
      const t = p.type;
      all = all.filter((e) => (t.endsWith('.*') ? e.type.startsWith(t.slice(0, -1)) : e.type === t));
    }
    const limit = p.limit ?? 10;
    let from = 0;
    let to = all.length;
    if (p.starting_after !== undefined) {
      const i = all.findIndex((e) => e.id === p.starting_after);
      if (i < 0) return noSuch('event', p.starting_after, 'starting_after');
      from = i + 1;
    } else if (p.ending_before !== undefined) {
      const i = all.findIndex((e) => e.id === p.ending_before);
      if (i < 0) return noSuch('event', p.ending_before, 'ending_before');
      to = i;
      from = Math.max(0, to - limit);
    }
    const data = all.slice(from, Math.min(to, from + limit));
    const hasMore = p.ending_before !== undefined ? from > 0 : from + limit < to;
    return { status: 200, body: { object: 'list', data: snap(data), has_more: hasMore, url: '/v1/events' } };
  }

  /** Stamps and stores the drafts a verb returned; the stored events are what webhooks deliver. */
  record(
    drafts: readonly EventDraft[],
    meta: { apiVersion: string; requestId: string | null; idempotencyKey: string | null; endpoints: number },
  ): StripeEvent[] {
    return drafts.map((d) => {
      const event: StripeEvent = {
        id: this.ids.next('evt'),
        object: 'event',
        api_version: meta.apiVersion,
        created: this.seconds(),
        data: d.previous_attributes ? { object: d.object, previous_attributes: d.previous_attributes } : { object: d.object },
        livemode: false,
        pending_webhooks: meta.endpoints,
        request: { id: meta.requestId, idempotency_key: meta.idempotencyKey },
        type: d.type,
      };
      this.events.push(event);
      return snap(event);
    });
  }
}
