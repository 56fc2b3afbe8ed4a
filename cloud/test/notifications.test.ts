import { newCorrelationId, type Logger } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  listNotifications,
  loadNotification,
  loadNotificationByDedupeKey,
  setPersonContact,
  setSiteLocale,
} from '../src/adapters/db/notifications.js';
import { logChannel, smtpChannel, webhookChannel, type Channel } from '../src/adapters/notifications/channels.js';
import type { ClaimedNotification } from '../src/adapters/notifications/claim.js';
import { NotificationDispatcher, type NotificationDispatchOptions } from '../src/adapters/notifications/dispatcher.js';
import { SimulatedCrash, crashAt } from '../src/app/crash.js';
import { enqueueNotification, retryNotification } from '../src/app/notifications.js';
import { createPerson } from '../src/app/registry.js';
import type { NotificationChannel } from '../src/domain/notifications.js';
import type { Queryable } from '../src/adapters/db/db.js';
import { capturingLogger, deps, openTestDb, seed, testLog, type TestDb } from './helpers.js';
import { deadPort, startReceiver, startSmtp } from './notifications-helpers.js';

/**
 * The notification outbox (docs/notifications.md) on both cloud
 * databases: one message per business event however often its verb runs,
 * the locale resolved at enqueue, the dispatcher's lease, backoff and dead
 * letters, racing dispatchers, a crash between send and mark, the operator's
 * retry, and the three channels against real servers (smtp-server, HTTP).
 */

/** A channel that records each send (after a turn of the event loop, so racing passes interleave). */
function countingChannel(fail: (m: ClaimedNotification) => boolean = () => false) {
  const sends: number[] = [];
  const channel: Channel = {
    async send(m) {
      await new Promise((r) => setImmediate(r));
      sends.push(m.id);
      return fail(m) ? { ok: false, code: 'NOTIFICATION_WEBHOOK_FAILED', detail: 'HTTP 503', permanent: false } : { ok: true };
    },
    close: () => Promise.resolve(),
  };
  return { sends, channel };
}

