import type { StorageStatus } from '../adapters/storage.js';
import { timingSafeEqual, createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { CorrelationId, SiteMode, newCorrelationId, type Logger } from '@tobira/shared';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Registry } from 'prom-client';
import { z } from 'zod';
import {
  AlarmCursor,
  TimeIdCursor,
  decodeCursor,
  type StaffAlarm,
  type StaffLists,
} from '../adapters/sqlite/staff-queries.js';

/**
 * The gateway's local HTTP surface, kept thin: health, Prometheus metrics,
 * the staff lockdown switch and the staff read API (docs/gateway.md). Every
 * `/staff/*` route needs the configured staff token (`Authorization: Bearer
 * <token>`, compared in constant time); with no token configured they are
 * refused (503), there is no default password. The check runs on request,
 * before the query or body is looked at, so a refused caller learns nothing.
 * Every request carries a correlation id (`X-Correlation-Id`, echoed, or a
 * fresh one) in its log line. One error handler hides 5xx details. The staff
 * web UI (gateway/ui: one HTML page, one ES module, one CSS file, no build
 * step) is served at /ui/ with a strict CSP; it holds no secret itself and
 * signs in against the same staff token.
 */
export interface Health {
  ok: boolean;
  cloudConnected: boolean;
  siteConnected: boolean;
  mode: 'normal' | 'lockdown';
  appliedSeq: number;
  leaseExpiresAt: number | null;
  leaseRemainingSeconds: number;
  inboxDepth: number;
  outboxDepth: number;
}

/** Why the site denies ordinary keys with CLOUD_STALE (DESIGN.md I1). */
export const FAIL_CLOSED_REASONS = ['NO_LEASE', 'LEASE_EXPIRED', 'BEHIND_CLOUD', 'SEQ_CONFLICT'] as const;
export type FailClosedReason = (typeof FAIL_CLOSED_REASONS)[number];

export interface StaffStatus {
  gatewayId: string;
  /** Trusted now (ms) the answer was computed at. */
  now: number;
  mode: 'normal' | 'lockdown';
  cloudConnected: boolean;
  siteConnected: boolean;
  appliedSeq: number;
  leaseExpiresAt: number | null;
  leaseRemainingSeconds: number;
  failClosed: boolean;
  failClosedReason: FailClosedReason | null;
  /** Sequenced inbox rows wait behind a missing seq (a resync is asked for). */
  waitingOnGap: boolean;
  /** The last seq a heartbeat named (the cloud has handed out up to it); null before the first heartbeat. */
  cloudLastSeq: number | null;
  /** Uplinks the broker took that the cloud has not acknowledged applying yet (kept, sent again when overdue). */
  uplinkUnacked: number;
  /** The highest uplink seq the cloud has acknowledged. */
  uplinkAckedSeq: number;
  newestVerifiedIatMs: number;
  lastResyncAt: number | null;
  inboxDepth: number;
  outboxDepth: number;
  inboxFailed: number;
  rejectedDownlinks: number;
  lockRefusals: number;
  openAlarms: number;
  locksTotal: number;
  locksOnline: number;
  /** The site's IANA time zone from the config (the staff UI shows times in it); null: not configured. */
  timeZone: string | null;
  /** Disk headroom of the data folder: while `low`, ordinary keys are refused STORAGE_FULL (docs/gateway.md "Flood bounds"). */
  storage: StorageStatus;
}

export interface StaffReads extends StaffLists {
  status(): StaffStatus;
}

export interface HttpDeps {
  health(): Health;
  readonly registry: Registry;
  readonly staffToken: string | undefined;
  readonly log: Logger;
  setMode(mode: 'normal' | 'lockdown', by: string, cid: string): { mode: 'normal' | 'lockdown'; changed: boolean };
  /** Closes an open alarm once (`by` is recorded as closed_by); a second ack is a noop. */
  ackAlarm(alarmId: string, by: string, cid: string): AlarmAck;
  readonly staff: StaffReads;
}

export type AlarmAck = { readonly status: 'applied' | 'noop'; readonly alarm: StaffAlarm } | { readonly status: 'refused'; readonly code: 'ALARM_NOT_FOUND' };

const ModeBody = z.strictObject({ mode: SiteMode, reason: z.string().min(1).max(200).optional() });
const AckBody = z.strictObject({ note: z.string().trim().min(1).max(200).optional() });
const AckParams = z.strictObject({ alarmId: z.string().min(1).max(128) });

