import { describe, expect, it } from 'vitest';
import type { Entry } from '../history.js';
import { checkMoney, membershipAgrees, type MoneyVerdict } from '../money/checker.js';
import type { MoneyLedgers } from '../money/ledgers.js';

/**
 * The money checker over hand-made histories and ledgers: one run that keeps M1..M6 (a stay with a
 * deposit paid and used, a stay cancelled and refunded once, a failed stay whose deposit came back, a
 * walk-in, a membership ending at period end, a blocked and unblocked guest) is reported clean; each
 * break of one invariant, made on a copy of it, is reported under that invariant and no other.
 */
const W = 1_800_000_000_000;
const BOUND = 10_000;

interface Line {
  readonly t: number;
  readonly what: string;
  readonly [k: string]: unknown;
}
const history = (...es: Line[]): Entry[] => es.map((e, n): Entry => ({ who: 'workload', wall: W + e.t, ...e, i: n + 1 }));
const call = (
  t: number,
  op: string,
  method: string,
  path: string,
  status: number,
  code: string | null,
  extra: Record<string, unknown> = {},
) => ({
  t,
  what: 'api',
  op,
  method,
  path,
  status,
  code,
  tSend: t - 20,
  wallSend: W + t - 20,
  ...extra,
});

function goodRun(): { h: Entry[]; l: MoneyLedgers } {
  const h = history(
    call(100, 'book', 'POST', '/stays', 202, 'STAY_BOOKED', { stayId: 'st_a', cid: 'cid-a' }),
    call(200, 'book', 'POST', '/stays', 202, 'STAY_BOOKED', { stayId: 'st_b', cid: 'cid-b' }),
    call(300, 'book', 'POST', '/stays', 202, 'STAY_BOOKED', { stayId: 'st_c', cid: 'cid-c' }),
    call(400, 'book', 'POST', '/stays', 503, 'BILLING_UNAVAILABLE', { stayId: null, cid: 'cid-d' }),
    call(500, 'book', 'POST', '/stays', 0, null, { error: 'connection refused' }),
    call(5_000, 'cancel-stay', 'POST', '/stays/st_b/cancel', 202, 'STAY_CANCELLED', { stayId: 'st_b' }),
    call(6_000, 'block', 'PUT', '/sites/s/blocked-people/p2', 200, 'PERSON_BLOCKED', { personId: 'p2' }),
    call(30_000, 'unblock', 'DELETE', '/sites/s/blocked-people/p2', 200, 'PERSON_UNBLOCKED', { personId: 'p2' }),
    call(31_000, 'self-cancel', 'POST', '/memberships/m1/cancel', 200, 'MEMBERSHIP_ENDING', { membershipId: 'm1' }),
    { t: 32_000, what: 'fault', who: 'injector', kind: 'kill-cloud' },
  );
  const l: MoneyLedgers = {
    collectedAt: W + 100_000,
    stripe: {
      intents: [
        { id: 'pi_a1', status: 'succeeded', amount: 3000, amountReceived: 3000, metadata: {} },
        { id: 'pi_a2', status: 'succeeded', amount: 7000, amountReceived: 7000, metadata: {} },
        { id: 'pi_b', status: 'succeeded', amount: 10_000, amountReceived: 10_000, metadata: {} },
        { id: 'pi_c1', status: 'succeeded', amount: 2000, amountReceived: 2000, metadata: {} },
        { id: 'pi_c2', status: 'canceled', amount: 8000, amountReceived: 0, metadata: {} },
        { id: 'pi_w', status: 'succeeded', amount: 1500, amountReceived: 1500, metadata: {} },
        { id: 'pi_m1', status: 'succeeded', amount: 5000, amountReceived: 5000, metadata: {} },
        { id: 'pi_m2', status: 'succeeded', amount: 5000, amountReceived: 5000, metadata: {} },
      ],
      refunds: [
        { id: 're_b', paymentIntent: 'pi_b', amount: 10_000, status: 'succeeded', metadata: { refund_id: 'rf_pay_b_1' } },
        { id: 're_c', paymentIntent: 'pi_c1', amount: 2000, status: 'succeeded', metadata: { refund_id: 'rf_pay_c1_1' } },
      ],
      subscriptions: [
        {
          id: 'sub_1',
          status: 'active',
          cancelAtPeriodEnd: true,
          paid: [
            { invoice: 'in_1', intentId: 'pi_m1', first: true },
            { invoice: 'in_2', intentId: 'pi_m2', first: false },
          ],
        },
      ],
    },
    cloud: {
      stays: [
        {
          id: 'st_a',
          personId: 'p1',
          status: 'confirmed',
          amount: 10_000,
          deposit: 3000,
          cancelReason: null,
          holdUntil: W + 60_000,
          keyId: 'key_st_a',
          cid: 'cid-a',
        },
        {
          id: 'st_b',
          personId: 'p1',
          status: 'cancelled',
          amount: 10_000,
          deposit: 0,
          cancelReason: 'guest_cancelled',
          holdUntil: W + 60_000,
          keyId: 'key_st_b',
          cid: 'cid-b',
        },
        {
          id: 'st_c',
          personId: 'p2',
          status: 'failed',
          amount: 10_000,
          deposit: 2000,
          cancelReason: null,
          holdUntil: W + 60_000,
          keyId: null,
          cid: 'cid-c',
        },
      ],
      payments: [
        {
          id: 'pay_a1',
          stayId: 'st_a',
          purpose: 'stay_deposit',
          status: 'succeeded',
          intentId: 'pi_a1',
          amount: 3000,
          amountReceived: 3000,
          amountRefunded: 0,
        },
        {
          id: 'pay_a2',
          stayId: 'st_a',
          purpose: 'stay_balance',
          status: 'succeeded',
          intentId: 'pi_a2',
          amount: 7000,
          amountReceived: 7000,
          amountRefunded: 0,
        },
        {
          id: 'pay_b',
          stayId: 'st_b',
          purpose: 'stay_balance',
          status: 'refunded',
          intentId: 'pi_b',
          amount: 10_000,
          amountReceived: 10_000,
          amountRefunded: 10_000,
        },
        {
          id: 'pay_c1',
          stayId: 'st_c',
          purpose: 'stay_deposit',
          status: 'refunded',
          intentId: 'pi_c1',
          amount: 2000,
          amountReceived: 2000,
          amountRefunded: 2000,
        },
        {
          id: 'pay_c2',
          stayId: 'st_c',
          purpose: 'stay_balance',
          status: 'failed',
          intentId: 'pi_c2',
          amount: 8000,
          amountReceived: 0,
          amountRefunded: 0,
        },
      ],
      refunds: [
        { id: 'rf_pay_b_1', paymentId: 'pay_b', amount: 10_000, status: 'succeeded', stripeRefundId: 're_b', createdAt: W + 5_000 },
        { id: 'rf_pay_c1_1', paymentId: 'pay_c1', amount: 2000, status: 'succeeded', stripeRefundId: 're_c', createdAt: W + 9_000 },
      ],
      walkIns: [
        {
          id: 'wi_1',
          personId: 'p3',
          status: 'paid',
          amount: 1500,
          intentId: 'pi_w',
          amountReceived: 1500,
          holdUntil: W + 60_000,
          keyId: 'key_wi_1',
        },
      ],
      memberships: [
        { id: 'm1', personId: 'p4', status: 'ending', subscriptionId: 'sub_1', cancelAtPeriodEnd: true, suspended: false, keyId: 'key_m1' },
      ],
      keys: [
        { id: 'key_st_a', status: 'active', cid: 'cid-a' },
        { id: 'key_st_b', status: 'revoked', cid: 'cid-b' },
      ],
      notifications: [
        { id: '1', dedupeKey: 'stay_confirmed:st_a', status: 'sent', createdAt: W + 1000 },
        { id: '2', dedupeKey: 'stay_cancelled:st_b', status: 'sent', createdAt: W + 5000 },
      ],
      open: [],
    },
    gateways: [
      {
        id: 'gw1',
        keys: [
          { keyId: 'key_st_a', status: 'active', grantCid: 'cid-a' },
          { keyId: 'key_st_b', status: 'revoked', grantCid: 'cid-b' },
        ],
        accessLog: [
          { keyId: 'key_st_a', lockId: 'L1', at: W + 2_000, allowed: true, code: 'ALLOWED' },
          // cancelled at 5 000: an opening within the propagation bound is allowed
          { keyId: 'key_st_b', lockId: 'L1', at: W + 5_000 + BOUND - 1, allowed: true, code: 'ALLOWED' },
          { keyId: 'key_st_b', lockId: 'L1', at: W + 40_000, allowed: false, code: 'KEY_REVOKED' },
          { keyId: 'key_wi_1', lockId: 'L2', at: W + 3_000, allowed: true, code: 'ALLOWED' },
          { keyId: 'key_m1', lockId: 'L2', at: W + 50_000, allowed: true, code: 'ALLOWED' },
          { keyId: 'k-door-side', lockId: 'L2', at: W + 50_000, allowed: true, code: 'ALLOWED' },
        ],
      },
    ],
    deliveries: [
      { dedupeKey: 'stay_confirmed:st_a', notificationId: '1', wall: W + 1100 },
      // sent twice across a kill of the cloud: at least once is the documented guarantee
      { dedupeKey: 'stay_cancelled:st_b', notificationId: '2', wall: W + 31_500 },
      { dedupeKey: 'stay_cancelled:st_b', notificationId: '2', wall: W + 33_000 },
    ],
  };
  return { h, l };
}

