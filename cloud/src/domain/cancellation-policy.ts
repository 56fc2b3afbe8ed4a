import { no, ok, type Checked } from './nights.js';

/**
 * What a guest gets back when a stay is cancelled: a site setting
 * (`site_stay_settings.cancellation_policy`, jsonb). Tiers are read from
 * the most days before check-in down; the first tier the cancellation is
 * at or beyond applies. Money is in the currency's minor unit (yen, cents).
 */
export interface CancellationPolicy {
  /** Sorted by `minDaysBefore` descending; refundPercent never grows as the days shrink. */
  readonly tiers: readonly { readonly minDaysBefore: number; readonly refundPercent: number }[];
  /** Percent refunded on a no-show (the guest never came): usually 0. */
  readonly noShowRefundPercent: number;
  /**
   * Whether a cancelled walk-in gives its use of a monthly quota back (to the
   * month it was used in): `always`, only when the site cancelled
   * (`site_fault`, the default), or `never`.
   */
  readonly quotaReturn?: QuotaReturn | undefined;
}

export const QUOTA_RETURNS = ['always', 'site_fault', 'never'] as const;
export type QuotaReturn = (typeof QUOTA_RETURNS)[number];

/** Full refund a week ahead, half from two days ahead, nothing after. */
export const DEFAULT_CANCELLATION_POLICY: CancellationPolicy = Object.freeze({
  tiers: Object.freeze([Object.freeze({ minDaysBefore: 7, refundPercent: 100 }), Object.freeze({ minDaysBefore: 2, refundPercent: 50 })]),
  noShowRefundPercent: 0,
});

export const CANCEL_REASONS = [
  'guest_cancelled',
  'staff_cancelled',
  'no_show',
  'payment_disputed',
  'site_closed',
  'membership_ended',
  'guest_blocked',
  // all the stay's money was refunded in Stripe (the dashboard, support): the stay ends with nothing held
  'payment_refunded',
] as const;
export type CancelReason = (typeof CANCEL_REASONS)[number];

/**
 * Reasons that are the site's doing: the guest gets everything back whatever the policy says. A members'
 * booking cancelled because its membership ended (`membership_ended`) was not cancelled by the guest; a stay
 * whose key a gate refused at confirmation (`guest_blocked`) was not delivered, so the site keeps nothing.
 */
const SITE_FAULT: ReadonlySet<CancelReason> = new Set(['staff_cancelled', 'site_closed', 'membership_ended', 'guest_blocked']);

const pct = (n: number) => Number.isInteger(n) && n >= 0 && n <= 100;

/** Invariant: a policy the refund function accepts is monotone (fewer days before never refunds more). */
export function validatePolicy(p: CancellationPolicy): Checked<CancellationPolicy> {
  if (!pct(p.noShowRefundPercent)) return no('INVALID_CANCELLATION_POLICY', 'noShowRefundPercent must be an integer 0..100');
  if (p.quotaReturn !== undefined && !QUOTA_RETURNS.includes(p.quotaReturn))
    return no('INVALID_CANCELLATION_POLICY', `quotaReturn must be one of ${QUOTA_RETURNS.join(', ')}`);
  let prev: { minDaysBefore: number; refundPercent: number } | undefined;
  for (const t of p.tiers) {
    if (!Number.isInteger(t.minDaysBefore) || t.minDaysBefore < 0 || !pct(t.refundPercent)) {
      return no('INVALID_CANCELLATION_POLICY', 'each tier needs integer minDaysBefore >= 0 and refundPercent 0..100');
    }
    if (prev && (t.minDaysBefore >= prev.minDaysBefore || t.refundPercent > prev.refundPercent)) {
      return no('INVALID_CANCELLATION_POLICY', 'tiers must be sorted by minDaysBefore descending with refundPercent not growing');
    }
    prev = t;
  }
  return ok(p);
}

/** The percent of the price the guest gets back `daysBefore` whole days before check-in. */
export function refundPercent(p: CancellationPolicy, daysBefore: number, reason: CancelReason): number {
  if (SITE_FAULT.has(reason)) return 100;
  if (reason === 'no_show') return p.noShowRefundPercent;
  return p.tiers.find((t) => daysBefore >= t.minDaysBefore)?.refundPercent ?? 0;
}

/** What was paid for a stay, per payment purpose (minor units, net of earlier refunds). */
export interface Paid {
  readonly deposit: number;
  readonly balance: number;
}

export interface RefundSplit {
  /** The cancellation fee the site keeps: price minus the refundable share. */
  readonly fee: number;
  readonly deposit: number;
  readonly balance: number;
  readonly total: number;
}

/**
 * The refund of a cancellation. The fee the policy charges is taken from the
 * deposit first and only what the deposit does not cover from the balance;
 * the rest goes back, balance before deposit. Invariant: 0 <= each refund <=
 * what was paid under its purpose, and the total never grows as check-in nears.
 */
export function refundFor(p: CancellationPolicy, price: number, paid: Paid, daysBefore: number, reason: CancelReason): RefundSplit {
  const keepPercent = 100 - refundPercent(p, daysBefore, reason);
  const fee = Math.min(price, Math.ceil((price * keepPercent) / 100));
  const fromDeposit = Math.min(paid.deposit, fee);
  const fromBalance = Math.min(paid.balance, fee - fromDeposit);
  const deposit = paid.deposit - fromDeposit;
  const balance = paid.balance - fromBalance;
  return { fee, deposit, balance, total: deposit + balance };
}

/**
 * Whether cancelling a walk-in for `reason` gives its quota use back (to the month it was used in, never
 * the current one: the caller names the month). Invariant: `never` never returns, `always` always does.
 */
export function returnsQuota(p: CancellationPolicy, reason: CancelReason): boolean {
  const rule = p.quotaReturn ?? 'site_fault';
  return rule === 'always' || (rule === 'site_fault' && SITE_FAULT.has(reason));
}
