import type { MoneyInjector } from './faults.js';
import type { BookedStay, MoneyWorkload } from './workload.js';

/**
 * Targeted scenarios (chaos/money/prove-bugs.ts): each drives the system into the conditions of one
 * known money bug without relying on random faults, then lets the run heal and the checker judge. On
 * today's code each ends with no violation; with its bug's patch applied, with one of the invariant
 * the bug breaks.
 */
export type Scenario = (w: MoneyWorkload, i: MoneyInjector) => Promise<void>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, f: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await f()) return;
    await sleep(300);
  }
  throw new Error(`scenario: timed out waiting for ${what}`);
}

interface Json {
  readonly [k: string]: unknown;
}
const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

async function stayOf(w: MoneyWorkload, stayId: string): Promise<{ status: string; payments: Json[] }> {
  const res = await w.call('get-stay', 'GET', `/stays/${stayId}`);
  const b = isObj(res.body) ? res.body : {};
  const stay = isObj(b.stay) ? b.stay : {};
  return { status: String(stay.status ?? '?'), payments: Array.isArray(b.payments) ? b.payments.filter(isObj) : [] };
}

const intentOf = (s: BookedStay, w: MoneyWorkload, purpose: string): string | undefined =>
  s.intents.find((i) => w.c.stripe.paymentIntent(i)?.metadata.purpose === purpose);

