import { decodeCursor, pageOf, parseRow, parseRows, type Page } from '@tobira/shared';
import { z } from 'zod';
import {
  NOTIFICATION_CHANNELS,
  NOTIFICATION_LOCALES,
  NOTIFICATION_STATUSES,
  type NotificationChannel,
  type NotificationLocale,
  type NotificationStatus,
} from '../../domain/notifications.js';
import type { Queryable } from './db.js';
import { scopeParam, type SiteScope } from './scope.js';

/**
 * The repository of `notification_outbox` (migration 0018) and of the
 * contact columns it reads (`people.locale`, `people.email`,
 * `sites.locale`). The dispatcher's SQL verbs (claim, mark sent, fail) are
 * in `adapters/notifications/`.
 */

const Locale = z.enum(NOTIFICATION_LOCALES);

/** Who a notification goes to, as the verb resolves it at enqueue. */
export interface Recipient {
  readonly personId: string;
  readonly name: string;
  readonly email: string | null;
  readonly personLocale: NotificationLocale | null;
  readonly siteId: string;
  readonly siteName: string;
  readonly siteLocale: NotificationLocale | null;
}

const RecipientRow = z.object({
  person_id: z.string(),
  name: z.string(),
  email: z.string().nullable(),
  person_locale: Locale.nullable(),
  site_id: z.string(),
  site_name: z.string(),
  site_locale: Locale.nullable(),
});

/** The person and the site of a notification; null when either is missing. */
export async function loadRecipient(q: Queryable, personId: string, siteId: string): Promise<Recipient | null> {
  const r = await q.query(
    `SELECT p.id AS person_id, p.name, p.email, p.locale AS person_locale, s.id AS site_id, s.name AS site_name, s.locale AS site_locale
       FROM people p, sites s WHERE p.id = $1 AND s.id = $2`,
    [personId, siteId],
  );
  if (r.rows[0] === undefined) return null;
  const x = parseRow('people', RecipientRow, r.rows[0]);
  return {
    personId: x.person_id,
    name: x.name,
    email: x.email,
    personLocale: x.person_locale,
    siteId: x.site_id,
    siteName: x.site_name,
    siteLocale: x.site_locale,
  };
}

/** Sets a person's e-mail and/or preferred locale (undefined: unchanged, null: cleared). 0 when there is no such person. */
export async function setPersonContact(
  q: Queryable,
  personId: string,
  c: { readonly email?: string | null | undefined; readonly locale?: NotificationLocale | null | undefined },
): Promise<number> {
  const r = await q.query(
    `UPDATE people SET email = CASE WHEN $2 THEN $3 ELSE email END, locale = CASE WHEN $4 THEN $5 ELSE locale END WHERE id = $1`,
    [personId, c.email !== undefined, c.email ?? null, c.locale !== undefined, c.locale ?? null],
  );
  return r.rowCount;
}

/** Sets a site's locale (the fallback for people with none). 0 when there is no such site. */
export async function setSiteLocale(q: Queryable, siteId: string, locale: NotificationLocale | null): Promise<number> {
  const r = await q.query('UPDATE sites SET locale = $2 WHERE id = $1', [siteId, locale]);
  return r.rowCount;
}

export interface NewNotification {
  readonly dedupeKey: string;
  readonly siteId: string;
  readonly personId: string;
  readonly channel: NotificationChannel;
  readonly address: string | null;
  readonly locale: NotificationLocale;
  readonly template: string;
  readonly subject: string;
  readonly body: string;
  /** a secret the body's {{pin}} stands for (a drawn PIN), held until the row is delivered; never read back by the API */
  readonly secret: string | null;
  readonly cid: string;
}

/** Insert, due now; null when a row with the dedupe key exists (the same event: nothing written). */
export async function insertNotification(q: Queryable, n: NewNotification, now: number): Promise<number | null> {
  const r = await q.query(
    `INSERT INTO notification_outbox (dedupe_key, site_id, person_id, channel, address, locale, template, subject, body, cid,
                                      next_attempt_at, created_at, updated_at, secret)
     VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$11,$11,$12) ON CONFLICT (dedupe_key) DO NOTHING RETURNING id`,
    [n.dedupeKey, n.siteId, n.personId, n.channel, n.address, n.locale, n.template, n.subject, n.body, n.cid, now, n.secret],
  );
  const row = r.rows[0];
  return row === undefined ? null : parseRow('notification_outbox', z.object({ id: z.number().int() }), row).id;
}

/** A notification as the admin API shows it (with its rendered text: it never holds a credential). */
export interface Notification {
  readonly id: number;
  readonly dedupeKey: string;
  readonly siteId: string;
  readonly personId: string;
  readonly channel: NotificationChannel;
  readonly address: string | null;
  readonly locale: NotificationLocale;
  readonly template: string;
  readonly subject: string;
  readonly body: string;
  readonly status: NotificationStatus;
  readonly attempts: number;
  readonly nextAttemptAt: number;
  readonly claimedBy: string | null;
  readonly leaseUntil: number | null;
  readonly lastError: string | null;
  readonly lastCode: string | null;
  readonly cid: string;
  readonly createdAt: number;
  readonly updatedAt: number;
  readonly sentAt: number | null;
}

