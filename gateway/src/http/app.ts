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
import { AuthFailureLimiter } from './auth-limit.js';
import { defaultHostRules, hostAllowed, hostRules, type HostRule } from './hosts.js';

/**
 * The gateway's local HTTP surface, kept thin: health, Prometheus metrics,
 * the staff lockdown switch and the staff read API (docs/gateway.md). A
 * request whose Host header names no allowed host is refused first (421,
 * DNS rebinding). Every `/staff/*` route needs the configured staff token
 * (`Authorization: Bearer <token>`, compared in constant time); with no token
 * configured they are refused (503), there is no default password. `/metrics`
 * needs the metrics token when one is configured. Wrong tokens are
 * counted per client address: past the limit it gets 429 for the rest of the
 * window. The checks run on request, before the query or body is looked at,
 * so a refused caller learns nothing.
 * Every request carries a correlation id (`X-Correlation-Id`, echoed, or a
 * fresh one) in its log line. One error handler hides 5xx details. The staff
 * web UI (gateway/ui: one HTML page, one ES module, one CSS file, no build
 * step) is served at /ui/ with a strict CSP; it holds no secret itself and
 * signs in against the same staff token.
 */
/** Why `/healthz` answers 503: the site fails closed (FAIL_CLOSED_REASONS), a broker link is down, or the daemon is stopping. */
/** Why the site denies ordinary keys with CLOUD_STALE (DESIGN.md I1). */
export const FAIL_CLOSED_REASONS = ['NO_LEASE', 'LEASE_EXPIRED', 'BEHIND_CLOUD', 'SEQ_CONFLICT'] as const;
export type FailClosedReason = (typeof FAIL_CLOSED_REASONS)[number];
export const HEALTH_REASONS = [...FAIL_CLOSED_REASONS, 'CLOUD_LINK_DOWN', 'SITE_LINK_DOWN', 'STOPPING'] as const;
export type HealthReason = (typeof HEALTH_REASONS)[number];

export interface Health {
  /** `ok` (200) or why not (503): `stopping`, else `failing_closed` (ordinary keys are denied), else `degraded` (a link is down). */
  status: 'ok' | 'failing_closed' | 'degraded' | 'stopping';
  reasons: HealthReason[];
  ok: boolean;
  failClosedReason: FailClosedReason | null;
  cloudConnected: boolean;
  siteConnected: boolean;
  mode: 'normal' | 'lockdown';
  appliedSeq: number;
  leaseExpiresAt: number | null;
  leaseRemainingSeconds: number;
  inboxDepth: number;
  outboxDepth: number;
}


/** The answer of `/healthz` from the same projection as `/staff/status` (its failClosedReason and link states). */
export function healthVerdict(s: { stopping: boolean; failClosedReason: FailClosedReason | null; cloudConnected: boolean; siteConnected: boolean }): Pick<Health, 'status' | 'reasons' | 'ok'> {
  const reasons: HealthReason[] = [];
  if (s.stopping) reasons.push('STOPPING');
  if (s.failClosedReason !== null) reasons.push(s.failClosedReason);
  if (!s.cloudConnected) reasons.push('CLOUD_LINK_DOWN');
  if (!s.siteConnected) reasons.push('SITE_LINK_DOWN');
  const status = s.stopping ? 'stopping' : s.failClosedReason !== null ? 'failing_closed' : reasons.length > 0 ? 'degraded' : 'ok';
  return { status, reasons, ok: status === 'ok' };
}

