import { randomUUID } from 'node:crypto';
import { asDoorId, asPersonId, asSiteId, newCorrelationId, newId, type CorrelationId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  claimBillingJobs,
  enqueueBillingJob,
  failBillingJob,
  listDeadBillingJobs,
  markBillingJobDone,
} from '../src/adapters/db/billing-jobs.js';
import { enterVerb, type Db, type Tx } from '../src/adapters/db/db.js';
import {
  casPayment,
  insertPayment,
  insertRefund,
  listRefundsOfPayment,
  loadPayment,
  loadPaymentByIntent,
  markRefundSucceeded,
  noteRefundError,
  recordIntent,
} from '../src/adapters/db/payments.js';
import {
  casStay,
  heldNights,
  insertRoom,
  insertStayWithNights,
  listExpiredHolds,
  listStays,
  loadRoom,
  loadStay,
  loadStaySettings,
  releaseNights,
  saveStaySettings,
} from '../src/adapters/db/stays.js';
import {
  claimWebhookEvents,
  failWebhookEvent,
  listDeadWebhookEvents,
  loadWebhookEvent,
  markWebhookProcessed,
  storeWebhookEvent,
} from '../src/adapters/db/webhook-events.js';
import { intentIdempotencyKey, settlePayment, type Payment } from '../src/domain/payments.js';
import { bookStay, failStay, paymentsOf, type Room, type SiteStaySettings, type Stay } from '../src/domain/stays.js';
import { DAY, T0, deps, openTestDb, seed, type TestDb } from './helpers.js';

/** A pending stay that nothing was paid for yet. */
const NOTHING_PAID = { deposit: 0, balance: 0 } as const;

/**
 * The stays/payments schema (migration 0014) and its repositories, against
 * both cloud databases: the per-night primary key really refuses a double
 * booking, the status guards and the release-at-commit trigger hold, CAS is
 * judged by rows affected, and the inbox / billing queue verbs keep their
 * delivery guarantees.
 */
const BACKOFF = { baseMs: 1_000, maxMs: 60_000, maxAttempts: 3 };

async function book(db: Db, stay: Stay) {
  return db.transaction(async (tx) => {
    await enterVerb(tx, 'bookStay');
    return insertStayWithNights(tx, stay);
  });
}

