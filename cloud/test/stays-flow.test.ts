import { asDoorId, asSiteId, newCorrelationId, newId, type CorrelationId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { listPaymentsOfStay, listRefundsOfPayment } from '../src/adapters/db/payments.js';
import { heldNights, insertRoom, loadStay, loadStaySettings, saveStaySettings } from '../src/adapters/db/stays.js';
import { loadWebhookEvent, storeWebhookEvent } from '../src/adapters/db/webhook-events.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import { SimulatedCrash, crashAt } from '../src/app/crash.js';
import { getKey } from '../src/app/keys.js';
import { bookStay, cancelStay, checkOutStay, type StayDeps } from '../src/app/stays.js';
import { zonedInstant } from '../src/domain/nights.js';
import type { Room } from '../src/domain/stays.js';
import { T0, capturingLogger, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { startInbox } from './stays-harness.js';

/**
 * Stays end to end through the use cases and the billing worker, with the
 * real `stripe` SDK against the local Stripe, on both cloud databases:
 * book → pay → signed webhook → confirmed with its key; cancel → key revoked
 * at once, refund made once; duplicates, reordering, expiry, Stripe down,
 * crashes between a Stripe call and its local write, and racing bookings.
 */
const WEBHOOK_SECRET = 'whsec_tobira_stays_flow';

describe.each(pgBackends())('stays flow on %s', (pgBackend) => {
  let t: TestDb;
  let local: StripeLocal;
  let stripe: Stripe;
  let inbox: Awaited<ReturnType<typeof startInbox>>;
  let base: ReturnType<typeof deps>;
  let s: Awaited<ReturnType<typeof seed>>;
  let room: Room;
  let pins = 0;
  const newPin = () => String(10_000_000 + ++pins);

  const stayDeps = (over: Partial<StayDeps> = {}): StayDeps => ({ ...base, stripe, newPin, ...over });
  const worker = (over: Partial<StayDeps> = {}) => new BillingWorker({ ...stayDeps(over), stripe, random: () => 0.5 });
  let day = 0;
  /** Fresh dates for each test (tests share the room): far enough ahead for a full refund. */
  const dates = (nights = 2) => {
    const start = Date.UTC(2027, 0, 10) + day * 86_400_000;
    day += nights + 1;
    const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);
    return { checkIn: iso(start), checkOut: iso(start + nights * 86_400_000) };
  };
  const book = (over: Partial<Parameters<typeof bookStay>[1]> = {}, d: StayDeps = stayDeps()) =>
    bookStay(d, { personId: s.personId, roomId: room.id, ...dates(), amount: 24_000, currency: 'jpy', ...over });
  const pay = async (intentId: string, card = 'pm_card_visa') => {
    const r = await fetch(`${local.url}/_local/pay/${intentId}?card=${card}`);
    expect(r.status).toBeLessThan(500);
  };
  const settle = async (w = worker()) => {
    await local.webhooks.idle();
    return w.runOnce();
  };
  const intentOf = async (stayId: string) => {
    const [p] = await listPaymentsOfStay(t.db, stayId);
    if (!p?.intentId) throw new Error('no intent');
    return p.intentId;
  };
  const intentsFor = (stayId: string) =>
    local
      .events()
      .filter(
        (e) =>
          e.type === 'payment_intent.created' && (e.data.object as { metadata?: Record<string, string> }).metadata?.subject_id === stayId,
      );

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    base = deps(t.db);
    s = await seed(base);
    room = { id: `room-${s.u}`, siteId: asSiteId(s.siteId), name: '101', doors: [asDoorId(s.doorA)] };
    await insertRoom(t.db, room, T0);
    const settings = await loadStaySettings(t.db, s.siteId);
    if (!settings) throw new Error('settings');
    await saveStaySettings(t.db, { ...settings, sharedDoors: [asDoorId(s.doorB)] }, T0);
    inbox = await startInbox(
      () => t.db,
      () => stripe,
      () => base.clock.now(),
      WEBHOOK_SECRET,
    );
    local = await startStripeLocal({ webhook: { url: inbox.url, secret: WEBHOOK_SECRET }, seed: `flow${pgBackend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
  });
  afterAll(async () => {
    await local.close();
    await inbox.close();
    await t.close();
  });
  afterEach(async () => {
    await local.webhooks.idle();
    Object.assign(local.faults, { unavailable: false, unavailableRequests: 0, failAfterEffect: 0 });
    Object.assign(local.webhooks.faults, { duplicates: 0, hold: false });
  });

  describe('when a booked stay is paid', () => {
    it('is confirmed by the verified webhook and gets a key for its window, room doors and shared doors, once', async () => {
      const d = dates();
      const booked = await book(d);
      expect(booked).toMatchObject({ status: 'applied', code: 'STAY_BOOKED' });
      if (booked.status !== 'applied') return;
      const { stay, payments } = booked.state;
      expect(stay.status).toBe('pending');
      expect(payments).toHaveLength(1);
      expect(payments[0]?.clientSecret).toMatch(/^pi_.+_secret_/);
      expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toHaveLength(2);

      local.webhooks.faults.duplicates = 2; // every event twice: one effect
      await pay(await intentOf(stay.id));
      const pass = await settle();
      expect(pass.events).toBeGreaterThan(0);

      const confirmed = await loadStay(t.db, stay.id);
      expect(confirmed).toMatchObject({ status: 'confirmed', keyId: `key_${stay.id}`, version: 2 });
      const key = await getKey(base, `key_${stay.id}`);
      expect(key).toMatchObject({ status: 'issuing', personId: s.personId });
      expect([...(key?.doors ?? [])].sort()).toEqual([s.doorA, s.doorB].sort());
      expect(key?.validFrom).toBe(zonedInstant(d.checkIn, '15:00', 'Asia/Tokyo'));
      expect(key?.validUntil).toBe(zonedInstant(d.checkOut, '10:00', 'Asia/Tokyo'));
      const [p] = await listPaymentsOfStay(t.db, stay.id);
      expect(p).toMatchObject({ status: 'succeeded', amountReceived: 24_000 });
      const notices = await t.db.query<{ body: { notice: string; pin?: string } }>(
        "SELECT body FROM billing_jobs WHERE kind = 'notify' AND subject_id = $1",
        [stay.id],
      );
      expect(notices.rows.map((r) => r.body.notice)).toEqual(['stay_confirmed']);
      // the guest's PIN is in no job body (a database row kept for days): only its digest, on the key
      expect(notices.rows[0]?.body).toEqual({ notice: 'stay_confirmed', stayId: stay.id });
      const jobs = JSON.stringify((await t.db.query('SELECT body FROM billing_jobs WHERE subject_id = $1', [stay.id])).rows);
      expect(jobs).not.toContain(String(10_000_000 + pins));

      // the duplicates and a second pass change nothing
      await settle();
      expect(await loadStay(t.db, stay.id)).toMatchObject({ status: 'confirmed', version: 2 });
      expect(intentsFor(stay.id)).toHaveLength(1);
    });

    it('a payment_failed event after the success revokes nothing (the intent is re-read, not the event believed)', async () => {
      const booked = await book();
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const intentId = await intentOf(stayId);
      local.webhooks.faults.hold = true;
      await pay(intentId);
      local.webhooks.release('reverse'); // succeeded arrives before charge.succeeded, created last
      await settle();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });
      const late = `evt_late_${newId()}`;
      await storeWebhookEvent(t.db, {
        eventId: late,
        type: 'payment_intent.payment_failed',
        objectId: intentId,
        payload: { id: late, type: 'payment_intent.payment_failed', data: { object: { id: intentId, metadata: {} } } },
        cid: newCorrelationId(),
        now: T0,
      });
      await settle();
      expect(await loadWebhookEvent(t.db, late)).toMatchObject({ status: 'processed' });
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed', version: 2 });
      expect(await getKey(base, `key_${stayId}`)).toMatchObject({ status: 'issuing' });
    });
  });

  describe('when a stay is booked with the guest credential', () => {
    const PIN = '48151623';
    const dump = async (table: string) => JSON.stringify((await t.db.query(`SELECT * FROM ${table}`)).rows);

    it('keeps only its digest, issues the key with it at confirmation, and the clear PIN is in no row', async () => {
      const drawn = pins;
      const booked = await book({ credential: { type: 'pin', value: PIN } });
      expect(booked).toMatchObject({ status: 'applied', code: 'STAY_BOOKED' });
      if (booked.status !== 'applied') return;
      const { stay } = booked.state;
      expect(JSON.stringify(booked)).not.toContain(PIN);
      expect(stay.guestCredential).toMatchObject({ type: 'pin', digest: expect.any(String) });
      expect(stay.guestCredential?.digest).not.toContain(PIN);

      await pay(await intentOf(stay.id));
      await settle();
      expect(await loadStay(t.db, stay.id)).toMatchObject({ status: 'confirmed', guestCredential: stay.guestCredential });
      const key = await getKey(base, `key_${stay.id}`);
      expect(key?.credential).toEqual(stay.guestCredential);
      // no random PIN was drawn for it
      expect(pins).toBe(drawn);
      for (const table of ['stays', 'billing_jobs', 'idempotency_keys', 'keys', 'payments']) expect(await dump(table)).not.toContain(PIN);
    });

    it('refuses a second live booking of the same PIN at the same gateway at booking, with nothing held', async () => {
      const first = await book({ credential: { type: 'pin', value: '27182818' } });
      if (first.status !== 'applied') throw new Error(first.code);
      await pay(await intentOf(first.state.stay.id));
      await settle();
      const d = dates();
      const second = await book({ ...d, credential: { type: 'pin', value: '27182818' } });
      expect(second).toMatchObject({ status: 'refused', code: 'CREDENTIAL_IN_USE' });
      expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toHaveLength(0);
    });

    it('refuses a credential that is not a valid PIN', async () => {
      expect(await book({ credential: { type: 'pin', value: 'x' } })).toMatchObject({ status: 'refused', code: 'INVALID_CREDENTIAL' });
    });
  });

  describe('when a confirmed stay is cancelled', () => {
    it('revokes the key at once, releases the nights, and refunds once through the worker', async () => {
      const d = dates();
      const booked = await book(d);
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const intentId = await intentOf(stayId);
      await pay(intentId);
      await settle();

      const c = await cancelStay(stayDeps(), { stayId, reason: 'guest_cancelled' });
      expect(c).toMatchObject({ status: 'applied', code: 'STAY_CANCELLED' });
      // before any worker pass: access is gone, the room is free, the refund is pending
      expect(await getKey(base, `key_${stayId}`)).toMatchObject({ status: 'revoking', revokeReason: 'stay_cancelled' });
      expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toEqual([]);
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ status: 'refund_pending' });

      await settle();
      await settle();
      const refunds = local.refunds().filter((r) => r.payment_intent === intentId);
      expect(refunds).toHaveLength(1);
      expect(refunds[0]?.amount).toBe(24_000);
      const [p] = await listPaymentsOfStay(t.db, stayId);
      expect(p).toMatchObject({ status: 'refunded', amountRefunded: 24_000 });
      expect(await listRefundsOfPayment(t.db, p?.id ?? '')).toMatchObject([{ status: 'succeeded', amount: 24_000 }]);

      const again = await cancelStay(stayDeps(), { stayId, reason: 'guest_cancelled' });
      expect(again).toMatchObject({ status: 'noop', code: 'STAY_ALREADY_CANCELLED' });
    });

    it('a refund while Stripe is down stays refund_pending and is retried with backoff, then made once', async () => {
      const booked = await book();
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const intentId = await intentOf(stayId);
      await pay(intentId);
      await settle();
      await cancelStay(stayDeps(), { stayId, reason: 'staff_cancelled' });
      local.faults.unavailable = true;
      await worker().runOnce();
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ status: 'refund_pending' });
      const job = await t.db.query<{ status: string; last_code: string; attempts: number }>(
        "SELECT status, last_code, attempts FROM billing_jobs WHERE kind = 'refund' AND subject_id LIKE $1",
        [`%${stayId}%`],
      );
      expect(job.rows[0]).toMatchObject({ status: 'pending', last_code: 'BILLING_UNAVAILABLE', attempts: 1 });
      local.faults.unavailable = false;
      base.clock.advance(10 * 60_000);
      await settle();
      expect(local.refunds().filter((r) => r.payment_intent === intentId)).toHaveLength(1);
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ status: 'refunded' });
    });

    it('a crash between the refund call and its local write still makes one refund', async () => {
      const booked = await book();
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const intentId = await intentOf(stayId);
      await pay(intentId);
      await settle();
      await cancelStay(stayDeps(), { stayId, reason: 'site_closed' });
      await expect(worker({ crash: crashAt(['afterRefundBeforeRecord']) }).runOnce()).rejects.toBeInstanceOf(SimulatedCrash);
      expect(local.refunds().filter((r) => r.payment_intent === intentId)).toHaveLength(1);
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ status: 'refund_pending' });
      base.clock.advance(61_000); // the crashed worker's lease lapses
      await settle();
      expect(local.refunds().filter((r) => r.payment_intent === intentId)).toHaveLength(1);
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ status: 'refunded', amountRefunded: 24_000 });
    });
  });

  describe('when a stay is never paid', () => {
    it('expires after its hold: nights released, intent cancelled, nothing charged', async () => {
      const d = dates();
      const booked = await book(d);
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const intentId = await intentOf(stayId);
      await worker().runOnce();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'pending' });
      base.clock.advance(31 * 60_000);
      const pass = await worker().runOnce();
      expect(pass.expired).toBeGreaterThanOrEqual(1);
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'expired' });
      expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toEqual([]);
      await settle(); // the cancel_intent job
      expect(local.paymentIntent(intentId)?.status).toBe('canceled');
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ status: 'failed', amountReceived: 0 });
    });

    it('a stay pending past its hold plus slack is an alarm with a code', async () => {
      const { log, lines } = await capturingLogger();
      const booked = await book();
      if (booked.status !== 'applied') throw new Error(booked.code);
      base.clock.advance(60 * 60_000);
      // a sweep that cannot expire anything (batch 0) leaves the stay overdue
      const w = new BillingWorker({ ...stayDeps({ log }), stripe, random: () => 0.5 }, { batch: 0 });
      const pass = await w.runOnce();
      expect(pass.overdue).toBeGreaterThanOrEqual(1);
      expect(lines.some((l) => l.code === 'STAY_HOLD_OVERDUE' && l.alarm === true && typeof l.cid === 'string')).toBe(true);
      await worker().runOnce();
      expect(await loadStay(t.db, booked.state.stay.id)).toMatchObject({ status: 'expired' });
    });
  });

  describe('when Stripe is unreachable at booking', () => {
    it('answers BILLING_UNAVAILABLE and leaves no stay holding the room', async () => {
      const d = dates();
      local.faults.unavailable = true;
      const r = await book(d);
      expect(r).toMatchObject({ status: 'refused', code: 'BILLING_UNAVAILABLE' });
      expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toEqual([]);
      local.faults.unavailable = false;
      expect(await book(d)).toMatchObject({ status: 'applied', code: 'STAY_BOOKED' });
    });

    it('without a Stripe client the stay verbs answer BILLING_NOT_CONFIGURED and write nothing', async () => {
      const d = dates();
      expect(await book(d, stayDeps({ stripe: null }))).toMatchObject({ status: 'refused', code: 'BILLING_NOT_CONFIGURED' });
      expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toEqual([]);
    });
  });

  describe('when the process crashes between creating the intent and recording it', () => {
    it('the repair job and a repeated booking get the same PaymentIntent back: one intent', async () => {
      const stayId = `st_crash_${newId()}`;
      const d = dates();
      await expect(book({ stayId, ...d }, stayDeps({ crash: crashAt(['afterIntentCreatedBeforeRecord']) }))).rejects.toBeInstanceOf(
        SimulatedCrash,
      );
      expect((await listPaymentsOfStay(t.db, stayId))[0]).toMatchObject({ intentId: null });
      expect(intentsFor(stayId)).toHaveLength(1);
      base.clock.advance(61_000);
      await worker().runOnce();
      const intentId = await intentOf(stayId);
      const again = await book({ stayId, ...d });
      expect(again).toMatchObject({ status: 'noop', code: 'STAY_ALREADY_BOOKED' });
      expect(again.status === 'noop' ? again.state.payments[0]?.intentId : null).toBe(intentId);
      expect(intentsFor(stayId)).toHaveLength(1);
      await pay(intentId);
      await settle();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });
    });
  });

  describe('when Stripe and the ledger disagree on the amount', () => {
    it('the event is refused with PAYMENT_AMOUNT_MISMATCH, alarmed and dead-lettered; the stay is not confirmed', async () => {
      const { log, lines } = await capturingLogger();
      const booked = await book();
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      const intentId = await intentOf(stayId);
      // the ledger drifts from what the intent charges; no verb may rewrite an amount, so the test goes around the verb guard
      await t.db.transaction(async (tx) => {
        await tx.query('ALTER TABLE payments DISABLE TRIGGER payments_verb_guard');
        await tx.query('UPDATE payments SET amount = amount + 1 WHERE stay_id = $1', [stayId]);
        await tx.query('ALTER TABLE payments ENABLE TRIGGER payments_verb_guard');
      });
      await pay(intentId);
      await settle(worker({ log }));
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'pending' });
      const dead = await t.db.query<{ event_id: string; dead_code: string }>(
        "SELECT event_id, dead_code FROM payment_webhook_events WHERE status = 'dead' AND object_id = $1",
        [intentId],
      );
      expect(dead.rows.length).toBeGreaterThan(0);
      expect(dead.rows.every((r) => r.dead_code === 'PAYMENT_AMOUNT_MISMATCH')).toBe(true);
      expect(lines.some((l) => l.code === 'PAYMENT_AMOUNT_MISMATCH' && l.alarm === true && typeof l.cid === 'string')).toBe(true);
    });
  });

  describe('when the guest checks out', () => {
    it('the key ends now and the nights are released', async () => {
      const d = dates();
      const booked = await book(d);
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      await pay(await intentOf(stayId));
      await settle();
      const clock = base.clock;
      const saved = clock.now();
      clock.set(zonedInstant(d.checkIn, '16:00', 'Asia/Tokyo'));
      try {
        const r = await checkOutStay(stayDeps(), { stayId });
        expect(r).toMatchObject({ status: 'applied', code: 'STAY_CHECKED_OUT' });
        expect(await getKey(base, `key_${stayId}`)).toMatchObject({ status: 'revoking', revokeReason: 'stay_checked_out' });
        expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toEqual([]);
      } finally {
        clock.set(saved);
      }
    });
  });

  describe('when a confirmed stay reaches its check-out time', () => {
    it('the worker checks it out on its own; the key is left to end by its validity, the nights are released', async () => {
      const d = dates();
      const booked = await book(d);
      if (booked.status !== 'applied') throw new Error(booked.code);
      const stayId = booked.state.stay.id;
      await pay(await intentOf(stayId));
      await settle();
      const clock = base.clock;
      const saved = clock.now();
      try {
        clock.set(zonedInstant(d.checkOut, '09:59', 'Asia/Tokyo'));
        await worker().runOnce();
        expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });
        clock.set(zonedInstant(d.checkOut, '10:00', 'Asia/Tokyo'));
        const pass = await worker().runOnce();
        expect(pass.ended).toBeGreaterThanOrEqual(1);
        expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'checked_out', lastCode: 'STAY_CHECKED_OUT' });
        expect(await getKey(base, `key_${stayId}`)).toMatchObject({ status: 'issuing', revokeReason: null });
        expect(await heldNights(t.db, room.id, d.checkIn, d.checkOut)).toEqual([]);
      } finally {
        clock.set(saved);
      }
    });
  });

  describe('when 20 clients race for one room', () => {
    it('exactly one booking wins; the others are ROOM_UNAVAILABLE with nothing created', async () => {
      const d = dates(3);
      const cid: CorrelationId = newCorrelationId();
      const results = await Promise.all(Array.from({ length: 20 }, () => book({ ...d, cid })));
      expect(results.filter((r) => r.status === 'applied')).toHaveLength(1);
      expect(results.filter((r) => r.status === 'refused' && r.code === 'ROOM_UNAVAILABLE')).toHaveLength(19);
      const held = await heldNights(t.db, room.id, d.checkIn, d.checkOut);
      expect(held).toHaveLength(3);
      expect(new Set(held.map((h) => h.stayId)).size).toBe(1);
    });
  });
});
