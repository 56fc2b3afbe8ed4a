import { randomBytes } from 'node:crypto';
import type { GatewayNode } from '../cluster.js';
import type { History } from '../history.js';
import { pick } from '../prng.js';
import type { MoneyCluster } from './system.js';

/**
 * The money workload (docs/reliability.md, "Money"): stays booked with and without a deposit, paid,
 * declined and paid again, cancelled pending and confirmed, failed by an intent cancelled at Stripe,
 * refunded in Stripe directly (as the dashboard would), left to expire; memberships applied,
 * approved, paid, self-cancelled, force-cancelled, gone past due, suspended and resumed; walk-ins
 * sold, paid and cancelled; people blocked and unblocked; and PINs presented at the doors. Every
 * admin API call is an `api` line of the history (status 0: no answer), every call to the local
 * Stripe a `stripe` line, every door decision a `present` line.
 */
export const PRICE = 10_000;
export const DEPOSIT = 3000;
export const WALK_IN_PRICE = 1500;
export const PLAN_PRICE = 8000;
const DAY = 86_400_000;

export interface BookedStay {
  readonly stayId: string;
  readonly personId: string;
  readonly pin: string;
  readonly lockId: string;
  readonly underway: boolean;
  readonly intents: string[];
  status: string;
}

interface WalkIn {
  readonly id: string;
  readonly personId: string;
  readonly pin: string;
  intentId: string | null;
  status: string;
}

interface Membership {
  readonly id: string;
  readonly personId: string;
  readonly pin: string;
  subscriptionId: string | null;
  invoiceId: string | null;
  status: string;
  /** an approval answered without an outcome (no answer, or 5xx): Stripe may hold its subscription */
  approveUnsure?: boolean;
}

interface Json {
  readonly [k: string]: unknown;
}
const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const codeOf = (b: unknown): string | null => (isObj(b) && typeof b.code === 'string' ? b.code : null);

/** The site's calendar date `days` after today there. */
export const siteDate = (now: number, tz: string, days = 0): string => {
  const today = new Intl.DateTimeFormat('en-CA', { timeZone: tz }).format(now);
  return new Date(Date.parse(`${today}T00:00:00Z`) + days * DAY).toISOString().slice(0, 10);
};

export const PEOPLE = ['guest-1', 'guest-2', 'guest-3', 'guest-4'] as const;
/** Rooms on the gateway's first locks; the lounge plan (memberships and walk-ins) on the last. */
export const ROOM_LOCKS = ['L1', 'L2', 'L3', 'L4'] as const;
export const LOUNGE_LOCK = 'L5';
export const LOCKS = ROOM_LOCKS.length + 1;
export const PLAN_ID = 'lounge';

export class MoneyWorkload {
  readonly stays: BookedStay[] = [];
  readonly walkIns: WalkIn[] = [];
  readonly memberships: Membership[] = [];
  readonly blocked = new Set<string>();
  readonly #pins = new Set<string>();
  /** bookings whose answer was lost or refused for now: repeated with the same key */
  readonly #retry: { key: string; cid: string; body: Json; lockId: string; pin: string; underway: boolean }[] = [];
  #n = 0;
  ops = 0;
  /** the checker's propagation bound, for scenarios that must wait past it */
  propagationMs = 12_000;

  constructor(
    readonly c: MoneyCluster,
    readonly h: History,
    readonly r: () => number,
  ) {}

  get gw(): GatewayNode {
    const g = this.c.gateways[0];
    if (g === undefined) throw new Error('no gateway');
    return g;
  }

  get tz(): string {
    return 'Asia/Tokyo';
  }

