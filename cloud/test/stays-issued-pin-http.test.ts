import { KeyGrant, credentialDigest, newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capturingLogger, testSecrets } from './helpers.js';
import { startSmtp } from './notifications-helpers.js';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * A stay booked without a credential gets a PIN the cloud draws when the
 * stay is confirmed. From outside: booked over HTTP with no credential, paid
 * at the local Stripe with its real signed webhook, the guest's key notice
 * (a real SMTP server) carries a PIN, and that PIN is the key's credential
 * as the gateway receives it (the grant's digest, hashed with the gateway's
 * pepper the way the gateway hashes what a keypad sends). The PIN is in no
 * row once the notice is delivered, in no log line, and in no answer of the
 * admin API (neither to the site's nor to another site's manager).
 */
const SECRET = 'whsec_tobira_issued_pin';

describe.each(pgBackends())('a PIN drawn for a stay booked without a credential on %s', (backend) => {
  let h: StaysApi;
  let smtp: Awaited<ReturnType<typeof startSmtp>>;
  let captured: Awaited<ReturnType<typeof capturingLogger>>;
  const auth = (token = h.admin) => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    smtp = await startSmtp();
    captured = await capturingLogger();
    h = await openStaysApi(backend, {
      tag: 'ip',
      secret: SECRET,
      sharedClock: true,
      env: {
        NOTIFY_CHANNEL: 'smtp',
        NOTIFY_SMTP_HOST: '127.0.0.1',
        NOTIFY_SMTP_PORT: String(smtp.port),
        NOTIFY_SMTP_FROM: 'tobira@example.test',
      },
      deps: { notificationDispatcher: false, log: captured.log },
    });
  });
  afterAll(async () => {
    await h?.close();
    await smtp?.close();
  });

  it("reaches the guest in the key notice, opens the key's doors at the gateway, and is kept nowhere once delivered", async () => {
    const contact = await h.app.inject({
      method: 'PUT',
      url: `/people/${h.personId}/contact`,
      headers: auth(),
      payload: { email: 'guest@example.test', locale: 'en' },
    });
    expect(contact.statusCode).toBe(200);
    const room = await h.app.inject({
      method: 'POST',
      url: '/rooms',
      headers: auth(),
      payload: { siteId: h.siteId, name: '701', doors: [h.doors[0]] },
    });
    expect(room.statusCode).toBe(201);
    const booked = await h.app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(), 'idempotency-key': `bk-${newId()}` },
      payload: {
        personId: h.personId,
        roomId: room.json<{ id: string }>().id,
        checkIn: '2027-06-01',
        checkOut: '2027-06-03',
        amount: 20_000,
        currency: 'jpy',
      },
    });
    expect(booked.statusCode).toBe(202);
    const { stay, payment } = booked.json<{ stay: { id: string }; payment: { intentId: string } }>();

    // the guest pays at the local Stripe; its signed webhook reaches the listening app; the worker settles
    expect((await fetch(`${h.local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`)).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      await h.local.webhooks.idle();
      await h.cloud.runBilling();
    }
    const view = await h.app.inject({ method: 'GET', url: `/stays/${stay.id}`, headers: auth() });
    expect(view.json<{ stay: { status: string; keyId: string } }>().stay).toMatchObject({ status: 'confirmed', keyId: `key_${stay.id}` });

    // before delivery the queued row holds the text with a placeholder, and the API shows no PIN
    const queued = await h.app.inject({ method: 'GET', url: `/notifications?personId=${h.personId}&template=key_issued`, headers: auth() });
    const [row] = queued.json<{ items: { id: number; body: string; status: string }[] }>().items;
    expect(row?.status).toBe('pending');
    expect(row?.body).toContain('Enter this PIN on the door keypad: {{pin}}');
    expect(row?.body).not.toMatch(/keypad: \d/); // (ids may hold digits: only where the PIN would stand)

    await h.cloud.runNotifications();
    await h.cloud.runNotifications();
    const mail = smtp.mails.find((m) => m.subject.includes('Your stay is confirmed'));
    expect(mail?.to).toEqual(['guest@example.test']);
    const pin = /Enter this PIN on the door keypad: (\d{8})/.exec(mail?.text ?? '')?.[1];
    expect(pin).toMatch(/^\d{8}$/);
    if (pin === undefined) throw new Error('no PIN in the notice');

    // the grant the gateway receives: the PIN, digested with the gateway's pepper as the gateway digests a keypad entry
    const sealed = (
      await h.t.db.query<{ credential_pepper_sealed: string }>('SELECT credential_pepper_sealed FROM gateways WHERE id = $1', [h.gatewayId])
    ).rows[0]?.credential_pepper_sealed;
    const opened = testSecrets.open(sealed ?? '', `gateways.credential_pepper:${h.gatewayId}`);
    const pepper = opened.ok ? opened.value : null;
    const grants = (
      await h.t.db.query<{ body: { key: unknown } }>(`SELECT body FROM outbox WHERE gateway_id = $1 AND type = 'key.grant'`, [h.gatewayId])
    ).rows.map((r) => KeyGrant.parse(r.body.key));
    const grant = grants.find((g) => g.keyId === `key_${stay.id}`);
    expect(grant?.doors).toContain(h.doors[0]);
    expect(grant?.credential).toEqual({ type: 'pin', digest: credentialDigest(Buffer.from(pepper ?? '', 'base64url'), 'pin', pin) });

    // delivered: the row keeps the placeholder text and no secret; the PIN is in no row, API answer or log line
    const sent = await h.t.db.query<Record<string, unknown>>('SELECT * FROM notification_outbox WHERE person_id = $1', [h.personId]);
    expect(sent.rows.find((r) => r['template'] === 'key_issued')).toMatchObject({ status: 'sent', secret: null });
    expect(JSON.stringify(sent.rows)).not.toContain(pin);
    for (const table of ['keys', 'stays', 'billing_jobs', 'payment_webhook_events', 'outbox']) {
      const all = await h.t.db.query(`SELECT * FROM ${table}`);
      expect(JSON.stringify(all.rows), table).not.toContain(pin);
    }
    for (const token of [h.admin, h.managerOther]) {
      const list = await h.app.inject({ method: 'GET', url: `/notifications?personId=${h.personId}`, headers: auth(token) });
      expect(list.body).not.toContain(pin);
      const one = await h.app.inject({ method: 'GET', url: `/notifications/${String(row?.id)}`, headers: auth(token) });
      expect(one.body).not.toContain(pin);
    }
    expect(captured.lines.length).toBeGreaterThan(0);
    expect(JSON.stringify(captured.lines)).not.toContain(pin);
  });
});
