import fc from 'fast-check';
import { asDoorId, asPersonId, asSiteId, newCorrelationId } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_CANCELLATION_POLICY,
  refundFor,
  refundPercent,
  validatePolicy,
  type CancellationPolicy,
  type CancelReason,
} from '../src/domain/cancellation-policy.js';
import { daysUntilCheckIn, nightsOf, zonedInstant } from '../src/domain/nights.js';
import { recordRefund, requestRefund, settlePayment, type IntentObservation, type Payment } from '../src/domain/payments.js';
import {
  bookStay,
  cancelStay,
  checkInStay,
  checkOutStay,
  confirmStay,
  defaultStaySettings,
  expireStay,
  failStay,
  type BookStayCommand,
  type Room,
  type Stay,
  type StayOutcome,
} from '../src/domain/stays.js';

/** A pending stay that nothing was paid for yet. */
const NOTHING_PAID = { deposit: 0, balance: 0 } as const;

/** The stay and payment verbs, given / when / then, including "nothing happened"; the cancellation policy by property. */
const T0 = Date.UTC(2026, 10, 29, 9, 0, 0); // 2026-11-29 18:00 in Tokyo
const DAY = 86_400_000;
const cid = newCorrelationId();
const site = asSiteId('site-1');
const settings = { ...defaultStaySettings(site, 'Asia/Tokyo'), sharedDoors: [asDoorId('lobby')] };
const room: Room = { id: 'room-101', siteId: site, name: '101', doors: [asDoorId('door-101'), asDoorId('lobby')] };
const booking: BookStayCommand = {
  stayId: 'st-1',
  personId: asPersonId('guest-1'),
  room,
  settings,
  checkIn: '2026-12-24',
  checkOut: '2026-12-26',
  amount: 40_000,
  currency: 'jpy',
  deposit: 10_000,
  cid,
};

function state<S>(o: { status: string; code: string; state?: S }): S {
  if (o.status !== 'applied' && o.status !== 'noop') throw new Error(`expected a state, got ${o.status} ${o.code}`);
  if (o.state === undefined) throw new Error('no state');
  return o.state;
}
const pending = (): Stay => state(bookStay(null, booking, T0));
const confirmed = (): Stay =>
  state(confirmStay(pending(), { room, settings, paid: { deposit: 10_000, balance: 30_000 }, keyId: 'key-1', cid }, T0 + 60_000));
const codeOf = (o: StayOutcome) => [o.status, o.code];

describe('nights', () => {
  it('are the dates from check-in up to (not including) check-out, across month and year ends', () => {
    expect(nightsOf('2026-12-30', '2027-01-02')).toEqual({ status: 'ok', value: ['2026-12-30', '2026-12-31', '2027-01-01'] });
    expect(nightsOf('2028-02-28', '2028-03-01')).toEqual({ status: 'ok', value: ['2028-02-28', '2028-02-29'] });
  });

  it('refuses empty, negative, over-long and impossible stays with codes', () => {
    expect(nightsOf('2026-12-24', '2026-12-24')).toMatchObject({ status: 'refused', code: 'STAY_EMPTY' });
    expect(nightsOf('2026-12-24', '2026-12-20')).toMatchObject({ status: 'refused', code: 'STAY_EMPTY' });
    expect(nightsOf('2026-12-01', '2027-01-01', 30)).toMatchObject({ status: 'refused', code: 'STAY_TOO_LONG' });
    expect(nightsOf('2026-12-01', '2026-12-31', 30)).toMatchObject({ status: 'ok' });
    expect(nightsOf('2027-02-29', '2027-03-02')).toMatchObject({ status: 'refused', code: 'STAY_DATES_INVALID' });
    expect(nightsOf('24/12/2026', '2026-12-26')).toMatchObject({ status: 'refused', code: 'STAY_DATES_INVALID' });
  });

  it('count is check-out minus check-in for any valid range', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 3000 }), fc.integer({ min: 1, max: 30 }), (start, len) => {
        const base = Date.UTC(2025, 0, 1) + start * DAY;
        const iso = (t: number) => new Date(t).toISOString().slice(0, 10);
        const r = nightsOf(iso(base), iso(base + len * DAY));
        return r.status === 'ok' && r.value.length === len && r.value[0] === iso(base) && r.value[len - 1] === iso(base + (len - 1) * DAY);
      }),
    );
  });

  it('wall-clock times are read in the site time zone', () => {
    expect(zonedInstant('2026-12-24', '15:00', 'Asia/Tokyo')).toBe(Date.UTC(2026, 11, 24, 6, 0));
    expect(zonedInstant('2026-07-01', '10:00', 'Europe/Paris')).toBe(Date.UTC(2026, 6, 1, 8, 0));
    expect(zonedInstant('2026-12-01', '10:00', 'Europe/Paris')).toBe(Date.UTC(2026, 11, 1, 9, 0));
    // 02:30 does not exist on 2026-03-29 in Paris: the instant after the gap
    expect(zonedInstant('2026-03-29', '02:30', 'Europe/Paris')).toBe(Date.UTC(2026, 2, 29, 0, 30));
    expect(daysUntilCheckIn(T0 + 3 * DAY + 1, T0)).toBe(3);
    expect(daysUntilCheckIn(T0 - 1, T0)).toBe(-1);
  });
});

