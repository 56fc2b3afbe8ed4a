import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { startStripeLocal, type StripeLocal } from '@tobira/stripe-local';
import { createLogger } from '@tobira/shared';
import Database from 'better-sqlite3';
import { Cluster, type ClusterOptions } from '../cluster.js';
import type { History } from '../history.js';
import type { GatewayLedger, MoneyLedgers, NotificationDelivery, OpenQueueRow, StripeIntent } from './ledgers.js';

/**
 * The money side of the system under test: the door runner's cluster (PostgreSQL behind a proxy, the
 * run's Mosquitto, `npm run cloud` as a child process, a gateway, its lock fleet) with the cloud
 * configured for Stripe against a local Stripe of the run's own (in the runner's process, so its
 * ledger is read directly and its fault knobs are set without a round trip), and a receiver for the
 * cloud's `webhook` notification channel that records every delivery (M4 counts them).
 */
export const WEBHOOK_SECRET = `whsec_${randomBytes(18).toString('base64url')}`;

/** The receiver of guest notifications: one entry per delivery, with the dedupe key Tobira sent. */
export class NotificationReceiver {
  readonly deliveries: NotificationDelivery[] = [];
  #server: Server | null = null;
  port = 0;

  async start(): Promise<void> {
    this.#server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const key = req.headers['tobira-dedupe-key'];
        const id = req.headers['tobira-notification-id'];
        this.deliveries.push({
          dedupeKey: typeof key === 'string' ? key : '?',
          notificationId: typeof id === 'string' ? id : '?',
          wall: Date.now(),
        });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      });
    });
    await new Promise<void>((r) => this.#server!.listen(0, '127.0.0.1', r));
    const a = this.#server.address();
    this.port = typeof a === 'object' && a !== null ? a.port : 0;
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => (this.#server ? this.#server.close(() => r()) : r()));
  }
}

/** The cluster with the cloud pointed at the local Stripe and the notification receiver. */
export class MoneyCluster extends Cluster {
  stripe!: StripeLocal;
  readonly receiver = new NotificationReceiver();

  constructor(
    o: ClusterOptions,
    h: History,
    readonly cloudEnv: Record<string, string> = {},
  ) {
    super(o, h);
  }

  override async start(): Promise<void> {
    this.stripe = await startStripeLocal({
      seed: `m${this.o.seed}`.slice(0, 8),
      log: createLogger('stripe-local', { level: 'silent' }),
      // Stripe retries a webhook for days; a cloud killed and restarting (20 s and more on a busy machine)
      // must not outlast the retries, or the run would test a loss Stripe does not cause
      webhookRetry: { attempts: 60, backoffMs: 250, maxBackoffMs: 2000 },
    });
    await this.receiver.start();
    await super.start();
    this.stripe.webhooks.add({ url: `${this.apiUrl}/webhooks/stripe`, secret: WEBHOOK_SECRET });
  }

  /** The cloud's env gets Stripe and the notification channel before each start (also after a kill). */
  override async startCloud(): Promise<void> {
    this.cloud.env = {
      ...this.cloud.env,
      STRIPE_SECRET_KEY: this.stripe.secretKey,
      STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
      STRIPE_API_HOST: this.stripe.host,
      STRIPE_API_PORT: String(this.stripe.port),
      STRIPE_API_PROTOCOL: 'http',
      BILLING_POLL_MS: '300',
      BILLING_LEASE_MS: '5000',
      // open checkouts re-read every 2 s: a paid first invoice whose webhooks were lost converges within the heal
      MEMBERSHIP_CHECKOUT_RECHECK_MS: '2000',
      // living subscriptions, pending refunds and open intents re-read every 2 s, for the same reason
      BILLING_RECONCILE_MS: '2000',
      NOTIFY_CHANNEL: 'webhook',
      NOTIFY_WEBHOOK_URL: `http://127.0.0.1:${this.receiver.port}/notify`,
      TOBIRA_WEBHOOK_ALLOW_PRIVATE: 'true',
      NOTIFY_POLL_MS: '300',
      NOTIFY_LEASE_MS: '3000',
      NOTIFY_BACKOFF_BASE_MS: '300',
      NOTIFY_BACKOFF_MAX_MS: '2000',
      ...this.cloudEnv,
    };
    await super.startCloud();
  }

  override async stop(): Promise<void> {
    await super.stop();
    await this.stripe?.close().catch(() => {});
    await this.receiver.stop().catch(() => {});
  }
}

const n = (v: unknown): number => Number(v ?? 0);
const s = (v: unknown): string => String(v);
const sn = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

