import { newCorrelationId } from '@tobira/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  INTENT_STATUSES,
  intentIdempotencyKey,
  intentUnsettled,
  moneyOfEndedStay,
  paymentEventOfCode,
  recordRefund,
  refundIdempotencyKey,
  refundOwedAfterFailedRefunds,
  requestRefund,
  settlePayment,
  type IntentObservation,
  type IntentStatus,
  type Payment,
  type PaymentMoney,
  type RefundView,
} from '../src/domain/payments.js';
import { PAYMENT_EVENTS, PAYMENT_STATUSES, type PaymentStatus } from '../src/domain/stay-states.js';

/** The payment ledger verbs, pure: what Stripe's answer does to one charge, and how its refunds are asked and recorded. */
const T0 = Date.UTC(2027, 2, 10, 1);
const cid = newCorrelationId();
const cid2 = newCorrelationId();

const payment: Payment = {
  id: 'pay-1',
  stayId: 'st-1',
  purpose: 'stay_balance',
  amount: 30_000,
  currency: 'jpy',
  status: 'requires_payment',
  version: 1,
  attempt: 1,
  idempotencyKey: 'stay_balance:st-1:1',
  intentId: null,
  clientSecret: null,
  amountReceived: 0,
  amountRefunded: 0,
  lastCode: 'STAY_BOOKED',
  cid,
  createdAt: T0,
  updatedAt: T0,
};
const at = (status: PaymentStatus, over: Partial<Payment> = {}): Payment => ({ ...payment, status, intentId: 'pi_1', ...over });
const held = (over: Partial<Payment> = {}) => at('succeeded', { amountReceived: 30_000, ...over });

const seen = (status: IntentStatus, over: Partial<IntentObservation> = {}): IntentObservation => ({
  intentId: 'pi_1',
  status,
  amount: 30_000,
  amountReceived: status === 'succeeded' ? 30_000 : 0,
  currency: 'jpy',
  declined: false,
  ...over,
});

describe('idempotency keys', () => {
  it('an intent key names its purpose, subject and attempt; a refund key its payment and number', () => {
    expect(intentIdempotencyKey('stay_deposit', 'st-9', 3)).toBe('stay_deposit:st-9:3');
    expect(refundIdempotencyKey('pay-9', 2)).toBe('refund:pay-9:2');
  });
});

