import { pgBackends } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadStaySettings, saveStaySettings } from '../src/adapters/db/stays.js';
import { loadWalkIn, quotaUsed } from '../src/adapters/db/walk-ins.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import { getKey } from '../src/app/keys.js';
import { createPlan } from '../src/app/memberships.js';
import { createPerson } from '../src/app/registry.js';
import type { StayDeps } from '../src/app/stays.js';
import { blockPerson, cancelWalkIn, createWalkIn } from '../src/app/walk-ins.js';
import { localDateOf } from '../src/domain/nights.js';
import { T0, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { startInbox } from './stays-harness.js';

/**
 * A walk-in's hold decided on Stripe's own intent, from outside: the real
 * `stripe` SDK against the local Stripe, its webhooks signed and sent
 * through the verified inbox and the billing worker. A pass paid at Stripe
 * whose success webhook was dropped is confirmed at its hold from the intent
 * re-read (its key issued once; the late webhook changes nothing); an intent
 * still `processing` holds the expiry; the desk can cancel a pending
 * walk-in (its intent cancelled, money that landed meanwhile refunded).
 */
const WEBHOOK_SECRET = 'whsec_tobira_walk_in_hold';
const HOLD_MS = 30 * 60_000;

describe.each(pgBackends())('a walk-in at and before its hold on %s', (pgBackend) => {
  let t: TestDb;
  let local: StripeLocal;
  let stripe: Stripe;
  let inbox: Awaited<ReturnType<typeof startInbox>>;
  let base: ReturnType<typeof deps>;
  let s: Awaited<ReturnType<typeof seed>>;
  let pins = 0;
  const pin = () => String(40_000_000 + ++pins);
  const d = (over: Partial<StayDeps> = {}): StayDeps => ({ ...base, stripe, newPin: pin, ...over });
  const settle = async () => {
    await local.webhooks.idle();
    return new BillingWorker({ ...d(), stripe, random: () => 0.5 }).runOnce();
  };
  const pay = async (intentId: string) => {
    const r = await fetch(`${local.url}/_local/pay/${intentId}?card=pm_card_visa`);
    expect(r.status).toBeLessThan(300);
  };
  let n = 0;
  const person = async () => {
    const id = `holder-${s.u}-${++n}`;
    expect((await createPerson(base, { id, name: `Holder ${n}` })).status).toBe('applied');
    return id;
  };
  const plan = async () => {
    const id = `plan-${s.u}-${++n}`;
    const p = await createPlan(d(), {
      id,
      siteId: s.siteId,
      name: id,
      amount: 8000,
      currency: 'jpy',
      interval: 'month',
      doors: [s.doorA],
      membersOnly: false,
      monthlyEntryQuota: 2,
      walkInAmount: 2000,
    });
    expect(p.status).toBe('applied');
    return id;
  };
  const sell = async () => {
    const planId = await plan();
    const who = await person();
    const w = await createWalkIn(d(), {
      walkInId: `wi-${s.u}-${++n}`,
      siteId: s.siteId,
      planId,
      personId: who,
      credential: { type: 'pin', value: pin() },
    });
    if (w.status !== 'applied') throw new Error(w.code);
    return { planId, who, w: w.state, intentId: w.state.intentId ?? '' };
  };
  const used = (planId: string, who: string) => quotaUsed(t.db, planId, who, localDateOf(base.clock.now(), 'Asia/Tokyo').slice(0, 7));
  const refundsOf = (intentId: string) => local.refunds().filter((r) => r.payment_intent === intentId);

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    base = deps(t.db);
    s = await seed(base);
    const settings = await loadStaySettings(t.db, s.siteId);
    if (!settings) throw new Error('settings');
    await saveStaySettings(t.db, { ...settings, walkInsAllowed: true }, T0);
    inbox = await startInbox(
      () => t.db,
      () => stripe,
      () => base.clock.now(),
      WEBHOOK_SECRET,
    );
    local = await startStripeLocal({ webhook: { url: inbox.url, secret: WEBHOOK_SECRET }, seed: `walkinhold${pgBackend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
  });
  afterAll(async () => {
    await local.close();
    await inbox.close();
    await t.close();
  });
  afterEach(async () => {
    await local.webhooks.idle();
    Object.assign(local.faults, { unavailable: false, unavailableRequests: 0, failAfterEffect: 0, processing: false });
    Object.assign(local.webhooks.faults, { duplicates: 1, hold: false, drop: false });
  });

  it("paid at Stripe, its success webhook dropped: the hold confirms it from Stripe's intent, its key issued once; the late webhook changes nothing", async () => {
    const { planId, who, w, intentId } = await sell();
    await settle(); // the intent's earlier events are read first: none of them may stand in for the dropped one
    local.webhooks.faults.drop = true;
    await pay(intentId);
    await local.webhooks.idle();
    local.webhooks.faults.drop = false;
    expect(local.paymentIntent(intentId)?.status).toBe('succeeded');
    await settle();
    expect(await loadWalkIn(t.db, w.id)).toMatchObject({ status: 'pending', keyId: null });

    base.clock.advance(HOLD_MS + 60_000);
    await settle();
    const paid = await loadWalkIn(t.db, w.id);
    expect(paid).toMatchObject({ status: 'paid', keyId: `key_${w.id}`, amountReceived: 2000, version: 2 });
    expect(await getKey(base, `key_${w.id}`)).toMatchObject({ personId: who, doors: [s.doorA] });
    expect(local.paymentIntent(intentId)?.status).toBe('succeeded');
    expect(refundsOf(intentId)).toEqual([]);
    expect(await used(planId, who)).toBe(1);

    // Stripe's retry of the dropped event, at last (signed by the SDK's test helper)
    const event = local.events().find((e) => e.type === 'payment_intent.succeeded' && e.data.object.id === intentId);
    if (!event) throw new Error('no succeeded event');
    const body = JSON.stringify(event);
    const header = stripe.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET });
    const r = await fetch(inbox.url, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': header }, body });
    expect(r.status).toBeLessThan(300);
    await settle();
    expect(await loadWalkIn(t.db, w.id)).toMatchObject({ status: 'paid', version: 2 });
    expect(refundsOf(intentId)).toEqual([]);
  });

  it('paid with its webhook dropped by a person blocked since: the hold fails it with no key and refunds it all, once', async () => {
    const { planId, who, w, intentId } = await sell();
    await settle();
    await blockPerson(d(), { siteId: s.siteId, personId: who, reason: 'theft', actor: 'staff-1' });
    local.webhooks.faults.drop = true;
    await pay(intentId);
    await local.webhooks.idle();
    local.webhooks.faults.drop = false;
    base.clock.advance(HOLD_MS + 60_000);
    await settle();
    await settle();
    expect(await loadWalkIn(t.db, w.id)).toMatchObject({ status: 'failed', keyId: null, quotaReturned: true });
    expect(await getKey(base, `key_${w.id}`)).toBeNull();
    expect(refundsOf(intentId).map((r) => r.amount)).toEqual([2000]);
    expect(await used(planId, who)).toBe(0);
  });

  it('an intent still processing at the hold holds it; once it succeeds the walk-in is paid', async () => {
    const { w, intentId } = await sell();
    await settle();
    local.faults.processing = true;
    await pay(intentId);
    local.faults.processing = false;
    expect(local.paymentIntent(intentId)?.status).toBe('processing');
    base.clock.advance(HOLD_MS + 60_000);
    const pass = await settle();
    expect(pass.walkInsExpired).toBe(0);
    expect(local.paymentIntent(intentId)?.status).toBe('processing');
    expect(await loadWalkIn(t.db, w.id)).toMatchObject({ status: 'pending', keyId: null });

    expect(local.settle(intentId, 'succeeded').status).toBeLessThan(300);
    await settle();
    expect(await loadWalkIn(t.db, w.id)).toMatchObject({ status: 'paid', keyId: `key_${w.id}` });
    expect(refundsOf(intentId)).toEqual([]);
  });

  it('the desk cancels a pending walk-in: its intent is cancelled, its use given back, and a repeat is a noop', async () => {
    const { planId, who, w, intentId } = await sell();
    const o = await cancelWalkIn(d(), { walkInId: w.id, reason: 'staff_cancelled' });
    expect(o).toMatchObject({ status: 'applied', code: 'WALK_IN_CANCELLED', state: { status: 'cancelled', keyId: null } });
    expect(local.paymentIntent(intentId)?.status).toBe('canceled');
    expect(await used(planId, who)).toBe(0);
    await settle();
    expect(await loadWalkIn(t.db, w.id)).toMatchObject({ status: 'cancelled' });
    expect(await cancelWalkIn(d(), { walkInId: w.id, reason: 'staff_cancelled' })).toMatchObject({
      status: 'noop',
      code: 'WALK_IN_ALREADY_CANCELLED',
    });
  });

  it('the desk cancels a pending walk-in whose money landed with its webhook dropped: it is refunded per policy, no key', async () => {
    const { w, intentId } = await sell();
    await settle();
    local.webhooks.faults.drop = true;
    await pay(intentId);
    await local.webhooks.idle();
    local.webhooks.faults.drop = false;
    const o = await cancelWalkIn(d(), { walkInId: w.id, reason: 'staff_cancelled' });
    expect(o).toMatchObject({ status: 'applied', code: 'WALK_IN_CANCELLED', state: { status: 'cancelled' } });
    await settle();
    await settle();
    expect(refundsOf(intentId).map((r) => r.amount)).toEqual([2000]);
    expect(await getKey(base, `key_${w.id}`)).toBeNull();
  });
});