const run = (h: Entry[], l: MoneyLedgers): MoneyVerdict => checkMoney(h, l, { propagationMs: BOUND });
const clone = <T>(x: T): T => structuredClone(x);
type Mutable<T> = {
  -readonly [K in keyof T]: T[K] extends readonly (infer U)[] ? Mutable<U>[] : T[K] extends object ? Mutable<T[K]> : T[K];
};
/** The violations of a broken copy: all under `invariant`, at least one. */
function broken(invariant: string, f: (h: Entry[], l: Mutable<MoneyLedgers>) => Entry[] | void): MoneyVerdict['violations'] {
  const { h, l } = goodRun();
  const m = clone(l) as Mutable<MoneyLedgers>;
  const h2 = f(clone(h), m) ?? h;
  const v = run(h2, m as MoneyLedgers);
  expect(v.violations.length, JSON.stringify(v.violations)).toBeGreaterThan(0);
  expect(
    v.violations.map((x) => x.invariant),
    JSON.stringify(v.violations),
  ).toEqual(v.violations.map(() => invariant));
  return v.violations;
}

describe('the money checker', () => {
  it('reports nothing for a run that keeps M1..M6, and says what it checked', () => {
    const { h, l } = goodRun();
    const v = run(h, l);
    expect(v.violations).toEqual([]);
    expect(v.checks).toMatchObject({
      'M1 door openings checked': 4,
      'M2 subjects checked': 5,
      'M3 memberships checked': 1,
      'M5 answers checked': 8,
      'M5 calls without an answer': 1,
      'M6 bookings with a key checked': 2,
    });
  });

  describe('M1: a door opens only for paid, live authority of a person not blocked', () => {
    it('an opening for a stay never confirmed', () => {
      const v = broken('M1', (_h, l) => {
        l.gateways[0]!.accessLog.push({ keyId: 'key_st_c', lockId: 'L1', at: W + 500, allowed: true, code: 'ALLOWED' });
      });
      expect(v[0]?.message).toContain('st_c, which was never confirmed');
    });
    it('an opening for a stay confirmed but not paid in full at Stripe', () => {
      const { h, l } = goodRun();
      const m = clone(l) as Mutable<MoneyLedgers>;
      m.stripe.intents[1]!.amountReceived = 0;
      m.cloud.payments[1]!.amountReceived = 0;
      // the stay delivered with 3 000 of 10 000 received breaks M2 as well
      const v = run(h, m as MoneyLedgers);
      expect(v.violations.filter((x) => x.invariant === 'M1').map((x) => x.message)).toEqual([
        'gw1/L1 opened for stay st_a, paid 3000 of 10000 at Stripe',
      ]);
      expect(v.violations.filter((x) => x.invariant === 'M2')).toHaveLength(1);
    });
    it('an opening past the propagation bound after the cancellation was accepted', () => {
      const v = broken('M1', (_h, l) => {
        l.gateways[0]!.accessLog.push({ keyId: 'key_st_b', lockId: 'L1', at: W + 5_000 + BOUND + 50, allowed: true, code: 'ALLOWED' });
      });
      expect(v[0]?.message).toMatch(/after it was cancelled/);
      expect(v[0]?.lines).toEqual([6]);
    });
    it('an opening for a blocked person, and none once unblocked', () => {
      const v = broken('M1', (_h, l) => {
        l.stripe.intents.push({ id: 'pi_w2', status: 'succeeded', amount: 1500, amountReceived: 1500, metadata: {} });
        l.cloud.walkIns.push({
          id: 'wi_2',
          personId: 'p2',
          status: 'paid',
          amount: 1500,
          intentId: 'pi_w2',
          amountReceived: 1500,
          holdUntil: W,
          keyId: 'key_wi_2',
        });
        l.gateways[0]!.accessLog.push(
          { keyId: 'key_wi_2', lockId: 'L2', at: W + 20_000, allowed: true, code: 'ALLOWED' },
          { keyId: 'key_wi_2', lockId: 'L2', at: W + 31_000, allowed: true, code: 'ALLOWED' },
        );
      });
      expect(v).toHaveLength(1);
      expect(v[0]?.message).toMatch(/of p2, blocked since/);
    });
    it('a fresh key after a resume opens again; the suspended one may not', () => {
      const { h, l } = goodRun();
      const m = clone(l) as Mutable<MoneyLedgers>;
      m.cloud.memberships[0]!.keyId = 'key_m1_2';
      m.gateways[0]!.accessLog.push({ keyId: 'key_m1_2', lockId: 'L2', at: W + 60_000, allowed: true, code: 'ALLOWED' });
      const h2 = [
        ...h,
        {
          i: h.length + 1,
          t: 39_000,
          wall: W + 39_000,
          who: 'workload',
          what: 'membership-observed',
          membershipId: 'm1',
          suspended: true,
          keyId: 'key_m1',
        },
      ];
      const v = run(h2, m as MoneyLedgers);
      expect(v.violations.map((x) => x.message)).toEqual([
        'gw1/L2 opened for membership m1 11000 ms after it was suspended (bound 10000 ms)',
      ]);
    });
    it('an opening with a suspended membership key', () => {
      broken('M1', (h) => [
        ...h,
        {
          i: h.length + 1,
          t: 39_000,
          wall: W + 39_000,
          who: 'workload',
          what: 'membership-observed',
          membershipId: 'm1',
          suspended: true,
          keyId: 'key_m1',
        },
      ]);
    });
  });

  describe('M2: received − refunded = what the policy keeps, each refund once', () => {
    it('a failed stay that keeps its deposit', () => {
      const v = broken('M2', (_h, l) => {
        l.stripe.refunds.splice(1, 1);
        l.cloud.refunds.splice(1, 1);
        l.cloud.payments[3]!.amountRefunded = 0;
      });
      expect(v[0]?.message).toMatch(/stay st_c: received 2000 − refunded 0 = 2000 at Stripe, its policy keeps 0/);
    });
    it('a refund made twice', () => {
      const v = broken('M2', (_h, l) => {
        l.stripe.refunds.push({ id: 're_b2', paymentIntent: 'pi_b', amount: 1, status: 'pending', metadata: { refund_id: 'rf_pay_b_1' } });
      });
      expect(v.map((x) => x.message)).toContain('refund rf_pay_b_1 was made 2 times at Stripe (re_b, re_b2)');
    });
    it('a refund made in Stripe that the cloud never recorded', () => {
      const v = broken('M2', (_h, l) => {
        l.stripe.refunds.push({ id: 're_dash', paymentIntent: 'pi_a2', amount: 7000, status: 'succeeded', metadata: {} });
      });
      expect(v.map((x) => x.message).join('\n')).toMatch(/re_dash .* is not in the cloud's ledger/);
    });
  });

  describe('M2 for memberships: what its invoices charged is kept while it ran, nothing of a checkout that ended', () => {
    const refund = (id: string, intent: string, amount: number) => ({
      id,
      paymentIntent: intent,
      amount,
      status: 'succeeded',
      metadata: { membership_id: 'm1' },
    });
    const endedBy = (l: Mutable<MoneyLedgers>, status: string, endReason: string) => {
      Object.assign(l.cloud.memberships[0]!, { status, endReason, cancelAtPeriodEnd: false });
      Object.assign(l.stripe.subscriptions[0]!, { status: 'canceled', cancelAtPeriodEnd: false });
    };
    it('a running membership whose renewal was refunded', () => {
      const v = broken('M2', (_h, l) => {
        l.stripe.refunds.push(refund('re_m2', 'pi_m2', 5000));
      });
      expect(v[0]?.message).toBe('membership m1: received 10000 − refunded 5000 = 5000 at Stripe, its policy keeps 10000');
    });
    it('a checkout that ended (rejected) and kept the money that landed as it ended', () => {
      const v = broken('M2', (_h, l) => {
        endedBy(l, 'rejected', 'checkout_expired');
        // a checkout never paid in time issued no key: no opening for it
        l.gateways[0]!.accessLog = l.gateways[0]!.accessLog.filter((d) => d.keyId !== 'key_m1');
      });
      expect(v[0]?.message).toBe('membership m1: received 10000 − refunded 0 = 10000 at Stripe, its policy keeps 0');
    });
    it('the checkout that won the race: ended by Stripe with its first invoice refunded in full, and only that', () => {
      const { h, l } = goodRun();
      const m = clone(l) as Mutable<MoneyLedgers>;
      endedBy(m, 'ended', 'force_cancel');
      m.stripe.refunds.push(refund('re_m1', 'pi_m1', 5000));
      expect(run(h, m as MoneyLedgers).violations).toEqual([]);
      m.stripe.refunds.push(refund('re_m1b', 'pi_m1', 1));
      expect(run(h, m as MoneyLedgers).violations.map((x) => x.message)).toEqual([
        'membership m1: received 10000 − refunded 5001 = 4999 at Stripe, its policy keeps 10000',
      ]);
    });
    it('an admin force-cancel refunds nothing', () => {
      const v = broken('M2', (_h, l) => {
        endedBy(l, 'ended', 'force_cancel');
        l.stripe.refunds.push(refund('re_m1', 'pi_m1', 4000));
      });
      expect(v[0]?.message).toBe('membership m1: received 10000 − refunded 4000 = 6000 at Stripe, its policy keeps 10000');
    });
  });

  it('reports a process that exited by itself (an unhandled error), not the injector kills', () => {
    const v = broken('crash', (h) => [
      ...h,
      {
        i: 900,
        t: 40_000,
        wall: W + 40_000,
        who: 'cloud',
        what: 'exit',
        code: 1,
        signal: null,
        stderr: "node:events:502\n throw er; // Unhandled 'error' event\n",
      },
    ]);
    expect(v[0]?.message).toMatch(/^cloud exited by itself \(code 1, signal null\): node:events:502 \|/);
  });

  describe('M3: a membership agrees with its subscription', () => {
    it('ending locally while Stripe will bill on', () => {
      const v = broken('M3', (_h, l) => {
        l.stripe.subscriptions[0]!.cancelAtPeriodEnd = false;
      });
      expect(v[0]?.message).toContain('m1 is ending locally, its subscription sub_1 is active at Stripe');
    });
    it('ended locally while the subscription is active', () => {
      broken('M3', (_h, l) => {
        l.cloud.memberships[0]!.status = 'ended';
      });
    });
    it('the mapping', () => {
      expect(membershipAgrees('ended', 'canceled', false)).toBe(true);
      expect(membershipAgrees('active', 'canceled', false)).toBe(false);
      expect(membershipAgrees('past_due', 'past_due', false)).toBe(true);
      expect(membershipAgrees('applied', 'incomplete', false)).toBe(true);
      expect(membershipAgrees('active', 'incomplete', false)).toBe(false);
    });
  });

  describe('M4: notices once per dedupe key; nothing non-terminal past its deadline', () => {
    it('a notice sent twice with no crash in between', () => {
      const v = broken('M4', (_h, l) => {
        l.deliveries.push({ dedupeKey: 'stay_confirmed:st_a', notificationId: '1', wall: W + 1200 });
      });
      expect(v[0]?.message).toBe('notice stay_confirmed:st_a was sent 2 times with no crash of the cloud in between');
    });
    it('a stay pending past its hold, a refund still pending, a job never done', () => {
      const v = broken('M4', (_h, l) => {
        l.stripe.intents.push({ id: 'pi_e', status: 'requires_payment_method', amount: 10, amountReceived: 0, metadata: {} });
        l.cloud.stays.push({
          id: 'st_e',
          personId: 'p1',
          status: 'pending',
          amount: 10,
          deposit: 0,
          cancelReason: null,
          holdUntil: W,
          keyId: null,
          cid: 'x',
        });
        l.cloud.refunds.push({ id: 'rf_x', paymentId: 'pay_a1', amount: 1, status: 'pending', stripeRefundId: null, createdAt: W });
        l.cloud.open.push({ queue: 'billing_jobs', id: 'j1', kind: 'refund', since: W });
      });
      expect(v).toHaveLength(3);
    });
  });

  describe('M5: every answer is documented, with a code', () => {
    it('a 500', () => {
      const v = broken('M5', (h) => [...h, { ...h[0]!, i: h.length + 1, status: 500, code: 'INTERNAL' }]);
      expect(v[0]?.message).toBe('POST /stays answered 500');
    });
    it('a refusal without a code', () => {
      broken('M5', (h) => [...h, { ...h[0]!, i: h.length + 1, status: 409, code: null }]);
    });
  });

  describe('M6: the booking correlation id reaches its key grant', () => {
    it('a grant at the gateway under another cid', () => {
      const v = broken('M6', (_h, l) => {
        l.gateways[0]!.keys[0]!.grantCid = 'evt_webhook_cid';
      });
      expect(v[0]?.message).toContain('key_st_a carries cid evt_webhook_cid');
    });
    it('a key under the webhook request cid in the cloud', () => {
      broken('M6', (_h, l) => {
        l.cloud.keys[0]!.cid = 'req_other';
      });
    });
  });
});