describe.each(pgBackends())('stays schema and repositories on %s', (pgBackend) => {
  let t: TestDb;
  let room: Room;
  let settings: SiteStaySettings;
  let personId: Stay['personId'];
  const cid: CorrelationId = newCorrelationId();

  const stayFor = (
    checkIn: string,
    checkOut: string,
    over: Partial<{ id: string; room: Room; amount: number; deposit: number }> = {},
  ): Stay => {
    const o = bookStay(
      null,
      {
        stayId: over.id ?? `st-${newId()}`,
        personId,
        room: over.room ?? room,
        settings,
        checkIn,
        checkOut,
        amount: over.amount ?? 30_000,
        currency: 'jpy',
        deposit: over.deposit ?? 0,
        cid,
      },
      T0,
    );
    if (o.status !== 'applied') throw new Error(`book: ${o.code}`);
    return o.state;
  };

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    const s = await seed(deps(t.db));
    personId = asPersonId(s.personId);
    room = { id: `room-${s.u}`, siteId: asSiteId(s.siteId), name: '101', doors: [asDoorId(s.doorA)] };
    expect(await insertRoom(t.db, room, T0)).toBe(1);
    const loaded = await loadStaySettings(t.db, s.siteId);
    if (!loaded) throw new Error('settings');
    settings = { ...loaded, sharedDoors: [asDoorId(s.doorB)] };
    await saveStaySettings(t.db, settings, T0);
  });
  afterAll(async () => {
    await t.close();
  });

  describe('rooms and settings', () => {
    it('reads a room back with its doors, and the site settings with defaults and shared doors', async () => {
      expect(await loadRoom(t.db, room.id)).toEqual(room);
      expect(await loadRoom(t.db, 'no-such-room')).toBeNull();
      const s = await loadStaySettings(t.db, room.siteId);
      expect(s).toMatchObject({ holdMinutes: 30, checkInTime: '15:00', checkOutTime: '10:00', currency: 'jpy', timeZone: 'Asia/Tokyo' });
      expect(s?.sharedDoors).toEqual(settings.sharedDoors);
      expect(s?.cancellationPolicy.tiers[0]).toEqual({ minDaysBefore: 7, refundPercent: 100 });
      expect(await loadStaySettings(t.db, 'no-such-site')).toBeNull();
    });
  });

  describe('when two stays want one room for overlapping nights', () => {
    it('the second booking is ROOM_UNAVAILABLE and leaves nothing behind', async () => {
      const a = stayFor('2026-12-10', '2026-12-13');
      const b = stayFor('2026-12-12', '2026-12-14');
      expect(await book(t.db, a)).toBe('inserted');
      expect(await book(t.db, b)).toBe('ROOM_UNAVAILABLE');
      expect(await loadStay(t.db, b.id)).toBeNull();
      const held = await heldNights(t.db, room.id, '2026-12-09', '2026-12-15');
      expect(held).toEqual(['2026-12-10', '2026-12-11', '2026-12-12'].map((night) => ({ night, stayId: a.id })));
      // back to back is not an overlap: check-out day is the next guest's check-in day
      expect(await book(t.db, stayFor('2026-12-13', '2026-12-14'))).toBe('inserted');
    });

    it('the database itself refuses a second row for one room and night (not a read-then-write check)', async () => {
      const a = stayFor('2027-01-05', '2027-01-06');
      expect(await book(t.db, a)).toBe('inserted');
      const b = stayFor('2027-01-04', '2027-01-05');
      expect(await book(t.db, b)).toBe('inserted');
      await expect(
        t.db.query(`INSERT INTO stay_nights (room_id, night, stay_id) VALUES ($1, '2027-01-05', $2)`, [room.id, b.id]),
      ).rejects.toMatchObject({
        code: '23505',
      });
    });

    it('the same stay booked twice is "exists", with its nights once', async () => {
      const a = stayFor('2027-02-01', '2027-02-03');
      expect(await book(t.db, a)).toBe('inserted');
      expect(await book(t.db, a)).toBe('exists');
      expect(await heldNights(t.db, room.id, '2027-02-01', '2027-02-03')).toHaveLength(2);
    });

    it('20 concurrent bookings of the same nights: exactly one wins (on PostgreSQL, 20 connections racing)', async () => {
      const stays = Array.from({ length: 20 }, () => stayFor('2027-03-10', '2027-03-12'));
      const results = await Promise.all(stays.map((s) => book(t.db, s)));
      expect(results.filter((r) => r === 'inserted')).toHaveLength(1);
      expect(results.filter((r) => r === 'ROOM_UNAVAILABLE')).toHaveLength(19);
      const winner = stays[results.indexOf('inserted')];
      const held = await heldNights(t.db, room.id, '2027-03-10', '2027-03-12');
      expect(held.map((h) => h.stayId)).toEqual([winner?.id, winner?.id]);
      const n = await t.db.query<{ n: number }>('SELECT count(*)::int AS n FROM stays WHERE id = ANY($1::text[])', [
        stays.map((s) => s.id),
      ]);
      expect(n.rows[0]?.n).toBe(1);
    });
    it('20 concurrent bookings of shifted, overlapping ranges: no error, no night held twice, every winner holds all its nights', async () => {
      const iso = (d: number) => `2027-10-${String(d).padStart(2, '0')}`;
      const stays = Array.from({ length: 20 }, (_, i) => stayFor(iso(1 + (i % 10)), iso(3 + (i % 10) + (i % 3))));
      const results = await Promise.all(stays.map((s) => book(t.db, s)));
      expect(results.every((r) => r === 'inserted' || r === 'ROOM_UNAVAILABLE')).toBe(true);
      const won = stays.filter((_, i) => results[i] === 'inserted');
      expect(won.length).toBeGreaterThan(0);
      const held = await heldNights(t.db, room.id, '2027-10-01', '2027-11-01');
      expect(held.map((h) => `${h.night} ${h.stayId}`).sort()).toEqual(won.flatMap((s) => s.nights.map((n) => `${n} ${s.id}`)).sort());
    });
  });

  describe('status guard and night release', () => {
    it('refuses a stay insert or status change outside a verb', async () => {
      const s = stayFor('2027-04-01', '2027-04-02');
      await expect(t.db.transaction((tx) => insertStayWithNights(tx, s))).rejects.toThrow(/tobira\.verb/);
      expect(await book(t.db, s)).toBe('inserted');
      await expect(t.db.query(`UPDATE stays SET status = 'confirmed', version = version + 1 WHERE id = $1`, [s.id])).rejects.toThrow(
        /tobira\.verb/,
      );
      expect((await loadStay(t.db, s.id))?.status).toBe('pending');
    });

    it('a stay that stops holding its room must release its nights in the same transaction', async () => {
      const s = stayFor('2027-05-01', '2027-05-03');
      expect(await book(t.db, s)).toBe('inserted');
      const failed = failStay(s, { paid: NOTHING_PAID, cid }, T0 + 1);
      if (failed.status !== 'applied') throw new Error(failed.code);
      await expect(
        t.db.transaction(async (tx) => {
          await enterVerb(tx, 'failStay');
          expect(await casStay(tx, failed.state, s.version)).toBe(1);
        }),
      ).rejects.toThrow(/still holds nights/);
      expect((await loadStay(t.db, s.id))?.status).toBe('pending');
      await t.db.transaction(async (tx) => {
        await enterVerb(tx, 'failStay');
        expect(await casStay(tx, failed.state, s.version)).toBe(1);
        expect(await releaseNights(tx, s.id)).toBe(2);
      });
      expect(await loadStay(t.db, s.id)).toEqual(failed.state);
      expect(await heldNights(t.db, room.id, '2027-05-01', '2027-05-03')).toEqual([]);
      // the released nights can be booked again
      expect(await book(t.db, stayFor('2027-05-02', '2027-05-04'))).toBe('inserted');
    });

    it('CAS on the version: a stale version writes nothing and leaves other stays as they were', async () => {
      const a = stayFor('2027-06-01', '2027-06-02');
      const b = stayFor('2027-06-02', '2027-06-03');
      expect(await book(t.db, a)).toBe('inserted');
      expect(await book(t.db, b)).toBe('inserted');
      const next = failStay(a, { paid: NOTHING_PAID, cid }, T0 + 5);
      if (next.status !== 'applied') throw new Error(next.code);
      await t.db.transaction(async (tx) => {
        await enterVerb(tx, 'failStay');
        expect(await casStay(tx, next.state, a.version + 7)).toBe(0);
      });
      expect(await loadStay(t.db, a.id)).toEqual(a);
      expect(await loadStay(t.db, b.id)).toEqual(b);
    });
  });

  describe('listing', () => {
    it('pages through a site stays with a cursor, none repeated or skipped; a foreign cursor is bad_cursor', async () => {
      const all: string[] = [];
      let cursor: string | undefined;
      for (let i = 0; i < 50; i++) {
        const page = await listStays(t.db, { siteIds: [room.siteId], limit: 2, ...(cursor === undefined ? {} : { cursor }) });
        if (page === 'bad_cursor') throw new Error('bad cursor');
        all.push(...page.items.map((s) => s.id));
        if (page.nextCursor === null) break;
        cursor = page.nextCursor;
      }
      const direct = await t.db.query<{ id: string }>('SELECT id FROM stays WHERE site_id = $1 ORDER BY created_at, id', [room.siteId]);
      expect(all).toEqual(direct.rows.map((r) => r.id));
      expect(all.length).toBeGreaterThan(4);
      expect(await listStays(t.db, { limit: 2, cursor: 'garbage' })).toBe('bad_cursor');
      const failed = await listStays(t.db, { siteIds: [room.siteId], status: 'failed', limit: 10 });
      expect(failed !== 'bad_cursor' && failed.items.every((s) => s.status === 'failed')).toBe(true);
    });

    it('lists pending stays whose hold has ended', async () => {
      const s = stayFor('2027-07-01', '2027-07-02');
      expect(await book(t.db, s)).toBe('inserted');
      expect(await listExpiredHolds(t.db, s.holdUntil - 1, 1000)).not.toContain(s.id);
      expect(await listExpiredHolds(t.db, s.holdUntil, 1000)).toContain(s.id);
    });
  });

  describe('payments ledger', () => {
    async function paymentFor(s: Stay): Promise<Payment> {
      const [first] = paymentsOf(s.amount, s.deposit);
      if (!first) throw new Error('no payment');
      const p: Payment = {
        id: `pay-${newId()}`,
        stayId: s.id,
        purpose: first.purpose,
        amount: first.amount,
        currency: s.currency,
        status: 'requires_payment',
        version: 1,
        attempt: 1,
        idempotencyKey: intentIdempotencyKey(first.purpose, s.id, 1),
        intentId: null,
        clientSecret: null,
        amountReceived: 0,
        amountRefunded: 0,
        lastCode: 'STAY_BOOKED',
        cid,
        createdAt: T0,
        updatedAt: T0,
      };
      await t.db.transaction(async (tx) => {
        await enterVerb(tx, 'bookStay');
        expect(await insertStayWithNights(tx, s)).toBe('inserted');
        expect(await insertPayment(tx, p)).toBe(1);
      });
      return p;
    }

    it('stores the idempotency key with the payment before any call, records one intent, settles by CAS', async () => {
      const s = stayFor('2027-08-01', '2027-08-03');
      const p = await paymentFor(s);
      expect(p.idempotencyKey).toBe(`stay_balance:${s.id}:1`);
      await expect(t.db.query(`UPDATE payments SET status = 'succeeded', version = 2 WHERE id = $1`, [p.id])).rejects.toThrow(
        /tobira\.verb/,
      );
      expect(await recordIntent(t.db, p.id, 'pi_1', 'pi_1_secret_x', T0)).toBe(1);
      expect(await recordIntent(t.db, p.id, 'pi_1', 'pi_1_secret_x', T0)).toBe(1);
      expect(await recordIntent(t.db, p.id, 'pi_2', 'pi_2_secret_x', T0)).toBe(0);
      const withIntent = await loadPaymentByIntent(t.db, 'pi_1');
      expect(withIntent).toMatchObject({ id: p.id, intentId: 'pi_1', clientSecret: 'pi_1_secret_x' });
      if (!withIntent) throw new Error('payment');
      const o = settlePayment(
        withIntent,
        { intentId: 'pi_1', status: 'succeeded', amount: p.amount, amountReceived: p.amount, currency: 'jpy', declined: false },
        { cid },
        T0 + 10,
      );
      if (o.status !== 'applied') throw new Error(o.code);
      await t.db.transaction(async (tx) => {
        await enterVerb(tx, 'settlePayment');
        expect(await casPayment(tx, o.state, withIntent.version)).toBe(1);
        expect(await casPayment(tx, o.state, withIntent.version)).toBe(0);
      });
      expect(await loadPayment(t.db, p.id)).toEqual(o.state);
    });

    it('a refund is stored once per idempotency key and marked succeeded once', async () => {
      const s = stayFor('2027-09-01', '2027-09-02');
      const p = await paymentFor(s);
      const r = { id: `re-${newId()}`, paymentId: p.id, amount: 1000, currency: 'jpy', idempotencyKey: `refund:${p.id}:1`, cid, now: T0 };
      const as = <T>(verb: string, fn: (tx: Tx) => Promise<T>) =>
        t.db.transaction(async (tx) => {
          await enterVerb(tx, verb);
          return fn(tx);
        });
      expect(await as('cancelStay', (tx) => insertRefund(tx, r))).toBe(1);
      expect(await as('cancelStay', (tx) => insertRefund(tx, { ...r, id: `re-${newId()}` }))).toBe(0);
      expect(await as('noteRefundError', (tx) => noteRefundError(tx, r.id, 'Stripe down', false, T0 + 1))).toBe(1);
      expect(await as('recordRefund', (tx) => markRefundSucceeded(tx, r.id, 're_stripe_1', T0 + 2))).toBe(1);
      expect(await as('recordRefund', (tx) => markRefundSucceeded(tx, r.id, 're_stripe_2', T0 + 3))).toBe(0);
      const [only, ...rest] = await listRefundsOfPayment(t.db, p.id);
      expect(rest).toEqual([]);
      expect(only).toMatchObject({ status: 'succeeded', stripeRefundId: 're_stripe_1', attempts: 2, lastError: null });
    });
  });

  describe('webhook inbox', () => {
    it('stores an event once, hands it to one claimer, and marks it processed under the lease only', async () => {
      const eventId = `evt_${newId()}`;
      const e = { eventId, type: 'payment_intent.succeeded', objectId: 'pi_x', payload: { id: eventId }, cid, now: T0 };
      expect(await storeWebhookEvent(t.db, e)).toBe('stored');
      expect(await storeWebhookEvent(t.db, e)).toBe('duplicate');
      const token = randomUUID();
      const claimed = await claimWebhookEvents(t.db, { token, now: T0, leaseMs: 30_000, limit: 100 });
      expect(claimed.map((c) => c.eventId)).toContain(eventId);
      expect(
        (await claimWebhookEvents(t.db, { token: randomUUID(), now: T0 + 1, leaseMs: 30_000, limit: 100 })).map((c) => c.eventId),
      ).not.toContain(eventId);
      expect(await markWebhookProcessed(t.db, { eventId, leaseToken: randomUUID() }, T0 + 2)).toBe(0);
      expect(await markWebhookProcessed(t.db, { eventId, leaseToken: token }, T0 + 2)).toBe(1);
      expect(await loadWebhookEvent(t.db, eventId)).toMatchObject({
        status: 'processed',
        receivedAt: T0,
        processedAt: T0 + 2,
        attempts: 1,
      });
    });

    it('a transient failure is retried after backoff; a permanent one is dead with its code', async () => {
      const eventId = `evt_${newId()}`;
      expect(
        await storeWebhookEvent(t.db, { eventId, type: 'payment_intent.succeeded', objectId: 'pi_y', payload: {}, cid, now: T0 + 100 }),
      ).toBe('stored');
      const mine = async (now: number) =>
        (await claimWebhookEvents(t.db, { token: randomUUID(), now, leaseMs: 30_000, limit: 100 })).find((c) => c.eventId === eventId);
      const first = await mine(T0 + 100);
      if (!first?.leaseToken) throw new Error('claim');
      expect(
        await failWebhookEvent(
          t.db,
          { eventId, leaseToken: first.leaseToken, attempts: first.attempts },
          { error: 'Stripe down', code: 'BILLING_UNAVAILABLE', permanent: false },
          T0 + 100,
          BACKOFF,
          0,
        ),
      ).toBe('pending');
      expect(await mine(T0 + 100)).toBeUndefined();
      const second = await mine(T0 + 100 + 60_000);
      if (!second?.leaseToken) throw new Error('claim');
      expect(
        await failWebhookEvent(
          t.db,
          { eventId, leaseToken: second.leaseToken, attempts: second.attempts },
          { error: 'mismatch', code: 'PAYMENT_AMOUNT_MISMATCH', permanent: true },
          T0 + 200,
          BACKOFF,
          0,
        ),
      ).toBe('dead');
      const dead = await listDeadWebhookEvents(t.db, null, { limit: 100 });
      expect(dead !== 'bad_cursor' && dead.items.find((d) => d.eventId === eventId)).toMatchObject({
        status: 'dead',
        deadCode: 'PAYMENT_AMOUNT_MISMATCH',
        attempts: 2,
      });
    });
  });

  describe('billing jobs', () => {
    it('one job per dedupe key; claim leases it; done only under the lease', async () => {
      const key = `issue_stay_key:${newId()}`;
      const job = { kind: 'issue_stay_key' as const, subjectId: 'st-1', dedupeKey: key, body: { keyId: 'k1' }, cid, now: T0 };
      expect(await enqueueBillingJob(t.db, job)).toBe(1);
      expect(await enqueueBillingJob(t.db, job)).toBe(0);
      const token = randomUUID();
      const got = (await claimBillingJobs(t.db, { token, now: T0, leaseMs: 30_000, limit: 100 })).find((j) => j.dedupeKey === key);
      expect(got).toMatchObject({ status: 'running', attempts: 1, leaseToken: token, body: { keyId: 'k1' } });
      if (!got) throw new Error('claim');
      expect(
        (await claimBillingJobs(t.db, { token: randomUUID(), now: T0 + 29_999, leaseMs: 30_000, limit: 100 })).map((j) => j.dedupeKey),
      ).not.toContain(key);
      // the lease lapsed: someone else may take it over, and the first holder can no longer mark it
      const other = randomUUID();
      expect(
        (await claimBillingJobs(t.db, { token: other, now: T0 + 30_000, leaseMs: 30_000, limit: 100 })).map((j) => j.dedupeKey),
      ).toContain(key);
      expect(await markBillingJobDone(t.db, { id: got.id, leaseToken: token }, T0 + 30_001)).toBe(0);
      expect(await markBillingJobDone(t.db, { id: got.id, leaseToken: other }, T0 + 30_001)).toBe(1);
    });

    it('transient failures back off, the last attempt or a permanent error is dead and listed', async () => {
      const key = `refund:${newId()}`;
      expect(await enqueueBillingJob(t.db, { kind: 'refund', subjectId: 're-1', dedupeKey: key, body: {}, cid, now: T0 + DAY })).toBe(1);
      let now = T0 + DAY;
      const statuses: (string | null)[] = [];
      for (let i = 0; i < 3; i++) {
        const j = (await claimBillingJobs(t.db, { token: randomUUID(), now, leaseMs: 30_000, limit: 100, kinds: ['refund'] })).find(
          (x) => x.dedupeKey === key,
        );
        if (!j?.leaseToken) throw new Error(`claim ${i}`);
        statuses.push(
          await failBillingJob(
            t.db,
            { id: j.id, leaseToken: j.leaseToken, attempts: j.attempts },
            { error: 'down', code: 'BILLING_UNAVAILABLE', permanent: false },
            now,
            BACKOFF,
            0.5,
          ),
        );
        now += 120_000;
      }
      expect(statuses).toEqual(['pending', 'pending', 'dead']);
      const dead = await listDeadBillingJobs(t.db, null, { limit: 1000 });
      expect(dead !== 'bad_cursor' && dead.items.find((d) => d.dedupeKey === key)).toMatchObject({
        lastCode: 'BILLING_UNAVAILABLE',
        attempts: 3,
      });
    });
  });
});
