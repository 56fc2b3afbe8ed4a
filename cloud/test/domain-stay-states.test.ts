import { describe, expect, it } from 'vitest';
import {
  holdsMoney,
  holdsNights,
  PAYMENT_EVENTS,
  PAYMENT_STATUSES,
  paymentNoopOf,
  paymentTransitionOf,
  STAY_EVENTS,
  STAY_STATUSES,
  stayNoopOf,
  stayTransitionOf,
  type PaymentEvent,
  type PaymentStatus,
  type StayStatus,
} from '../src/domain/stay-states.js';

/** The stay and payment machines as rules: what each lookup answers, and the properties the tables must keep. */

describe('stay lookups', () => {
  it('a stay is born pending by its booking, and only by it', () => {
    expect(stayTransitionOf(null, 'book')).toMatchObject({ to: 'pending', code: 'STAY_BOOKED' });
    for (const e of STAY_EVENTS.filter((e) => e !== 'book')) expect(stayTransitionOf(null, e), e).toBeUndefined();
    for (const s of STAY_STATUSES) expect(stayTransitionOf(s, 'book'), s).toBeUndefined();
  });

  it('the life of a stay: paid, checked in, checked out', () => {
    expect(stayTransitionOf('pending', 'payment_settled')).toMatchObject({ to: 'confirmed', code: 'STAY_CONFIRMED' });
    expect(stayTransitionOf('confirmed', 'check_in')).toMatchObject({ to: 'checked_in', code: 'STAY_CHECKED_IN' });
    expect(stayTransitionOf('checked_in', 'check_out')).toMatchObject({ to: 'checked_out', code: 'STAY_CHECKED_OUT' });
  });

  it('a pending stay ends failed when its payment fails, expired when its hold runs out', () => {
    expect(stayTransitionOf('pending', 'payment_failed')).toMatchObject({ to: 'failed', code: 'STAY_FAILED' });
    expect(stayTransitionOf('pending', 'hold_expired')).toMatchObject({ to: 'expired', code: 'STAY_EXPIRED' });
  });

  it('a stay not yet over (pending, confirmed, checked in) can be cancelled; an ended one answers why not', () => {
    for (const s of ['pending', 'confirmed', 'checked_in'] as const)
      expect(stayTransitionOf(s, 'cancel'), s).toMatchObject({ to: 'cancelled', code: 'STAY_CANCELLED' });
    expect(stayNoopOf('cancelled', 'cancel')).toMatchObject({ code: 'STAY_ALREADY_CANCELLED' });
    for (const s of ['checked_out', 'failed', 'expired'] as const)
      expect(stayNoopOf(s, 'cancel'), s).toMatchObject({ code: 'STAY_ALREADY_ENDED' });
  });

  it('repeats are noops with their code: the money settled again, the guest checked in or out again', () => {
    for (const s of ['confirmed', 'checked_in', 'checked_out'] as const)
      expect(stayNoopOf(s, 'payment_settled'), s).toMatchObject({ code: 'STAY_ALREADY_CONFIRMED' });
    for (const s of ['checked_in', 'checked_out'] as const)
      expect(stayNoopOf(s, 'check_in'), s).toMatchObject({ code: 'STAY_ALREADY_CHECKED_IN' });
    expect(stayNoopOf('checked_out', 'check_out')).toMatchObject({ code: 'STAY_ALREADY_CHECKED_OUT' });
  });

  it('a failure reported after the money settled changes nothing; one after the stay ended says so', () => {
    for (const s of ['confirmed', 'checked_in', 'checked_out', 'cancelled'] as const)
      expect(stayNoopOf(s, 'payment_failed'), s).toMatchObject({ code: 'PAYMENT_FAILURE_IGNORED' });
    for (const s of ['failed', 'expired'] as const)
      expect(stayNoopOf(s, 'payment_failed'), s).toMatchObject({ code: 'STAY_ALREADY_ENDED' });
  });

  it('only a pending stay has a hold to expire', () => {
    for (const s of STAY_STATUSES.filter((s) => s !== 'pending'))
      expect(stayNoopOf(s, 'hold_expired'), s).toMatchObject({ code: 'STAY_NOT_PENDING' });
    expect(stayNoopOf('pending', 'hold_expired')).toBeUndefined();
  });

  it('what is neither a transition nor a noop is no answer at all (the verb refuses it)', () => {
    expect(stayTransitionOf('pending', 'check_in')).toBeUndefined();
    expect(stayNoopOf('pending', 'check_in')).toBeUndefined();
    expect(stayTransitionOf('confirmed', 'check_out')).toBeUndefined();
    expect(stayNoopOf('confirmed', 'check_out')).toBeUndefined();
    expect(stayTransitionOf('failed', 'payment_settled')).toBeUndefined();
    expect(stayNoopOf('failed', 'payment_settled')).toBeUndefined();
    expect(stayTransitionOf('cancelled', 'check_in')).toBeUndefined();
  });

  it('no pair of state and event is both a transition and a noop; every transition names its own event and state', () => {
    for (const s of STAY_STATUSES)
      for (const e of STAY_EVENTS) {
        const t = stayTransitionOf(s, e);
        const n = stayNoopOf(s, e);
        expect(t !== undefined && n !== undefined, `${s} ${e}`).toBe(false);
        if (t) expect(t.event === e && t.from.includes(s), `${s} ${e}`).toBe(true);
        if (n) expect(n.event === e && n.from.includes(s), `${s} ${e}`).toBe(true);
      }
  });

  it('the nights of its room are held exactly while a stay is pending, confirmed or checked in', () => {
    const holding: StayStatus[] = ['pending', 'confirmed', 'checked_in'];
    for (const s of STAY_STATUSES) expect(holdsNights(s), s).toBe(holding.includes(s));
  });

  it('an ended stay (checked out, failed, expired, cancelled) goes nowhere', () => {
    for (const s of ['checked_out', 'failed', 'expired', 'cancelled'] as const)
      for (const e of STAY_EVENTS) expect(stayTransitionOf(s, e), `${s} ${e}`).toBeUndefined();
  });
});

