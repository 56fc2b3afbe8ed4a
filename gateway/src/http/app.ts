import { timingSafeEqual, createHash } from 'node:crypto';
import fastifyCookie from '@fastify/cookie';
import { CorrelationId, newCorrelationId } from '@tobira/shared';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { AuthFailureLimiter } from './auth-limit.js';
import { actorOf, sameSecret, tokenActor } from '../app/staff-accounts.js';
import type { HttpDeps } from './context.js';
import { defaultHostRules, hostAllowed, hostRules, type HostRule } from './hosts.js';
import { BadQuery } from './query.js';
import { boundConnections, SERVER_CONNECTION_OPTIONS, type ConnectionConfig } from './connections.js';
import { accessRoutes } from './routes/access.js';
import { accountsRoutes } from './routes/accounts.js';
import { alarmsRoutes } from './routes/alarms.js';
import { diagnosticsRoutes } from './routes/diagnostics.js';
import { eventsRoutes } from './routes/events.js';
import { healthRoutes } from './routes/health.js';
import { keysRoutes } from './routes/keys.js';
import { locksRoutes } from './routes/locks.js';
import { modeRoutes } from './routes/mode.js';
import { passageRoutes } from './routes/passage.js';
import { statusRoutes } from './routes/status.js';
import { openSessionRoutes, sessionRoutes, type SessionCookie } from './routes/session.js';
import { totpRoutes } from './routes/totp.js';
import { uiRoutes } from './routes/ui.js';
import { SignInThrottle, type ThrottleOptions } from './sign-in-throttle.js';
import { addHsts, httpsServerOptions } from './tls.js';

export type { HttpDeps, StaffReads, StaffAuth } from './context.js';
export type { StaffStatus, Health } from '../app/staff-status.js';
export type { AlarmAck } from '../app/staff-actions.js';
export { UI_SECURITY_HEADERS } from './routes/ui.js';

/**
 * The gateway's local HTTP surface, kept thin: health, Prometheus metrics,
 * the staff sign-in, accounts, actions and read API (docs/gateway.md), one
 * plugin per resource under routes/. A request whose Host header names no
 * allowed host is refused first (421, DNS rebinding). Every `/staff/*` route
 * but the sign-in and setup ones needs either a staff session (the session
 * cookie, and on every state-changing request the session's CSRF token in
 * `X-CSRF-Token`) or the API token for automation (`Authorization: Bearer`,
 * compared in constant time, acting with the `staff` role). There is no
 * default password. `/metrics` needs the metrics token when one is
 * configured. Wrong tokens are counted per client address: past the limit it
 * gets 429 for the rest of the window; wrong passwords are throttled per
 * address and name (sign-in-throttle.ts). The checks run on request, before
 * the query or body is looked at, so a refused caller learns nothing.
 * Every request carries a correlation id (`X-Correlation-Id`, echoed, or a
 * fresh one) in its log line. One error handler hides 5xx details. The staff
 * web UI (gateway/ui: one HTML page, one ES module, one CSS file, no build
 * step) is served at /ui/ with a strict CSP.
 */

