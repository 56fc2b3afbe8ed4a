/**
 * The three ledgers the money checker reads after healing, next to the run's history: the local
 * Stripe's own objects (what the money provider says happened), the cloud's database rows (what
 * Tobira recorded), and each gateway's key set and access log (what the doors did). Plain data, so
 * the checker stays a pure function and a recorded run can be checked again from its files.
 */
export interface StripeIntent {
  readonly id: string;
  readonly status: string;
  readonly amount: number;
  readonly amountReceived: number;
  readonly metadata: Readonly<Record<string, string>>;
}

export interface StripeRefund {
  readonly id: string;
  readonly paymentIntent: string | null;
  readonly amount: number;
  readonly status: string;
  readonly metadata: Readonly<Record<string, string>>;
}

/** An invoice of a subscription paid through a PaymentIntent (Stripe's InvoicePayment, status `paid`). */
export interface StripeInvoicePayment {
  readonly invoice: string;
  readonly intentId: string;
  /** the subscription's first invoice (`billing_reason: subscription_create`): the checkout */
  readonly first: boolean;
}

export interface StripeSubscription {
  readonly id: string;
  readonly status: string;
  readonly cancelAtPeriodEnd: boolean;
  /** its paid invoices; absent in runs recorded before the ledger read them (their M2 skips memberships) */
  readonly paid?: readonly StripeInvoicePayment[];
}

export interface CloudStay {
  readonly id: string;
  readonly personId: string;
  readonly status: string;
  readonly amount: number;
  readonly deposit: number;
  readonly cancelReason: string | null;
  readonly holdUntil: number;
  readonly keyId: string | null;
  readonly cid: string;
}

export interface CloudPayment {
  readonly id: string;
  readonly stayId: string;
  readonly purpose: string;
  readonly status: string;
  readonly intentId: string | null;
  readonly amount: number;
  readonly amountReceived: number;
  readonly amountRefunded: number;
}

export interface CloudRefund {
  readonly id: string;
  readonly paymentId: string;
  readonly amount: number;
  readonly status: string;
  readonly stripeRefundId: string | null;
  readonly createdAt: number;
}

export interface CloudWalkIn {
  readonly id: string;
  readonly personId: string;
  readonly status: string;
  readonly amount: number;
  readonly intentId: string | null;
  readonly amountReceived: number;
  readonly holdUntil: number;
  readonly keyId: string | null;
}

export interface CloudMembership {
  readonly id: string;
  readonly personId: string;
  readonly status: string;
  readonly subscriptionId: string | null;
  readonly cancelAtPeriodEnd: boolean;
  readonly suspended: boolean;
  readonly keyId: string | null;
  /** why it ended (`memberships.end_reason`); absent in runs recorded before the ledger read it */
  readonly endReason?: string | null;
}

export interface CloudKey {
  readonly id: string;
  readonly status: string;
  readonly cid: string | null;
}

export interface CloudNotification {
  readonly id: string;
  readonly dedupeKey: string;
  readonly status: string;
  readonly createdAt: number;
}

/** A row of a queue (webhook inbox, billing jobs) that is neither done nor dead. */
export interface OpenQueueRow {
  readonly queue: string;
  readonly id: string;
  readonly kind: string;
  readonly since: number;
}

export interface GatewayKey {
  readonly keyId: string;
  readonly status: string;
  readonly grantCid: string | null;
}

export interface GatewayDecision {
  readonly keyId: string | null;
  readonly lockId: string;
  /** the gateway's wall clock, ms */
  readonly at: number;
  readonly allowed: boolean;
  readonly code: string;
}

export interface GatewayLedger {
  readonly id: string;
  readonly keys: readonly GatewayKey[];
  readonly accessLog: readonly GatewayDecision[];
}

/** One delivery the notification receiver got (the cloud's `webhook` notification channel). */
export interface NotificationDelivery {
  readonly dedupeKey: string;
  readonly notificationId: string;
  /** the runner's wall clock when it arrived */
  readonly wall: number;
}

export interface MoneyLedgers {
  /** the runner's wall clock when the ledgers were read (after healing) */
  readonly collectedAt: number;
  readonly stripe: {
    readonly intents: readonly StripeIntent[];
    readonly refunds: readonly StripeRefund[];
    readonly subscriptions: readonly StripeSubscription[];
  };
  readonly cloud: {
    readonly stays: readonly CloudStay[];
    readonly payments: readonly CloudPayment[];
    readonly refunds: readonly CloudRefund[];
    readonly walkIns: readonly CloudWalkIn[];
    readonly memberships: readonly CloudMembership[];
    readonly keys: readonly CloudKey[];
    readonly notifications: readonly CloudNotification[];
    readonly open: readonly OpenQueueRow[];
  };
  readonly gateways: readonly GatewayLedger[];
  readonly deliveries: readonly NotificationDelivery[];
}

export const emptyLedgers = (collectedAt = 0): MoneyLedgers => ({
  collectedAt,
  stripe: { intents: [], refunds: [], subscriptions: [] },
  cloud: { stays: [], payments: [], refunds: [], walkIns: [], memberships: [], keys: [], notifications: [], open: [] },
  gateways: [],
  deliveries: [],
});