describe.each(pgBackends())('notification outbox on %s', (pgBackend) => {
  let t: TestDb;
  let d: ReturnType<typeof deps>;
  let s: Awaited<ReturnType<typeof seed>>;
  let n = 0;

  beforeAll(async () => {
    t = await openTestDb(pgBackend);
    d = deps(t.db);
    s = await seed(d);
  });
  afterAll(async () => {
    await t.close();
  });

  /** A fresh person at the seeded site, with an e-mail and/or locale. */
  async function person(contact: { email?: string | null; locale?: 'ja' | 'en' | null } = {}, name = 'Hana') {
    const id = `nt-${s.u}-${++n}`;
    const o = await createPerson(d, { id, name });
    expect(o.status).toBe('applied');
    await setPersonContact(t.db, id, contact);
    return id;
  }

  const enqueue = (personId: string, subjectId: string, channel: NotificationChannel = 'log', db: Queryable = t.db) =>
    enqueueNotification(db, {
      template: 'payment_received',
      subjectId,
      personId,
      siteId: s.siteId,
      vars: { amount: 24_000, currency: 'jpy' },
      cid: newCorrelationId(),
      now: d.clock.now(),
      channel,
    });

  const dispatcher = (
    channels: Partial<Record<NotificationChannel, Channel>>,
    o: Partial<NotificationDispatchOptions> = {},
    log: Logger = testLog,
  ) =>
    new NotificationDispatcher(
      { db: t.db, clock: d.clock, log, channels, random: () => 0.5 },
      { maxAttempts: 3, baseMs: 1_000, maxMs: 60_000, leaseMs: 30_000, ...o },
    );

  /** Runs passes (moving the clock past any backoff) until nothing is due. */
  async function drain(disp: NotificationDispatcher, rounds = 20): Promise<void> {
    for (let i = 0; i < rounds; i++) {
      await disp.runOnce();
      d.clock.advance(120_000);
    }
  }

  describe('enqueue', () => {
    it('writes one message per business event: the same event enqueued twice (a retried verb) is a noop', async () => {
      const p = await person();
      const subject = `pay-${s.u}-dup`;
      const first = await enqueue(p, subject);
      expect(first).toMatchObject({ status: 'applied', code: 'NOTIFICATION_QUEUED' });
      const again = await t.db.transaction((tx) => enqueue(p, subject, 'log', tx));
      expect(again).toMatchObject({ status: 'noop', code: 'NOTIFICATION_DUPLICATE' });
      if (first.status !== 'applied' || again.status !== 'noop') return;
      expect(again.state.id).toBe(first.state.id);
      const page = await listNotifications(t.db, { siteIds: [s.siteId], personId: p, limit: 10 });
      expect(page !== 'bad_cursor' && page.items.map((x) => x.dedupeKey)).toEqual([`payment_received:${subject}`]);
    });

    it('two transactions enqueuing the same event at once leave one row', async () => {
      const p = await person();
      const subject = `pay-${s.u}-race`;
      const outs = await Promise.all(Array.from({ length: 6 }, () => t.db.transaction((tx) => enqueue(p, subject, 'log', tx))));
      expect(outs.filter((o) => o.status === 'applied')).toHaveLength(1);
      expect(outs.filter((o) => o.status === 'noop')).toHaveLength(5);
      const page = await listNotifications(t.db, { personId: p, limit: 10 });
      expect(page !== 'bad_cursor' && page.items).toHaveLength(1);
    });

    it('rolls back with the business transaction: no message for a change that did not commit', async () => {
      const p = await person();
      await expect(
        t.db.transaction(async (tx) => {
          await enqueue(p, `pay-${s.u}-rollback`, 'log', tx);
          throw new Error('the business change failed');
        }),
      ).rejects.toThrow('the business change failed');
      expect(await loadNotificationByDedupeKey(t.db, `payment_received:pay-${s.u}-rollback`)).toBeNull();
    });

    it('resolves the locale at enqueue: person → site → ja, and a later change does not touch a queued message', async () => {
      const en = await person({ locale: 'en' });
      const none = await person();
      const a = await enqueue(en, `loc-${s.u}-1`);
      const b = await enqueue(none, `loc-${s.u}-2`);
      await setSiteLocale(t.db, s.siteId, 'en');
      const c = await enqueue(none, `loc-${s.u}-3`);
      const ja = await person({ locale: 'ja' });
      const e = await enqueue(ja, `loc-${s.u}-4`);
      await setSiteLocale(t.db, s.siteId, null);
      expect([a, b, c, e].map((o) => (o.status === 'applied' ? o.state.locale : o.status))).toEqual(['en', 'ja', 'en', 'ja']);
      await setPersonContact(t.db, en, { locale: 'ja' });
      const row = a.status === 'applied' ? await loadNotification(t.db, a.state.id) : null;
      expect(row).toMatchObject({ locale: 'en', subject: '[Site] Payment received' });
      expect(row?.body).toContain('¥24,000');
      const jaRow = b.status === 'applied' ? await loadNotification(t.db, b.state.id) : null;
      expect(jaRow?.subject).toBe('【Site】お支払いを受け付けました');
      expect(jaRow?.body).toContain('Hana 様');
    });

    it('refuses an unknown person with PERSON_NOT_FOUND and writes nothing', async () => {
      const o = await enqueue(`nobody-${s.u}`, `x-${s.u}`);
      expect(o).toMatchObject({ status: 'refused', code: 'PERSON_NOT_FOUND' });
      expect(await loadNotificationByDedupeKey(t.db, `payment_received:x-${s.u}`)).toBeNull();
    });
  });

  describe('dispatcher', () => {
    it('log channel: marks the row sent and logs its id and template, never its subject or body', async () => {
      const p = await person({}, 'Secret Name 48151623');
      const o = await enqueue(p, `log-${s.u}`);
      if (o.status !== 'applied') throw new Error(o.code);
      const { log, lines } = await capturingLogger();
      await dispatcher({ log: logChannel(log) }, {}, log).runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', attempts: 1, lastError: null });
      const sent = lines.filter((l) => l['notificationId'] === o.state.id);
      expect(sent.map((l) => l['msg'])).toEqual(['notification sent', 'notification delivered']);
      expect(sent.every((l) => l['cid'] !== undefined && l['template'] === 'payment_received')).toBe(true);
      const text = JSON.stringify(lines);
      expect(text).not.toContain('48151623');
      expect(text).not.toContain('お支払い');
    });

    it('SMTP down: the row is retried with backoff, then dead with NOTIFICATION_SMTP_FAILED; the other rows still go out', async () => {
      const mailed = await person({ email: 'guest@example.test' });
      const logged = await person();
      const down = await enqueue(mailed, `smtp-down-${s.u}`, 'smtp');
      const others = [await enqueue(logged, `other-${s.u}-1`), await enqueue(logged, `other-${s.u}-2`)];
      if (down.status !== 'applied' || others.some((x) => x.status !== 'applied')) throw new Error('enqueue');
      const smtp = smtpChannel({ host: '127.0.0.1', port: await deadPort(), from: 'tobira@example.test', secure: false, timeoutMs: 2_000 });
      const counting = countingChannel();
      const disp = dispatcher({ smtp, log: counting.channel }, { batch: 50 });
      const t0 = d.clock.now();
      await disp.runOnce();
      const first = await loadNotification(t.db, down.state.id);
      expect(first).toMatchObject({ status: 'pending', attempts: 1, lastCode: 'NOTIFICATION_SMTP_FAILED' });
      expect(first?.nextAttemptAt).toBeGreaterThan(t0);
      for (const x of others)
        if (x.status === 'applied') expect(await loadNotification(t.db, x.state.id)).toMatchObject({ status: 'sent' });
      // not due before its backoff: a pass now claims nothing of it
      await disp.runOnce();
      expect(await loadNotification(t.db, down.state.id)).toMatchObject({ attempts: 1 });
      await drain(disp);
      const dead = await loadNotification(t.db, down.state.id);
      expect(dead).toMatchObject({ status: 'dead', attempts: 3, lastCode: 'NOTIFICATION_SMTP_FAILED', claimedBy: expect.any(String) });
      expect(counting.sends.filter((id) => others.some((x) => x.status === 'applied' && x.state.id === id))).toHaveLength(2);
      await smtp.close();
    });

    it('a person with no e-mail on the smtp channel is dead at once with NOTIFICATION_NO_ADDRESS; the retry after the contact is added reaches it', async () => {
      const p = await person();
      const o = await enqueue(p, `noaddr-${s.u}`, 'smtp');
      if (o.status !== 'applied') throw new Error(o.code);
      const server = await startSmtp();
      const smtp = smtpChannel({ host: '127.0.0.1', port: server.port, from: 'tobira@example.test', secure: false, timeoutMs: 2_000 });
      await dispatcher({ smtp }).runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'dead', attempts: 1, lastCode: 'NOTIFICATION_NO_ADDRESS' });
      expect(server.mails).toHaveLength(0);
      // the operator adds the address and retries: the message goes to it, not to the missing one it was queued with
      await setPersonContact(t.db, p, { email: 'late@example.test' });
      expect(await retryNotification(d, o.state.id)).toMatchObject({ status: 'applied', code: 'NOTIFICATION_RETRIED' });
      await dispatcher({ smtp }).runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', address: 'late@example.test' });
      expect(server.mails).toHaveLength(1);
      await smtp.close();
      await server.close();
    });

    it('a row whose channel this cloud has not configured is retried, then dead with NOTIFICATION_CHANNEL_UNCONFIGURED', async () => {
      const p = await person();
      const o = await enqueue(p, `unconf-${s.u}`, 'webhook');
      if (o.status !== 'applied') throw new Error(o.code);
      await drain(dispatcher({ log: logChannel(testLog) }), 5);
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({
        status: 'dead',
        attempts: 3,
        lastCode: 'NOTIFICATION_CHANNEL_UNCONFIGURED',
      });
    });

    it('two dispatchers racing over the same rows send each row once', async () => {
      const p = await person();
      const ids: number[] = [];
      for (let i = 0; i < 30; i++) {
        const o = await enqueue(p, `race-${s.u}-${i}`);
        if (o.status === 'applied') ids.push(o.state.id);
      }
      const a = countingChannel();
      const b = countingChannel();
      const one = dispatcher({ log: a.channel }, { batch: 4, workerId: 'one' });
      const two = dispatcher({ log: b.channel }, { batch: 4, workerId: 'two' });
      for (let i = 0; i < 10; i++) await Promise.all([one.runOnce(), two.runOnce(), one.runOnce(), two.runOnce()]);
      const sends = [...a.sends, ...b.sends].filter((id) => ids.includes(id));
      expect(sends.sort((x, y) => x - y)).toEqual(ids);
      expect(a.sends.length).toBeGreaterThan(0);
      expect(b.sends.length).toBeGreaterThan(0);
      for (const id of ids) expect(await loadNotification(t.db, id)).toMatchObject({ status: 'sent', attempts: 1 });
    });

    it('a crash between send and mark (afterNotificationSendBeforeMark) sends again after the lease: at least once', async () => {
      const p = await person();
      const o = await enqueue(p, `crash-${s.u}`);
      if (o.status !== 'applied') throw new Error(o.code);
      const c = countingChannel();
      const crashing = new NotificationDispatcher(
        { db: t.db, clock: d.clock, log: testLog, channels: { log: c.channel }, crash: crashAt(['afterNotificationSendBeforeMark']) },
        { leaseMs: 30_000 },
      );
      await expect(crashing.runOnce()).rejects.toBeInstanceOf(SimulatedCrash);
      expect(c.sends.filter((x) => x === o.state.id)).toHaveLength(1);
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sending', attempts: 1 });
      // the restarted dispatcher does not take a row whose lease is still running
      const restarted = dispatcher({ log: c.channel });
      await restarted.runOnce();
      expect(c.sends.filter((x) => x === o.state.id)).toHaveLength(1);
      d.clock.advance(30_001);
      await restarted.runOnce();
      expect(c.sends.filter((x) => x === o.state.id)).toHaveLength(2);
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', attempts: 2 });
    });

    it('a dispatcher whose lease ran out changes nothing: its late failure does not undo the send of the one that claimed it again', async () => {
      const p = await person();
      const o = await enqueue(p, `lease-${s.u}`);
      if (o.status !== 'applied') throw new Error(o.code);
      let release: () => void = () => {};
      const slow: Channel = {
        send: () =>
          new Promise((r) => (release = () => r({ ok: false, code: 'NOTIFICATION_SMTP_FAILED', detail: 'late', permanent: true }))),
        close: () => Promise.resolve(),
      };
      const c = countingChannel();
      const first = dispatcher({ log: slow }, { leaseMs: 1_000 }).runOnce();
      await new Promise((r) => setTimeout(r, 50));
      d.clock.advance(1_001);
      await dispatcher({ log: c.channel }, { leaseMs: 1_000 }).runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', attempts: 2 });
      release();
      await first;
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', attempts: 2 });
    });
  });

  describe('operator retry', () => {
    it('puts a dead row back to pending (applied), then it is sent; not dead → conflict; unknown or other site → refused', async () => {
      const p = await person();
      const o = await enqueue(p, `retry-${s.u}`);
      if (o.status !== 'applied') throw new Error(o.code);
      const failing = countingChannel(() => true);
      await drain(dispatcher({ log: failing.channel }), 5);
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({
        status: 'dead',
        attempts: 3,
        lastCode: 'NOTIFICATION_WEBHOOK_FAILED',
      });
      expect(await retryNotification(d, o.state.id, ['another-site'])).toMatchObject({ status: 'refused', code: 'NOTIFICATION_NOT_FOUND' });
      expect(await retryNotification(d, 9_999_999)).toMatchObject({ status: 'refused', code: 'NOTIFICATION_NOT_FOUND' });
      expect(await retryNotification(d, o.state.id, [s.siteId])).toMatchObject({ status: 'applied', code: 'NOTIFICATION_RETRIED' });
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'pending', attempts: 0 });
      expect(await retryNotification(d, o.state.id)).toMatchObject({
        status: 'conflict',
        code: 'NOTIFICATION_NOT_DEAD',
        current: { status: 'pending' },
      });
      await dispatcher({ log: countingChannel().channel }).runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', attempts: 1 });
    });
  });

  describe('channels against real servers', () => {
    it('smtp: the local SMTP server receives the message in the recipient locale, with a stable Message-ID', async () => {
      const server = await startSmtp({ reject: (a) => a.startsWith('busy') });
      const ja = await person({ email: 'hana@example.test' });
      const en = await person({ email: 'sam@example.test', locale: 'en' }, 'Sam');
      const busy = await person({ email: 'busy@example.test' });
      const a = await enqueue(ja, `mail-${s.u}-ja`, 'smtp');
      const b = await enqueue(en, `mail-${s.u}-en`, 'smtp');
      const c = await enqueue(busy, `mail-${s.u}-busy`, 'smtp');
      if (a.status !== 'applied' || b.status !== 'applied' || c.status !== 'applied') throw new Error('enqueue');
      const smtp = smtpChannel({ host: '127.0.0.1', port: server.port, from: 'tobira@example.test', secure: false, timeoutMs: 5_000 });
      await dispatcher({ smtp }).runOnce();
      const toHana = server.mails.find((m) => m.to.includes('hana@example.test'));
      expect(toHana).toMatchObject({ from: 'tobira@example.test', subject: '【Site】お支払いを受け付けました' });
      expect(toHana?.text).toContain('Hana 様');
      expect(toHana?.text).toContain('￥24,000');
      expect(toHana?.messageId).toMatch(new RegExp(`^<notification-${a.state.id}\\.`));
      expect(server.mails.find((m) => m.to.includes('sam@example.test'))).toMatchObject({ subject: '[Site] Payment received' });
      expect(await loadNotification(t.db, a.state.id)).toMatchObject({ status: 'sent' });
      // a recipient the server answers 451 to: retried, and it does not hold up the others
      expect(await loadNotification(t.db, c.state.id)).toMatchObject({ status: 'pending', lastCode: 'NOTIFICATION_SMTP_FAILED' });
      expect(server.mails.filter((m) => m.to.includes('busy@example.test'))).toHaveLength(0);
      await smtp.close();
      await server.close();
    });

    it('webhook: one POST with the rendered message and its ids; a non-2xx answer is retried with its code', async () => {
      let status = 500;
      const rx = await startReceiver(() => status);
      const p = await person({ locale: 'en' });
      const o = await enqueue(p, `hook-${s.u}`, 'webhook');
      if (o.status !== 'applied') throw new Error(o.code);
      const hook = webhookChannel({ url: rx.url, secret: 'notify-secret-0123456789', timeoutMs: 5_000, allowPrivateNetworks: true });
      const disp = dispatcher({ webhook: hook });
      await disp.runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'pending', lastCode: 'NOTIFICATION_WEBHOOK_FAILED' });
      status = 204;
      d.clock.advance(120_000);
      await disp.runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'sent', attempts: 2 });
      const last = rx.got.at(-1);
      expect(last?.headers['tobira-notification-id']).toBe(String(o.state.id));
      expect(last?.headers['tobira-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
      expect(last?.body).toMatchObject({ id: o.state.id, template: 'payment_received', locale: 'en', subject: '[Site] Payment received' });
      await rx.close();
    });

    it('webhook: the egress guard refuses a private address (NOTIFICATION_ADDRESS_FORBIDDEN) and nothing is sent', async () => {
      const rx = await startReceiver();
      const p = await person();
      const o = await enqueue(p, `hook-guard-${s.u}`, 'webhook');
      if (o.status !== 'applied') throw new Error(o.code);
      await dispatcher({ webhook: webhookChannel({ url: rx.url, timeoutMs: 5_000, allowPrivateNetworks: false }) }).runOnce();
      expect(await loadNotification(t.db, o.state.id)).toMatchObject({ status: 'pending', lastCode: 'NOTIFICATION_ADDRESS_FORBIDDEN' });
      expect(rx.got).toHaveLength(0);
      await rx.close();
    });
  });
});