describe('settlePayment', () => {
  it('a succeeded intent: the payment succeeds one version on, with the money and the intent recorded', () => {
    const o = settlePayment(payment, seen('succeeded'), { cid: cid2 }, T0 + 5);
    expect(o).toEqual({
      status: 'applied',
      code: 'PAYMENT_SUCCEEDED',
      state: {
        ...payment,
        status: 'succeeded',
        version: 2,
        amountReceived: 30_000,
        intentId: 'pi_1',
        lastCode: 'PAYMENT_SUCCEEDED',
        cid: cid2,
        updatedAt: T0 + 5,
      },
      emits: [],
    });
  });

  it('processing and canceled record the intent but no money', () => {
    expect(settlePayment(payment, seen('processing'), { cid }, T0)).toMatchObject({
      status: 'applied',
      code: 'PAYMENT_PROCESSING',
      state: { status: 'processing', intentId: 'pi_1', amountReceived: 0, version: 2 },
    });
    expect(settlePayment(at('processing'), seen('canceled'), { cid }, T0)).toMatchObject({
      status: 'applied',
      code: 'PAYMENT_FAILED',
      state: { status: 'failed', intentId: 'pi_1', amountReceived: 0 },
    });
    // an intent in flight that already counts money received does not put it in the ledger before it succeeds
    expect(settlePayment(payment, seen('processing', { amountReceived: 30_000 }), { cid }, T0)).toMatchObject({
      state: { amountReceived: 0 },
    });
  });

  it('the first intent Stripe names is taken; another one after it is refused, naming the payment', () => {
    const o = settlePayment(at('processing'), seen('succeeded', { intentId: 'pi_2' }), { cid }, T0);
    expect(o).toMatchObject({ status: 'refused', code: 'PAYMENT_INTENT_MISMATCH' });
    if (o.status === 'refused') expect(o.detail).toMatch(/pi_2.*pay-1/);
    expect(settlePayment(payment, seen('succeeded', { intentId: 'pi_7' }), { cid }, T0)).toMatchObject({ state: { intentId: 'pi_7' } });
  });

  it('money that is not the ledger amount and currency is refused, whatever the status', () => {
    for (const status of INTENT_STATUSES) {
      for (const over of [{ currency: 'usd' }, { amount: 29_999 }, { amount: 30_001 }] as Partial<IntentObservation>[]) {
        const o = settlePayment(payment, seen(status, over), { cid }, T0);
        expect(o, `${status} ${JSON.stringify(over)}`).toMatchObject({ status: 'refused', code: 'PAYMENT_AMOUNT_MISMATCH' });
        if (o.status === 'refused') expect(o.detail).toContain('ledger 30000 jpy');
      }
    }
    expect(settlePayment(payment, seen('succeeded', { amountReceived: 29_999 }), { cid }, T0)).toMatchObject({
      code: 'PAYMENT_AMOUNT_MISMATCH',
    });
  });

  it('a state Stripe has not settled changes nothing', () => {
    for (const status of ['requires_confirmation', 'requires_action', 'requires_capture', 'other'] as const)
      for (const declined of [false, true])
        expect(settlePayment(payment, seen(status, { declined }), { cid }, T0), status).toEqual({
          status: 'noop',
          code: 'PAYMENT_NOT_SETTLED',
          state: payment,
        });
  });

  it('a decline is retryable while the payment waits, and ignored once it settled or failed', () => {
    const decline = seen('requires_payment_method', { declined: true });
    for (const s of ['requires_payment', 'processing'] as const)
      expect(settlePayment(at(s), decline, { cid }, T0), s).toMatchObject({ status: 'noop', code: 'PAYMENT_DECLINED_RETRYABLE' });
    for (const s of PAYMENT_STATUSES.filter((s) => s !== 'requires_payment' && s !== 'processing'))
      expect(settlePayment(at(s, { amountReceived: 30_000 }), decline, { cid }, T0), s).toMatchObject({
        status: 'noop',
        code: 'PAYMENT_FAILURE_IGNORED',
      });
  });

  it('the order observations arrive in never matters: the last state is that of the highest rank seen', () => {
    const rank = { requires_payment: 0, processing: 1, failed: 2, succeeded: 3 } as const;
    const obs = fc.constantFrom(
      seen('processing'),
      seen('canceled'),
      seen('succeeded'),
      seen('requires_payment_method', { declined: true }),
    );
    fc.assert(
      fc.property(fc.array(obs, { maxLength: 8 }), (list) => {
        let p = payment;
        for (const o of list) {
          const r = settlePayment(p, o, { cid }, T0);
          expect(r.status).not.toBe('refused');
          if (r.status === 'applied') p = r.state;
        }
        const seenRanks = list.map((o) => (o.status === 'succeeded' ? 3 : o.status === 'canceled' ? 2 : o.status === 'processing' ? 1 : 0));
        expect(rank[p.status as keyof typeof rank]).toBe(Math.max(0, ...seenRanks));
      }),
    );
  });
});