  #pin(): string {
    for (;;) {
      const pin = String(10_000_000 + Math.floor(this.r() * 89_999_999));
      if (!this.#pins.has(pin)) {
        this.#pins.add(pin);
        return pin;
      }
    }
  }

  /** One admin API call, recorded. Answers without a body or no answer at all (status 0) are recorded too. */
  async call(
    op: string,
    method: string,
    path: string,
    body?: unknown,
    extra: Record<string, unknown> = {},
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: unknown }> {
    const tSend = this.h.now();
    const wallSend = Date.now();
    try {
      const res = await fetch(`${this.c.apiUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.c.token}`,
          ...(body !== undefined && { 'content-type': 'application/json' }),
          ...(method === 'POST' && { 'idempotency-key': `mw-${randomBytes(8).toString('hex')}` }),
          ...headers,
        },
        ...(body !== undefined && { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // keep the text
      }
      // a booking's answer names its stay: the checker follows its correlation id to the key (M6)
      const stayId = isObj(parsed) && isObj(parsed.stay) && typeof parsed.stay.id === 'string' ? parsed.stay.id : null;
      this.h.add('workload', 'api', {
        op,
        method,
        path,
        status: res.status,
        code: codeOf(parsed),
        tSend,
        wallSend,
        ...(stayId !== null && { stayId }),
        ...extra,
      });
      return { status: res.status, body: parsed };
    } catch (e) {
      this.h.add('workload', 'api', { op, method, path, status: 0, code: null, error: String(e), tSend, wallSend, ...extra });
      return { status: 0, body: null };
    }
  }

  /** A call to the local Stripe as a guest's browser or the dashboard makes it. */
  async stripe(
    op: string,
    method: string,
    path: string,
    form?: Record<string, string>,
    extra: Record<string, unknown> = {},
  ): Promise<number> {
    const local = this.c.stripe;
    // the control routes take JSON, the v1 API forms
    const control = path.startsWith('/_local/');
    try {
      const res = await fetch(`${local.url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${local.secretKey}`,
          ...(form !== undefined && { 'content-type': control ? 'application/json' : 'application/x-www-form-urlencoded' }),
        },
        ...(form !== undefined && { body: control ? JSON.stringify(form) : new URLSearchParams(form).toString() }),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // keep the text
      }
      const err = isObj(parsed) && isObj(parsed.error) ? parsed.error : null;
      this.h.add('workload', 'stripe', {
        op,
        method,
        path,
        status: res.status,
        stripeStatus: isObj(parsed) ? (parsed.status ?? null) : null,
        error: err?.code ?? null,
        ...extra,
      });
      return res.status;
    } catch (e) {
      this.h.add('workload', 'stripe', { op, method, path, status: 0, error: String(e), ...extra });
      return 0;
    }
  }

  /** The site, its people, rooms, the lounge plan and settings: a policy that refunds everything. */
  async setup(): Promise<void> {
    const site = this.c.siteId;
    for (const p of PEOPLE) await this.call('setup', 'POST', '/people', { id: p, name: p, siteId: site });
    for (const [i, l] of ROOM_LOCKS.entries())
      await this.call('setup', 'POST', '/rooms', { id: `room-${i + 1}`, siteId: site, name: `Room ${i + 1}`, doors: [this.gw.doors[l]] });
    await this.call('setup', 'PUT', `/sites/${site}/stay-settings`, {
      holdMinutes: 1,
      checkInTime: '00:00',
      checkOutTime: '23:59',
      walkInsAllowed: true,
      cancellationPolicy: { tiers: [{ minDaysBefore: 0, refundPercent: 100 }], noShowRefundPercent: 100 },
    });
    await this.call('setup', 'POST', '/plans', {
      id: PLAN_ID,
      siteId: site,
      name: 'Lounge',
      amount: PLAN_PRICE,
      currency: 'jpy',
      interval: 'month',
      doors: [this.gw.doors[LOUNGE_LOCK]],
      walkInAmount: WALK_IN_PRICE,
      graceSeconds: 1,
    });
  }

  async step(): Promise<void> {
    this.ops++;
    const x = this.r();
    if (x < 0.18) return void (await this.book());
    if (x < 0.36) return this.pay();
    if (x < 0.44) return this.cancelStay();
    if (x < 0.47) return this.failAtStripe();
    if (x < 0.5) return this.refundInStripe();
    if (x < 0.66) return void (await this.present());
    if (x < 0.7) return this.blockOrUnblock();
    if (x < 0.78) return this.walkIn();
    if (x < 0.9) return this.membership();
    return this.observe();
  }

  // ---------------------------------------------------------------- stays

  async book(opts: { personId?: string; underway?: boolean; deposit?: boolean } = {}): Promise<BookedStay | null> {
    const again = this.#retry.length > 0 && this.r() < 0.5 ? this.#retry.shift() : undefined;
    const underway = again?.underway ?? opts.underway ?? this.r() < 0.6;
    const lockId = again?.lockId ?? pick(this.r, ROOM_LOCKS);
    const room = `room-${ROOM_LOCKS.indexOf(lockId as (typeof ROOM_LOCKS)[number]) + 1}`;
    const now = Date.now();
    const offset = underway ? 0 : 5 + Math.floor(this.r() * 300);
    const pin = again?.pin ?? this.#pin();
    const body: Json = again?.body ?? {
      personId: opts.personId ?? pick(this.r, PEOPLE),
      roomId: room,
      checkIn: siteDate(now, this.tz, offset),
      checkOut: siteDate(now, this.tz, offset + 1),
      amount: PRICE,
      currency: 'jpy',
      ...((opts.deposit ?? this.r() < 0.5) && { deposit: DEPOSIT }),
      credential: { type: 'pin', value: pin },
    };
    const key = again?.key ?? `book-${this.c.o.seed}-${++this.#n}`;
    const cid = again?.cid ?? `mc-${this.c.o.seed}-${this.#n}-${randomBytes(3).toString('hex')}`;
    const res = await this.call(
      'book',
      'POST',
      '/stays',
      body,
      { cid, idempotencyKey: key, personId: body.personId, underway, repeat: again !== undefined },
      {
        'idempotency-key': key,
        'x-correlation-id': cid,
      },
    );
    const b = isObj(res.body) ? res.body : {};
    const stay = isObj(b.stay) ? b.stay : null;
    if ((res.status === 202 || res.status === 200) && stay && typeof stay.id === 'string') {
      const stayId = stay.id;
      const payments = Array.isArray(b.payments) ? b.payments.filter(isObj) : [];
      const intents = payments.map((p) => p.intentId).filter((i): i is string => typeof i === 'string');
      const existing = this.stays.find((s) => s.stayId === stayId);
      if (existing) return existing;
      const s: BookedStay = { stayId, personId: String(body.personId), pin, lockId, underway, intents, status: 'pending' };
      this.stays.push(s);
      return s;
    }
    if (res.status === 0 || res.status === 503 || res.status === 409) {
      if (codeOf(res.body) !== 'ROOM_UNAVAILABLE') this.#retry.push({ key, cid, body, lockId, pin, underway });
    }
    return null;
  }

  /** The guest pays one unpaid intent of a pending stay (or a walk-in), sometimes with a card that is declined. */
  async pay(): Promise<void> {
    const pendingWalkIn = this.walkIns.filter((w) => w.status === 'pending' && w.intentId !== null);
    if (pendingWalkIn.length > 0 && this.r() < 0.25) {
      const w = pick(this.r, pendingWalkIn);
      await this.payIntent(w.intentId!, this.r() < 0.2 ? 'pm_card_chargeDeclined' : 'pm_card_visa', { walkInId: w.id });
      return;
    }
    const pending = this.stays.filter((s) => s.status === 'pending' && s.intents.length > 0);
    if (pending.length === 0) return;
    const s = pick(this.r, pending);
    const unpaid = s.intents.filter((i) => this.c.stripe.paymentIntent(i)?.status !== 'succeeded');
    if (unpaid.length === 0) return;
    const card = this.r() < 0.2 ? 'pm_card_visa_chargeDeclined' : 'pm_card_visa';
    // a stay with a deposit pays it first; the balance may never come (the hold then expires)
    await this.payIntent(unpaid[0]!, card, { stayId: s.stayId });
  }

  payIntent(intentId: string, card: string, extra: Record<string, unknown> = {}): Promise<number> {
    return this.stripe('pay', 'GET', `/_local/pay/${intentId}?card=${card}`, undefined, { intentId, card, ...extra });
  }

  async cancelStay(s?: BookedStay, reason?: string): Promise<void> {
    const open = this.stays.filter((x) => x.status === 'pending' || x.status === 'confirmed');
    const stay = s ?? (open.length > 0 ? pick(this.r, open) : undefined);
    if (!stay) return;
    // a guest who cancels a stay under way cancels after its check-in (the site checks in from 00:00): no tier of
    // the policy covers that (days before check-in < 0), so the site keeps what was paid, which the checker's
    // everything-refunded policy does not model; such stays are cancelled by the desk
    const guest = this.r() < 0.5 && !stay.underway;
    const res = await this.call(
      'cancel-stay',
      'POST',
      `/stays/${stay.stayId}/cancel`,
      { reason: reason ?? (guest ? 'guest_cancelled' : 'staff_cancelled') },
      { stayId: stay.stayId },
    );
    if (res.status === 202 || codeOf(res.body) === 'STAY_ALREADY_CANCELLED' || codeOf(res.body) === 'STAY_ALREADY_ENDED')
      stay.status = 'ended';
    // support refunds it in the dashboard too, while the cloud's own refund job is still queued: the race
    if (res.status === 202 && this.r() < 0.3) await this.refundInStripe(stay);
  }

  /** The intent of a pending stay is cancelled at Stripe (the dashboard): the stay fails, what was paid comes back. */
  async failAtStripe(s?: BookedStay): Promise<void> {
    const pending = this.stays.filter((x) => x.status === 'pending' && x.intents.length > 0);
    const stay = s ?? (pending.length > 0 ? pick(this.r, pending) : undefined);
    if (!stay) return;
    const unpaid = stay.intents.filter((i) => this.c.stripe.paymentIntent(i)?.status !== 'succeeded');
    const target = unpaid.at(-1);
    if (target === undefined) return;
    await this.stripe(
      'dashboard-cancel-intent',
      'POST',
      `/v1/payment_intents/${target}/cancel`,
      {},
      { stayId: stay.stayId, intentId: target },
    );
  }

  /**
   * Money a stay paid is refunded in Stripe directly (the dashboard, support). A live stay is refunded in
   * full and ends (payment_refunded). A stay that is over — cancelled, or failed by an intent cancelled at
   * Stripe — has the cloud's own refund on its way: the dashboard races it, in full or in part, and the
   * cloud must then give back only what is left (never twice, never a dead refund job).
   */
  async refundInStripe(s?: BookedStay): Promise<void> {
    const succeeded = (i: string) => this.c.stripe.paymentIntent(i)?.status === 'succeeded';
    const over = (x: BookedStay) => x.status === 'ended' || x.intents.some((i) => this.c.stripe.paymentIntent(i)?.status === 'canceled');
    const paid = this.stays.filter((x) => x.intents.length > 0 && (x.intents.every(succeeded) || (over(x) && x.intents.some(succeeded))));
    const stay = s ?? (paid.length > 0 ? pick(this.r, paid) : undefined);
    if (!stay) return;
    const racing = over(stay);
    for (const i of stay.intents) {
      const pi = this.c.stripe.paymentIntent(i);
      if (!pi || pi.status !== 'succeeded' || pi.amount_received === 0) continue;
      const part = racing && this.r() < 0.5 ? Math.max(1, Math.floor(pi.amount_received / 3)) : null;
      await this.stripe(
        'dashboard-refund',
        'POST',
        '/v1/refunds',
        { payment_intent: i, ...(part !== null && { amount: String(part) }) },
        { stayId: stay.stayId, intentId: i, racing, ...(part !== null && { amount: part }) },
      );
    }
  }

  // ---------------------------------------------------------------- doors

  async present(which?: { pin: string; lockId: string; subject: string }): Promise<Json> {
    const candidates = [
      ...this.stays.filter((s) => s.underway).map((s) => ({ pin: s.pin, lockId: s.lockId, subject: s.stayId })),
      ...this.walkIns.map((w) => ({ pin: w.pin, lockId: LOUNGE_LOCK, subject: w.id })),
      ...this.memberships.map((m) => ({ pin: m.pin, lockId: LOUNGE_LOCK, subject: m.id })),
    ];
    const p = which ?? (candidates.length > 0 ? pick(this.r, candidates) : undefined);
    if (!p) return {};
    const tSend = this.h.now();
    const wallSend = Date.now();
    const a = await this.c.present(this.gw, p.lockId, p.pin);
    const res = isObj(a.result) ? a.result : null;
    const d = res && isObj(res.decision) ? res.decision : null;
    this.h.add('workload', 'present', {
      gatewayId: this.gw.id,
      lockId: p.lockId,
      subject: p.subject,
      tSend,
      wallSend,
      allowed: d?.allowed ?? null,
      code: d?.code ?? null,
      keyId: d?.keyId ?? null,
      error: a.error ?? null,
    });
    return d ?? {};
  }

  async blockOrUnblock(personId = pick(this.r, PEOPLE)): Promise<void> {
    const site = this.c.siteId;
    if (this.blocked.has(personId)) {
      const res = await this.call('unblock', 'DELETE', `/sites/${site}/blocked-people/${personId}`, undefined, { personId });
      if (res.status === 200) this.blocked.delete(personId);
    } else {
      const res = await this.call('block', 'PUT', `/sites/${site}/blocked-people/${personId}`, { reason: 'chaos' }, { personId });
      if (res.status === 200) this.blocked.add(personId);
    }
  }

  /** Approve an application; one answered without an outcome is marked for the desk to repeat. */
  async approve(m: Membership): Promise<void> {
    const res = await this.call('approve', 'POST', `/memberships/${m.id}/approve`, undefined, { membershipId: m.id });
    const b = isObj(res.body) ? res.body : {};
    m.approveUnsure = res.status === 0 || res.status >= 500;
    if (res.status === 200 && typeof b.subscriptionId === 'string') {
      m.subscriptionId = b.subscriptionId;
      m.invoiceId = typeof b.firstInvoiceId === 'string' ? b.firstInvoiceId : null;
      m.status = 'approved';
    }
  }

  // ---------------------------------------------------------------- walk-ins

  async cancelWalkIn(w: { id: string; status: string }): Promise<void> {
    const res = await this.call('cancel-walk-in', 'POST', `/walk-ins/${w.id}/cancel`, { reason: 'staff_cancelled' }, { walkInId: w.id });
    if (res.status === 200) w.status = 'cancelled';
  }

  async walkIn(): Promise<void> {
    const open = this.walkIns.filter((w) => w.status === 'pending' || w.status === 'paid');
    if (open.length > 0 && this.r() < 0.3) {
      await this.cancelWalkIn(pick(this.r, open));
      return;
    }
    const id = `wi-${this.c.o.seed}-${++this.#n}`;
    const pin = this.#pin();
    const personId = pick(this.r, PEOPLE);
    const res = await this.call(
      'walk-in',
      'POST',
      '/walk-ins',
      { id, siteId: this.c.siteId, planId: PLAN_ID, personId, credential: { type: 'pin', value: pin } },
      { walkInId: id, personId },
    );
    const b = isObj(res.body) ? res.body : {};
    if (res.status === 202 || res.status === 200)
      this.walkIns.push({ id, personId, pin, intentId: typeof b.intentId === 'string' ? b.intentId : null, status: 'pending' });
  }

  // ---------------------------------------------------------------- memberships

  async membership(): Promise<void> {
    const x = this.r();
    const by = (st: string) => this.memberships.filter((m) => m.status === st);
    if (x < 0.25 || this.memberships.length === 0) {
      const id = `mem-${this.c.o.seed}-${++this.#n}`;
      const pin = this.#pin();
      const personId = pick(this.r, PEOPLE);
      const res = await this.call(
        'apply',
        'POST',
        '/memberships',
        { id, planId: PLAN_ID, personId, credential: { type: 'pin', value: pin } },
        { membershipId: id },
      );
      if (res.status === 201 || res.status === 200)
        this.memberships.push({ id, personId, pin, subscriptionId: null, invoiceId: null, status: 'applied' });
      return;
    }
    if (x < 0.4 && by('applied').length > 0) {
      await this.approve(pick(this.r, by('applied')));
      return;
    }
    if (x < 0.55 && by('approved').length > 0) {
      const m = pick(this.r, by('approved'));
      if (m.invoiceId === null) return;
      const st = await this.stripe('pay-invoice', 'GET', `/_local/invoices/${m.invoiceId}/pay?card=pm_card_visa`, undefined, {
        membershipId: m.id,
      });
      if (st === 200) m.status = 'paid';
      return;
    }
    const paid = by('paid');
    if (paid.length === 0) return;
    const m = pick(this.r, paid);
    if (x < 0.65) {
      const res = await this.call('self-cancel', 'POST', `/memberships/${m.id}/self-cancel`, {}, { membershipId: m.id });
      if (res.status === 200) m.status = 'ending';
    } else if (x < 0.75) {
      const res = await this.call('force-cancel', 'POST', `/memberships/${m.id}/force-cancel`, { note: 'chaos' }, { membershipId: m.id });
      if (res.status === 200) m.status = 'ended';
    } else if (m.subscriptionId !== null) {
      // the period boundary: renewed, or its payment failed (past_due → suspended after the grace → resumed when paid)
      const outcome = this.r() < 0.5 ? 'failed' : 'paid';
      await this.stripe(
        'advance',
        'POST',
        `/_local/subscriptions/${m.subscriptionId}/advance`,
        { outcome },
        { membershipId: m.id, outcome },
      );
    }
  }

  /** Reads a membership as the desk would: a suspension seen here ends that key's authority (M1). */
  async observe(): Promise<void> {
    const live = this.memberships.filter((m) => m.status === 'paid');
    if (live.length === 0) return;
    const m = pick(this.r, live);
    const res = await this.call('get-membership', 'GET', `/memberships/${m.id}`);
    const b = isObj(res.body) ? res.body : null;
    if (res.status === 200 && b)
      this.h.add('workload', 'membership-observed', {
        membershipId: m.id,
        status: b.membershipStatus ?? null,
        suspended: b.suspended === true,
        keyId: b.keyId ?? null,
      });
  }

  /** The stays' statuses as the cloud has them now (the workload's own view, not the checker's). */
  async refresh(): Promise<void> {
    for (const s of this.stays.filter((x) => x.status === 'pending' || x.status === 'confirmed')) {
      const res = await this.call('get-stay', 'GET', `/stays/${s.stayId}`);
      const b = isObj(res.body) && isObj(res.body.stay) ? res.body.stay : null;
      if (b && typeof b.status === 'string') s.status = b.status === 'pending' || b.status === 'confirmed' ? b.status : 'ended';
    }
    for (const w of this.walkIns.filter((x) => x.status === 'pending' || x.status === 'paid')) {
      const res = await this.call('get-walk-in', 'GET', `/walk-ins/${w.id}`);
      const b = isObj(res.body) ? (isObj(res.body.walkIn) ? res.body.walkIn : res.body) : null;
      if (b && typeof b.walkInStatus === 'string') w.status = b.walkInStatus;
      if (b && typeof b.intentId === 'string') w.intentId = b.intentId;
    }
  }
}
