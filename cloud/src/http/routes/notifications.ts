import { z } from 'zod';
import { listNotifications, loadNotification, type Notification } from '../../adapters/db/notifications.js';
import { NOTIFICATION_CHANNELS, NOTIFICATION_LOCALES, NOTIFICATION_STATUSES, NOTIFICATION_TEMPLATES } from '../../domain/notifications.js';
import { cidOf, defined, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { Cursor, Id, Limit, OutcomeStatus, errorResponses } from '../schemas.js';

const NotificationJson = z.object({
  id: z.int(),
  dedupeKey: z.string(),
  siteId: z.string(),
  personId: z.string(),
  channel: z.enum(NOTIFICATION_CHANNELS),
  address: z.string().nullable(),
  locale: z.enum(NOTIFICATION_LOCALES),
  template: z.string(),
  subject: z.string(),
  body: z.string(),
  status: z.enum(NOTIFICATION_STATUSES),
  attempts: z.int(),
  nextAttemptAt: z.int(),
  claimedBy: z.string().nullable(),
  leaseUntil: z.int().nullable(),
  lastError: z.string().nullable(),
  lastCode: z.string().nullable(),
  cid: z.string(),
  createdAt: z.int(),
  updatedAt: z.int(),
  sentAt: z.int().nullable(),
});
const notificationJson = (n: Notification) => ({ ...n });

const NotificationId = z.strictObject({
  id: z.coerce
    .number()
    .int()
    .positive()
    .max(2 ** 53 - 1),
});
const Locale = z.enum(NOTIFICATION_LOCALES).nullable();

/**
 * Notifications to guests and members (docs/notifications.md):
 * the outbox as a resource (list with filters and cursor pagination, get),
 * the operator's retry of a dead one, and where and in which language a
 * person is told. Site scoping by token: another site's row is 404.
 */
export function notificationsRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/notifications',
    {
      schema: {
        tags: ['notifications'],
        summary: 'List notifications (oldest first) with filters and cursor pagination',
        querystring: z.strictObject({
          siteId: Id.optional(),
          status: z.enum(NOTIFICATION_STATUSES).optional(),
          template: z.enum(NOTIFICATION_TEMPLATES).optional(),
          personId: Id.optional(),
          cursor: Cursor.optional(),
          limit: Limit,
        }),
        response: { ...errorResponses, 200: z.object({ items: z.array(NotificationJson), nextCursor: z.string().nullable() }) },
      },
    },
    async (req, reply) => {
      const scope = who(req).sites;
      const { siteId } = req.query;
      if (siteId !== undefined && scope !== null && !scope.includes(siteId)) return { items: [], nextCursor: null };
      const siteIds = siteId !== undefined ? [siteId] : (scope ?? undefined);
      const page = await listNotifications(
        ctx.db,
        defined({
          siteIds,
          status: req.query.status,
          template: req.query.template,
          personId: req.query.personId,
          limit: req.query.limit,
          cursor: req.query.cursor,
        }),
      );
      if (page === 'bad_cursor') return reply.status(400).send(problem('BAD_REQUEST', 'bad cursor'));
      return { items: page.items.map(notificationJson), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/notifications/:id',
    {
      schema: {
        tags: ['notifications'],
        summary: 'Get a notification: its rendered text, channel, status, attempts and last error code',
        params: NotificationId,
        response: { ...errorResponses, 200: z.object({ notification: NotificationJson }) },
      },
    },
    async (req, reply) => {
      const n = await loadNotification(ctx.db, req.params.id, who(req).sites);
      return n ? { notification: notificationJson(n) } : reply.status(404).send(problem('NOTIFICATION_NOT_FOUND'));
    },
  );

  app.post(
    '/notifications/:id/retry',
    {
      schema: {
        tags: ['notifications'],
        summary: 'Put a dead notification back to pending (attempts reset); 409 NOTIFICATION_NOT_DEAD otherwise',
        params: NotificationId,
        response: {
          ...errorResponses,
          200: z.object({ status: OutcomeStatus, code: z.string() }),
          409: z.object({ status: z.literal('conflict'), code: z.string(), notificationStatus: z.string() }),
        },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const o = await ctx.cloud.retryNotification({ id: req.params.id, siteScope: who(req).sites, cid: cidOf(req) }, { db });
        if (o.status === 'refused') return { statusCode: statusOf(o), body: problem(o.code, o.detail) };
        if (o.status === 'conflict')
          return { statusCode: 409, body: { status: 'conflict', code: o.code, notificationStatus: o.current.status } };
        return { statusCode: 200, body: { status: o.status, code: o.code } };
      }),
  );

  app.put(
    '/people/:personId/contact',
    {
      schema: {
        tags: ['notifications'],
        summary:
          "Set where and in which language a person is told: e-mail (the smtp channel's address) and locale (null clears); 403 PERSON_SHARED when the person also belongs to a site the token does not cover",
        params: z.strictObject({ personId: Id }),
        body: z.strictObject({ email: z.email().max(254).nullable().optional(), locale: Locale.optional() }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const o = await ctx.cloud.savePersonContact(
          defined({ personId: req.params.personId, ...req.body, siteScope: who(req).sites, cid: cidOf(req) }),
          {
            db,
          },
        );
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );

  app.put(
    '/sites/:siteId/locale',
    {
      schema: {
        tags: ['notifications'],
        summary: "Set a site's locale: the language of its people who have none (null: Japanese)",
        params: z.strictObject({ siteId: Id }),
        body: z.strictObject({ locale: Locale }),
        response: { ...errorResponses, 200: z.object({ status: OutcomeStatus, code: z.string() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const o = await ctx.cloud.saveSiteLocale({ siteId: req.params.siteId, locale: req.body.locale, siteScope: who(req).sites }, { db });
        return { statusCode: statusOf(o), body: o.status === 'refused' ? problem(o.code, o.detail) : { status: o.status, code: o.code } };
      }),
  );
}