describe('a stay', () => {
  describe('when booked', () => {
    it('is pending, holds its nights until the hold ends, and asks for the deposit and balance intents', () => {
      const o = bookStay(null, booking, T0);
      expect(o.status).toBe('applied');
      if (o.status !== 'applied') return;
      expect(o.code).toBe('STAY_BOOKED');
      expect(o.state).toMatchObject({
        status: 'pending',
        version: 1,
        holdUntil: T0 + 30 * 60_000,
        nights: ['2026-12-24', '2026-12-25'],
        keyId: null,
      });
      expect(o.emits).toEqual([
        { type: 'reserve_nights', roomId: 'room-101', nights: ['2026-12-24', '2026-12-25'] },
        {
          type: 'create_intents',
          payments: [
            { purpose: 'stay_deposit', amount: 10_000 },
            { purpose: 'stay_balance', amount: 30_000 },
          ],
        },
      ]);
    });

    it('the same booking again is a noop; another booking under the id is a conflict', () => {
      const s = pending();
      expect(codeOf(bookStay(s, booking, T0 + 1))).toEqual(['noop', 'STAY_ALREADY_BOOKED']);
      expect(codeOf(bookStay(s, { ...booking, checkOut: '2026-12-27' }, T0 + 1))).toEqual(['conflict', 'STAY_ALREADY_EXISTS']);
    });

    it('refuses bad prices, currencies, rooms and dates', () => {
      expect(codeOf(bookStay(null, { ...booking, amount: 0 }, T0))).toEqual(['refused', 'STAY_PRICE_INVALID']);
      expect(codeOf(bookStay(null, { ...booking, amount: 10.5 }, T0))).toEqual(['refused', 'STAY_PRICE_INVALID']);
      expect(codeOf(bookStay(null, { ...booking, deposit: 50_000 }, T0))).toEqual(['refused', 'STAY_PRICE_INVALID']);
      expect(codeOf(bookStay(null, { ...booking, currency: 'usd' }, T0))).toEqual(['refused', 'STAY_CURRENCY_MISMATCH']);
      expect(codeOf(bookStay(null, { ...booking, room: { ...room, siteId: asSiteId('other') } }, T0))).toEqual([
        'refused',
        'ROOM_NOT_FOUND',
      ]);
      expect(codeOf(bookStay(null, { ...booking, checkIn: '2026-11-01', checkOut: '2026-11-02' }, T0))).toEqual([
        'refused',
        'STAY_DATES_INVALID',
      ]);
      expect(codeOf(bookStay(null, { ...booking, checkOut: '2026-12-24' }, T0))).toEqual(['refused', 'STAY_EMPTY']);
    });
  });

  describe('when pending', () => {
    it('confirms once the ledger holds the whole price, asking for a key from check-in to check-out for room + shared doors', () => {
      const o = confirmStay(pending(), { room, settings, paid: { deposit: 10_000, balance: 30_000 }, keyId: 'key-1', cid }, T0 + 60_000);
      expect(o.status).toBe('applied');
      if (o.status !== 'applied') return;
      expect(o.code).toBe('STAY_CONFIRMED');
      expect(o.state).toMatchObject({ status: 'confirmed', version: 2, keyId: 'key-1' });
      expect(o.emits).toEqual([
        {
          type: 'issue_key',
          key: {
            keyId: 'key-1',
            personId: 'guest-1',
            doors: ['door-101', 'lobby'],
            validFrom: Date.UTC(2026, 11, 24, 6, 0),
            validUntil: Date.UTC(2026, 11, 26, 1, 0),
          },
        },
        { type: 'notify', notice: 'stay_confirmed', dedupeKey: 'stay_confirmed:st-1' },
      ]);
    });

    it('stays pending while money is missing (the deposit alone is not the price)', () => {
      const s = pending();
      expect(confirmStay(s, { room, settings, paid: { deposit: 10_000, balance: 0 }, keyId: 'k', cid }, T0)).toEqual({
        status: 'noop',
        code: 'STAY_BALANCE_DUE',
        state: s,
      });
    });

    it('fails on a failed payment: nights released, intents cancelled, nothing to refund when nothing was paid', () => {
      const o = failStay(pending(), { paid: NOTHING_PAID, cid }, T0 + 1);
      expect(o.status === 'applied' && [o.state.status, o.emits.map((e) => e.type)]).toEqual([
        'failed',
        ['release_nights', 'cancel_intents', 'notify'],
      ]);
    });

    it('a failure or an expiry gives back everything already paid (a deposit): the stay was never delivered', () => {
      const paid = { deposit: 10_000, balance: 0 };
      const full = { type: 'refund', split: { fee: 0, deposit: 10_000, balance: 0, total: 10_000 } };
      const f = failStay(pending(), { paid, cid }, T0 + 1);
      expect(f.status === 'applied' && f.emits).toContainEqual(full);
      const s = pending();
      const e = expireStay(s, { paid, processing: false, cid }, s.holdUntil);
      expect(e.status === 'applied' && e.emits).toContainEqual(full);
    });

    it('expires only once the hold has ended', () => {
      const s = pending();
      expect(codeOf(expireStay(s, { paid: NOTHING_PAID, processing: false, cid }, s.holdUntil - 1))).toEqual([
        'noop',
        'STAY_HOLD_NOT_OVER',
      ]);
      const o = expireStay(s, { paid: NOTHING_PAID, processing: false, cid }, s.holdUntil);
      expect(o.status === 'applied' && [o.code, o.state.status, o.emits.map((e) => e.type)]).toEqual([
        'STAY_EXPIRED',
        'expired',
        ['release_nights', 'cancel_intents', 'notify'],
      ]);
    });

    it('does not expire while a payment is processing: the money in flight decides', () => {
      const s = pending();
      expect(codeOf(expireStay(s, { paid: NOTHING_PAID, processing: true, cid }, s.holdUntil))).toEqual([
        'noop',
        'STAY_PAYMENT_PROCESSING',
      ]);
    });

    it('can be cancelled: nights released, intents cancelled, what was paid refunded by the policy; not checked in', () => {
      const o = cancelStay(pending(), { reason: 'guest_cancelled', settings, paid: { deposit: 0, balance: 0 }, cid }, T0);
      expect(o.status === 'applied' && [o.code, o.emits.map((e) => e.type)]).toEqual([
        'STAY_CANCELLED',
        ['release_nights', 'cancel_intents', 'notify'],
      ]);
      const staff = cancelStay(pending(), { reason: 'staff_cancelled', settings, paid: { deposit: 10_000, balance: 0 }, cid }, T0);
      expect(staff.status === 'applied' && staff.emits).toContainEqual({
        type: 'refund',
        split: { fee: 0, deposit: 10_000, balance: 0, total: 10_000 },
      });
      expect(codeOf(checkInStay(pending(), { settings, cid }, Date.UTC(2026, 11, 24, 7)))).toEqual(['refused', 'INVALID_TRANSITION']);
    });
  });

  describe('when the stay already ended', () => {
    it('money that settles late is refused so the caller refunds it', () => {
      const expired = state(expireStay(pending(), { paid: NOTHING_PAID, processing: false, cid }, T0 + DAY));
      expect(
        codeOf(confirmStay(expired, { room, settings, paid: { deposit: 10_000, balance: 30_000 }, keyId: 'k', cid }, T0 + DAY)),
      ).toEqual(['refused', 'PAYMENT_AFTER_STAY_ENDED']);
      expect(codeOf(failStay(expired, { paid: NOTHING_PAID, cid }, T0 + DAY))).toEqual(['noop', 'STAY_ALREADY_ENDED']);
      expect(codeOf(expireStay(expired, { paid: NOTHING_PAID, processing: false, cid }, T0 + DAY))).toEqual(['noop', 'STAY_NOT_PENDING']);
    });
  });

  describe('when confirmed', () => {
    it('a payment failure reported after the money settled changes nothing', () => {
      const s = confirmed();
      expect(failStay(s, { paid: NOTHING_PAID, cid }, T0 + 2)).toEqual({ status: 'noop', code: 'PAYMENT_FAILURE_IGNORED', state: s });
      expect(codeOf(confirmStay(s, { room, settings, paid: { deposit: 10_000, balance: 30_000 }, keyId: 'key-2', cid }, T0 + 3))).toEqual([
        'noop',
        'STAY_ALREADY_CONFIRMED',
      ]);
    });

    it('cancel revokes the key at once, releases the nights and queues the policy refund (fee taken from the deposit first)', () => {
      // 2026-12-20 is 4 days before check-in: the default policy refunds 50 %, a 20 000 fee the 10 000 deposit covers half of
      const o = cancelStay(
        confirmed(),
        { reason: 'guest_cancelled', settings, paid: { deposit: 10_000, balance: 30_000 }, cid },
        Date.UTC(2026, 11, 20, 0),
      );
      expect(o.status).toBe('applied');
      if (o.status !== 'applied') return;
      expect(o.state).toMatchObject({ status: 'cancelled', cancelReason: 'guest_cancelled' });
      expect(o.emits).toEqual([
        { type: 'revoke_key', keyId: 'key-1', reason: 'stay_cancelled' },
        { type: 'release_nights' },
        { type: 'refund', split: { fee: 20_000, deposit: 0, balance: 20_000, total: 20_000 } },
        { type: 'notify', notice: 'stay_cancelled', dedupeKey: 'stay_cancelled:st-1' },
      ]);
      expect(
        codeOf(
          cancelStay(
            o.state,
            { reason: 'guest_cancelled', settings, paid: { deposit: 10_000, balance: 30_000 }, cid },
            Date.UTC(2026, 11, 20, 1),
          ),
        ),
      ).toEqual(['noop', 'STAY_ALREADY_CANCELLED']);
    });

    it('a no-show refunds nothing and queues no refund; a staff cancellation refunds all', () => {
      const late = Date.UTC(2026, 11, 25, 0);
      const noShow = cancelStay(confirmed(), { reason: 'no_show', settings, paid: { deposit: 10_000, balance: 30_000 }, cid }, late);
      expect(noShow.status === 'applied' && noShow.emits.map((e) => e.type)).toEqual(['revoke_key', 'release_nights', 'notify']);
      const staff = cancelStay(confirmed(), { reason: 'staff_cancelled', settings, paid: { deposit: 10_000, balance: 30_000 }, cid }, late);
      expect(staff.status === 'applied' && staff.emits.find((e) => e.type === 'refund')).toEqual({
        type: 'refund',
        split: { fee: 0, deposit: 10_000, balance: 30_000, total: 40_000 },
      });
    });

    it('checks in from the check-in date, then checks out: the key ends and the nights are released', () => {
      const s = confirmed();
      expect(codeOf(checkInStay(s, { settings, cid }, Date.UTC(2026, 11, 23, 14, 59)))).toEqual(['refused', 'STAY_NOT_STARTED']);
      const inn = state(checkInStay(s, { settings, cid }, Date.UTC(2026, 11, 23, 15, 0)));
      expect(inn.status).toBe('checked_in');
      expect(codeOf(checkInStay(inn, { settings, cid }, Date.UTC(2026, 11, 24)))).toEqual(['noop', 'STAY_ALREADY_CHECKED_IN']);
      const out = checkOutStay(inn, { cid }, Date.UTC(2026, 11, 25));
      expect(out.status === 'applied' && out.emits).toEqual([
        { type: 'revoke_key', keyId: 'key-1', reason: 'stay_checked_out' },
        { type: 'release_nights' },
        { type: 'notify', notice: 'stay_checked_out', dedupeKey: 'stay_checked_out:st-1' },
      ]);
      if (out.status !== 'applied') return;
      expect(codeOf(checkOutStay(out.state, { cid }, Date.UTC(2026, 11, 25)))).toEqual(['noop', 'STAY_ALREADY_CHECKED_OUT']);
      expect(
        codeOf(
          cancelStay(out.state, { reason: 'guest_cancelled', settings, paid: { deposit: 0, balance: 0 }, cid }, Date.UTC(2026, 11, 25)),
        ),
      ).toEqual(['noop', 'STAY_ALREADY_ENDED']);
    });
  });

  it('a missing stay is refused by every verb', () => {
    const paid = { deposit: 0, balance: 0 };
    for (const o of [
      confirmStay(null, { room, settings, paid, keyId: 'k', cid }, T0),
      failStay(null, { paid: NOTHING_PAID, cid }, T0),
      expireStay(null, { paid: NOTHING_PAID, processing: false, cid }, T0),
      cancelStay(null, { reason: 'guest_cancelled', settings, paid, cid }, T0),
      checkInStay(null, { settings, cid }, T0),
      checkOutStay(null, { cid }, T0),
    ]) {
      expect(codeOf(o)).toEqual(['refused', 'STAY_NOT_FOUND']);
    }
  });
});

