import { asDoorId, asSiteId, generateSigningKeyPair, newId } from '@tobira/shared';
import { pgBackends, waitFor } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listPaymentsOfStay } from '../src/adapters/db/payments.js';
import { insertRoom, loadStay } from '../src/adapters/db/stays.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import { createDoor, createPerson, createSite, registerGateway } from '../src/app/registry.js';
import { bookStay, type StayDeps } from '../src/app/stays.js';
import { lastCheckOutDue, zonedInstant } from '../src/domain/nights.js';
import { T0, deps, openTestDb, type TestDb } from './helpers.js';
import { openStaysApi, startInbox, type StaysApi } from './stays-harness.js';

/**
 * The billing worker's scheduling: a stored webhook wakes it at once (the
 * poll is only the fallback), and the automatic check-out is judged on each
 * site's own calendar, so a site far east of UTC is checked out at its
 * check-out time, not when the UTC date catches up or a batch of stays that
 * are not over yet lets it through.
 */
const SECRET = 'whsec_tobira_stays_worker';

describe.each(pgBackends())('the billing worker on %s', (backend) => {
  describe('when a verified webhook is stored', () => {
    let h: StaysApi;
    beforeAll(async () => {
      // the poll is an hour: only the wake can process the payment within the test
      h = await openStaysApi(backend, { tag: 'wk', secret: SECRET, deps: { billingWorker: { pollMs: 3_600_000 } } });
    });
    afterAll(() => h?.close());

    it('the worker is woken and confirms the stay without waiting for its poll', async () => {
      const auth = { authorization: `Bearer ${h.admin}` };
      const room = await h.app.inject({
        method: 'POST',
        url: '/rooms',
        headers: auth,
        payload: { siteId: h.siteId, name: '1', doors: h.doors },
      });
      expect(room.statusCode).toBe(201);
      const booked = await h.app.inject({
        method: 'POST',
        url: '/stays',
        headers: { ...auth, 'idempotency-key': `bk-${newId()}` },
        payload: {
          personId: h.personId,
          roomId: room.json<{ id: string }>().id,
          checkIn: '2027-05-01',
          checkOut: '2027-05-03',
          amount: 30_000,
          currency: 'jpy',
        },
      });
      expect(booked.statusCode).toBe(202);
      const { stay, payment } = booked.json<{ stay: { id: string }; payment: { intentId: string } }>();
      await fetch(`${h.local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`);
      await h.local.webhooks.idle();
      await waitFor(async () => (await loadStay(h.t.db, stay.id))?.status === 'confirmed', 'the stay confirmed by the woken worker');
      expect(await loadStay(h.t.db, stay.id)).toMatchObject({ status: 'confirmed', keyId: `key_${stay.id}` });
    });
  });

  describe('when stays end at sites in different time zones', () => {
    let t: TestDb;
    let local: StripeLocal;
    let stripe: Stripe;
    let inbox: Awaited<ReturnType<typeof startInbox>>;
    let base: ReturnType<typeof deps>;
    const rooms: Record<string, { roomId: string; personId: string }> = {};
    const zones = ['Asia/Tokyo', 'Pacific/Kiritimati', 'America/Los_Angeles'] as const;
    const stayDeps = (): StayDeps => ({ ...base, stripe });
    const worker = (batch = 20) => new BillingWorker({ ...stayDeps(), stripe, random: () => 0.5 }, { batch });

    beforeAll(async () => {
      t = await openTestDb(backend);
      base = deps(t.db);
      inbox = await startInbox(
        () => t.db,
        () => stripe,
        () => base.clock.now(),
        SECRET,
      );
      local = await startStripeLocal({ webhook: { url: inbox.url, secret: SECRET }, seed: `zones${backend}` });
      stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
      for (const tz of zones) {
        const u = newId().slice(-10);
        expect((await createSite(base, { id: `site-${u}`, name: tz, timeZone: tz })).status).toBe('applied');
        const pair = await generateSigningKeyPair();
        const gw = await registerGateway(
          base,
          { issuer: 'tobira-cloud', jwks: { keys: [] } },
          { gatewayId: `gw-${u}`, siteId: `site-${u}`, publicJwk: pair.publicJwk },
        );
        expect(gw.status).toBe('applied');
        expect((await createDoor(base, { id: `door-${u}`, gatewayId: `gw-${u}`, name: 'room' })).status).toBe('applied');
        expect((await createPerson(base, { id: `person-${u}`, name: 'Guest' })).status).toBe('applied');
        await insertRoom(
          t.db,
          { id: `room-${u}`, siteId: asSiteId(`site-${u}`), name: '1', doors: [asDoorId(`door-${u}`)] },
          base.clock.now(),
        );
        rooms[tz] = { roomId: `room-${u}`, personId: `person-${u}` };
      }
    });
    afterAll(async () => {
      await local?.close();
      await inbox?.close();
      await t?.close();
    });

    /** A confirmed stay at the zone's site (paid through the local Stripe, settled by the signed webhook). */
    const confirmed = async (tz: (typeof zones)[number], checkIn: string, checkOut: string, stayId: string) => {
      const r = rooms[tz];
      if (!r) throw new Error(tz);
      base.clock.set(T0);
      const b = await bookStay(stayDeps(), {
        stayId,
        personId: r.personId,
        roomId: r.roomId,
        checkIn,
        checkOut,
        amount: 20_000,
        currency: 'jpy',
      });
      if (b.status !== 'applied') throw new Error(`${tz}: ${b.code}`);
      const [p] = await listPaymentsOfStay(t.db, stayId);
      await fetch(`${local.url}/_local/pay/${p?.intentId ?? ''}?card=pm_card_visa`);
      await local.webhooks.idle();
      await worker().runOnce();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });
    };

    it('the last check-out date due is the site calendar, east and west of UTC', () => {
      // 2026-11-30 20:00Z is 10:00 on 12-01 at Kiritimati (UTC+14), 05:00 on 12-01 in Tokyo, 12:00 on 11-30 in Los Angeles
      const now = Date.UTC(2026, 10, 30, 20, 0);
      expect(lastCheckOutDue(now, '10:00', 'Pacific/Kiritimati')).toBe('2026-12-01');
      expect(lastCheckOutDue(now - 1, '10:00', 'Pacific/Kiritimati')).toBe('2026-11-30');
      expect(lastCheckOutDue(now, '10:00', 'Asia/Tokyo')).toBe('2026-11-30');
      expect(lastCheckOutDue(now, '10:00', 'America/Los_Angeles')).toBe('2026-11-30');
      expect(lastCheckOutDue(now, '13:00', 'America/Los_Angeles')).toBe('2026-11-29');
    });

    it.each(zones)('a stay at a site in %s is checked out at its own check-out time, not before', async (tz) => {
      const stayId = `st_${tz.replace(/\W/g, '')}_${newId().slice(-6)}`;
      await confirmed(tz, '2027-03-01', '2027-03-03', stayId);
      const end = zonedInstant('2027-03-03', '10:00', tz);
      base.clock.set(end - 60_000);
      await worker().runOnce();
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });
      base.clock.set(end);
      expect((await worker().runOnce()).ended).toBe(1);
      expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'checked_out', lastCode: 'STAY_CHECKED_OUT' });
    });

    it('far east of UTC, stays that are not over yet elsewhere do not hold its check-out back', async () => {
      // same check-out date; the west stay sorts first and is not over for another 18 hours
      await confirmed('America/Los_Angeles', '2027-04-01', '2027-04-03', `st_a_west_${newId().slice(-6)}`);
      const east = `st_z_east_${newId().slice(-6)}`;
      await confirmed('Pacific/Kiritimati', '2027-04-01', '2027-04-03', east);
      base.clock.set(zonedInstant('2027-04-03', '10:00', 'Pacific/Kiritimati'));
      // a batch of one: a sweep that listed the west stay too would spend its batch on it
      expect((await worker(1).runOnce()).ended).toBe(1);
      expect(await loadStay(t.db, east)).toMatchObject({ status: 'checked_out' });
    });
  });
});