/** Codes the gateway's HTTP layer answers with (stable: clients match on the code; docs/gateway.md#http). */
export const GATEWAY_HTTP_CODES = Object.freeze({
  BAD_REQUEST: 'A malformed query, body, parameter or X-Correlation-Id; nothing changed.',
  NOT_FOUND: 'No such route.',
  HOST_NOT_ALLOWED: 'The Host header names no allowed host (http.allowedHosts; DNS rebinding guard); 421, before any auth.',
  UNAUTHORIZED: 'No bearer token, or not the staff (or metrics) token; 401.',
  AUTH_RATE_LIMITED: 'Too many wrong tokens from this client address in the window (http.authFailures); 429 with Retry-After, whatever token is sent.',
  STAFF_AUTH_NOT_CONFIGURED: 'No staff token is configured: staff routes are refused (503).',
  ALARM_NOT_FOUND: 'No such alarm (404).',
  INTERNAL: 'An internal error; details are in the log under the correlation id.',
});
export type GatewayHttpCode = keyof typeof GATEWAY_HTTP_CODES;

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
  /** Bearer token `/metrics` asks for; undefined: `/metrics` is open. */
  readonly metricsToken?: string | undefined;
  readonly log: Logger;
  /** The address the server listens on (default 127.0.0.1): one of the default allowed Host names. */
  readonly listenHost?: string;
  /** Allowed Host header values (`name` or `name:port`); undefined: the default (hosts.ts defaultHostRules). */
  readonly allowedHosts?: readonly string[] | undefined;
  /** Wrong tokens per client IP per window (default 10 per 300 s). */
  readonly authFailures?: { readonly max: number; readonly windowSeconds: number };
  /** Clock (ms) of the auth-failure windows; default Date.now. */
  readonly now?: () => number;
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
function bearerMatches(req: FastifyRequest, token: string): boolean {
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
  // DNS rebinding guard, before any auth: a request naming a host we do not serve is answered with nothing but the code.
  const configuredHosts = deps.allowedHosts === undefined ? null : hostRules(deps.allowedHosts);
  let defaultHosts: HostRule[] | null = null;
  const allowedHosts = (): readonly HostRule[] => {
    if (configuredHosts !== null) return configuredHosts;
    if (defaultHosts !== null) return defaultHosts;
    const addr = app.server.address();
    // Not listening (inject): any port. Listening: the bound port (config port 0 picks one), computed once.
    if (addr === null || typeof addr === 'string') return defaultHostRules(deps.listenHost ?? '127.0.0.1', null);
    return (defaultHosts = defaultHostRules(deps.listenHost ?? '127.0.0.1', addr.port));
  };
  app.addHook('onRequest', async (req, reply) => {
    if (hostAllowed(allowedHosts(), req.headers.host)) return undefined;
    req.log.warn({ code: 'HOST_NOT_ALLOWED', host: String(req.headers.host ?? '').slice(0, 100) }, 'request refused');
    return reply.status(421).send({ code: 'HOST_NOT_ALLOWED' });
  });

  // One failure counter for both tokens: a guesser of either gets `max` tries per window per address.
  const limiter = new AuthFailureLimiter(
    { max: deps.authFailures?.max ?? 10, windowMs: (deps.authFailures?.windowSeconds ?? 300) * 1000 },
    deps.now ?? Date.now,
  );
  /** undefined: the token matched; otherwise the reply has been sent. */
  const checkToken = (req: FastifyRequest, reply: FastifyReply, token: string, what: 'staff' | 'metrics'): FastifyReply | undefined => {
    const wait = limiter.blockedFor(req.ip);
    if (wait > 0) {
      req.log.warn({ code: 'AUTH_RATE_LIMITED', ip: req.ip }, `${what} request refused`);
      return reply.status(429).header('retry-after', String(Math.ceil(wait / 1000))).send({ code: 'AUTH_RATE_LIMITED' });
    }
    if (bearerMatches(req, token)) return undefined;
    // Only a presented token is a guess: the UI's first probe (and a monitor) send none, and must not use up the limit.
    if (req.headers.authorization !== undefined) limiter.failed(req.ip);
    req.log.warn({ code: 'UNAUTHORIZED', ip: req.ip }, `${what} request refused`);
    return reply.status(401).header('www-authenticate', 'Bearer').send({ code: 'UNAUTHORIZED' });
  };

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

  app.get('/metrics', async (req, reply) => {
    if (deps.metricsToken !== undefined) {
      const refused = checkToken(req, reply, deps.metricsToken, 'metrics');
      if (refused !== undefined) return refused;
    }
    const body = await deps.registry.metrics();
    return reply.header('content-type', deps.registry.contentType).send(body);
  });

  void app.register(async (staff) => {
    staff.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
      if (deps.staffToken === undefined) {
        req.log.warn({ code: 'STAFF_AUTH_NOT_CONFIGURED' }, 'staff request refused');
        return reply.status(503).send({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
      }
      return checkToken(req, reply, deps.staffToken, 'staff');
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