/** Codes the gateway's HTTP layer answers with (stable: clients match on the code; docs/gateway.md#http). */
export const GATEWAY_HTTP_CODES = Object.freeze({
  BAD_REQUEST: 'A malformed query, body, parameter or X-Correlation-Id; nothing changed.',
  NOT_FOUND: 'No such route.',
  HOST_NOT_ALLOWED: 'The Host header names no allowed host (http.allowedHosts; DNS rebinding guard); 421, before any auth.',
  UNAUTHORIZED: 'No live staff session and no bearer token, or not the staff (or metrics) token; 401.',
  AUTH_RATE_LIMITED:
    'Too many wrong tokens from this client address in the window (http.authFailures); 429 with Retry-After, whatever token is sent.',
  STAFF_AUTH_NOT_CONFIGURED: 'A bearer token was sent but no staff API token is configured (or accounts are not set up in this app); 503.',
  ALARM_NOT_FOUND: 'No such alarm (404).',
  INTERNAL: 'An internal error; details are in the log under the correlation id.',
  BAD_CREDENTIALS: 'Sign-in: no such username, or not its password (the answer does not say which); 401.',
  ACCOUNT_DISABLED: 'Sign-in with the right password of a disabled account; 403.',
  SIGN_IN_THROTTLED:
    'Too many wrong passwords (or setup codes) from this address for this name; 429 with Retry-After. Other addresses are not affected.',
  CSRF_TOKEN_INVALID: "A state-changing request with a session cookie but without the session's X-CSRF-Token; 403, nothing changed.",
  SETUP_CODE_INVALID: 'Setup: not the current one-time setup code, or it expired (a restart prints a new one); 403.',
  SETUP_ALREADY_DONE: 'Setup: an account exists already; supervisors create the others; 409.',
  WEAK_PASSWORD:
    'A password shorter than 12 characters, longer than 1024, of fewer than 5 different characters, or containing the username; 422.',
  USERNAME_TAKEN: 'An account with that username (compared without case) exists; 409.',
  ACCOUNT_NOT_FOUND: 'No such staff account; 404.',
  LAST_SUPERVISOR: 'Disabling the last enabled supervisor is refused (nobody could manage accounts then); 409.',
  NOT_SUPERVISOR: 'Only a supervisor may do this (remote unlock, passage, staff accounts); 403. The API token acts as staff.',
  REASON_REQUIRED:
    "Remote unlock, lifting a lockdown the cloud set, or resetting another supervisor's second factor, without a reason (blank after trimming); 422, nothing changed.",
  LOCK_NOT_FOUND: 'Remote unlock of a lock this gateway is not paired with; 404.',
  LOCK_OFFLINE: 'Remote unlock of a lock whose presence is offline: the command could not reach it; 409, nothing sent.',
  SITE_LOCKDOWN: 'Remote unlock while the site is in lockdown: end the lockdown first; 409, nothing sent.',
  TOO_MANY_STREAMS:
    'GET /staff/events over the open-stream limits (per session, per account, or in all); 429 with Retry-After: the page polls instead.',
  SIGN_IN_BUSY:
    'The gateway is checking as many passwords as it does at once and its queue is full (a sign-in flood); nothing was evaluated; 503 with Retry-After.',
  BREACHED_PASSWORD: 'A new password that is on the list of commonly used (breached) passwords, or one with digits added to one; 422.',
  CURRENT_PASSWORD_WRONG: 'Changing your own password: the current password given is not yours; 403, nothing changed.',
  SESSION_REQUIRED: 'Only a signed-in person can do this (their own password); the API token cannot; 403.',
  DOOR_NOT_FOUND: 'Passage for a door this gateway has no lock on; 404.',
  PASSAGE_GUEST_ROOM: "Passage for a door configured as a guest's room (locks[].guestRoom): never held open from here; 409.",
  PASSAGE_TOO_LONG: 'A passage schedule that would hold the door open more than 16 hours in a row; 422.',
  PRIVACY_ACTIVE: 'Remote unlock of a door whose guest has privacy on, without emergency: true; 409, nothing sent.',
  CLOUD_LOCKDOWN:
    'Lifting a lockdown the cloud set: only the cloud, or a supervisor signed in with a reason; never a staff member or the API token; 403.',
  CROSS_SITE_REQUEST: "A state-changing staff request made by another site's page (Origin or Sec-Fetch-Site); 403, nothing changed.",
  METRICS_TOKEN_NOT_CONFIGURED: 'GET /metrics on a gateway without a metricsToken: metrics are never open; 503.',
  TOTP_REQUIRED:
    "Sign-in: the password was right and the supervisor has a second factor: send a current code with the answer's challenge to POST /staff/session/totp; 401, no session yet.",
  TOTP_ENROLMENT_REQUIRED:
    "Sign-in under staffTotp required by a supervisor without a second factor: enrol with the answer's challenge (POST /staff/session/totp/enrolment) first; 401, no session yet.",
  TOTP_CHALLENGE_INVALID:
    'The second step of a sign-in with no live challenge: unknown, expired (5 min), used, too many wrong codes, or from another address; 401: sign in again.',
  TOTP_INVALID:
    "Not a current code of the supervisor's authenticator (one 30 s step of clock drift either way is allowed); 401 at sign-in, 403 in a session; throttled like a password.",
  TOTP_REPLAYED:
    'A code that was accepted once already (a code is single use, a later one must be waited for); 401 at sign-in, 403 in a session.',
  RECOVERY_CODE_INVALID: "Not one of the supervisor's recovery codes; 401 at sign-in, 403 in a session; throttled like a password.",
  RECOVERY_CODE_USED: 'A recovery code that was used already (each is good once); 401 at sign-in, 403 in a session.',
  TOTP_POLICY_OFF: 'Enrolling a second factor while the site policy (staffTotp.supervisors) is off; 409.',
  TOTP_ALREADY_ENROLLED: 'Starting an enrolment with a second factor already enrolled: turn it off (or have it reset) first; 409.',
  TOTP_NOT_ENROLLING: 'Confirming an enrolment that was not started (or was replaced or reset); 409.',
  TOTP_NOT_ENROLLED: 'Turning off a second factor that is not enrolled; 409.',
  TOTP_RESET_OWN: 'A supervisor resetting their own second factor: turn it off with password and code instead; 409.',
  REAUTH_REQUIRED:
    "Creating or enabling a supervisor account, resetting another account's password or second factor, or starting one's own enrolment, without the acting supervisor's currentPassword; 403, nothing changed.",
  REAUTH_FAILED:
    "The currentPassword given to confirm such an action is not the acting supervisor's; 403, nothing changed; counted in the sign-in throttle like a wrong password.",
  PASSWORD_RESET_OWN:
    "A supervisor setting their own password through the supervisors' reset: change it with POST /staff/session/password and the current one instead; 409, nothing changed.",
});
export type GatewayHttpCode = keyof typeof GATEWAY_HTTP_CODES;

