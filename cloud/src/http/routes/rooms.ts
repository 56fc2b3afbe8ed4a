import { DoorId } from '@tobira/shared';
import { z } from 'zod';
import { cidOf, defined, idempotent, problem, statusOf, who, type Api, type Ctx } from '../context.js';
import { QUOTA_RETURNS } from '../../domain/cancellation-policy.js';
import { Id, OutcomeStatus, Problem, errorResponses } from '../schemas.js';
import { heldElsewhere, idUnavailable } from '../scope-guard.js';

const Room = z.object({ id: z.string(), siteId: z.string(), name: z.string(), doors: z.array(z.string()) });
const RoomAnswer = Room.extend({ status: OutcomeStatus, code: z.string(), cid: z.string() });
const HHMM = z.string().regex(/^([01][0-9]|2[0-3]):[0-5][0-9]$/, 'HH:MM (site-local)');
const Policy = z.strictObject({
  tiers: z.array(z.strictObject({ minDaysBefore: z.int().min(0).max(3650), refundPercent: z.int().min(0).max(100) })).max(20),
  noShowRefundPercent: z.int().min(0).max(100),
  /** whether a cancelled walk-in gives its quota use back to the month it was used in (default site_fault) */
  quotaReturn: z.enum(QUOTA_RETURNS).optional(),
});
const Settings = z.object({
  siteId: z.string(),
  timeZone: z.string(),
  holdMinutes: z.int(),
  checkInTime: z.string(),
  checkOutTime: z.string(),
  sharedDoors: z.array(z.string()),
  cancellationPolicy: Policy,
  currency: z.string(),
  maxNights: z.int(),
  walkInsAllowed: z.boolean(),
});
const SettingsAnswer = Settings.extend({ status: OutcomeStatus, code: z.string(), cid: z.string() });

/** Rooms (a named set of a site's doors that a stay books) and a site's stay settings, so stays can be set up through the API. */
export function roomsRoutes(app: Api, ctx: Ctx): void {
  app.post(
    '/rooms',
    {
      schema: {
        tags: ['stays'],
        summary: "Create a room: a name and the site's doors a stay in it opens",
        body: z.strictObject({ id: Id.optional(), siteId: Id, name: z.string().min(1).max(200), doors: z.array(DoorId).min(1).max(64) }),
        response: { ...errorResponses, 200: RoomAnswer, 201: RoomAnswer, 409: Problem.extend({ room: Room.optional() }) },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const scope = who(req).sites;
        // another site's room of that id is neither shown nor confirmed (no answer reveals another site's row)
        if (await heldElsewhere(db, scope, 'room', req.body.id)) return idUnavailable(cid);
        const o = await ctx.cloud.createRoom(defined({ ...req.body, siteScope: scope, cid }), { db });
        if (o.status === 'refused') return { statusCode: statusOf(o), body: { ...problem(o.code, o.detail), cid } };
        if (o.status !== 'applied' && (await heldElsewhere(db, scope, 'room', o.status === 'conflict' ? o.current.id : o.state.id)))
          return idUnavailable(cid);
        if (o.status === 'conflict')
          return { statusCode: 409, body: { status: 'conflict', code: o.code, cid, room: { ...o.current, doors: [...o.current.doors] } } };
        return {
          statusCode: statusOf(o, 201),
          body: { status: o.status, code: o.code, cid, ...o.state, doors: [...o.state.doors] },
          headers: { location: `/rooms/${o.state.id}` },
        };
      }),
  );

  app.put(
    '/sites/:siteId/stay-settings',
    {
      schema: {
        tags: ['stays'],
        summary:
          "Set a site's stay settings (hold, check-in/out times, shared doors, cancellation policy, currency); unnamed fields keep their value",
        params: z.strictObject({ siteId: Id }),
        body: z.strictObject({
          holdMinutes: z.int().min(1).max(1440).optional(),
          checkInTime: HHMM.optional(),
          checkOutTime: HHMM.optional(),
          sharedDoors: z.array(DoorId).max(64).optional(),
          cancellationPolicy: Policy.optional(),
          currency: z
            .string()
            .regex(/^[a-z]{3}$/)
            .optional(),
          maxNights: z.int().min(1).max(366).optional(),
          // the front desk may sell walk-in day passes (POST /walk-ins); off unless set
          walkInsAllowed: z.boolean().optional(),
        }),
        response: { ...errorResponses, 200: SettingsAnswer },
      },
    },
    (req, reply) =>
      idempotent(ctx, req, reply, async ({ db }) => {
        const cid = cidOf(req);
        const o = await ctx.cloud.setStaySettings(defined({ ...req.body, siteId: req.params.siteId, siteScope: who(req).sites, cid }), {
          db,
        });
        if (o.status !== 'applied')
          return { statusCode: statusOf(o), body: { ...problem(o.code, o.status === 'refused' ? o.detail : undefined), cid } };
        const s = o.state;
        return {
          statusCode: 200,
          body: {
            status: o.status,
            code: o.code,
            cid,
            ...s,
            sharedDoors: [...s.sharedDoors],
            cancellationPolicy: {
              tiers: s.cancellationPolicy.tiers.map((t) => ({ ...t })),
              noShowRefundPercent: s.cancellationPolicy.noShowRefundPercent,
              ...(s.cancellationPolicy.quotaReturn === undefined ? {} : { quotaReturn: s.cancellationPolicy.quotaReturn }),
            },
          },
        };
      }),
  );
}
