/**
 * The in-memory billing side of the account: Customers, Prices (with their
 * Products implied), Subscriptions and their Invoices, as Stripe documents
 * them for the pinned API version (the period lives on the subscription
 * item; an invoice names its subscription under `parent.subscription_details`
 * and carries `confirmation_secret` instead of a PaymentIntent id). Like the
 * Ledger, each verb checks the state it is given, changes it and returns the
 * wire answer plus the events Stripe would emit; idempotency, faults and
 * delivery are the HTTP layer's.
 *
 * What a period boundary does is the control route's: `advance(id)` ends a
 * subscription set to cancel at period end (`customer.subscription.deleted`),
 * or opens the next period's invoice and charges the customer's default card
 * (`invoice.paid`, or `invoice.payment_failed` and `past_due`); `giveUp(id)`
 * is the end of Stripe's retries (canceled for `payment_failed`).
 */
import {
  errorAnswer,
  type ApiAnswer,
  type Customer,
  type Invoice,
  type InvoicePayment,
  type Price,
  type RecurringInterval,
  type Subscription,
} from './objects.js';
import { TEST_CARDS, type Clock, type EventDraft, type Ids, type Ledger, type VerbResult } from './ledger.js';
import type {
  CancelSubscriptionParams,
  CreateCustomerParams,
  CreatePriceParams,
  CreateSubscriptionParams,
  ListInvoicePaymentsParams,
  PayInvoiceParams,
  UpdateSubscriptionParams,
} from './params.js';

const snap = <T>(o: T): T => structuredClone(o);
const ok = (body: unknown, events: EventDraft[]): VerbResult => ({ answer: { status: 200, body }, events });
const fail = (answer: ApiAnswer): VerbResult => ({ answer, events: [] });

function noSuch(kind: string, id: string, param?: string): ApiAnswer {
  return errorAnswer(param ? 400 : 404, {
    type: 'invalid_request_error',
    code: 'resource_missing',
    message: `No such ${kind}: '${id}'`,
    ...(param ? { param } : {}),
  });
}

const invalid = (message: string, param?: string): VerbResult =>
  fail(errorAnswer(400, { type: 'invalid_request_error', message, ...(param ? { param } : {}) }));

/** The end of one billing period that starts at `start` (seconds), in UTC calendar terms as Stripe bills. */
export function periodEnd(start: number, interval: RecurringInterval, count: number): number {
  const d = new Date(start * 1000);
  switch (interval) {
    case 'day':
      d.setUTCDate(d.getUTCDate() + count);
      break;
    case 'week':
      d.setUTCDate(d.getUTCDate() + 7 * count);
      break;
    case 'month':
      d.setUTCMonth(d.getUTCMonth() + count);
      break;
    case 'year':
      d.setUTCFullYear(d.getUTCFullYear() + count);
      break;
  }
  return Math.floor(d.getTime() / 1000);
}

const isTestCard = (pm: string): pm is keyof typeof TEST_CARDS => Object.hasOwn(TEST_CARDS, pm);

export type RenewalOutcome = 'paid' | 'failed';

export class BillingBook {
  readonly customers = new Map<string, Customer>();
  readonly prices = new Map<string, Price>();
  readonly subscriptions = new Map<string, Subscription>();
  readonly invoices = new Map<string, Invoice>();
  readonly invoicePayments = new Map<string, InvoicePayment>();

  constructor(
    private readonly ids: Ids,
    private readonly clock: Clock,
    /** where an invoice's PaymentIntent is made when it is paid (so its money can be refunded); none: no InvoicePayment */
    private readonly ledger?: Ledger,
  ) {}

  private seconds(): number {
    return Math.floor(this.clock.now() / 1000);
  }

  createCustomer(p: CreateCustomerParams): VerbResult {
    const c: Customer = {
      id: this.ids.next('cus'),
      object: 'customer',
      created: this.seconds(),
      description: p.description ?? null,
      email: p.email ?? null,
      livemode: false,
      metadata: p.metadata ?? {},
      name: p.name ?? null,
      invoice_settings: { default_payment_method: null },
    };
    this.customers.set(c.id, c);
    return ok(snap(c), [{ type: 'customer.created', object: snap(c) }]);
  }