const COLUMNS = `id, dedupe_key, site_id, person_id, channel, address, locale, template, subject, body, status, attempts,
  next_attempt_at, claimed_by, lease_until, last_error, last_code, cid, created_at, updated_at, sent_at`;

const NotificationRow = z
  .object({
    id: z.number().int(),
    dedupe_key: z.string(),
    site_id: z.string(),
    person_id: z.string(),
    channel: z.enum(NOTIFICATION_CHANNELS),
    address: z.string().nullable(),
    locale: Locale,
    template: z.string(),
    subject: z.string(),
    body: z.string(),
    status: z.enum(NOTIFICATION_STATUSES),
    attempts: z.number().int(),
    next_attempt_at: z.number(),
    claimed_by: z.string().nullable(),
    lease_until: z.number().nullable(),
    last_error: z.string().nullable(),
    last_code: z.string().nullable(),
    cid: z.string(),
    created_at: z.number(),
    updated_at: z.number(),
    sent_at: z.number().nullable(),
  })
  .transform((r): Notification => ({
    id: r.id,
    dedupeKey: r.dedupe_key,
    siteId: r.site_id,
    personId: r.person_id,
    channel: r.channel,
    address: r.address,
    locale: r.locale,
    template: r.template,
    subject: r.subject,
    body: r.body,
    status: r.status,
    attempts: r.attempts,
    nextAttemptAt: r.next_attempt_at,
    claimedBy: r.claimed_by,
    leaseUntil: r.lease_until,
    lastError: r.last_error,
    lastCode: r.last_code,
    cid: r.cid,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    sentAt: r.sent_at,
  }));

/** One notification within the scope; null when absent or of another site. */
export async function loadNotification(q: Queryable, id: number, scope: SiteScope = null): Promise<Notification | null> {
  const r = await q.query(`SELECT ${COLUMNS} FROM notification_outbox WHERE id = $1 AND ($2::text[] IS NULL OR site_id = ANY($2))`, [
    id,
    scopeParam(scope),
  ]);
  return r.rows[0] === undefined ? null : parseRow('notification_outbox', NotificationRow, r.rows[0]);
}

/** The notification of a business event (its dedupe key); null when none. */
export async function loadNotificationByDedupeKey(q: Queryable, dedupeKey: string): Promise<Notification | null> {
  const r = await q.query(`SELECT ${COLUMNS} FROM notification_outbox WHERE dedupe_key = $1`, [dedupeKey]);
  return r.rows[0] === undefined ? null : parseRow('notification_outbox', NotificationRow, r.rows[0]);
}

export interface NotificationFilter {
  /** the sites to list (the caller's scope, or one site of it); undefined: every site */
  readonly siteIds?: readonly string[] | undefined;
  readonly status?: NotificationStatus | undefined;
  readonly template?: string | undefined;
  readonly personId?: string | undefined;
  readonly cursor?: string | undefined;
  readonly limit: number;
}
const NotificationCursor = z.tuple([z.number().int(), z.number().int()]);

/** Oldest first, by (created_at, id), with cursor pagination. */
export async function listNotifications(q: Queryable, f: NotificationFilter): Promise<Page<Notification> | 'bad_cursor'> {
  const after = decodeCursor(NotificationCursor, f.cursor);
  if (after === 'bad') return 'bad_cursor';
  const r = await q.query(
    `SELECT ${COLUMNS} FROM notification_outbox
      WHERE ($1::text[] IS NULL OR site_id = ANY($1::text[])) AND ($2::text IS NULL OR status = $2)
        AND ($3::text IS NULL OR template = $3) AND ($4::text IS NULL OR person_id = $4)
        AND ($5::bigint IS NULL OR (created_at, id) > ($5::bigint, $6::bigint))
      ORDER BY created_at, id LIMIT $7`,
    [
      f.siteIds === undefined ? null : [...f.siteIds],
      f.status ?? null,
      f.template ?? null,
      f.personId ?? null,
      after?.[0] ?? null,
      after?.[1] ?? null,
      f.limit + 1,
    ],
  );
  return pageOf(parseRows('notification_outbox', NotificationRow, r.rows), f.limit, (n) => [n.createdAt, n.id]);
}

/** Operator retry: a dead row goes back to pending, due now, attempts reset. 1 = retried, 0 = not dead (or absent). */
export async function retryDeadNotification(q: Queryable, id: number, now: number): Promise<number> {
  const r = await q.query(
    `UPDATE notification_outbox SET status = 'pending', attempts = 0, next_attempt_at = $2, updated_at = $2 WHERE id = $1 AND status = 'dead'`,
    [id, now],
  );
  return r.rowCount;
}