/** A route as Fastify registered it (one per method; HEAD twins of GET routes included). */
export interface RegisteredRoute {
  readonly method: string;
  readonly url: string;
}
const routeTables = new WeakMap<FastifyInstance, RegisteredRoute[]>();
/** Every route `app` registered (after `ready()`/`listen()`), from Fastify's own onRoute hook: not a hand list. */
export const registeredRoutes = (app: FastifyInstance): readonly RegisteredRoute[] => routeTables.get(app) ?? [];

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Constant time in the token's length too: both sides are hashed first. */
function bearerMatches(req: FastifyRequest, token: string): boolean {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(h.slice(7)), digest(token));
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Why a request was made by another site's page (null: it was not, or no
 * browser says): `Sec-Fetch-Site` other than same-origin / none, or an
 * `Origin` whose host is not the `Host` asked for (`null` included).
 */
function crossSite(req: FastifyRequest): string | null {
  const site = req.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none') return `sec-fetch-site ${site.slice(0, 20)}`;
  const origin = req.headers.origin;
  if (origin === undefined) return null;
  try {
    const host = String(req.headers.host ?? '').toLowerCase();
    return new URL(origin).host.toLowerCase() === host ? null : 'origin';
  } catch {
    return 'origin';
  }
}

/**
 * The path a request is judged by: the pattern of the route it reached, else
 * (nothing matched) its decoded path with runs of slashes folded. The raw
 * URL is not: the router decodes `/%73taff/mode` to `/staff/mode`, so a check
 * on the raw spelling would let every other spelling of a path skip it.
 */
function judgedPath(req: FastifyRequest): string {
  const route = req.routeOptions.url;
  if (route !== undefined) return route;
  const raw = req.url.split('?')[0] ?? '';
  let path: string;
  try {
    path = decodeURIComponent(raw);
  } catch {
    path = raw;
  }
  return path.replace(/\/+/g, '/');
}
const underPrefix = (path: string, prefix: string) => path === prefix || path.startsWith(`${prefix}/`);

