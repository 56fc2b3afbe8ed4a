import { firstLines } from '../checker.js';
import type { Entry } from '../history.js';
import type { CloudMembership, CloudStay, CloudWalkIn, MoneyLedgers, StripeInvoicePayment } from './ledgers.js';

/**
 * The money checker: reads a money run's history and the three ledgers read after healing (the
 * local Stripe's, the cloud's database, each gateway's key set and access log) and reports every
 * violation of M1..M6 (docs/reliability.md, "Money") with the history lines that prove it. Pure:
 * the history and the ledgers in, the verdict out.
 *
 * The history lines it reads are the money workload's (chaos/money/workload.ts):
 * - `api` {op, method, path, status, code, tSend, wallSend, ...}: one per admin API call (status 0:
 *   no answer at all: the cloud was down or the client gave up);
 * - `fault` {kind}: the injector's (a `kill-cloud` explains a notification sent twice);
 * - `membership-observed` {membershipId, status, suspended}: the workload's reads.
 */
export interface MoneyCheckOptions {
  /**
   * The documented propagation bound: how long after the cloud accepted an end of authority (a
   * cancellation, a block, a force-cancel) a gateway may still open for it (the site's
   * `offlineGraceSeconds`: a gateway that missed the revoke fails closed by then).
   */
  readonly propagationMs: number;
  /** How long past its deadline a non-terminal row is tolerated (the worker's passes). */
  readonly deadlineSlackMs?: number;
  /** What the site's policy keeps of a stay in its final state; by default the run's policy (below). */
  readonly keptOfStay?: (s: CloudStay) => number;
  readonly keptOfWalkIn?: (w: CloudWalkIn) => number;
  readonly keptOfMembership?: typeof keptOfMembershipPolicy;
}

export interface MoneyViolation {
  readonly invariant: 'M1' | 'M2' | 'M3' | 'M4' | 'M5' | 'M6' | 'crash';
  readonly message: string;
  /** history line numbers (`i`) that prove it; none when the ledgers alone do */
  readonly lines: readonly number[];
}

export interface MoneyVerdict {
  readonly checks: Record<string, number>;
  readonly violations: readonly MoneyViolation[];
}

/**
 * The run's policy: the workload sets a cancellation policy that refunds everything at every tier
 * (and a no-show too), so a stay keeps its whole price only when it was delivered (confirmed,
 * checked in or out) and nothing otherwise; a walk-in keeps its price only while paid.
 */
export const DELIVERED_STAY = new Set(['confirmed', 'checked_in', 'checked_out']);
export const keptOfStayFullRefundPolicy = (s: CloudStay): number => (DELIVERED_STAY.has(s.status) ? s.amount : 0);
export const keptOfWalkInFullRefundPolicy = (w: CloudWalkIn): number => (w.status === 'paid' ? w.amount : 0);

/** What Stripe holds of one PaymentIntent: received, and refunded by refunds that succeeded. */
export type MoneyOf = (intentId: string) => { readonly received: number; readonly refunded: number };

/**
 * A membership keeps what each of its invoices charged while it ran (a cancel, at once or at the period
 * end, refunds nothing). A checkout that ended unpaid (`rejected`) keeps nothing: money that landed as its
 * deadline cancelled the subscription is refunded. That payment may also have won the race locally: the
 * membership was active for a moment and Stripe's cancel ended it (`ended`, `force_cancel`) with its first
 * invoice refunded in full, the one refund a member's money may see (docs/memberships.md).
 */
export function keptOfMembershipPolicy(m: CloudMembership, paid: readonly StripeInvoicePayment[], money: MoneyOf): number {
  const sum = (ps: readonly StripeInvoicePayment[]) => ps.reduce((s, p) => s + money(p.intentId).received, 0);
  if (m.status === 'rejected') return 0;
  const first = paid.filter((p) => p.first);
  const checkoutRefunded =
    m.status === 'ended' &&
    m.endReason === 'force_cancel' &&
    first.length > 0 &&
    first.every((p) => money(p.intentId).refunded === money(p.intentId).received);
  return sum(paid) - (checkoutRefunded ? sum(first) : 0);
}

/** The statuses docs/api.md documents for the calls the workload makes. */
export const DOCUMENTED_STATUSES = new Set([200, 201, 202, 204, 400, 401, 403, 404, 409, 422, 429, 503]);