  retrieveCustomer(id: string): ApiAnswer {
    const c = this.customers.get(id);
    return c ? { status: 200, body: snap(c) } : noSuch('customer', id);
  }

  createPrice(p: CreatePriceParams): VerbResult {
    if ((p.product === undefined) === (p.product_data === undefined))
      return invalid('You must pass exactly one of product or product_data.', 'product');
    const price: Price = {
      id: this.ids.next('price'),
      object: 'price',
      active: true,
      created: this.seconds(),
      currency: p.currency,
      livemode: false,
      metadata: p.metadata ?? {},
      product: p.product ?? this.ids.next('prod'),
      recurring: p.recurring ? { interval: p.recurring.interval, interval_count: p.recurring.interval_count ?? 1 } : null,
      type: p.recurring ? 'recurring' : 'one_time',
      unit_amount: p.unit_amount,
    };
    this.prices.set(price.id, price);
    return ok(snap(price), []);
  }

  retrievePrice(id: string): ApiAnswer {
    const p = this.prices.get(id);
    return p ? { status: 200, body: snap(p) } : noSuch('price', id);
  }

  createSubscription(p: CreateSubscriptionParams): VerbResult {
    const customer = this.customers.get(p.customer);
    if (!customer) return fail(noSuch('customer', p.customer, 'customer'));
    const item = p.items[0];
    if (!item) return invalid('Missing required param: items.', 'items');
    let price: Price | undefined;
    if (item.price !== undefined) {
      price = this.prices.get(item.price);
      if (!price) return fail(noSuch('price', item.price, 'items[0][price]'));
    } else if (item.price_data !== undefined) {
      const pd = item.price_data;
      price = {
        id: this.ids.next('price'),
        object: 'price',
        active: false,
        created: this.seconds(),
        currency: pd.currency,
        livemode: false,
        metadata: {},
        product: pd.product,
        recurring: { interval: pd.recurring.interval, interval_count: pd.recurring.interval_count ?? 1 },
        type: 'recurring',
        unit_amount: pd.unit_amount,
      };
      this.prices.set(price.id, price);
    } else {
      return invalid('Each item needs a price or price_data.', 'items[0]');
    }
    if (price.recurring === null)
      return invalid(`The price specified (${price.id}) is not a recurring price; a subscription needs one.`, 'items[0][price]');
    const now = this.seconds();
    const id = this.ids.next('sub');
    const sub: Subscription = {
      id,
      object: 'subscription',
      billing_cycle_anchor: now,
      cancel_at: null,
      cancel_at_period_end: p.cancel_at_period_end ?? false,
      canceled_at: null,
      cancellation_details: { comment: null, feedback: null, reason: null },
      collection_method: 'charge_automatically',
      created: now,
      currency: price.currency,
      customer: customer.id,
      ended_at: null,
      items: {
        object: 'list',
        data: [
          {
            id: this.ids.next('si'),
            object: 'subscription_item',
            created: now,
            current_period_start: now,
            current_period_end: periodEnd(now, price.recurring.interval, price.recurring.interval_count),
            metadata: item.metadata ?? {},
            price: snap(price),
            quantity: 1,
            subscription: id,
          },
        ],
        has_more: false,
        url: `/v1/subscription_items?subscription=${id}`,
      },
      latest_invoice: null,
      livemode: false,
      metadata: p.metadata ?? {},
      start_date: now,
      status: 'incomplete',
    };
    if (sub.cancel_at_period_end) sub.cancel_at = this.period(sub).end;
    this.subscriptions.set(id, sub);
    const invoice = this.openInvoice(sub, 'subscription_create');
    const events: EventDraft[] = [
      { type: 'customer.subscription.created', object: snap(sub) },
      { type: 'invoice.created', object: snap(invoice) },
      { type: 'invoice.finalized', object: snap(invoice) },
    ];
    const pm = p.default_payment_method;
    if (pm !== undefined) {
      const paid = this.charge(invoice, pm);
      if (paid.declined !== null && p.payment_behavior === 'error_if_incomplete') return fail(paid.answer);
      events.push(...paid.events);
    }
    return ok(snap(sub), events);
  }