/** Reads the three ledgers after healing (docs/reliability.md, "Money"). */
export async function readLedgers(c: MoneyCluster): Promise<MoneyLedgers> {
  const local = c.stripe;
  const events = local.events();
  const objectIds = (prefix: string) =>
    [
      ...new Set(
        events
          .filter((e) => e.type.startsWith(prefix))
          .map((e) => (e.data.object as { id?: unknown }).id)
          .filter((x): x is string => typeof x === 'string'),
      ),
    ].sort();
  const intents: StripeIntent[] = [];
  for (const id of objectIds('payment_intent.')) {
    const pi = local.paymentIntent(id);
    if (pi) intents.push({ id, status: pi.status, amount: pi.amount, amountReceived: pi.amount_received, metadata: { ...pi.metadata } });
  }
  // an invoice's PaymentIntent emits no events of its own (the invoice's stand for it): read them from its payments
  const invoicePayments = local.invoicePayments().filter((p) => p.status === 'paid');
  for (const p of invoicePayments) {
    const id = p.payment.payment_intent;
    const pi = local.paymentIntent(id);
    if (pi && !intents.some((x) => x.id === id))
      intents.push({ id, status: pi.status, amount: pi.amount, amountReceived: pi.amount_received, metadata: { ...pi.metadata } });
  }
  const subscriptions = objectIds('customer.subscription.').flatMap((id) => {
    const sub = local.subscription(id);
    if (!sub) return [];
    const paid = invoicePayments.flatMap((p) => {
      const inv = local.invoice(p.invoice);
      if (inv?.parent.subscription_details.subscription !== id) return [];
      return [{ invoice: p.invoice, intentId: p.payment.payment_intent, first: inv.billing_reason === 'subscription_create' }];
    });
    return [{ id, status: sub.status, cancelAtPeriodEnd: sub.cancel_at_period_end, paid }];
  });
  const refunds = local.refunds().map((r) => ({
    id: r.id,
    paymentIntent: typeof r.payment_intent === 'string' ? r.payment_intent : null,
    amount: r.amount,
    status: r.status,
    metadata: { ...r.metadata },
  }));

  const cloud = await c.directDb(async (db) => {
    const q = async (sql: string) => (await db.query<Record<string, unknown>>(sql)).rows;
    const open: OpenQueueRow[] = [
      ...(await q("SELECT event_id, type, received_at FROM payment_webhook_events WHERE status IN ('pending', 'processing')")).map((r) => ({
        queue: 'payment_webhook_events',
        id: s(r.event_id),
        kind: s(r.type),
        since: n(r.received_at),
      })),
      ...(await q("SELECT id, kind, next_attempt_at FROM billing_jobs WHERE status IN ('pending', 'running')")).map((r) => ({
        queue: 'billing_jobs',
        id: s(r.id),
        kind: s(r.kind),
        since: n(r.next_attempt_at),
      })),
    ];
    return {
      stays: (await q('SELECT id, person_id, status, amount, deposit, cancel_reason, hold_until, key_id, cid FROM stays ORDER BY id')).map(
        (r) => ({
          id: s(r.id),
          personId: s(r.person_id),
          status: s(r.status),
          amount: n(r.amount),
          deposit: n(r.deposit),
          cancelReason: sn(r.cancel_reason),
          holdUntil: n(r.hold_until),
          keyId: sn(r.key_id),
          cid: s(r.cid),
        }),
      ),
      payments: (
        await q('SELECT id, stay_id, purpose, status, intent_id, amount, amount_received, amount_refunded FROM payments ORDER BY id')
      ).map((r) => ({
        id: s(r.id),
        stayId: s(r.stay_id),
        purpose: s(r.purpose),
        status: s(r.status),
        intentId: sn(r.intent_id),
        amount: n(r.amount),
        amountReceived: n(r.amount_received),
        amountRefunded: n(r.amount_refunded),
      })),
      refunds: (await q('SELECT id, payment_id, amount, status, stripe_refund_id, created_at FROM refunds ORDER BY id')).map((r) => ({
        id: s(r.id),
        paymentId: s(r.payment_id),
        amount: n(r.amount),
        status: s(r.status),
        stripeRefundId: sn(r.stripe_refund_id),
        createdAt: n(r.created_at),
      })),
      walkIns: (
        await q('SELECT id, person_id, status, amount, intent_id, amount_received, hold_until, key_id FROM walk_ins ORDER BY id')
      ).map((r) => ({
        id: s(r.id),
        personId: s(r.person_id),
        status: s(r.status),
        amount: n(r.amount),
        intentId: sn(r.intent_id),
        amountReceived: n(r.amount_received),
        holdUntil: n(r.hold_until),
        keyId: sn(r.key_id),
      })),
      memberships: (
        await q(
          'SELECT id, person_id, status, subscription_id, cancel_at_period_end, suspended, key_id, end_reason FROM memberships ORDER BY id',
        )
      ).map((r) => ({
        id: s(r.id),
        personId: s(r.person_id),
        status: s(r.status),
        subscriptionId: sn(r.subscription_id),
        cancelAtPeriodEnd: r.cancel_at_period_end === true,
        suspended: r.suspended === true,
        keyId: sn(r.key_id),
        endReason: sn(r.end_reason),
      })),
      keys: (await q('SELECT id, status, cid FROM keys ORDER BY id')).map((r) => ({ id: s(r.id), status: s(r.status), cid: sn(r.cid) })),
      notifications: (await q('SELECT id, dedupe_key, status, created_at FROM notification_outbox ORDER BY id')).map((r) => ({
        id: s(r.id),
        dedupeKey: s(r.dedupe_key),
        status: s(r.status),
        createdAt: n(r.created_at),
      })),
      open,
    };
  });

  const gateways: GatewayLedger[] = c.gateways.map((g) => {
    const db = new Database(g.sqlitePath, { readonly: true, fileMustExist: true });
    try {
      const keys = db.prepare('SELECT key_id, status, grant_cid FROM keys').all() as {
        key_id: string;
        status: string;
        grant_cid: string;
      }[];
      const log = db.prepare('SELECT lock_id, at, allowed, code, key_id FROM access_log ORDER BY id').all() as {
        lock_id: string;
        at: number;
        allowed: number;
        code: string;
        key_id: string | null;
      }[];
      return {
        id: g.id,
        keys: keys.map((k) => ({ keyId: k.key_id, status: k.status, grantCid: k.grant_cid })),
        accessLog: log.map((r) => ({ keyId: r.key_id, lockId: r.lock_id, at: r.at, allowed: r.allowed === 1, code: r.code })),
      };
    } finally {
      db.close();
    }
  });
  return {
    collectedAt: Date.now(),
    stripe: { intents, refunds, subscriptions },
    cloud,
    gateways,
    deliveries: [...c.receiver.deliveries],
  };
}
