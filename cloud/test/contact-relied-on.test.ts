import { newId } from '@tobira/shared';
import { pgBackends } from '@tobira/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSmtp } from './notifications-helpers.js';
import { openStaysApi, type StaysApi } from './stays-harness.js';

/**
 * A person created for site B whom site A has booked a stay for (an admin of both can), no key at A yet:
 * site A relies on her contact, as its notices (the stay's PIN, drawn at payment) go there. Site B's
 * manager re-pointing her e-mail is refused PERSON_SHARED, and the PIN never reaches an address site B chose.
 */
const SECRET = 'whsec_tobira_contact_relied_on';

describe.each(pgBackends())('the contact of a guest another site booked, before her key exists, on %s', (backend) => {
  let h: StaysApi;
  let smtp: Awaited<ReturnType<typeof startSmtp>>;
  const auth = (token = h.admin) => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    smtp = await startSmtp();
    h = await openStaysApi(backend, {
      tag: 'ac',
      secret: SECRET,
      sharedClock: true,
      env: {
        NOTIFY_CHANNEL: 'smtp',
        NOTIFY_SMTP_HOST: '127.0.0.1',
        NOTIFY_SMTP_PORT: String(smtp.port),
        NOTIFY_SMTP_FROM: 'tobira@example.test',
      },
      deps: { notificationDispatcher: false },
    });
  });
  afterAll(async () => {
    await h?.close();
    await smtp?.close();
  });

  it("is not site B's alone to change: 403 PERSON_SHARED, and site A's stay PIN never goes to an address site B set", async () => {
    const personId = `p-${newId()}`;
    const created = await h.app.inject({
      method: 'POST',
      url: '/people',
      headers: auth(h.managerOther),
      payload: { id: personId, name: 'Kato', siteId: h.otherSiteId },
    });
    expect(created.statusCode).toBe(201);
    expect(
      (
        await h.app.inject({
          method: 'PUT',
          url: `/people/${personId}/contact`,
          headers: auth(h.managerOther),
          payload: { email: 'kato@guest.test', locale: 'en' },
        })
      ).statusCode,
    ).toBe(200);

    // site A (the admin) books her a stay with no credential: the cloud will draw the PIN and mail it
    const room = await h.app.inject({
      method: 'POST',
      url: '/rooms',
      headers: auth(),
      payload: { siteId: h.siteId, name: '801', doors: [h.doors[0]] },
    });
    expect(room.statusCode).toBe(201);
    const booked = await h.app.inject({
      method: 'POST',
      url: '/stays',
      headers: { ...auth(), 'idempotency-key': `bk-${newId()}` },
      payload: {
        personId,
        roomId: room.json<{ id: string }>().id,
        checkIn: '2027-06-01',
        checkOut: '2027-06-03',
        amount: 20_000,
        currency: 'jpy',
      },
    });
    expect(booked.statusCode).toBe(202);
    const { payment } = booked.json<{ payment: { intentId: string } }>();

    // site B's manager, who cannot see site A, points her e-mail at itself
    const hijack = await h.app.inject({
      method: 'PUT',
      url: `/people/${personId}/contact`,
      headers: auth(h.managerOther),
      payload: { email: 'attacker@site-b.test' },
    });

    expect((await fetch(`${h.local.url}/_local/pay/${payment.intentId}?card=pm_card_visa`)).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      await h.local.webhooks.idle();
      await h.cloud.runBilling();
    }
    await h.cloud.runNotifications();
    await h.cloud.runNotifications();
    const toAttacker = smtp.mails.filter((m) => m.to.includes('attacker@site-b.test'));
    const leaked = toAttacker.map((m) => /Enter this PIN on the door keypad: (\d{8})/.exec(m.text)?.[1]).filter((p) => p !== undefined);
    expect({ hijack: hijack.statusCode, pinsMailedToSiteB: leaked }).toEqual({ hijack: 403, pinsMailedToSiteB: [] });
  });
});
