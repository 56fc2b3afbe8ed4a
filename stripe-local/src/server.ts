/**
 * `startStripeLocal()`: wires the ledger, the idempotency store, the webhook
 * dispatcher and the HTTP app, listens, and hands back the control surface
 * tests and the demo drive. Each call is its own Stripe account: state lives
 * in memory, for as long as the server does.
 */
import Stripe from 'stripe';
import type { Logger } from 'pino';
import { createLogger } from '@tobira/shared';
import { buildApp } from './app.js';
import { noFaults, type ApiFaults } from './faults.js';
import { IdempotencyStore } from './idempotency.js';
import { BillingBook, type RenewalOutcome } from './subscriptions.js';
import { Ids, Ledger, type Clock, type VerbResult } from './ledger.js';
import type { PaymentIntent, Refund, Charge, StripeEvent, ApiAnswer, Subscription, Invoice, InvoicePayment, Customer } from './objects.js';
import {
  DEFAULT_WEBHOOK_RETRY,
  WebhookDispatcher,
  type DeliveryAttempt,
  type ReleaseOrder,
  type WebhookEndpoint,
  type WebhookFaults,
  type WebhookRetry,
} from './webhooks.js';

/** The key tests and the demo use unless told otherwise; Stripe's test keys start `sk_test_`. */
export const DEFAULT_SECRET_KEY = 'sk_test_tobira_local_0000000000';

export interface StripeLocalOptions {
  /** 0 (the default) picks a free port */
  port?: number;
  host?: string;
  secretKey?: string;
  webhook?: WebhookEndpoint;
  webhookRetry?: Partial<WebhookRetry>;
  log?: Logger;
  clock?: Clock;
  /** part of every id; a different seed per run keeps ids from colliding with an earlier run's */
  seed?: string;
  /** events' `api_version` when a request sends no `Stripe-Version` (default: the pinned SDK's) */
  apiVersion?: string;
}

export interface StripeLocal {
  url: string;
  host: string;
  port: number;
  secretKey: string;
  /** mutate fields to inject faults (see faults.ts) */
  faults: ApiFaults;
  webhooks: {
    add(endpoint: WebhookEndpoint): void;
    remove(url: string): void;
    /** mutate fields: duplicates, hold, drop */
    faults: WebhookFaults;
    /** sends held events in that order; returns their ids */
    release(order?: ReleaseOrder, seed?: number): string[];
    /** resolves when no delivery or retry is pending */
    idle(): Promise<void>;
    attempts(): readonly DeliveryAttempt[];
    held(): readonly StripeEvent[];
  };
  /** oldest first */
  events(): StripeEvent[];
  paymentIntent(id: string): PaymentIntent | undefined;
  charge(id: string): Charge | undefined;
  refunds(): Refund[];
  /** ends a `processing` PaymentIntent, emitting its events */
  settle(id: string, outcome: 'succeeded' | 'failed'): ApiAnswer;
  /** ends a `pending` refund (the `refundsPending` knob: succeeded or failed) or one that `requires_action` (succeeded or canceled), emitting its events */
  settleRefund(id: string, outcome: 'succeeded' | 'failed' | 'canceled'): ApiAnswer;
  customer(id: string): Customer | undefined;
  subscription(id: string): Subscription | undefined;
  invoice(id: string): Invoice | undefined;
  /** every payment of an invoice (oldest first): the PaymentIntent each invoice was paid through */
  invoicePayments(): InvoicePayment[];
  /** pays an open invoice with a test card (the member's browser), emitting its events */
  payInvoice(id: string, card?: string): ApiAnswer;
  /** the subscription's period boundary: renewal paid / failed, or its end when set to cancel at period end */
  advanceSubscription(id: string, outcome?: RenewalOutcome): ApiAnswer;
  /** Stripe's retries of a failed renewal are over: canceled for payment_failed */
  giveUpSubscription(id: string): ApiAnswer;
  close(): Promise<void>;
}

export async function startStripeLocal(options: StripeLocalOptions = {}): Promise<StripeLocal> {
  const log = options.log ?? createLogger('stripe-local');
  const clock: Clock = options.clock ?? { now: () => Date.now() };
  const ids = new Ids(options.seed ?? 'L0');
  const ledger = new Ledger(ids, clock);
  const billing = new BillingBook(ids, clock, ledger);
  const idempotency = new IdempotencyStore(clock);
  const webhooks = new WebhookDispatcher(log, clock, { ...DEFAULT_WEBHOOK_RETRY, ...options.webhookRetry });
  if (options.webhook) webhooks.addEndpoint(options.webhook);
  const faults = noFaults();
  const secretKey = options.secretKey ?? DEFAULT_SECRET_KEY;
  const apiVersion = options.apiVersion ?? Stripe.API_VERSION;
  const app = buildApp({ ledger, billing, ids, idempotency, webhooks, faults, secretKey, apiVersion, log });
  const host = options.host ?? '127.0.0.1';
  await app.listen({ port: options.port ?? 0, host });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : (options.port ?? 0);
  log.info({ host, port }, 'stripe-local listening');

  const snap = <T>(o: T): T => structuredClone(o);
  const emitLocal = (result: VerbResult): ApiAnswer => {
    webhooks.dispatch(
      ledger.record(result.events, { apiVersion, requestId: null, idempotencyKey: null, endpoints: webhooks.endpoints.length }),
    );
    return result.answer;
  };
  return {
    url: `http://${host}:${port}`,
    host,
    port,
    secretKey,
    faults,
    webhooks: {
      add: (e) => webhooks.addEndpoint(e),
      remove: (url) => webhooks.removeEndpoint(url),
      faults: webhooks.faults,
      release: (order, seed) => webhooks.release(order, seed),
      idle: () => webhooks.idle(),
      attempts: () => webhooks.attempts,
      held: () => webhooks.heldEvents(),
    },
    events: () => snap(ledger.events),
    paymentIntent: (id) => snap(ledger.paymentIntents.get(id)),
    charge: (id) => snap(ledger.charges.get(id)),
    refunds: () => snap([...ledger.refunds.values()]),
    settle: (id, outcome) => emitLocal(ledger.settle(id, outcome)),
    settleRefund: (id, outcome) => emitLocal(ledger.settleRefund(id, outcome)),
    customer: (id) => snap(billing.customers.get(id)),
    subscription: (id) => snap(billing.subscriptions.get(id)),
    invoice: (id) => snap(billing.invoices.get(id)),
    invoicePayments: () => snap([...billing.invoicePayments.values()]),
    payInvoice: (id, card = 'pm_card_visa') => emitLocal(billing.payInvoice(id, { payment_method: card })),
    advanceSubscription: (id, outcome = 'paid') => emitLocal(billing.advance(id, outcome)),
    giveUpSubscription: (id) => emitLocal(billing.giveUp(id)),
    close: async () => {
      webhooks.close();
      await app.close();
      log.info('stripe-local closed');
    },
  };
}