export const SCENARIOS: Record<string, Scenario> = {
  /**
   * A paid deposit, then the stay fails: the guest pays the deposit, the balance intent is cancelled at
   * Stripe (as the dashboard or an expired checkout does), the stay fails. The policy keeps nothing of a
   * stay never delivered: the deposit must come back (M2).
   */
  'deposit-kept-on-failed-stay': async (w) => {
    const s = await w.book({ personId: 'guest-1', underway: false, deposit: true });
    if (!s) throw new Error('scenario: the booking was refused');
    const deposit = intentOf(s, w, 'stay_deposit');
    const balance = intentOf(s, w, 'stay_balance');
    if (deposit === undefined || balance === undefined) throw new Error('scenario: a stay with a deposit has two intents');
    await w.payIntent(deposit, 'pm_card_visa', { stayId: s.stayId });
    await waitFor('the deposit recorded', async () =>
      (await stayOf(w, s.stayId)).payments.some((p) => p.purpose === 'stay_deposit' && p.status === 'succeeded'),
    );
    await w.stripe('dashboard-cancel-intent', 'POST', `/v1/payment_intents/${balance}/cancel`, {}, { stayId: s.stayId, intentId: balance });
    await waitFor('the stay failed', async () => (await stayOf(w, s.stayId)).status === 'failed');
  },

  /**
   * A refund made in the dashboard races the cloud's own: one paid stay is refunded in part in Stripe and
   * cancelled at once (the cloud asks for the whole amount before the refund's webhook is in), another is
   * cancelled and refunded in full in Stripe at once (before the cloud's refund job ran). Stripe refuses
   * the cloud's call (`amount_too_large`, `charge_already_refunded`); the cloud must give back only what
   * is left, each refund once, and leave no refund pending or dead (M2).
   */
  'dashboard-refund-races-cancel': async (w) => {
    const paidStay = async (personId: string) => {
      const s = await w.book({ personId, underway: false, deposit: false });
      if (!s) throw new Error('scenario: the booking was refused');
      for (const i of s.intents) await w.payIntent(i, 'pm_card_visa', { stayId: s.stayId });
      await waitFor('the stay confirmed', async () => (await stayOf(w, s.stayId)).status === 'confirmed');
      s.status = 'confirmed';
      return s;
    };
    const settled = (id: string) =>
      waitFor('the refunds settled', async () => {
        const st = await stayOf(w, id);
        return st.payments.length > 0 && st.payments.every((p) => p.status === 'refunded');
      });
    const a = await paidStay('guest-2');
    const intent = a.intents[0] ?? '';
    const third = String(Math.floor((w.c.stripe.paymentIntent(intent)?.amount_received ?? 3) / 3));
    await w.stripe(
      'dashboard-refund',
      'POST',
      '/v1/refunds',
      { payment_intent: intent, amount: third },
      { stayId: a.stayId, intentId: intent, racing: true },
    );
    await w.cancelStay(a, 'staff_cancelled');
    const b = await paidStay('guest-3');
    await w.cancelStay(b, 'staff_cancelled');
    for (const i of b.intents)
      await w.stripe('dashboard-refund', 'POST', '/v1/refunds', { payment_intent: i }, { stayId: b.stayId, intentId: i, racing: true });
    await settled(a.stayId);
    await settled(b.stayId);
  },

  /**
   * A blocked guest books, pays and presents the PIN: the site blocked guest-4, then a booking for them
   * is tried. It must be refused (GUEST_BLOCKED), or at the latest the key refused at confirmation; a
   * door that opens for them past the propagation bound breaks M1.
   */
  'blocked-guest-books-and-opens': async (w) => {
    await w.blockOrUnblock('guest-4');
    const blockedAt = Date.now();
    const s = await w.book({ personId: 'guest-4', underway: true, deposit: false });
    if (!s) return; // refused at booking: nothing more can happen
    for (const i of s.intents) await w.payIntent(i, 'pm_card_visa', { stayId: s.stayId });
    await waitFor('the stay settled', async () => (await stayOf(w, s.stayId)).status !== 'pending');
    // the guest tries the door until well past the propagation bound after the block
    const until = blockedAt + w.propagationMs + 5000;
    while (Date.now() < until) {
      await w.present({ pin: s.pin, lockId: s.lockId, subject: s.stayId });
      await sleep(1000);
    }
  },

  /**
   * The slow-Stripe self-cancel: a member pays, then self-cancels while Stripe takes longer than the
   * cloud's SDK gives it (the first attempt times out, the retries find the key in use): the cloud has
   * no answer, and Stripe schedules the end a little later. The membership must follow Stripe
   * (`ending`, by the pending stop's job or the observer); one left `active` while Stripe will stop
   * billing breaks M3.
   */
  'slow-stripe-self-cancel': async (w) => {
    const local = w.c.stripe;
    const id = 'mem-slow';
    const res = await w.call('apply', 'POST', '/memberships', { id, planId: 'lounge', personId: 'guest-2' }, { membershipId: id });
    if (res.status !== 201) throw new Error(`scenario: apply answered ${res.status}`);
    const approved = await w.call('approve', 'POST', `/memberships/${id}/approve`, undefined, { membershipId: id });
    const a = isObj(approved.body) ? approved.body : {};
    if (typeof a.firstInvoiceId !== 'string' || typeof a.subscriptionId !== 'string') throw new Error('scenario: not approved');
    const subId = a.subscriptionId;
    await w.stripe('pay-invoice', 'GET', `/_local/invoices/${a.firstInvoiceId}/pay?card=pm_card_visa`, undefined, { membershipId: id });
    await waitFor('the membership active', async () => {
      const m = await w.call('get-membership', 'GET', `/memberships/${id}`);
      return isObj(m.body) && m.body.membershipStatus === 'active';
    });
    // longer than the SDK's 20 s timeout and its two retries (each answered 409 idempotency_key_in_use)
    local.faults.delayMs = 45_000;
    const cancel = w.call('self-cancel', 'POST', `/memberships/${id}/self-cancel`, {}, { membershipId: id });
    await sleep(500);
    local.faults.delayMs = 0; // only the self-cancel's first attempt is slow; its effect lands at +45 s
    await cancel;
    await waitFor('Stripe to schedule the end', async () => local.subscription(subId)?.cancel_at_period_end === true, 90_000);
    await local.webhooks.idle();
  },
};