/** The rank the payment machine orders observations by: a later status in Stripe never goes back. */
const RANK: Record<'requires_payment' | 'processing' | 'failed' | 'succeeded', number> = {
  requires_payment: 0,
  processing: 1,
  failed: 2,
  succeeded: 3,
};
const REFUND_STATES: readonly PaymentStatus[] = ['refund_pending', 'refunded', 'partially_refunded'];
const rankOf = (s: PaymentStatus) => (REFUND_STATES.includes(s) ? 4 : RANK[s as keyof typeof RANK]);

describe('payment lookups', () => {
  it('an observation that ranks at or below the current status changes nothing; one above it moves the payment', () => {
    const observed: readonly (PaymentEvent & keyof typeof RANK)[] = ['processing', 'failed', 'succeeded'];
    for (const s of PAYMENT_STATUSES)
      for (const e of observed) {
        const t = paymentTransitionOf(s, e);
        const n = paymentNoopOf(s, e);
        if (rankOf(s) >= RANK[e]) {
          expect(n, `${s} ${e}`).toBeDefined();
          expect(t, `${s} ${e}`).toBeUndefined();
        } else {
          expect(t, `${s} ${e}`).toMatchObject({ to: e });
          expect(n, `${s} ${e}`).toBeUndefined();
        }
      }
  });

  it('each observation carries its code', () => {
    expect(paymentTransitionOf('requires_payment', 'processing')).toMatchObject({ code: 'PAYMENT_PROCESSING' });
    for (const s of ['requires_payment', 'processing'] as const) {
      expect(paymentTransitionOf(s, 'succeeded'), s).toMatchObject({ code: 'PAYMENT_SUCCEEDED' });
      expect(paymentTransitionOf(s, 'failed'), s).toMatchObject({ code: 'PAYMENT_FAILED' });
    }
    // money after the ledger gave up is still money: recorded, told apart for the stay to refund it
    expect(paymentTransitionOf('failed', 'succeeded')).toMatchObject({ to: 'succeeded', code: 'PAYMENT_SUCCEEDED_LATE' });
    for (const s of PAYMENT_STATUSES.filter((s) => s !== 'requires_payment'))
      expect(paymentNoopOf(s, 'processing'), s).toMatchObject({ code: 'PAYMENT_STATUS_STALE' });
    for (const s of ['succeeded', ...REFUND_STATES] as const) {
      expect(paymentNoopOf(s, 'succeeded'), s).toMatchObject({ code: 'PAYMENT_ALREADY_SUCCEEDED' });
      expect(paymentNoopOf(s, 'failed'), s).toMatchObject({ code: 'PAYMENT_FAILURE_IGNORED' });
    }
    expect(paymentNoopOf('failed', 'failed')).toMatchObject({ code: 'PAYMENT_ALREADY_FAILED' });
  });

  it('a refund is asked for money held on the charge, and asked once', () => {
    for (const s of ['succeeded', 'partially_refunded'] as const)
      expect(paymentTransitionOf(s, 'refund_requested'), s).toMatchObject({ to: 'refund_pending', code: 'REFUND_QUEUED' });
    for (const s of ['refund_pending', 'refunded'] as const)
      expect(paymentNoopOf(s, 'refund_requested'), s).toMatchObject({ code: 'REFUND_ALREADY_REQUESTED' });
    for (const s of ['requires_payment', 'processing', 'failed'] as const) {
      expect(paymentTransitionOf(s, 'refund_requested'), s).toBeUndefined();
      expect(paymentNoopOf(s, 'refund_requested'), s).toBeUndefined();
    }
  });

  it('refunds from any source are recorded while money is held; a fully refunded payment records no more', () => {
    for (const s of ['succeeded', 'refund_pending', 'partially_refunded'] as const) {
      expect(paymentTransitionOf(s, 'refunded_full'), s).toMatchObject({ to: 'refunded', code: 'PAYMENT_REFUNDED' });
      expect(paymentTransitionOf(s, 'refunded_partial'), s).toMatchObject({ to: 'partially_refunded', code: 'PAYMENT_PARTIALLY_REFUNDED' });
    }
    for (const e of ['refunded_full', 'refunded_partial'] as const) {
      expect(paymentNoopOf('refunded', e), e).toMatchObject({ code: 'REFUND_ALREADY_RECORDED' });
      expect(paymentTransitionOf('refunded', e), e).toBeUndefined();
      for (const s of ['requires_payment', 'processing', 'failed'] as const) {
        expect(paymentTransitionOf(s, e), `${s} ${e}`).toBeUndefined();
        expect(paymentNoopOf(s, e), `${s} ${e}`).toBeUndefined();
      }
    }
  });

  it('no pair of status and event is both a transition and a noop; every answer names its own event and status', () => {
    for (const s of PAYMENT_STATUSES)
      for (const e of PAYMENT_EVENTS) {
        const t = paymentTransitionOf(s, e);
        const n = paymentNoopOf(s, e);
        expect(t !== undefined && n !== undefined, `${s} ${e}`).toBe(false);
        if (t) expect(t.event === e && t.from.includes(s), `${s} ${e}`).toBe(true);
        if (n) expect(n.event === e && n.from.includes(s), `${s} ${e}`).toBe(true);
      }
  });

  it('money is held exactly while it is paid and not all given back', () => {
    const holding: PaymentStatus[] = ['succeeded', 'refund_pending', 'partially_refunded'];
    for (const s of PAYMENT_STATUSES) expect(holdsMoney(s), s).toBe(holding.includes(s));
  });
});
