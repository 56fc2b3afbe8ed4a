import { applied, noop, refused, withCorrelation, type CorrelationId, type Logger, type Outcome } from '@tobira/shared';
import type { Queryable } from '../adapters/db/db.js';
import {
  insertNotification,
  loadNotificationByDedupeKey,
  loadRecipient,
  retryDeadNotification,
  loadNotification,
  setPersonContact,
  setSiteLocale,
} from '../adapters/db/notifications.js';
import { lockPerson } from '../adapters/db/registry.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { personContactReach } from '../adapters/db/visibility.js';
import type { Payment } from '../domain/payments.js';
import type { Stay, StayNotice } from '../domain/stays.js';
import {
  notificationDedupeKey,
  renderNotification,
  resolveLocale,
  type NotificationChannel,
  type NotificationLocale,
  type NotificationTemplate,
  type NotificationVars,
} from '../domain/notifications.js';
import type { AppDeps } from './deps.js';

/**
 * The one verb that queues a message to a guest or member
 * (docs/notifications.md). Called inside the business transaction, so the
 * message exists exactly when the change committed; the dedupe key (template
 * + subject) makes a retried verb write nothing the second time. The locale
 * is resolved now (person → site → `ja`) and the text rendered now, so a
 * later change of locale or template does not change a queued message.
 */

/** What the caller gives: `name` and `site` come from the recipient. */
export type NotificationInput<T extends NotificationTemplate> = {
  readonly template: T;
  /** the business subject (stay, payment, refund, membership id): with the template, the dedupe key */
  readonly subjectId: string;
  readonly personId: string;
  readonly siteId: string;
  readonly vars: Omit<NotificationVars[T], 'name' | 'site'>;
  readonly cid: CorrelationId;
  readonly now: number;
  /** the channel this cloud sends through (config NOTIFY_CHANNEL); default `log` */
  readonly channel?: NotificationChannel | undefined;
  readonly log?: Logger | undefined;
  /** a secret the message carries ({{pin}} in the text): kept apart from the text and cleared once delivered */
  readonly secret?: string | undefined;
};

export interface QueuedNotification {
  readonly id: number;
  readonly dedupeKey: string;
  readonly locale: NotificationLocale;
}

export async function enqueueNotification<T extends NotificationTemplate>(
  tx: Queryable,
  n: NotificationInput<T>,
): Promise<Outcome<QueuedNotification>> {
  const dedupeKey = notificationDedupeKey(n.template, n.subjectId);
  const existing = await loadNotificationByDedupeKey(tx, dedupeKey);
  if (existing) return noop('NOTIFICATION_DUPLICATE', { id: existing.id, dedupeKey, locale: existing.locale });
  const who = await loadRecipient(tx, n.personId, n.siteId);
  if (!who) return refused('PERSON_NOT_FOUND', `person ${n.personId} or site ${n.siteId} not found`);
  const locale = resolveLocale(who.personLocale, who.siteLocale);
  // the caller's variables plus the recipient's: the template's variable type is exactly this union
  const vars = { ...n.vars, name: who.name, site: who.siteName } as NotificationVars[T];
  const text = renderNotification(n.template, locale, vars);
  const channel = n.channel ?? 'log';
  const id = await insertNotification(
    tx,
    {
      dedupeKey,
      siteId: n.siteId,
      personId: n.personId,
      channel,
      address: channel === 'smtp' ? who.email : null,
      locale,
      template: n.template,
      subject: text.subject,
      body: text.body,
      secret: n.secret ?? null,
      cid: n.cid,
    },
    n.now,
  );
  if (id === null) {
    // a concurrent transaction queued the same event first (the unique key waited for its commit)
    const other = await loadNotificationByDedupeKey(tx, dedupeKey);
    return noop('NOTIFICATION_DUPLICATE', { id: other?.id ?? 0, dedupeKey, locale: other?.locale ?? locale });
  }
  // the id and the template only: the body is for the recipient
  if (n.log)
    withCorrelation(n.log, n.cid).info(
      { code: 'NOTIFICATION_QUEUED', notificationId: id, template: n.template, dedupeKey, locale, channel },
      'notification queued',
    );
  return applied('NOTIFICATION_QUEUED', { id, dedupeKey, locale });
}

// ---------------------------------------------------------------- the stay events (one line each in app/stays.ts)

const STAY_TEMPLATES: Partial<Record<StayNotice, 'key_issued' | 'key_revoked'>> = {
  stay_confirmed: 'key_issued',
  stay_cancelled: 'key_revoked',
};

/**
 * A stay's notice as a message: confirmed → `key_issued` (how to enter: the
 * PIN the guest chose at booking, their card, or — a stay booked without a
 * credential — the PIN the cloud drew for its key, `issuedPin`, carried as the
 * row's secret until delivered), cancelled → `key_revoked`. Other notices
 * send nothing (yet).
 */