describe('requestRefund', () => {
  it('an unknown payment is refused', () => {
    expect(requestRefund(null, { amount: 1, cid }, T0)).toMatchObject({ status: 'refused', code: 'PAYMENT_NOT_FOUND' });
  });

  it('queues one refund job with its key, the payment pending its refund one version on', () => {
    const p = held({ version: 3 });
    const o = requestRefund(p, { amount: 12_000, cid: cid2, attempt: 4 }, T0 + 9);
    expect(o).toEqual({
      status: 'applied',
      code: 'REFUND_QUEUED',
      state: { ...p, status: 'refund_pending', version: 4, lastCode: 'REFUND_QUEUED', cid: cid2, updatedAt: T0 + 9 },
      emits: [{ type: 'refund', paymentId: 'pay-1', amount: 12_000, idempotencyKey: 'refund:pay-1:4' }],
    });
    expect(requestRefund(p, { amount: 1, cid }, T0)).toMatchObject({ emits: [{ idempotencyKey: 'refund:pay-1:1' }] });
  });

  it('0 < amount <= what was received and not yet refunded; nothing asked is a noop', () => {
    const p = at('partially_refunded', { amountReceived: 30_000, amountRefunded: 10_000 });
    expect(requestRefund(p, { amount: 0, cid }, T0)).toEqual({ status: 'noop', code: 'NOTHING_TO_REFUND', state: p });
    expect(requestRefund(p, { amount: 20_000, cid }, T0)).toMatchObject({ status: 'applied', emits: [{ amount: 20_000 }] });
    for (const amount of [20_001, -1, 1.5, Number.NaN, Number.MAX_SAFE_INTEGER + 1]) {
      const o = requestRefund(p, { amount, cid }, T0);
      expect(o, String(amount)).toMatchObject({ status: 'refused', code: 'REFUND_EXCEEDS_PAYMENT' });
      if (o.status === 'refused') expect(o.detail).toContain('20000');
    }
  });

  it('only money held on the charge can be refunded', () => {
    for (const s of ['requires_payment', 'processing', 'failed'] as const) {
      const o = requestRefund(at(s, { amountReceived: 30_000 }), { amount: 1, cid }, T0);
      expect(o, s).toMatchObject({ status: 'refused', code: 'INVALID_TRANSITION' });
      if (o.status === 'refused') expect(o.detail).toBe(`refund_requested from ${s}`);
    }
    expect(requestRefund(at('refund_pending', { amountReceived: 30_000 }), { amount: 1, cid }, T0)).toMatchObject({
      status: 'noop',
      code: 'REFUND_ALREADY_REQUESTED',
    });
  });
});

describe('recordRefund', () => {
  const pending = at('refund_pending', { amountReceived: 30_000, amountRefunded: 0 });

  it('an unknown payment is refused', () => {
    expect(recordRefund(null, { amountRefunded: 1, currency: 'jpy', cid }, T0)).toMatchObject({
      status: 'refused',
      code: 'PAYMENT_NOT_FOUND',
    });
  });

  it('all of it back: refunded; part of it: partially refunded; each one version on with the amount', () => {
    expect(recordRefund(pending, { amountRefunded: 30_000, currency: 'jpy', cid: cid2 }, T0 + 3)).toEqual({
      status: 'applied',
      code: 'PAYMENT_REFUNDED',
      state: {
        ...pending,
        status: 'refunded',
        amountRefunded: 30_000,
        version: 2,
        lastCode: 'PAYMENT_REFUNDED',
        cid: cid2,
        updatedAt: T0 + 3,
      },
      emits: [],
    });
    expect(recordRefund(pending, { amountRefunded: 29_999, currency: 'jpy', cid }, T0)).toMatchObject({
      status: 'applied',
      code: 'PAYMENT_PARTIALLY_REFUNDED',
      state: { status: 'partially_refunded', amountRefunded: 29_999 },
    });
    // a refund made in Stripe directly is recorded from succeeded too
    expect(recordRefund(held(), { amountRefunded: 1, currency: 'jpy', cid }, T0)).toMatchObject({ code: 'PAYMENT_PARTIALLY_REFUNDED' });
  });

  it('the recorded amount never shrinks: the same amount or less again is a noop', () => {
    const part = at('partially_refunded', { amountReceived: 30_000, amountRefunded: 10_000 });
    expect(recordRefund(part, { amountRefunded: 10_000, currency: 'jpy', cid }, T0)).toEqual({
      status: 'noop',
      code: 'REFUND_ALREADY_RECORDED',
      state: part,
    });
    expect(recordRefund(part, { amountRefunded: 9_999, currency: 'jpy', cid }, T0)).toMatchObject({ status: 'noop' });
    expect(recordRefund(part, { amountRefunded: 10_001, currency: 'jpy', cid }, T0)).toMatchObject({ status: 'applied' });
  });

  it('more than was received, or another currency, is refused as a mismatch', () => {
    const o = recordRefund(pending, { amountRefunded: 30_001, currency: 'jpy', cid }, T0);
    expect(o).toMatchObject({ status: 'refused', code: 'PAYMENT_AMOUNT_MISMATCH' });
    if (o.status === 'refused') expect(o.detail).toBe('refunded 30001 jpy of 30000 jpy');
    expect(recordRefund(pending, { amountRefunded: 30_000, currency: 'usd', cid }, T0)).toMatchObject({ code: 'PAYMENT_AMOUNT_MISMATCH' });
  });

  it('nothing is recorded on a payment that never held money', () => {
    expect(recordRefund(at('failed'), { amountRefunded: 0, currency: 'jpy', cid }, T0)).toMatchObject({ status: 'noop' });
    const o = recordRefund(at('processing', { amountReceived: 30_000 }), { amountRefunded: 30_000, currency: 'jpy', cid }, T0);
    expect(o).toMatchObject({ status: 'refused', code: 'INVALID_TRANSITION' });
  });
});