// ---------------------------------------------------------------- staff web UI (static files)

/**
 * Sent on every UI answer. The page loads only its own script and style files
 * (no inline script or style, nothing from elsewhere), talks only to this
 * gateway, cannot be framed, and sends no Referer.
 */
export const UI_SECURITY_HEADERS = Object.freeze({
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-cache',
});

/** The UI's files, fixed: a request can only name one of these, never a path on disk. */
const UI_FILES = [
  { route: '/ui/', file: 'index.html', type: 'text/html; charset=utf-8' },
  { route: '/ui/app.js', file: 'app.js', type: 'text/javascript; charset=utf-8' },
  { route: '/ui/app.css', file: 'app.css', type: 'text/css; charset=utf-8' },
] as const;

/** gateway/ui, next to this package's src/ (no build step: the files are used as they are in the repository). */
const UI_DIR = new URL('../../ui/', import.meta.url);

// ---------------------------------------------------------------- query schemas (strings in, typed values out)

const Ms = z.string().regex(/^\d{1,15}$/, 'epoch ms (digits)').transform(Number);
const Limit = z
  .string()
  .regex(/^\d{1,3}$/, 'an integer 1..500')
  .transform(Number)
  .refine((n) => n >= 1 && n <= 500, 'an integer 1..500')
  .default(100);
const Cursor = z.string().min(1).max(400);
const Code = z.string().regex(/^[A-Z_]{1,64}$/, 'a code: A-Z and _');
const Id = z.string().min(1).max(128);
const Bool = z.enum(['true', 'false']).transform((v) => v === 'true');

const TimePage = { code: Code.optional(), since: Ms.optional(), until: Ms.optional(), cursor: Cursor.optional(), limit: Limit };
const NoQuery = z.strictObject({});
const AccessQuery = z.strictObject({ door: Id.optional(), lock: Id.optional(), allowed: Bool.optional(), ...TimePage });
const AlarmQuery = z.strictObject({ status: z.enum(['open', 'all']).default('all'), lock: Id.optional(), cursor: Cursor.optional(), limit: Limit });
const TimeQuery = z.strictObject(TimePage);
const RejectedQuery = z.strictObject({ cid: z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/).optional(), ...TimePage });
const RefusalQuery = z.strictObject({ lock: Id.optional(), origin: z.enum(['gateway', 'lock']).optional(), ...TimePage });

const issues = (e: z.ZodError): string =>
  e.issues
    .slice(0, 5)
    .map((i) => `${i.path.join('.') || 'query'}: ${i.message}`)
    .join('; ');

class BadQuery extends Error {}

function query<S extends z.ZodType>(schema: S, req: FastifyRequest): z.infer<S> {
  const r = schema.safeParse(req.query ?? {});
  if (!r.success) throw new BadQuery(issues(r.error));
  return r.data;
}

function cursorOf<S extends z.ZodType>(schema: S, c: string | undefined): z.infer<S> | null {
  const d = decodeCursor(schema, c);
  if (d === 'bad') throw new BadQuery('cursor: not a cursor of this list');
  return d;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Constant time in the token's length too: both sides are hashed first. */
function staffAllowed(req: FastifyRequest, token: string): boolean {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(h.slice(7)), digest(token));
}