export async function notifyStay(
  deps: AppDeps,
  tx: Queryable,
  stay: Stay,
  notice: StayNotice,
  cid: CorrelationId,
  now: number,
  issuedPin?: string,
): Promise<void> {
  const template = STAY_TEMPLATES[notice];
  if (template === undefined) return;
  const dates = { checkIn: stay.checkIn, checkOut: stay.checkOut };
  const base = {
    subjectId: stay.id,
    personId: stay.personId,
    siteId: stay.siteId,
    cid,
    now,
    channel: deps.notificationChannel,
    log: deps.log,
  };
  if (template === 'key_issued') {
    const credential = stay.guestCredential?.type ?? (issuedPin === undefined ? 'desk' : 'issued_pin');
    await enqueueNotification(tx, {
      ...base,
      template,
      vars: { ...dates, credential },
      secret: credential === 'issued_pin' ? issuedPin : undefined,
    });
  } else {
    await enqueueNotification(tx, { ...base, template, vars: dates });
  }
}

/** Money settled for a stay: `payment_received`, once per payment. */
export async function notifyPaymentReceived(
  deps: AppDeps,
  tx: Queryable,
  stay: Stay,
  p: Payment,
  cid: CorrelationId,
  now: number,
): Promise<void> {
  await enqueueNotification(tx, {
    template: 'payment_received',
    subjectId: p.id,
    personId: stay.personId,
    siteId: stay.siteId,
    vars: { amount: p.amountReceived, currency: p.currency },
    cid,
    now,
    channel: deps.notificationChannel,
    log: deps.log,
  });
}

/** A refund Stripe made: `refund_made`, once per refund row. */
export async function notifyRefundMade(
  deps: AppDeps,
  tx: Queryable,
  stay: Pick<Stay, 'personId' | 'siteId'>,
  refund: { readonly id: string; readonly amount: number; readonly currency: string },
  cid: CorrelationId,
  now: number,
): Promise<void> {
  await enqueueNotification(tx, {
    template: 'refund_made',
    subjectId: refund.id,
    personId: stay.personId,
    siteId: stay.siteId,
    vars: { amount: refund.amount, currency: refund.currency },
    cid,
    now,
    channel: deps.notificationChannel,
    log: deps.log,
  });
}

// ---------------------------------------------------------------- operator retry

/** A dead notification back to pending (attempts reset). Not found in the scope → refused; not dead → conflict with its status. */
export async function retryNotification(
  deps: AppDeps,
  id: number,
  scope: SiteScope = null,
  cid?: CorrelationId,
): Promise<Outcome<{ readonly id: number; readonly status: string }>> {
  const n = await loadNotification(deps.db, id, scope);
  if (!n) return refused('NOTIFICATION_NOT_FOUND');
  if ((await retryDeadNotification(deps.db, id, deps.clock.now())) === 1) {
    if (cid) withCorrelation(deps.log, cid).info({ code: 'NOTIFICATION_RETRIED', notificationId: id }, 'dead notification retried');
    return applied('NOTIFICATION_RETRIED', { id, status: 'pending' });
  }
  const now = await loadNotification(deps.db, id, scope);
  return { status: 'conflict', code: 'NOTIFICATION_NOT_DEAD', current: { id, status: now?.status ?? n.status } };
}

// ---------------------------------------------------------------- contact details (where and in which language)

/**
 * A person's e-mail and/or locale (undefined: unchanged, null: cleared). They
 * are the person's, not a site's: every site the person belongs to sends its
 * notices there. So a token must cover all of those sites to change them: a
 * person it cannot see is PERSON_NOT_FOUND, one that another site shares is
 * PERSON_SHARED (which names no site).
 */
export async function savePersonContact(
  deps: AppDeps,
  input: {
    readonly personId: string;
    readonly email?: string | null | undefined;
    readonly locale?: NotificationLocale | null | undefined;
    readonly siteScope: SiteScope;
    readonly cid?: CorrelationId;
  },
): Promise<Outcome<{ readonly personId: string }>> {
  return deps.db.transaction(async (tx) => {
    await lockPerson(tx, input.personId);
    const reach = await personContactReach(tx, input.siteScope, input.personId);
    if (reach === 'absent' || reach === 'foreign') return refused('PERSON_NOT_FOUND');
    if (reach === 'shared') {
      // a site's token reaching for what another site relies on: the operator sees who tried
      if (input.cid)
        withCorrelation(deps.log, input.cid).warn({ code: 'PERSON_SHARED', personId: input.personId }, 'contact write refused');
      return refused('PERSON_SHARED', 'the person also belongs to a site this token does not cover');
    }
    const n = await setPersonContact(tx, input.personId, { email: input.email, locale: input.locale });
    return n === 1 ? applied('NOTIFICATION_CONTACT_SAVED', { personId: input.personId }) : refused('PERSON_NOT_FOUND');
  });
}

/** A site's locale, the fallback of its people with none. */
export async function saveSiteLocale(
  deps: AppDeps,
  input: { readonly siteId: string; readonly locale: NotificationLocale | null; readonly siteScope?: SiteScope },
): Promise<Outcome<{ readonly siteId: string }>> {
  const scope = input.siteScope ?? null;
  if (scope !== null && !scope.includes(input.siteId)) return refused('SITE_NOT_FOUND');
  const n = await setSiteLocale(deps.db, input.siteId, input.locale);
  return n === 1 ? applied('NOTIFICATION_CONTACT_SAVED', { siteId: input.siteId }) : refused('SITE_NOT_FOUND');
}