describe('paymentEventOfCode', () => {
  it('each applied code names the event that produced it', () => {
    expect(paymentEventOfCode('PAYMENT_SUCCEEDED')).toBe('succeeded');
    expect(paymentEventOfCode('PAYMENT_SUCCEEDED_LATE')).toBe('succeeded');
    expect(paymentEventOfCode('PAYMENT_FAILED')).toBe('failed');
    expect(paymentEventOfCode('REFUND_QUEUED')).toBe('refund_requested');
    expect(paymentEventOfCode('PAYMENT_PARTIALLY_REFUNDED')).toBe('refunded_partial');
    expect(PAYMENT_EVENTS).toContain(paymentEventOfCode('PAYMENT_REFUNDED'));
  });

  it('a code no transition has is an error, not a guess', () => {
    expect(() => paymentEventOfCode('PAYMENT_STATUS_STALE')).toThrow(/PAYMENT_STATUS_STALE/);
    expect(() => paymentEventOfCode('')).toThrow();
  });
});

describe('refundOwedAfterFailedRefunds', () => {
  const ours = (attempt: number, amount: number, status: RefundView['status'], stripeRefundId: string | null, at = 10): RefundView => ({
    amount,
    status,
    source: 'tobira',
    stripeRefundId,
    attempt,
    createdAt: at,
    updatedAt: at,
  });
  const theirs = (amount: number, status: RefundView['status'], at = 5): RefundView => ({
    amount,
    status,
    source: 'stripe',
    stripeRefundId: `re_${amount}`,
    attempt: null,
    createdAt: at,
    updatedAt: at,
  });

  it('gives back what ours was cut by when the refund it counted on fails (all of it owed)', () => {
    const failed = theirs(10_000, 'failed');
    const all = [ours(1, 30_000, 'failed', null), ours(2, 20_000, 'succeeded', 're_2'), failed];
    expect(refundOwedAfterFailedRefunds(all, [failed], 30_000)).toBe(10_000);
  });

  it('never more than the refund ours was asked for: a policy that keeps half gets half back, not the failed amount', () => {
    // ours asked 15 000; a pending 25 000 left 5 000 on the charge, so ours was cut to 5 000
    const failed = theirs(25_000, 'failed');
    const all = [ours(1, 15_000, 'failed', null), ours(2, 5_000, 'succeeded', 're_2'), failed];
    expect(refundOwedAfterFailedRefunds(all, [failed], 30_000)).toBe(10_000);
  });

  it('nothing when ours was never cut (the failed refund was extra), or was closed before the failed one existed', () => {
    const failed = theirs(10_000, 'failed', 50);
    expect(refundOwedAfterFailedRefunds([ours(1, 15_000, 'succeeded', 're_1'), failed], [failed], 30_000)).toBe(0);
    expect(
      refundOwedAfterFailedRefunds([ours(1, 30_000, 'failed', null, 10), ours(2, 30_000, 'succeeded', 're_2'), failed], [failed], 30_000),
    ).toBe(0);
  });

  it('nothing again once given back: the give-back is a later attempt of ours', () => {
    const failed = theirs(10_000, 'failed');
    const all = [ours(1, 30_000, 'failed', null), ours(2, 20_000, 'succeeded', 're_2'), ours(3, 10_000, 'pending', 're_3'), failed];
    expect(refundOwedAfterFailedRefunds(all, [failed], 30_000)).toBe(0);
  });

  it('a refund of ours that Stripe failed itself (it has a Stripe id) is not a cut', () => {
    const failed = theirs(10_000, 'failed');
    expect(refundOwedAfterFailedRefunds([ours(1, 20_000, 'failed', 're_1'), failed], [failed], 30_000)).toBe(0);
  });

  it('is bounded by the failed amounts, the cut and what the charge still holds, whatever the history', () => {
    const view = fc.record({
      amount: fc.integer({ min: 1, max: 40_000 }),
      status: fc.constantFrom<RefundView['status']>('pending', 'succeeded', 'failed'),
      source: fc.constantFrom<RefundView['source']>('tobira', 'stripe'),
      stripeRefundId: fc.option(fc.constant('re_x'), { nil: null }),
      attempt: fc.option(fc.integer({ min: 1, max: 5 }), { nil: null }),
      createdAt: fc.integer({ min: 0, max: 100 }),
      updatedAt: fc.integer({ min: 0, max: 100 }),
    });
    fc.assert(
      fc.property(
        fc.array(view, { maxLength: 8 }),
        fc.array(view, { minLength: 1, maxLength: 3 }),
        fc.integer({ min: 0, max: 60_000 }),
        (rest, failed, received) => {
          const all = [...rest, ...failed];
          const owed = refundOwedAfterFailedRefunds(all, failed, received);
          const given = all.filter((r) => r.status !== 'failed').reduce((n, r) => n + r.amount, 0);
          expect(owed).toBeGreaterThanOrEqual(0);
          expect(owed).toBeLessThanOrEqual(failed.reduce((n, r) => n + r.amount, 0));
          expect(owed).toBeLessThanOrEqual(Math.max(0, received - given));
          expect(Number.isSafeInteger(owed)).toBe(true);
        },
      ),
    );
  });
});

