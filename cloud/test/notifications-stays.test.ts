import { asDoorId, asSiteId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { startStripeLocal, stripeClient, type StripeLocal } from '@tobira/stripe-local';
import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listNotifications, setPersonContact } from '../src/adapters/db/notifications.js';
import { listPaymentsOfStay } from '../src/adapters/db/payments.js';
import { insertRoom, loadStay } from '../src/adapters/db/stays.js';
import { logChannel, smtpChannel } from '../src/adapters/notifications/channels.js';
import { NotificationDispatcher } from '../src/adapters/notifications/dispatcher.js';
import { BillingWorker } from '../src/app/billing-worker.js';
import { bookStay, cancelStay, type StayDeps } from '../src/app/stays.js';
import { createPerson } from '../src/app/registry.js';
import type { Room } from '../src/domain/stays.js';
import { T0, capturingLogger, deps, openTestDb, seed, type TestDb } from './helpers.js';
import { startSmtp } from './notifications-helpers.js';
import { startInbox } from './stays-harness.js';

/**
 * The guest is told (issues #12 and #13): a stay paid through the real
 * `stripe` SDK against the local Stripe is confirmed → `payment_received`
 * and `key_issued` (how to use the PIN chosen at booking, never the PIN);
 * cancelled → `key_revoked`; refunded → `refund_made`; duplicated webhooks
 * add no message; the PIN is in no notification row and no log line; the
 * messages arrive once, in the guest's language, at a real SMTP server.
 */
const WEBHOOK_SECRET = 'whsec_tobira_notify_flow';
const PIN = '48151623';

describe.each(pgBackends())('stay notifications on %s', (pgBackend) => {
  let t: TestDb;
  let local: StripeLocal;
  let stripe: Stripe;
  let inbox: Awaited<ReturnType<typeof startInbox>>;
  let base: StayDeps;
  let s: Awaited<ReturnType<typeof seed>>;
  let room: Room;
  let captured: Awaited<ReturnType<typeof capturingLogger>>;

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    captured = await capturingLogger();
    const d = deps(t.db);
    s = await seed(d);
    base = { ...d, log: captured.log, stripe: null, notificationChannel: 'smtp' };
    room = { id: `room-${s.u}`, siteId: asSiteId(s.siteId), name: '101', doors: [asDoorId(s.doorA)] };
    await insertRoom(t.db, room, T0);
    inbox = await startInbox(
      () => t.db,
      () => stripe,
      () => base.clock.now(),
      WEBHOOK_SECRET,
    );
    local = await startStripeLocal({ webhook: { url: inbox.url, secret: WEBHOOK_SECRET }, seed: `notify${pgBackend}` });
    stripe = stripeClient(local, { maxNetworkRetries: 1, timeout: 5_000 });
    base = { ...base, stripe };
  });
  afterAll(async () => {
    await local.close();
    await inbox.close();
    await t.close();
  });

  const settle = async () => {
    await local.webhooks.idle();
    return new BillingWorker({ ...base, stripe, random: () => 0.5 }).runOnce();
  };

  it('confirm, cancel and refund each tell the guest once, in their language, without the PIN', async () => {
    const guest = `guest-${s.u}`;
    expect(await createPerson(base, { id: guest, name: 'Sam Guest' })).toMatchObject({ status: 'applied' });
    await setPersonContact(t.db, guest, { email: 'sam@example.test', locale: 'en' });
    const booked = await bookStay(base, {
      personId: guest,
      roomId: room.id,
      checkIn: '2027-03-10',
      checkOut: '2027-03-12',
      amount: 24_000,
      currency: 'jpy',
      credential: { type: 'pin', value: PIN },
    });
    if (booked.status !== 'applied') throw new Error(booked.code);
    const stayId = booked.state.stay.id;
    const [payment] = await listPaymentsOfStay(t.db, stayId);
    local.webhooks.faults.duplicates = 2; // every event twice: still one message each
    const r = await fetch(`${local.url}/_local/pay/${payment?.intentId ?? ''}?card=pm_card_visa`);
    expect(r.status).toBeLessThan(500);
    await settle();
    await settle();
    expect(await loadStay(t.db, stayId)).toMatchObject({ status: 'confirmed' });

    const templatesOf = async () => {
      const page = await listNotifications(t.db, { personId: guest, limit: 50 });
      if (page === 'bad_cursor') throw new Error('cursor');
      return page.items;
    };
    expect((await templatesOf()).map((n) => [n.template, n.dedupeKey])).toEqual([
      ['payment_received', `payment_received:${payment?.id ?? ''}`],
      ['key_issued', `key_issued:${stayId}`],
    ]);

    const c = await cancelStay(base, { stayId, reason: 'guest_cancelled' });
    expect(c).toMatchObject({ status: 'applied' });
    await cancelStay(base, { stayId, reason: 'guest_cancelled' }); // a retried cancel: noop, no second message
    await settle();
    await settle();
    const all = await templatesOf();
    expect(all.map((n) => n.template)).toEqual(['payment_received', 'key_issued', 'key_revoked', 'refund_made']);
    expect(all.every((n) => n.locale === 'en' && n.channel === 'smtp' && n.address === 'sam@example.test')).toBe(true);
    const issued = all.find((n) => n.template === 'key_issued');
    expect(issued?.body).toContain('Enter the PIN you chose at booking');
    expect(all.find((n) => n.template === 'refund_made')?.body).toContain('¥24,000');

    // delivered once each to a real SMTP server, through the dispatcher
    const server = await startSmtp();
    const smtp = smtpChannel({ host: '127.0.0.1', port: server.port, from: 'tobira@example.test', secure: false, timeoutMs: 5_000 });
    const disp = new NotificationDispatcher({
      db: t.db,
      clock: base.clock,
      log: captured.log,
      channels: { smtp, log: logChannel(captured.log) },
    });
    await disp.runOnce();
    await disp.runOnce();
    await disp.stop();
    await server.close();
    expect(server.mails.map((m) => m.subject).sort()).toEqual(
      ['[Site] Payment received', '[Site] Refund made', '[Site] Your stay is confirmed', '[Site] Your stay was cancelled'].sort(),
    );
    expect((await templatesOf()).every((n) => n.status === 'sent')).toBe(true);

    // the PIN is in no notification row, no mail and no log line of the whole flow
    const rows = await t.db.query('SELECT * FROM notification_outbox WHERE person_id = $1', [guest]);
    expect(JSON.stringify(rows.rows)).not.toContain(PIN);
    expect(server.mails.map((m) => m.raw).join('\n')).not.toContain(PIN);
    expect(captured.lines.length).toBeGreaterThan(0);
    expect(JSON.stringify(captured.lines)).not.toContain(PIN);
  });
});