  retrieveSubscription(id: string): ApiAnswer {
    const s = this.subscriptions.get(id);
    return s ? { status: 200, body: snap(s) } : noSuch('subscription', id);
  }

  updateSubscription(id: string, p: UpdateSubscriptionParams): VerbResult {
    const sub = this.subscriptions.get(id);
    if (!sub) return fail(noSuch('subscription', id));
    if (sub.status === 'canceled' && p.cancel_at_period_end !== undefined)
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'invalid_canceled_subscription_fields',
          message: 'A canceled subscription can only update its cancellation_details and metadata.',
        }),
      );
    const previous: Record<string, unknown> = {};
    if (p.cancel_at_period_end !== undefined && p.cancel_at_period_end !== sub.cancel_at_period_end) {
      previous.cancel_at_period_end = sub.cancel_at_period_end;
      previous.cancel_at = sub.cancel_at;
      sub.cancel_at_period_end = p.cancel_at_period_end;
      sub.cancel_at = p.cancel_at_period_end ? this.period(sub).end : null;
      if (p.cancel_at_period_end) sub.cancellation_details = { ...sub.cancellation_details, reason: 'cancellation_requested' };
    }
    if (p.cancellation_details?.comment !== undefined) sub.cancellation_details.comment = p.cancellation_details.comment;
    if (p.metadata !== undefined) {
      previous.metadata = sub.metadata;
      sub.metadata = { ...sub.metadata, ...p.metadata };
    }
    const events: EventDraft[] =
      Object.keys(previous).length > 0 ? [{ type: 'customer.subscription.updated', object: snap(sub), previous_attributes: previous }] : [];
    return ok(snap(sub), events);
  }

  /** `DELETE /v1/subscriptions/:id`: canceled now; its open invoice is voided. */
  cancelSubscription(id: string, p: CancelSubscriptionParams): VerbResult {
    const sub = this.subscriptions.get(id);
    if (!sub) return fail(noSuch('subscription', id));
    // Stripe answers a cancel of a subscription that has already ended as if it were not there (404
    // resource_missing, "No such subscription"), though a GET still returns it: there is no "already canceled" code
    if (sub.status === 'canceled' || sub.status === 'incomplete_expired') return fail(noSuch('subscription', id));
    if (p.cancellation_details?.comment !== undefined) sub.cancellation_details.comment = p.cancellation_details.comment;
    const events = this.end(sub, 'cancellation_requested');
    return ok(snap(sub), events);
  }

  /** `GET /v1/invoice_payments`: newest first, by `invoice` and `status`. */
  listInvoicePayments(p: ListInvoicePaymentsParams): ApiAnswer {
    let all = [...this.invoicePayments.values()].reverse();
    if (p.invoice !== undefined) all = all.filter((x) => x.invoice === p.invoice);
    if (p.status !== undefined) all = all.filter((x) => x.status === p.status);
    if (p.starting_after !== undefined) {
      const i = all.findIndex((x) => x.id === p.starting_after);
      if (i < 0) return noSuch('invoice_payment', p.starting_after, 'starting_after');
      all = all.slice(i + 1);
    }
    const limit = p.limit ?? 10;
    return {
      status: 200,
      body: { object: 'list', data: snap(all.slice(0, limit)), has_more: all.length > limit, url: '/v1/invoice_payments' },
    };
  }

  retrieveInvoice(id: string): ApiAnswer {
    const i = this.invoices.get(id);
    return i ? { status: 200, body: snap(i) } : noSuch('invoice', id);
  }

  /** `POST /v1/invoices/:id/pay` (and the demo's "pay it"): charges a test card for an open invoice. */
  payInvoice(id: string, p: PayInvoiceParams): VerbResult {
    const invoice = this.invoices.get(id);
    if (!invoice) return fail(noSuch('invoice', id));
    if (invoice.status !== 'open') {
      return fail(
        errorAnswer(400, {
          type: 'invalid_request_error',
          code: 'invoice_not_open',
          message: `Invoice ${id} is ${invoice.status}; only an open invoice can be paid.`,
        }),
      );
    }
    const customer = this.customers.get(invoice.customer);
    const pm = p.payment_method ?? customer?.invoice_settings.default_payment_method ?? null;
    if (pm === null) return invalid('This invoice has no payment method to charge; pass payment_method.', 'payment_method');
    const r = this.charge(invoice, pm);
    return r.declined !== null ? { answer: r.answer, events: r.events } : ok(snap(invoice), r.events);
  }

  /**
   * The period boundary (control route): a subscription set to cancel at
   * period end is canceled; any other live one starts its next period with a
   * renewal invoice charged to the customer's default card — paid, or failed
   * (`past_due`, the invoice left open for `payInvoice` or `giveUp`).
   */
  advance(id: string, outcome: RenewalOutcome): VerbResult {
    const sub = this.subscriptions.get(id);
    if (!sub) return fail(noSuch('subscription', id));
    if (sub.status !== 'active' && sub.status !== 'past_due')
      return invalid(`Subscription ${id} is ${sub.status}; only an active or past_due one has a next period.`);
    const item = sub.items.data[0];
    const recurring = item?.price.recurring;
    if (!item || !recurring) throw new Error(`subscription ${id} without a recurring item`);
    if (sub.cancel_at_period_end) {
      const ended = this.end(sub, 'cancellation_requested');
      return ok(snap(sub), ended);
    }
    const previous = { items: snap(sub.items) };
    item.current_period_start = item.current_period_end;
    item.current_period_end = periodEnd(item.current_period_start, recurring.interval, recurring.interval_count);
    const invoice = this.openInvoice(sub, 'subscription_cycle');
    const events: EventDraft[] = [
      { type: 'customer.subscription.updated', object: snap(sub), previous_attributes: previous },
      { type: 'invoice.created', object: snap(invoice) },
      { type: 'invoice.finalized', object: snap(invoice) },
    ];
    const customer = this.customers.get(sub.customer);
    const pm = customer?.invoice_settings.default_payment_method ?? null;
    const card = outcome === 'failed' || pm === null ? 'pm_card_chargeDeclined' : pm;
    events.push(...this.charge(invoice, card).events);
    return ok(snap(sub), events);
  }

  /** Stripe's retries are over: the subscription is canceled for `payment_failed`, its open invoice uncollectible. */
  giveUp(id: string): VerbResult {
    const sub = this.subscriptions.get(id);
    if (!sub) return fail(noSuch('subscription', id));
    if (sub.status !== 'past_due' && sub.status !== 'unpaid') return invalid(`Subscription ${id} is ${sub.status}, not past_due.`);
    const events = this.end(sub, 'payment_failed');
    return ok(snap(sub), events);
  }

  private period(sub: Subscription): { start: number; end: number } {
    const item = sub.items.data[0];
    if (!item) throw new Error(`subscription ${sub.id} has no item`);
    return { start: item.current_period_start, end: item.current_period_end };
  }

  private end(sub: Subscription, reason: 'cancellation_requested' | 'payment_failed'): EventDraft[] {
    const now = this.seconds();
    sub.status = 'canceled';
    sub.canceled_at = sub.canceled_at ?? now;
    sub.ended_at = now;
    sub.cancellation_details = { ...sub.cancellation_details, reason };
    const events: EventDraft[] = [];
    for (const inv of this.invoices.values()) {
      if (inv.parent.subscription_details.subscription !== sub.id || inv.status !== 'open') continue;
      inv.status = reason === 'payment_failed' ? 'uncollectible' : 'void';
      inv.next_payment_attempt = null;
    }
    events.push({ type: 'customer.subscription.deleted', object: snap(sub) });
    return events;
  }

  private openInvoice(sub: Subscription, reason: Invoice['billing_reason']): Invoice {
    const item = sub.items.data[0];
    if (!item) throw new Error(`subscription ${sub.id} has no item`);
    const now = this.seconds();
    const id = this.ids.next('in');
    const invoice: Invoice = {
      id,
      object: 'invoice',
      amount_due: item.price.unit_amount,
      amount_paid: 0,
      amount_remaining: item.price.unit_amount,
      attempt_count: 0,
      attempted: false,
      billing_reason: reason,
      collection_method: 'charge_automatically',
      confirmation_secret: { client_secret: `${id}_secret_${this.ids.secret(id)}`, type: 'payment_intent' },
      created: now,
      currency: sub.currency,
      customer: sub.customer,
      livemode: false,
      metadata: {},
      next_payment_attempt: null,
      parent: { type: 'subscription_details', subscription_details: { metadata: { ...sub.metadata }, subscription: sub.id } },
      period_start: item.current_period_start,
      period_end: item.current_period_end,
      status: 'open',
      status_transitions: { finalized_at: now, paid_at: null },
      total: item.price.unit_amount,
    };
    this.invoices.set(id, invoice);
    sub.latest_invoice = id;
    return invoice;
  }

  /** One charge attempt of an open invoice with a test card; the subscription follows the invoice. */
  private charge(invoice: Invoice, pm: string): { declined: string | null; answer: ApiAnswer; events: EventDraft[] } {
    const sub = this.subscriptions.get(invoice.parent.subscription_details.subscription);
    if (!sub) throw new Error(`invoice ${invoice.id} without its subscription`);
    if (!isTestCard(pm)) return { declined: 'no_such_payment_method', answer: noSuch('PaymentMethod', pm, 'payment_method'), events: [] };
    const card = TEST_CARDS[pm];
    const now = this.seconds();
    invoice.attempt_count += 1;
    invoice.attempted = true;
    const before = sub.status;
    const events: EventDraft[] = [];
    if (card.outcome === 'declined') {
      invoice.next_payment_attempt = now + 3 * 86_400;
      if (invoice.billing_reason === 'subscription_cycle') sub.status = 'past_due';
      events.push({ type: 'invoice.payment_failed', object: snap(invoice) });
      if (sub.status !== before)
        events.push({ type: 'customer.subscription.updated', object: snap(sub), previous_attributes: { status: before } });
      const message = card.declineCode === 'insufficient_funds' ? 'Your card has insufficient funds.' : 'Your card was declined.';
      return {
        declined: card.declineCode,
        answer: errorAnswer(402, { type: 'card_error', code: 'card_declined', decline_code: card.declineCode, message }),
        events,
      };
    }
    if (this.ledger) {
      const paymentIntent = this.ledger.succeededForInvoice({
        invoice: invoice.id,
        amount: invoice.amount_due,
        currency: invoice.currency,
        customer: invoice.customer,
        paymentMethod: pm,
      });
      const payment: InvoicePayment = {
        id: this.ids.next('inpay'),
        object: 'invoice_payment',
        amount_paid: invoice.amount_due,
        amount_requested: invoice.amount_due,
        created: now,
        currency: invoice.currency,
        invoice: invoice.id,
        is_default: true,
        livemode: false,
        payment: { type: 'payment_intent', payment_intent: paymentIntent },
        status: 'paid',
        status_transitions: { canceled_at: null, paid_at: now },
      };
      this.invoicePayments.set(payment.id, payment);
    }
    invoice.status = 'paid';
    invoice.amount_paid = invoice.amount_due;
    invoice.amount_remaining = 0;
    invoice.next_payment_attempt = null;
    invoice.status_transitions.paid_at = now;
    const customer = this.customers.get(invoice.customer);
    if (customer && customer.invoice_settings.default_payment_method === null) customer.invoice_settings.default_payment_method = pm;
    sub.status = 'active';
    events.push({ type: 'invoice.paid', object: snap(invoice) }, { type: 'invoice.payment_succeeded', object: snap(invoice) });
    if (sub.status !== before)
      events.push({ type: 'customer.subscription.updated', object: snap(sub), previous_attributes: { status: before } });
    return { declined: null, answer: { status: 200, body: snap(invoice) }, events };
  }
}