describe('moneyOfEndedStay', () => {
  const money = (over: Partial<PaymentMoney> = {}): PaymentMoney => ({
    status: 'failed',
    intentId: 'pi_1',
    amountReceived: 0,
    amountRefunded: 0,
    refunds: [],
    ...over,
  });
  type R = PaymentMoney['refunds'][number];
  const ours = (attempt: number, amount: number, status: R['status']): R => ({ amount, status, source: 'tobira', attempt });
  const theirs = (amount: number, status: R['status']): R => ({ amount, status, source: 'stripe', attempt: null });

  it('says nothing was charged when every intent is known unpaid: cancelled at Stripe, or never made', () => {
    expect(moneyOfEndedStay([money(), money({ status: 'requires_payment', intentId: null })])).toEqual({
      said: 'none',
      received: 0,
      refunded: 0,
      refunding: 0,
      kept: 0,
    });
    expect(moneyOfEndedStay([]).said).toBe('none');
  });

  it('is being checked while an intent shown to the guest is neither paid nor cancelled (its cancel or its webhook not in yet)', () => {
    for (const status of ['requires_payment', 'processing'] as const) {
      expect(moneyOfEndedStay([money({ status })]).said).toBe('checking');
      // what else was paid and refunded does not make the sentence true: the open intent may have been paid too
      const deposit = money({
        status: 'refunded',
        amountReceived: 10_000,
        amountRefunded: 10_000,
        refunds: [ours(1, 10_000, 'succeeded')],
      });
      expect(moneyOfEndedStay([deposit, money({ status })])).toMatchObject({ said: 'checking', received: 10_000, refunded: 10_000 });
    }
  });

  it('refunded, being refunded, or kept by the policy, from the ledger', () => {
    expect(moneyOfEndedStay([money({ status: 'refunded', amountReceived: 30_000, amountRefunded: 30_000 })])).toEqual({
      said: 'refunded',
      received: 30_000,
      refunded: 30_000,
      refunding: 0,
      kept: 0,
    });
    expect(moneyOfEndedStay([money({ status: 'refund_pending', amountReceived: 30_000, refunds: [ours(1, 30_000, 'pending')] })])).toEqual({
      said: 'refunding',
      received: 30_000,
      refunded: 0,
      refunding: 30_000,
      kept: 0,
    });
    expect(
      moneyOfEndedStay([
        money({ status: 'partially_refunded', amountReceived: 30_000, amountRefunded: 15_000, refunds: [ours(1, 15_000, 'succeeded')] }),
      ]),
    ).toEqual({ said: 'kept', received: 30_000, refunded: 15_000, refunding: 0, kept: 15_000 });
  });

  it('a refund of ours Stripe failed is still owed until a later attempt of ours replaces it; one made in Stripe directly that failed is not ours to owe', () => {
    const failedOurs = money({ status: 'refund_pending', amountReceived: 30_000, refunds: [ours(1, 30_000, 'failed')] });
    expect(moneyOfEndedStay([failedOurs])).toMatchObject({ said: 'refunding', refunding: 30_000, kept: 0 });
    const replaced = money({
      status: 'refunded',
      amountReceived: 30_000,
      amountRefunded: 30_000,
      refunds: [ours(1, 30_000, 'failed'), ours(2, 30_000, 'succeeded')],
    });
    expect(moneyOfEndedStay([replaced])).toMatchObject({ said: 'refunded', refunding: 0, kept: 0 });
    const retrying = money({
      status: 'refund_pending',
      amountReceived: 30_000,
      refunds: [ours(1, 30_000, 'failed'), ours(2, 30_000, 'pending')],
    });
    expect(moneyOfEndedStay([retrying])).toMatchObject({ said: 'refunding', refunding: 30_000 });
    // a later refund made in Stripe directly does not replace ours
    const theirsLater = money({
      status: 'refund_pending',
      amountReceived: 30_000,
      refunds: [ours(1, 20_000, 'failed'), theirs(10_000, 'succeeded')],
      amountRefunded: 10_000,
    });
    expect(moneyOfEndedStay([theirsLater])).toMatchObject({ said: 'refunding', refunding: 20_000, kept: 0 });
    const theirsFailed = money({ status: 'succeeded', amountReceived: 30_000, refunds: [theirs(30_000, 'failed')] });
    expect(moneyOfEndedStay([theirsFailed])).toMatchObject({ said: 'kept', refunding: 0, kept: 30_000 });
  });

  it('intentUnsettled: only an intent shown to the guest and neither paid nor ended', () => {
    for (const status of PAYMENT_STATUSES) {
      expect(intentUnsettled({ status, intentId: null })).toBe(false);
      expect(intentUnsettled({ status, intentId: 'pi_1' })).toBe(status === 'requires_payment' || status === 'processing');
    }
  });

  it('never says nothing was charged when money was received or an intent is open, and kept is what is neither refunded nor being refunded', () => {
    const refund = fc.record({
      amount: fc.integer({ min: 1, max: 40_000 }),
      status: fc.constantFrom<R['status']>('pending', 'succeeded', 'failed'),
      source: fc.constantFrom<R['source']>('tobira', 'stripe'),
      attempt: fc.option(fc.integer({ min: 1, max: 4 }), { nil: null }),
    });
    const pay = fc.record({
      status: fc.constantFrom(...PAYMENT_STATUSES),
      intentId: fc.option(fc.constant('pi_x'), { nil: null }),
      amountReceived: fc.integer({ min: 0, max: 60_000 }),
      amountRefunded: fc.integer({ min: 0, max: 60_000 }),
      refunds: fc.array(refund, { maxLength: 4 }),
    });
    fc.assert(
      fc.property(fc.array(pay, { maxLength: 3 }), (ps) => {
        const m = moneyOfEndedStay(ps);
        const open = ps.some((p) => p.intentId !== null && (p.status === 'requires_payment' || p.status === 'processing'));
        expect(m.received).toBe(ps.reduce((n, p) => n + p.amountReceived, 0));
        expect(m.refunded).toBe(ps.reduce((n, p) => n + p.amountRefunded, 0));
        expect(m.kept).toBe(m.received - m.refunded - m.refunding);
        expect(m.refunding).toBeGreaterThanOrEqual(
          ps
            .flatMap((p) => p.refunds)
            .filter((r) => r.status === 'pending')
            .reduce((n, r) => n + r.amount, 0),
        );
        if (m.said === 'none') expect(m.received === 0 && !open).toBe(true);
        if (open) expect(m.said).toBe('checking');
        if (!open && m.received > 0) expect(m.said).not.toBe('none');
        if (m.said === 'kept') expect(m.kept).toBeGreaterThan(0);
        if (m.said === 'refunding') expect(m.refunding).toBeGreaterThan(0);
      }),
    );
  });
});