export function buildApp(
  deps: HttpDeps & { readonly signInThrottle?: Partial<ThrottleOptions>; readonly connections?: ConnectionConfig | undefined },
): FastifyInstance {
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
    // Fastify's default (100) is below the 128 characters a cloud id (a key id, percent-encoded too) may have
    routerOptions: { maxParamLength: 512 },
    // errors the router raises before any route or hook runs get this API's own body and code too
    frameworkErrors: (err, req, reply: FastifyReply) => {
      const tooLong = err.code === 'FST_ERR_MAX_PARAM_LENGTH';
      req.log.info({ code: tooLong ? 'URI_TOO_LONG' : 'BAD_REQUEST', fastifyCode: err.code }, 'request refused');
      void reply
        .status(tooLong ? 414 : 400)
        .header('x-correlation-id', req.id)
        .send({ code: tooLong ? 'URI_TOO_LONG' : 'BAD_REQUEST', detail: tooLong ? 'a path segment is too long' : 'malformed URL' });
    },
    http: { ...SERVER_CONNECTION_OPTIONS },
    ...httpsServerOptions(deps.tls),
  });
  addHsts(app, deps.tls);
  // Before any route: the server's sockets are bounded per address and in all, and idle ones time out in seconds.
  boundConnections(app.server, deps.connections, deps.log, deps.registry);

  app.setErrorHandler((err: { statusCode?: number; message?: string }, req, reply) => {
    if (err instanceof BadQuery) return reply.status(400).send({ code: 'BAD_REQUEST', detail: err.message });
    const status = err.statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'request failed');
    return reply
      .status(status)
      .send(
        status >= 500
          ? { code: 'INTERNAL', detail: `correlation id ${req.id}` }
          : { code: 'BAD_REQUEST', detail: err.message ?? 'bad request' },
      );
  });
  app.setNotFoundHandler((_req, reply) => reply.status(404).send({ code: 'NOT_FOUND' }));
  const routes: RegisteredRoute[] = [];
  routeTables.set(app, routes);
  app.addHook('onRoute', (r) => {
    for (const method of Array.isArray(r.method) ? r.method : [r.method]) routes.push({ method, url: r.url });
  });
  void app.register(fastifyCookie);
  app.decorateRequest('staffAuth', null);

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

  // Login CSRF and cross-site writes: a browser names where a request comes from. A state-changing staff
  // request another site made is refused before anything else looks at it; a client that sends neither
  // header (curl, automation) is not a browser page and is judged by its credentials alone.
  app.addHook('onRequest', async (req, reply) => {
    if (SAFE_METHODS.has(req.method) || !underPrefix(judgedPath(req), '/staff')) return undefined;
    const why = crossSite(req);
    if (why === null) return undefined;
    req.log.warn({ code: 'CROSS_SITE_REQUEST', why }, 'staff request refused');
    return reply.status(403).send({ code: 'CROSS_SITE_REQUEST' });
  });
  // Staff answers carry session and CSRF tokens and site data: no cache keeps them, no browser guesses their type.
  app.addHook('onSend', async (req, reply, payload) => {
    void reply.header('x-content-type-options', 'nosniff');
    const path = judgedPath(req);
    if (underPrefix(path, '/staff') || underPrefix(path, '/metrics')) void reply.header('cache-control', 'no-store');
    return payload;
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
      return reply
        .status(429)
        .header('retry-after', String(Math.ceil(wait / 1000)))
        .send({ code: 'AUTH_RATE_LIMITED' });
    }
    if (bearerMatches(req, token)) return undefined;
    // Only a presented token is a guess: the UI's first probe (and a monitor) send none, and must not use up the limit.
    if (req.headers.authorization !== undefined) limiter.failed(req.ip);
    req.log.warn({ code: 'UNAUTHORIZED', ip: req.ip }, `${what} request refused`);
    return reply.status(401).header('www-authenticate', 'Bearer').send({ code: 'UNAUTHORIZED' });
  };

  app.addHook('onResponse', async (req, reply) => {
    // No headers: the Authorization header must never reach a log.
    req.log.info(
      { method: req.method, url: req.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 },
      'http request',
    );
  });

  void app.register(async (root) => healthRoutes(root, deps, checkToken));
  void app.register(uiRoutes);

  // `__Host-`: sent only over HTTPS, for this host and path / only (no subdomain can set or read it).
  const cookie: SessionCookie =
    deps.secureCookies === true ? { name: '__Host-tobira_staff', secure: true } : { name: 'tobira_staff', secure: false };
  const throttle = new SignInThrottle(deps.now ?? Date.now, deps.signInThrottle, deps.accounts?.knownAddresses);
  void app.register(async (open) => openSessionRoutes(open, deps, cookie, throttle));

  void app.register(async (staff) => {
    staff.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
      const sid = req.cookies[cookie.name];
      const session = sid === undefined ? null : (deps.accounts?.session(sid) ?? null);
      if (session !== null) {
        // Synchronizer token: a cross-site form or script cannot know it (SameSite=Strict is the second line).
        if (!SAFE_METHODS.has(req.method)) {
          const t = req.headers['x-csrf-token'];
          if (typeof t !== 'string' || !sameSecret(t, session.csrfToken)) {
            req.log.warn({ code: 'CSRF_TOKEN_INVALID', accountId: session.account.accountId }, 'staff request refused');
            return reply.status(403).send({ code: 'CSRF_TOKEN_INVALID' });
          }
        }
        req.staffAuth = { actor: actorOf(session.account), session };
        return undefined;
      }
      if (req.headers.authorization === undefined) {
        req.log.warn({ code: 'UNAUTHORIZED', ip: req.ip, staleCookie: sid !== undefined }, 'staff request refused');
        if (sid !== undefined)
          void reply.clearCookie(cookie.name, { path: '/', httpOnly: true, sameSite: 'strict', secure: cookie.secure });
        return reply.status(401).send({ code: 'UNAUTHORIZED' });
      }
      if (deps.staffToken === undefined) {
        req.log.warn({ code: 'STAFF_AUTH_NOT_CONFIGURED' }, 'staff request refused');
        return reply.status(503).send({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
      }
      const refused = checkToken(req, reply, deps.staffToken, 'staff');
      if (refused !== undefined) return refused;
      req.staffAuth = { actor: tokenActor, session: null };
      return undefined;
    });

    await sessionRoutes(staff, deps, cookie, throttle);
    await accountsRoutes(staff, deps, throttle);
    await totpRoutes(staff, deps, throttle);
    await statusRoutes(staff, deps);
    await modeRoutes(staff, deps);
    await locksRoutes(staff, deps);
    await passageRoutes(staff, deps);
    await accessRoutes(staff, deps);
    await alarmsRoutes(staff, deps);
    await diagnosticsRoutes(staff, deps);
    await keysRoutes(staff, deps);
    await eventsRoutes(staff, deps);
  });

  return app;
}
