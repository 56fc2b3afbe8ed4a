import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { billingCall } from '../src/adapters/stripe/errors.js';
import {
  cancelPaymentIntent,
  createPaymentIntent,
  retrievePaymentIntent,
  type CreateIntentRequest,
} from '../src/adapters/stripe/payment-intents.js';
import { createRefund } from '../src/adapters/stripe/refunds.js';
import { verifyWebhook } from '../src/adapters/stripe/webhook.js';
import { intentIdempotencyKey } from '../src/domain/payments.js';

/**
 * The Stripe adapter with the real `stripe` SDK against the local Stripe:
 * one PaymentIntent per idempotency key whatever is retried or lost, one
 * refund per key, SDK errors classified transient / permanent with codes,
 * and webhook signatures verified on the raw body.
 */
const WEBHOOK_SECRET = 'whsec_tobira_cloud_test';

interface Delivery {
  readonly raw: Buffer;
  readonly signature: string;
}

async function startReceiver(): Promise<{ url: string; got: Delivery[]; close(): Promise<void> }> {
  const got: Delivery[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ raw: Buffer.concat(chunks), signature: String(req.headers['stripe-signature'] ?? '') });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/webhooks/stripe`, got, close: () => new Promise<void>((r) => server.close(() => r())) };
}

let local: StripeLocal;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let n = 0;

beforeAll(async () => {
  receiver = await startReceiver();
  local = await startStripeLocal({ webhook: { url: receiver.url, secret: WEBHOOK_SECRET }, seed: 'cloudtest' });
});
afterAll(async () => {
  await local.close();
  await receiver.close();
});
afterEach(() => {
  Object.assign(local.faults, {
    unavailable: false,
    unavailableRequests: 0,
    failAfterEffect: 0,
    failAfterEffectMode: '500',
    declineNextConfirms: 0,
  });
});

function request(over: Partial<CreateIntentRequest> = {}): CreateIntentRequest {
  n += 1;
  const subjectId = `st-${n}`;
  return {
    purpose: 'stay_balance',
    subjectId,
    paymentId: `pay-${n}`,
    amount: 24_000,
    currency: 'jpy',
    idempotencyKey: intentIdempotencyKey('stay_balance', subjectId, 1),
    ...over,
  };
}
const createdFor = (intentId: string) =>
  local.events().filter((e) => e.type === 'payment_intent.created' && (e.data.object as { id: string }).id === intentId);
const intentsOf = (subjectId: string) =>
  local
    .events()
    .filter(
      (e) =>
        e.type === 'payment_intent.created' && (e.data.object as { metadata: Record<string, string> }).metadata.subject_id === subjectId,
    );

describe('creating a PaymentIntent', () => {
  it('tags it with purpose and subject and answers its client secret', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const r = request();
    const made = await createPaymentIntent(stripe, r);
    if (!made.ok) throw new Error(made.failure.code);
    expect(made.value.clientSecret).toMatch(/^pi_.+_secret_/);
    expect(made.value.observation).toMatchObject({ status: 'requires_payment_method', amount: 24_000, currency: 'jpy', declined: false });
    expect(local.paymentIntent(made.value.intentId)?.metadata).toEqual({
      purpose: 'stay_balance',
      subject_id: r.subjectId,
      payment_id: r.paymentId,
    });
  });

  it('a retry with the stored key gets the same intent: one PaymentIntent per key', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const r = request();
    const a = await createPaymentIntent(stripe, r);
    const b = await createPaymentIntent(stripe, r);
    if (!a.ok || !b.ok) throw new Error('create');
    expect(b.value.intentId).toBe(a.value.intentId);
    expect(intentsOf(r.subjectId)).toHaveLength(1);
  });

  it('when the answer is lost after Stripe made the intent, our retry with the stored key finds it (no second intent)', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const r = request();
    local.faults.failAfterEffect = 1;
    const lost = await createPaymentIntent(stripe, r);
    expect(lost).toMatchObject({ ok: false, failure: { kind: 'transient', code: 'BILLING_UNAVAILABLE' } });
    expect(intentsOf(r.subjectId)).toHaveLength(1);
    const again = await createPaymentIntent(stripe, r);
    if (!again.ok) throw new Error(again.failure.code);
    expect(createdFor(again.value.intentId)).toHaveLength(1);
    expect(intentsOf(r.subjectId)).toHaveLength(1);
  });

  it('the SDK own retries of a lost answer (closed connection) also end with one intent', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 2 });
    const r = request();
    Object.assign(local.faults, { failAfterEffect: 1, failAfterEffectMode: 'reset' });
    const made = await createPaymentIntent(stripe, r);
    expect(made.ok).toBe(true);
    expect(intentsOf(r.subjectId)).toHaveLength(1);
  });

  it('Stripe unreachable is transient BILLING_UNAVAILABLE and creates nothing', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const r = request();
    local.faults.unavailable = true;
    expect(await createPaymentIntent(stripe, r)).toMatchObject({ ok: false, failure: { kind: 'transient', code: 'BILLING_UNAVAILABLE' } });
    local.faults.unavailable = false;
    expect(intentsOf(r.subjectId)).toHaveLength(0);
  });

  it('the key reused with other parameters is a permanent idempotency conflict, not a second intent', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const r = request();
    expect((await createPaymentIntent(stripe, r)).ok).toBe(true);
    expect(await createPaymentIntent(stripe, { ...r, amount: 1 })).toMatchObject({
      ok: false,
      failure: { kind: 'permanent', code: 'BILLING_IDEMPOTENCY_CONFLICT' },
    });
    expect(intentsOf(r.subjectId)).toHaveLength(1);
  });

  it('refuses (as a bug) a key that is not purpose:subjectId:attempt', async () => {
    await expect(createPaymentIntent(stripeClient(local), request({ idempotencyKey: 'random-key' }))).rejects.toThrow(
      /is not stay_balance:/,
    );
  });
});

describe('reading and cancelling an intent', () => {
  it('a declined card is a permanent PAYMENT_DECLINED, and the re-read shows the decline', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const made = await createPaymentIntent(stripe, request());
    if (!made.ok) throw new Error('create');
    const confirm = await billingCall(() =>
      stripe.paymentIntents.confirm(made.value.intentId, { payment_method: 'pm_card_chargeDeclined' }),
    );
    expect(confirm).toMatchObject({ ok: false, failure: { kind: 'permanent', code: 'PAYMENT_DECLINED', stripeCode: 'card_declined' } });
    expect(await retrievePaymentIntent(stripe, made.value.intentId)).toMatchObject({
      ok: true,
      value: { status: 'requires_payment_method', declined: true },
    });
  });

  it('cancel is idempotent; cancelling one that already succeeded answers its status so the caller refunds', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const a = await createPaymentIntent(stripe, request());
    if (!a.ok) throw new Error('create');
    expect(await cancelPaymentIntent(stripe, a.value.intentId)).toMatchObject({ ok: true, value: { status: 'canceled' } });
    expect(await cancelPaymentIntent(stripe, a.value.intentId)).toMatchObject({ ok: true, value: { status: 'canceled' } });
    const b = await createPaymentIntent(stripe, request());
    if (!b.ok) throw new Error('create');
    await stripe.paymentIntents.confirm(b.value.intentId, { payment_method: 'pm_card_visa' });
    expect(await cancelPaymentIntent(stripe, b.value.intentId)).toMatchObject({
      ok: true,
      value: { status: 'succeeded', amountReceived: 24_000 },
    });
  });
});

describe('refunds', () => {
  it('one refund per stored key, across a lost answer and retries', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const made = await createPaymentIntent(stripe, request());
    if (!made.ok) throw new Error('create');
    await stripe.paymentIntents.confirm(made.value.intentId, { payment_method: 'pm_card_visa' });
    const req = {
      intentId: made.value.intentId,
      amount: 12_000,
      idempotencyKey: `refund:${made.value.intentId}:1`,
      refundId: 're-local-1',
      reason: 'requested_by_customer' as const,
    };
    local.faults.failAfterEffect = 1;
    expect(await createRefund(stripe, req)).toMatchObject({ ok: false, failure: { kind: 'transient', code: 'BILLING_UNAVAILABLE' } });
    const a = await createRefund(stripe, req);
    const b = await createRefund(stripe, req);
    if (!a.ok || !b.ok) throw new Error('refund');
    expect(b.value.stripeRefundId).toBe(a.value.stripeRefundId);
    expect(a.value).toMatchObject({ status: 'succeeded', amount: 12_000, currency: 'jpy' });
    expect(local.refunds().filter((r) => r.payment_intent === made.value.intentId)).toHaveLength(1);
  });

  it('more than remains is a permanent BILLING_REQUEST_INVALID', async () => {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const made = await createPaymentIntent(stripe, request());
    if (!made.ok) throw new Error('create');
    await stripe.paymentIntents.confirm(made.value.intentId, { payment_method: 'pm_card_visa' });
    const r = await createRefund(stripe, {
      intentId: made.value.intentId,
      amount: 24_001,
      idempotencyKey: `refund:${made.value.intentId}:x`,
      refundId: 're-x',
      reason: 'requested_by_customer',
    });
    expect(r).toMatchObject({ ok: false, failure: { kind: 'permanent', code: 'BILLING_REQUEST_INVALID', stripeCode: 'amount_too_large' } });
  });
});

describe('webhook verification', () => {
  async function delivered(): Promise<Delivery> {
    const stripe = stripeClient(local, { maxNetworkRetries: 0 });
    const made = await createPaymentIntent(stripe, request());
    if (!made.ok) throw new Error('create');
    await local.webhooks.idle();
    const d = receiver.got.find((x) => {
      const e = JSON.parse(x.raw.toString('utf8')) as { type: string; data: { object: { id: string } } };
      return e.type === 'payment_intent.created' && e.data.object.id === made.value.intentId;
    });
    if (!d) throw new Error('no delivery');
    return d;
  }

  it('accepts the raw body with a good signature and names the event and its object', async () => {
    const d = await delivered();
    const v = verifyWebhook(stripeClient(local), d.raw, d.signature, WEBHOOK_SECRET, Date.now());
    expect(v.status).toBe('verified');
    if (v.status !== 'verified') return;
    const parsed = JSON.parse(d.raw.toString('utf8')) as { id: string; data: { object: { id: string } } };
    expect(v.event).toMatchObject({ eventId: parsed.id, type: 'payment_intent.created', objectId: parsed.data.object.id });
  });

  it('refuses a bad signature, a wrong secret, a missing header and a re-serialized body', async () => {
    const d = await delivered();
    const stripe = stripeClient(local);
    const now = Date.now();
    const tampered = d.signature.replace(/v1=([0-9a-f])/, (_m, c: string) => `v1=${c === '0' ? '1' : '0'}`);
    expect(verifyWebhook(stripe, d.raw, tampered, WEBHOOK_SECRET, now)).toMatchObject({
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
    });
    expect(verifyWebhook(stripe, d.raw, d.signature, 'whsec_other', now)).toMatchObject({
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
    });
    expect(verifyWebhook(stripe, d.raw, undefined, WEBHOOK_SECRET, now)).toMatchObject({
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
    });
    const reserialized = JSON.stringify(JSON.parse(d.raw.toString('utf8')));
    expect(reserialized).not.toBe(d.raw.toString('utf8'));
    expect(verifyWebhook(stripe, reserialized, d.signature, WEBHOOK_SECRET, now)).toMatchObject({
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
    });
  });

  it('refuses a signature older than 300 s by the injected clock, and a forged old one as invalid, not stale', async () => {
    const d = await delivered();
    const stripe = stripeClient(local);
    const t = Number(/t=(\d+)/.exec(d.signature)?.[1]);
    expect(verifyWebhook(stripe, d.raw, d.signature, WEBHOOK_SECRET, (t + 300) * 1000)).toMatchObject({ status: 'verified' });
    expect(verifyWebhook(stripe, d.raw, d.signature, WEBHOOK_SECRET, (t + 301) * 1000)).toMatchObject({
      status: 'refused',
      code: 'WEBHOOK_TIMESTAMP_STALE',
    });
    const forged = stripe.webhooks.generateTestHeaderString({
      payload: d.raw.toString('utf8'),
      secret: 'whsec_other',
      timestamp: t - 3600,
    });
    expect(verifyWebhook(stripe, d.raw, forged, WEBHOOK_SECRET, t * 1000)).toMatchObject({
      status: 'refused',
      code: 'WEBHOOK_SIGNATURE_INVALID',
    });
  });
});

describe('the one PaymentIntent factory', () => {
  it('paymentIntents.create appears in exactly one file of cloud/src', () => {
    const root = fileURLToPath(new URL('../src/', import.meta.url));
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
      );
    const files = walk(root).filter((f) => /paymentIntents\s*\.\s*create\b/.test(readFileSync(f, 'utf8')));
    expect(files.map((f) => relative(root, f))).toEqual(['adapters/stripe/payment-intents.ts']);
  });

  it('subscriptions.create appears in exactly one file of cloud/src (the one Subscription factory)', () => {
    const root = fileURLToPath(new URL('../src/', import.meta.url));
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
      );
    const files = walk(root).filter((f) => /subscriptions\s*\.\s*create\b/.test(readFileSync(f, 'utf8')));
    expect(files.map((f) => relative(root, f))).toEqual(['adapters/stripe/subscriptions.ts']);
  });
});