export function buildApp(deps: HttpDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: 16 * 1024,
    // One line per request (onResponse below) instead of Fastify's two; `cid` is the request id's label.
    logController: new LogController({ requestIdLogLabel: 'cid', disableRequestLogging: true }),
    requestIdHeader: false,
    genReqId: (req) => {
      const h = req.headers['x-correlation-id'];
      return typeof h === 'string' && CorrelationId.safeParse(h).success ? h : newCorrelationId();
    },
  });

  app.setErrorHandler((err: { statusCode?: number; message?: string }, req, reply) => {
    if (err instanceof BadQuery) return reply.status(400).send({ code: 'BAD_REQUEST', detail: err.message });
    const status = err.statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'request failed');
    return reply.status(status).send(status >= 500 ? { code: 'INTERNAL', detail: `correlation id ${req.id}` } : { code: 'BAD_REQUEST', detail: err.message ?? 'bad request' });
  });
  app.setNotFoundHandler((_req, reply) => reply.status(404).send({ code: 'NOT_FOUND' }));

  // Correlation id: echoed on every answer; a malformed one is refused rather than silently replaced (as the cloud API does).
  app.addHook('onRequest', async (req, reply) => {
    void reply.header('x-correlation-id', req.id);
    const h = req.headers['x-correlation-id'];
    if (h !== undefined && (typeof h !== 'string' || !CorrelationId.safeParse(h).success)) {
      return reply.status(400).send({ code: 'BAD_REQUEST', detail: 'X-Correlation-Id: 1-128 of [A-Za-z0-9_.:-]' });
    }
    return undefined;
  });
  app.addHook('onResponse', async (req, reply) => {
    // No headers: the Authorization header must never reach a log.
    req.log.info({ method: req.method, url: req.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 }, 'http request');
  });

  app.get('/healthz', async (_req, reply) => {
    const h = deps.health();
    return reply.status(h.ok ? 200 : 503).send(h);
  });

  // The staff web UI: three files read once at start (a handler of our own: three fixed files need no
  // file-system lookup, no range requests and no directory listing, so no @fastify/static).
  void app.register(async (ui) => {
    ui.addHook('onRequest', async (_req, reply) => {
      void reply.headers(UI_SECURITY_HEADERS);
    });
    for (const f of UI_FILES) {
      const body = readFileSync(new URL(f.file, UI_DIR));
      ui.get(f.route, async (_req, reply) => reply.header('content-type', f.type).send(body));
    }
    ui.get('/', async (_req, reply) => reply.redirect('/ui/', 302));
    ui.get('/ui', async (_req, reply) => reply.redirect('/ui/', 302));
  });

  app.get('/metrics', async (_req, reply) => {
    const body = await deps.registry.metrics();
    return reply.header('content-type', deps.registry.contentType).send(body);
  });

  void app.register(async (staff) => {
    staff.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
      if (deps.staffToken === undefined) {
        req.log.warn({ code: 'STAFF_AUTH_NOT_CONFIGURED' }, 'staff request refused');
        return reply.status(503).send({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
      }
      if (!staffAllowed(req, deps.staffToken)) {
        req.log.warn({ code: 'UNAUTHORIZED' }, 'staff request refused');
        return reply.status(401).header('www-authenticate', 'Bearer').send({ code: 'UNAUTHORIZED' });
      }
      return undefined;
    });

    staff.post('/staff/mode', async (req, reply) => {
      const body = ModeBody.safeParse(req.body);
      if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
      const r = deps.setMode(body.data.mode, body.data.reason ?? 'staff', req.id);
      return reply.status(200).send({ status: r.changed ? 'applied' : 'noop', mode: r.mode });
    });

    staff.post('/staff/alarms/:alarmId/ack', async (req, reply) => {
      const params = AckParams.safeParse(req.params);
      if (!params.success) return reply.status(400).send({ code: 'BAD_REQUEST', detail: issues(params.error) });
      const body = AckBody.safeParse(req.body ?? {});
      if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST', detail: issues(body.error) });
      const note = body.data.note;
      const r = deps.ackAlarm(params.data.alarmId, note === undefined ? 'staff' : `staff: ${note}`, req.id);
      if (r.status === 'refused') return reply.status(404).send({ code: r.code });
      return reply.status(200).send(r);
    });

    staff.get('/staff/status', async (req) => {
      query(NoQuery, req);
      return deps.staff.status();
    });

    staff.get('/staff/locks', async (req) => {
      query(NoQuery, req);
      return { items: deps.staff.locks(), nextCursor: null };
    });

    staff.get('/staff/access-events', async (req) => {
      const q = query(AccessQuery, req);
      return deps.staff.accessEvents({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
    });

    staff.get('/staff/alarms', async (req) => {
      const q = query(AlarmQuery, req);
      return deps.staff.alarms({ ...q, cursor: cursorOf(AlarmCursor, q.cursor) });
    });

    staff.get('/staff/inbox/failed', async (req) => {
      const q = query(TimeQuery, req);
      return deps.staff.failedInbox({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
    });

    staff.get('/staff/rejected', async (req) => {
      const q = query(RejectedQuery, req);
      return deps.staff.rejected({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
    });

    staff.get('/staff/lock-refusals', async (req) => {
      const q = query(RefusalQuery, req);
      return deps.staff.lockRefusals({ ...q, cursor: cursorOf(TimeIdCursor, q.cursor) });
    });
  });

  return app;
}