describe('a payment', () => {
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
    intentId: 'pi_1',
    clientSecret: 'pi_1_secret',
    amountReceived: 0,
    amountRefunded: 0,
    lastCode: 'STAY_BOOKED',
    cid,
    createdAt: T0,
    updatedAt: T0,
  };
  const seen = (o: Partial<IntentObservation>): IntentObservation => ({
    intentId: 'pi_1',
    status: 'succeeded',
    amount: 30_000,
    amountReceived: 30_000,
    currency: 'jpy',
    declined: false,
    ...o,
  });
  const settle = (p: Payment, o: Partial<IntentObservation>) => settlePayment(p, seen(o), { cid }, T0 + 1);

  it('settles on the intent current status, whatever order events arrive in', () => {
    const paid = settle(payment, {});
    expect(paid.status === 'applied' && [paid.code, paid.state.status, paid.state.amountReceived]).toEqual([
      'PAYMENT_SUCCEEDED',
      'succeeded',
      30_000,
    ]);
    if (paid.status !== 'applied') return;
    // payment_failed after succeeded: the re-read says declined, but the ledger already ranks higher
    expect(settle(paid.state, { status: 'requires_payment_method', amountReceived: 0, declined: true })).toEqual({
      status: 'noop',
      code: 'PAYMENT_FAILURE_IGNORED',
      state: paid.state,
    });
    expect(settle(paid.state, { status: 'processing', amountReceived: 0 })).toMatchObject({ status: 'noop', code: 'PAYMENT_STATUS_STALE' });
    expect(settle(paid.state, {})).toMatchObject({ status: 'noop', code: 'PAYMENT_ALREADY_SUCCEEDED' });
  });

  it('a declined attempt leaves it open for another card; a cancelled intent fails it; money arriving late still counts', () => {
    expect(settle(payment, { status: 'requires_payment_method', amountReceived: 0, declined: true })).toEqual({
      status: 'noop',
      code: 'PAYMENT_DECLINED_RETRYABLE',
      state: payment,
    });
    expect(settle(payment, { status: 'requires_payment_method', amountReceived: 0 })).toMatchObject({
      status: 'noop',
      code: 'PAYMENT_NOT_SETTLED',
    });
    const failed = settle(payment, { status: 'canceled', amountReceived: 0 });
    expect(failed.status === 'applied' && failed.state.status).toBe('failed');
    if (failed.status !== 'applied') return;
    expect(settle(failed.state, {})).toMatchObject({ status: 'applied', code: 'PAYMENT_SUCCEEDED_LATE' });
  });

  it('an amount or currency that is not the ledger is refused, never applied', () => {
    expect(settle(payment, { amount: 29_999, amountReceived: 29_999 })).toMatchObject({
      status: 'refused',
      code: 'PAYMENT_AMOUNT_MISMATCH',
    });
    expect(settle(payment, { amountReceived: 1 })).toMatchObject({ status: 'refused', code: 'PAYMENT_AMOUNT_MISMATCH' });
    expect(settle(payment, { currency: 'usd' })).toMatchObject({ status: 'refused', code: 'PAYMENT_AMOUNT_MISMATCH' });
    expect(settle(payment, { intentId: 'pi_other' })).toMatchObject({ status: 'refused', code: 'PAYMENT_INTENT_MISMATCH' });
    expect(settlePayment(null, seen({}), { cid }, T0)).toMatchObject({ status: 'refused', code: 'PAYMENT_NOT_FOUND' });
  });

  it('is refunded once: requested with its key, recorded by the amount Stripe reports', () => {
    const paid = state(settle(payment, {}));
    expect(requestRefund(paid, { amount: 30_001, cid }, T0)).toMatchObject({ status: 'refused', code: 'REFUND_EXCEEDS_PAYMENT' });
    expect(requestRefund(paid, { amount: 0, cid }, T0)).toMatchObject({ status: 'noop', code: 'NOTHING_TO_REFUND' });
    const asked = requestRefund(paid, { amount: 20_000, cid }, T0 + 2);
    expect(asked.status === 'applied' && [asked.state.status, asked.emits]).toEqual([
      'refund_pending',
      [{ type: 'refund', paymentId: 'pay-1', amount: 20_000, idempotencyKey: 'refund:pay-1:1' }],
    ]);
    if (asked.status !== 'applied') return;
    expect(requestRefund(asked.state, { amount: 20_000, cid }, T0 + 3)).toMatchObject({ status: 'noop', code: 'REFUND_ALREADY_REQUESTED' });
    const part = recordRefund(asked.state, { amountRefunded: 20_000, currency: 'jpy', cid }, T0 + 4);
    expect(part.status === 'applied' && [part.code, part.state.status, part.state.amountRefunded]).toEqual([
      'PAYMENT_PARTIALLY_REFUNDED',
      'partially_refunded',
      20_000,
    ]);
    if (part.status !== 'applied') return;
    expect(recordRefund(part.state, { amountRefunded: 20_000, currency: 'jpy', cid }, T0 + 5)).toMatchObject({
      status: 'noop',
      code: 'REFUND_ALREADY_RECORDED',
    });
    expect(recordRefund(asked.state, { amountRefunded: 30_000, currency: 'jpy', cid }, T0 + 4)).toMatchObject({
      status: 'applied',
      code: 'PAYMENT_REFUNDED',
    });
    expect(recordRefund(asked.state, { amountRefunded: 30_001, currency: 'jpy', cid }, T0 + 4)).toMatchObject({
      status: 'refused',
      code: 'PAYMENT_AMOUNT_MISMATCH',
    });
  });
});