/** Stripe's subscription status + schedule → the local membership statuses that agree with it. */
export function membershipAgrees(local: string, stripeStatus: string, cancelAtPeriodEnd: boolean): boolean {
  switch (stripeStatus) {
    case 'canceled':
    case 'incomplete_expired':
      return local === 'ended' || local === 'rejected';
    case 'incomplete':
      return local === 'applied';
    case 'active':
    case 'trialing':
      return cancelAtPeriodEnd ? local === 'ending' : local === 'active';
    case 'past_due':
    case 'unpaid':
      return cancelAtPeriodEnd ? local === 'ending' : local === 'past_due';
    default:
      return false;
  }
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' ? v : null);
const accepted = (e: Entry): boolean => typeof e.status === 'number' && e.status >= 200 && e.status < 300;

interface Window {
  readonly from: number;
  readonly to: number;
  readonly line: number;
}

export function checkMoney(history: readonly Entry[], l: MoneyLedgers, o: MoneyCheckOptions): MoneyVerdict {
  const bound = o.propagationMs;
  const deadlineSlack = o.deadlineSlackMs ?? 60_000;
  const keptOfStay = o.keptOfStay ?? keptOfStayFullRefundPolicy;
  const keptOfWalkIn = o.keptOfWalkIn ?? keptOfWalkInFullRefundPolicy;
  const keptOfMembership = o.keptOfMembership ?? keptOfMembershipPolicy;
  const checks: Record<string, number> = {};
  const violations: MoneyViolation[] = [];
  const count = (name: string, n = 1) => (checks[name] = (checks[name] ?? 0) + n);
  const fail = (invariant: MoneyViolation['invariant'], message: string, lines: number[] = []) =>
    violations.push({ invariant, message, lines });

  // no process dies by itself (the injector's kills are SIGKILLs, not recorded as `exit`)
  for (const e of history)
    if (e.what === 'exit') {
      count('processes that exited by themselves');
      fail('crash', `${String(e.who)} exited by itself (code ${String(e.code)}, signal ${String(e.signal)}): ${firstLines(e.stderr)}`, [
        e.i,
      ]);
    }

  const api = history.filter((e) => e.what === 'api');
  const intents = new Map(l.stripe.intents.map((i) => [i.id, i]));
  const succeededRefundsOf = (intentId: string | null) =>
    intentId === null ? [] : l.stripe.refunds.filter((r) => r.paymentIntent === intentId && r.status === 'succeeded');
  const refundedAt = (intentId: string | null) => succeededRefundsOf(intentId).reduce((s, r) => s + r.amount, 0);
  const receivedAt = (intentId: string | null): number => (intentId === null ? 0 : (intents.get(intentId)?.amountReceived ?? 0));
  const paymentsOf = (stayId: string) => l.cloud.payments.filter((p) => p.stayId === stayId);

  // ------------------------------------------------------------------ M1: doors open only on paid, live authority
  const stays = new Map(l.cloud.stays.map((s) => [s.id, s]));
  type Subject =
    | { kind: 'stay'; id: string; personId: string }
    | { kind: 'walk_in'; id: string; personId: string }
    | { kind: 'membership'; id: string; personId: string };
  const subjectOfKey = new Map<string, Subject>();
  for (const s of l.cloud.stays) subjectOfKey.set(s.keyId ?? `key_${s.id}`, { kind: 'stay', id: s.id, personId: s.personId });
  for (const w of l.cloud.walkIns) if (w.keyId !== null) subjectOfKey.set(w.keyId, { kind: 'walk_in', id: w.id, personId: w.personId });
  for (const m of l.cloud.memberships) {
    // a membership's keys are key_<id> and key_<id>_<n> after a resume; the row names only the latest
    if (m.keyId !== null) subjectOfKey.set(m.keyId, { kind: 'membership', id: m.id, personId: m.personId });
  }
  const membershipOfKey = (keyId: string): Subject | undefined => {
    const hit = subjectOfKey.get(keyId);
    if (hit) return hit;
    const m = l.cloud.memberships.find((x) => keyId === `key_${x.id}` || keyId.startsWith(`key_${x.id}_`));
    return m ? { kind: 'membership', id: m.id, personId: m.personId } : undefined;
  };

  // when each subject's authority ended, as the cloud accepted it (the runner's wall clock)
  const endedAt = new Map<string, { wall: number; line: number; why: string }>();
  const noteEnd = (id: string | null, wall: number, line: number, why: string) => {
    if (id === null) return;
    const prev = endedAt.get(id);
    if (prev === undefined || wall < prev.wall) endedAt.set(id, { wall, line, why });
  };
  const blocked = new Map<string, Window[]>();
  const openBlock = new Map<string, { from: number; line: number }>();
  for (const e of api) {
    if (!accepted(e)) continue;
    const op = str(e.op);
    if (op === 'cancel-stay') noteEnd(str(e.stayId), e.wall, e.i, 'cancelled');
    if (op === 'cancel-walk-in') noteEnd(str(e.walkInId), e.wall, e.i, 'cancelled');
    if (op === 'force-cancel') noteEnd(str(e.membershipId), e.wall, e.i, 'force-cancelled');
    if (op === 'block') {
      const p = str(e.personId);
      if (p !== null && !openBlock.has(p)) openBlock.set(p, { from: e.wall, line: e.i });
    }
    if (op === 'unblock') {
      const p = str(e.personId);
      const b = p === null ? undefined : openBlock.get(p);
      if (p !== null && b !== undefined) {
        // the unblock counts from when it was sent: a door may open once it was asked for
        blocked.set(p, [...(blocked.get(p) ?? []), { from: b.from, to: num(e.wallSend) ?? e.wall, line: b.line }]);
        openBlock.delete(p);
      }
    }
  }
  for (const [p, b] of openBlock) blocked.set(p, [...(blocked.get(p) ?? []), { from: b.from, to: Infinity, line: b.line }]);
  // a suspension ends the key it revoked; a resume issues a fresh key (key_<id>_<n+1>) that opens again
  for (const e of history)
    if (e.what === 'membership-observed' && e.suspended === true && str(e.keyId) !== null)
      noteEnd(`key:${str(e.keyId)}`, e.wall, e.i, 'suspended');

  for (const g of l.gateways) {
    for (const d of g.accessLog) {
      if (!d.allowed || d.keyId === null) continue;
      const subject = d.keyId.startsWith('key_') ? membershipOfKey(d.keyId) : undefined;
      if (subject === undefined) continue; // a key the money workload did not make (a door-side key)
      count('M1 door openings checked');
      const where = `${g.id}/${d.lockId}`;
      if (subject.kind === 'stay') {
        const s = stays.get(subject.id);
        const paid = paymentsOf(subject.id).reduce((sum, p) => sum + receivedAt(p.intentId), 0);
        if (s === undefined || s.keyId === null || !(DELIVERED_STAY.has(s.status) || s.status === 'cancelled'))
          fail('M1', `${where} opened for stay ${subject.id}, which was never confirmed (status ${s?.status ?? 'unknown'})`);
        else if (paid < s.amount) fail('M1', `${where} opened for stay ${subject.id}, paid ${paid} of ${s.amount} at Stripe`);
      }
      if (subject.kind === 'walk_in') {
        const w = l.cloud.walkIns.find((x) => x.id === subject.id);
        if (w === undefined || receivedAt(w.intentId) < w.amount || !(w.status === 'paid' || w.status === 'cancelled'))
          fail('M1', `${where} opened for walk-in ${subject.id}, which was never paid (status ${w?.status ?? 'unknown'})`);
      }
      if (subject.kind === 'membership') {
        const m = l.cloud.memberships.find((x) => x.id === subject.id);
        const sub = m?.subscriptionId ? l.stripe.subscriptions.find((x) => x.id === m.subscriptionId) : undefined;
        if (m === undefined || sub === undefined || sub.status === 'incomplete' || m.status === 'applied' || m.status === 'rejected')
          fail('M1', `${where} opened for membership ${subject.id}, which was never paid (status ${m?.status ?? 'unknown'})`);
      }
      const ends = [endedAt.get(subject.id), endedAt.get(`key:${d.keyId}`)].filter((x) => x !== undefined);
      const end = ends.sort((x, y) => x.wall - y.wall)[0];
      if (end !== undefined && d.at > end.wall + bound)
        fail(
          'M1',
          `${where} opened for ${subject.kind} ${subject.id} ${Math.round(d.at - end.wall)} ms after it was ${end.why} (bound ${bound} ms)`,
          [end.line],
        );
      for (const w of blocked.get(subject.personId) ?? [])
        if (d.at > w.from + bound && d.at < w.to)
          fail(
            'M1',
            `${where} opened for ${subject.kind} ${subject.id} of ${subject.personId}, blocked since ${Math.round(d.at - w.from)} ms (bound ${bound} ms)`,
            [w.line],
          );
    }
  }

  // ------------------------------------------------------------------ M2: money received − refunded = what the policy keeps
  const checkMoneyOf = (kind: string, id: string, intentIds: readonly (string | null)[], kept: number) => {
    count('M2 subjects checked');
    const received = intentIds.reduce((s, i) => s + receivedAt(i), 0);
    const refunded = intentIds.reduce((s, i) => s + refundedAt(i), 0);
    if (received - refunded !== kept)
      fail('M2', `${kind} ${id}: received ${received} − refunded ${refunded} = ${received - refunded} at Stripe, its policy keeps ${kept}`);
  };
  for (const s of l.cloud.stays) {
    if (s.status === 'pending') continue; // M4's: nothing may stay pending past its hold
    checkMoneyOf(
      'stay',
      s.id,
      paymentsOf(s.id).map((p) => p.intentId),
      keptOfStay(s),
    );
  }
  for (const w of l.cloud.walkIns) if (w.status !== 'pending') checkMoneyOf('walk-in', w.id, [w.intentId], keptOfWalkIn(w));
  // a membership's money is Stripe's invoices alone (the cloud keeps no payment rows for it; M3 keeps the states in step)
  const money: MoneyOf = (intentId) => ({ received: receivedAt(intentId), refunded: refundedAt(intentId) });
  const subscriptionOf = new Map(l.stripe.subscriptions.map((x) => [x.id, x]));
  for (const m of l.cloud.memberships) {
    const paid = m.subscriptionId === null ? undefined : subscriptionOf.get(m.subscriptionId)?.paid;
    if (paid === undefined) continue; // never billed (M3 says whether it should have been), or a run recorded before invoices were read
    checkMoneyOf(
      'membership',
      m.id,
      paid.map((p) => p.intentId),
      keptOfMembership(m, paid, money),
    );
  }
  // the cloud's ledger says what Stripe says
  for (const p of l.cloud.payments) {
    count('M2 payments compared with Stripe');
    if (p.amountReceived !== receivedAt(p.intentId))
      fail('M2', `payment ${p.id}: the cloud records ${p.amountReceived} received, Stripe ${receivedAt(p.intentId)}`);
    if (p.amountRefunded !== refundedAt(p.intentId))
      fail('M2', `payment ${p.id}: the cloud records ${p.amountRefunded} refunded, Stripe ${refundedAt(p.intentId)}`);
  }
  // every refund once: one Stripe refund per refund row of ours, never two under one of our ids
  const byOurId = new Map<string, string[]>();
  for (const r of l.stripe.refunds) {
    const ours = r.metadata.refund_id;
    if (ours !== undefined && r.status !== 'failed') byOurId.set(ours, [...(byOurId.get(ours) ?? []), r.id]);
  }
  for (const [ours, ids] of byOurId) {
    count('M2 refunds checked');
    if (ids.length > 1) fail('M2', `refund ${ours} was made ${ids.length} times at Stripe (${ids.join(', ')})`);
  }
  const recorded = new Set(l.cloud.refunds.map((r) => r.stripeRefundId).filter((x): x is string => x !== null));
  const ourIntents = new Set(l.cloud.payments.map((p) => p.intentId).filter((x): x is string => x !== null));
  for (const r of l.stripe.refunds)
    if (r.paymentIntent !== null && ourIntents.has(r.paymentIntent) && r.status === 'succeeded' && !recorded.has(r.id))
      fail('M2', `Stripe refund ${r.id} of ${r.paymentIntent} (${r.amount}) is not in the cloud's ledger`);

  // ------------------------------------------------------------------ M3: a membership agrees with its subscription
  const subs = new Map(l.stripe.subscriptions.map((s) => [s.id, s]));
  for (const m of l.cloud.memberships) {
    count('M3 memberships checked');
    if (m.subscriptionId === null) {
      if (m.status !== 'applied' && m.status !== 'rejected') fail('M3', `membership ${m.id} is ${m.status} with no subscription`);
      continue;
    }
    const sub = subs.get(m.subscriptionId);
    if (sub === undefined) {
      fail('M3', `membership ${m.id}: its subscription ${m.subscriptionId} is not at Stripe`);
      continue;
    }
    if (!membershipAgrees(m.status, sub.status, sub.cancelAtPeriodEnd))
      fail(
        'M3',
        `membership ${m.id} is ${m.status} locally, its subscription ${sub.id} is ${sub.status}${sub.cancelAtPeriodEnd ? ' (cancel at period end)' : ''} at Stripe`,
      );
    if (m.cancelAtPeriodEnd !== sub.cancelAtPeriodEnd && sub.status !== 'canceled')
      fail('M3', `membership ${m.id}: cancel_at_period_end ${m.cancelAtPeriodEnd} locally, ${sub.cancelAtPeriodEnd} at Stripe`);
  }

  // ------------------------------------------------------------------ M4: notices once; nothing left non-terminal
  const kills = history.filter((e) => e.what === 'fault' && e.kind === 'kill-cloud').map((e) => e.wall);
  const deliveries = new Map<string, number[]>();
  for (const d of l.deliveries) deliveries.set(d.dedupeKey, [...(deliveries.get(d.dedupeKey) ?? []), d.wall]);
  for (const [key, walls] of deliveries) {
    count('M4 notices checked');
    const sorted = [...walls].sort((a, b) => a - b);
    const first = sorted[0] ?? 0;
    const last = sorted[sorted.length - 1] ?? 0;
    // at least once: a cloud killed between the send and its mark sends again (docs/notifications.md)
    if (sorted.length > 1 && !kills.some((k) => k >= first && k <= last))
      fail('M4', `notice ${key} was sent ${sorted.length} times with no crash of the cloud in between`);
  }
  for (const n of l.cloud.notifications) {
    if (n.status === 'sent' && !deliveries.has(n.dedupeKey) && l.deliveries.length > 0)
      fail('M4', `notice ${n.dedupeKey} is marked sent, the receiver never got it`);
    if (n.status === 'pending' || n.status === 'sending') fail('M4', `notice ${n.dedupeKey} is still ${n.status} after healing`);
  }
  const late = (deadline: number) => l.collectedAt > deadline + deadlineSlack;
  for (const s of l.cloud.stays) {
    count('M4 deadlines checked');
    if (s.status === 'pending' && late(s.holdUntil))
      fail('M4', `stay ${s.id} is still pending ${l.collectedAt - s.holdUntil} ms past its hold`);
  }
  for (const w of l.cloud.walkIns)
    if (w.status === 'pending' && late(w.holdUntil)) fail('M4', `walk-in ${w.id} is still pending past its hold`);
  for (const p of l.cloud.payments)
    if (p.status === 'refund_pending' || p.status === 'processing') fail('M4', `payment ${p.id} is still ${p.status} after healing`);
  for (const r of l.cloud.refunds) if (r.status === 'pending') fail('M4', `refund ${r.id} is still pending after healing`);
  for (const q of l.cloud.open)
    if (late(q.since)) fail('M4', `${q.queue} ${q.kind} ${q.id} is neither done nor dead ${l.collectedAt - q.since} ms after it was due`);

  // ------------------------------------------------------------------ M5: every answer documented, with a code, never a 500
  for (const e of api) {
    const status = num(e.status);
    if (status === null || status === 0) {
      count('M5 calls without an answer');
      continue;
    }
    count('M5 answers checked');
    if (!DOCUMENTED_STATUSES.has(status)) fail('M5', `${String(e.method)} ${String(e.path)} answered ${status}`, [e.i]);
    else if (status >= 300 && str(e.code) === null)
      fail('M5', `${String(e.method)} ${String(e.path)} answered ${status} without a code`, [e.i]);
    else if (e.method !== 'GET' && str(e.code) === null && e.op !== 'stripe')
      fail('M5', `${String(e.method)} ${String(e.path)} answered ${status} without a code`, [e.i]);
  }

  // ------------------------------------------------------------------ M6: the booking's correlation id reaches its key grant
  const cloudKeys = new Map(l.cloud.keys.map((k) => [k.id, k]));
  const gwKeys = new Map(l.gateways.flatMap((g) => g.keys.map((k) => [k.keyId, k] as const)));
  for (const e of api) {
    if (e.op !== 'book' || (e.status !== 202 && e.status !== 200)) continue;
    const stayId = str(e.stayId);
    const cid = str(e.cid);
    const s = stayId === null ? undefined : stays.get(stayId);
    if (s === undefined || cid === null || s.keyId === null) continue;
    count('M6 bookings with a key checked');
    // a stay's and a key's row carry the cid of their latest verb (a cancellation has its own), so
    // they are compared only while the confirmation is the latest; the gateway's grant keeps it for good
    if (s.status === 'confirmed' && s.cid !== cid) fail('M6', `stay ${s.id} carries cid ${s.cid}, its booking sent ${cid}`, [e.i]);
    const ck = cloudKeys.get(s.keyId);
    if (ck !== undefined && ck.status === 'active' && ck.cid !== cid)
      fail('M6', `key ${s.keyId} carries cid ${String(ck.cid)}, its booking sent ${cid}`, [e.i]);
    const gk = gwKeys.get(s.keyId);
    if (gk === undefined) fail('M6', `the gateway holds no grant of ${s.keyId}`, [e.i]);
    else if (gk.grantCid !== cid)
      fail('M6', `the gateway's grant of ${s.keyId} carries cid ${String(gk.grantCid)}, its booking sent ${cid}`, [e.i]);
  }
  return { checks, violations };
}