describe('the cancellation policy', () => {
  const reasons: fc.Arbitrary<CancelReason> = fc.constantFrom(
    'guest_cancelled',
    'staff_cancelled',
    'no_show',
    'payment_disputed',
    'site_closed',
  );
  // valid policies: distinct day thresholds descending, percents not growing
  const policy: fc.Arbitrary<CancellationPolicy> = fc
    .tuple(
      fc.uniqueArray(fc.integer({ min: 0, max: 60 }), { maxLength: 5 }),
      fc.array(fc.integer({ min: 0, max: 100 }), { minLength: 5, maxLength: 5 }),
      fc.integer({ min: 0, max: 100 }),
    )
    .map(([days, pcts, noShow]) => {
      const d = [...days].sort((a, b) => b - a);
      const p = [...pcts].sort((a, b) => b - a);
      return { tiers: d.map((minDaysBefore, i) => ({ minDaysBefore, refundPercent: p[i] ?? 0 })), noShowRefundPercent: noShow };
    });
  const money = fc.record({
    price: fc.integer({ min: 1, max: 10_000_000 }),
    depositShare: fc.double({ min: 0, max: 1, noNaN: true }),
    paidShare: fc.double({ min: 0, max: 1, noNaN: true }),
  });
  const paidOf = (m: { price: number; depositShare: number; paidShare: number }) => {
    const deposit = Math.floor(m.price * m.depositShare);
    return { deposit, balance: Math.floor((m.price - deposit) * m.paidShare) };
  };

  it('generated policies are valid, and so is the default; malformed ones are refused', () => {
    fc.assert(fc.property(policy, (p) => validatePolicy(p).status === 'ok'));
    expect(validatePolicy(DEFAULT_CANCELLATION_POLICY).status).toBe('ok');
    expect(
      validatePolicy({
        tiers: [
          { minDaysBefore: 2, refundPercent: 100 },
          { minDaysBefore: 7, refundPercent: 50 },
        ],
        noShowRefundPercent: 0,
      }),
    ).toMatchObject({ code: 'INVALID_CANCELLATION_POLICY' });
    expect(
      validatePolicy({
        tiers: [
          { minDaysBefore: 7, refundPercent: 50 },
          { minDaysBefore: 2, refundPercent: 100 },
        ],
        noShowRefundPercent: 0,
      }),
    ).toMatchObject({ code: 'INVALID_CANCELLATION_POLICY' });
    expect(validatePolicy({ tiers: [{ minDaysBefore: 7, refundPercent: 101 }], noShowRefundPercent: 0 })).toMatchObject({
      code: 'INVALID_CANCELLATION_POLICY',
    });
  });

  it('never refunds more than was paid under each purpose, and never a negative amount', () => {
    fc.assert(
      fc.property(policy, money, fc.integer({ min: -30, max: 400 }), reasons, (p, m, days, reason) => {
        const paid = paidOf(m);
        const r = refundFor(p, m.price, paid, days, reason);
        return (
          r.deposit >= 0 &&
          r.balance >= 0 &&
          r.deposit <= paid.deposit &&
          r.balance <= paid.balance &&
          r.total === r.deposit + r.balance &&
          r.fee >= 0 &&
          r.fee <= m.price
        );
      }),
    );
  });

  it('is monotone: cancelling earlier never refunds less', () => {
    fc.assert(
      fc.property(
        policy,
        money,
        fc.integer({ min: -30, max: 400 }),
        fc.integer({ min: 0, max: 100 }),
        reasons,
        (p, m, days, more, reason) => {
          const paid = paidOf(m);
          return refundFor(p, m.price, paid, days + more, reason).total >= refundFor(p, m.price, paid, days, reason).total;
        },
      ),
    );
  });

  it('charges only what the deposit does not cover', () => {
    // 50 % fee on 40 000 = 20 000: the 10 000 deposit is kept first, then 10 000 of the balance
    expect(refundFor(DEFAULT_CANCELLATION_POLICY, 40_000, { deposit: 10_000, balance: 30_000 }, 3, 'guest_cancelled')).toEqual({
      fee: 20_000,
      deposit: 0,
      balance: 20_000,
      total: 20_000,
    });
    // a fee the deposit covers leaves the balance whole
    expect(
      refundFor(
        { tiers: [{ minDaysBefore: 0, refundPercent: 80 }], noShowRefundPercent: 0 },
        40_000,
        { deposit: 10_000, balance: 30_000 },
        3,
        'guest_cancelled',
      ),
    ).toEqual({
      fee: 8_000,
      deposit: 2_000,
      balance: 30_000,
      total: 32_000,
    });
    expect(refundPercent(DEFAULT_CANCELLATION_POLICY, 7, 'guest_cancelled')).toBe(100);
    expect(refundPercent(DEFAULT_CANCELLATION_POLICY, 1, 'guest_cancelled')).toBe(0);
    expect(refundPercent(DEFAULT_CANCELLATION_POLICY, 1, 'site_closed')).toBe(100);
  });
});
