import { cloudMetrics } from './metrics.js';
import { createHash } from 'node:crypto';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { CorrelationId, newCorrelationId } from '@tobira/shared';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify';
import {
  hasZodFastifySchemaValidationErrors,
  isResponseSerializationError,
  jsonSchemaTransform,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import { z } from 'zod';
import { pgErrorCode, type Tx } from '../adapters/db/db.js';
import type { ApiCode } from './codes.js';
import { DEFAULT_API_CONFIG, problem, type ApiDeps, type Ctx } from './context.js';
import { authenticate } from '../adapters/db/tokens.js';
import { TOKEN_EXPIRES_HEADER, expiryWarning } from './tokens.js';
import { sitesRoutes } from './routes/sites.js';
import { gatewaysRoutes } from './routes/gateways.js';
import { doorsRoutes } from './routes/doors.js';
import { peopleRoutes } from './routes/people.js';
import { keysRoutes } from './routes/keys.js';
import { mobileTokensRoutes } from './routes/mobile-tokens.js';
import { eventsRoutes } from './routes/events.js';
import { billingRoutes } from './routes/billing.js';
import { deadLettersRoutes } from './routes/dead-letters.js';
import { notificationsRoutes } from './routes/notifications.js';
import { tokensRoutes } from './routes/tokens.js';
import { webhooksRoutes } from './routes/webhooks.js';
import { alarmsRoutes } from './routes/alarms.js';
import { staffActionsRoutes } from './routes/staff-actions.js';
import { rejectedUplinksRoutes } from './routes/rejected-uplinks.js';
import { gatewayHealthRoutes } from './routes/gateway-health.js';
import { staysRoutes } from './routes/stays.js';
import { roomsRoutes } from './routes/rooms.js';
import { stripeWebhookRoutes } from './routes/stripe-webhook.js';
import { payReturnRoutes } from './routes/pay-return.js';
import { plansRoutes } from './routes/plans.js';
import { membershipsRoutes } from './routes/memberships.js';
import { signingKeysRoutes } from './routes/signing-keys.js';
import { modesRoutes } from './routes/modes.js';
import { walkInsRoutes } from './routes/walk-ins.js';

export type ApiApp = FastifyInstance;

const ROUTES = new WeakMap<FastifyInstance, { method: string; url: string; hidden: boolean }[]>();
/** Every route the app registered (for the OpenAPI completeness test and the docs). */
export const routesOf = (app: FastifyInstance): readonly { method: string; url: string; hidden: boolean }[] => ROUTES.get(app) ?? [];

const PUBLIC_PREFIXES = ['/docs', '/openapi.json', '/healthz', '/readyz'];
/** The longest path segment the router matches; longer is 414 URI_TOO_LONG (ids are at most 128 characters). */
export const MAX_PARAM_LENGTH = 512;
const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** True when any string (or key) in a parsed value holds a NUL, which PostgreSQL text cannot store. */
function hasNul(v: unknown, depth = 0): boolean {
  if (typeof v === 'string') return v.includes('\u0000');
  if (depth > 64 || v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) return v.some((x) => hasNul(x, depth + 1));
  return Object.entries(v).some(([k, x]) => k.includes('\u0000') || hasNul(x, depth + 1));
}

/**
 * node-postgres's own errors for a connection lost or never made: they carry no code, only these
 * messages (pg's client.js and pg-pool's index.js), so they are matched by their beginning.
 */
const LOST_CONNECTION_MESSAGES = [
  'Connection terminated',
  'Client has encountered a connection error',
  'Client was closed and is not queryable',
  'timeout exceeded when trying to connect',
];

/** Driver errors that mean the database is unreachable, not that the request was bad. */
function dependencyDown(e: unknown): boolean {
  const code = pgErrorCode(e);
  if (code === undefined) {
    return e instanceof Error && LOST_CONNECTION_MESSAGES.some((m) => e.message.startsWith(m));
  }
  return ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', '57P01', '57P03', '53300'].includes(code) || code.startsWith('08');
}

/** Why `/readyz` answers 503 (codes.ts). */
const HEALTH_REASONS = ['DATABASE_UNREACHABLE', 'BROKER_DISCONNECTED'] as const satisfies readonly ApiCode[];

/** null when `SELECT 1` answers within `timeoutMs`, else why not: a hung connection counts as down, not as a hung health check. */
async function databaseFailure(db: Tx, timeoutMs: number): Promise<string | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(`no answer within ${timeoutMs} ms`), timeoutMs);
  });
  try {
    return await Promise.race([
      db.query('SELECT 1').then(
        () => null,
        (e: unknown) => String(e),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The admin HTTP API (docs/api.md), thin over the cloud's verbs: each
 * resource is a plugin, every body/query/param is a strict zod schema, every
 * status has a response schema, and one error handler answers with stable
 * codes and hides 5xx details (logged with the correlation id). Listening is
 * server.ts's job; tests use `app.inject`.
 */
export async function buildApp(deps: ApiDeps): Promise<FastifyInstance> {
  const config = { ...DEFAULT_API_CONFIG, ...deps.config };
  const ctx: Ctx = { cloud: deps.cloud, db: deps.db, clock: deps.clock, config };
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: config.bodyLimit,
    logController: new LogController({ requestIdLogLabel: 'cid' }),
    requestIdHeader: false,
    genReqId: (req) => {
      const h = req.headers['x-correlation-id'];
      return typeof h === 'string' && CorrelationId.safeParse(h).success ? h : newCorrelationId();
    },
    // Fastify's default (100) is below the 128 characters an id may have, and a longer segment would
    // be answered by Fastify itself: every id the schemas accept fits, percent-encoded too (3 × 128)
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    // errors the router raises before any route or hook runs get the API's own body and code too
    frameworkErrors: (err, req, reply: FastifyReply) => {
      const tooLong = err.code === 'FST_ERR_MAX_PARAM_LENGTH';
      const code = tooLong ? 'URI_TOO_LONG' : 'BAD_REQUEST';
      req.log.info({ code, fastifyCode: err.code }, 'request refused');
      void reply
        .status(tooLong ? 414 : 400)
        .header('x-correlation-id', req.id)
        .send(problem(code, tooLong ? `a path segment is longer than ${MAX_PARAM_LENGTH} characters` : 'malformed URL'));
    },
  });
  const routes: { method: string; url: string; hidden: boolean }[] = [];
  ROUTES.set(app, routes);
  app.addHook('onRoute', (r) => {
    for (const method of [r.method].flat()) {
      if (method !== 'HEAD')
        routes.push({
          method,
          url: r.url,
          hidden: (r.schema as { hide?: boolean } | undefined)?.hide === true || r.url.startsWith('/docs'),
        });
    }
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.decorateRequest('principal', null);
  // JSON only: a text/plain body is 415, not a string the schema then refuses
  app.removeContentTypeParser('text/plain');

  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (hasZodFastifySchemaValidationErrors(err)) {
      const detail = err.validation
        .slice(0, 10)
        .map((v) => `${err.validationContext ?? ''}${v.instancePath || ''}: ${v.message ?? 'invalid'}`)
        .join('; ');
      req.log.info({ code: 'BAD_REQUEST', detail }, 'request refused');
      return reply.status(400).send(problem('BAD_REQUEST', detail));
    }
    if (isResponseSerializationError(err)) {
      req.log.error({ err, issues: err.cause.issues }, 'response does not match its schema');
      return reply.status(500).send(problem('INTERNAL'));
    }
    const code = err.code;
    if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err instanceof SyntaxError) {
      req.log.info({ code: 'MALFORMED_JSON' }, 'request refused');
      return reply
        .status(400)
        .send(problem('MALFORMED_JSON', code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'empty body' : 'body is not valid JSON'));
    }
    if (code === 'FST_ERR_CTP_BODY_TOO_LARGE')
      return reply.status(413).send(problem('PAYLOAD_TOO_LARGE', `limit ${config.bodyLimit} bytes`));
    if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE')
      return reply.status(415).send(problem('UNSUPPORTED_MEDIA_TYPE', 'send application/json'));
    if (err.statusCode === 429) return reply.status(429).send(problem('RATE_LIMITED', err.message));
    if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
      return reply.status(err.statusCode).send(problem('BAD_REQUEST', err.message));
    }
    if (dependencyDown(err)) {
      req.log.error({ err }, 'dependency down');
      return reply.status(503).header('retry-after', '5').send(problem('SERVICE_UNAVAILABLE'));
    }
    req.log.error({ err }, 'internal error');
    return reply.status(500).send(problem('INTERNAL', `correlation id ${req.id}`));
  });
  app.setNotFoundHandler((_req, reply) => reply.status(404).send(problem('NOT_FOUND', 'no such route')));

  // every answer is what its content type says; one that may carry a secret is kept by no cache, replays included
  app.addHook('onSend', async (req, reply, payload) => {
    void reply.header('x-content-type-options', 'nosniff');
    if (req.routeOptions.config.secretAnswer === true) void reply.header('cache-control', 'no-store');
    return payload;
  });

  const metrics = cloudMetrics(deps.db, deps.clock, deps.processRegistry);
  // latency by route pattern (not the URL: an id per series would grow without bound); unmatched URLs share one series
  app.addHook('onResponse', async (req, reply) => {
    metrics.observeHttp(req.routeOptions.url ?? 'unmatched', req.method, reply.statusCode, reply.elapsedTime / 1000);
  });

  // correlation id: a bad X-Correlation-Id is refused rather than silently replaced
  app.addHook('onRequest', async (req, reply) => {
    void reply.header('x-correlation-id', req.id);
    const h = req.headers['x-correlation-id'];
    if (h !== undefined && (typeof h !== 'string' || !CorrelationId.safeParse(h).success)) {
      return reply.status(400).send(problem('BAD_REQUEST', 'X-Correlation-Id: 1-128 of [A-Za-z0-9_.:-]'));
    }
    return undefined;
  });

  // before the schemas: a NUL would otherwise pass a free-text schema and fail in the database as a 500
  app.addHook('preValidation', async (req, reply) => {
    if (hasNul(req.body) || hasNul(req.query) || hasNul(req.params)) {
      req.log.info({ code: 'BAD_REQUEST' }, 'request refused: NUL character');
      return reply.status(400).send(problem('BAD_REQUEST', 'strings may not contain NUL (\\u0000)'));
    }
    return undefined;
  });

  await app.register(rateLimit, {
    global: true,
    max: config.rateLimitMax,
    timeWindow: config.rateLimitWindowMs,
    // per token (its hash, so the clear token never sits in memory as a map key); per IP without one
    keyGenerator: (req) => {
      const h = req.headers.authorization;
      return typeof h === 'string' && h.startsWith('Bearer ')
        ? `t:${createHash('sha256').update(h.slice(7)).digest('hex')}`
        : `ip:${req.ip}`;
    },
    errorResponseBuilder: (_req, c) => ({ statusCode: 429, code: 'RATE_LIMITED' satisfies ApiCode, message: `retry in ${c.after}` }),
  });

  // Per client IP, before authentication: the per-token limiter above is a route hook, and route
  // hooks run after the app's onRequest hooks, so on its own it never sees a request the auth hook
  // refuses; without this a flood of bad tokens would cost a database lookup each, unlimited.
  // createRateLimit (not app.rateLimit) so this check does not set the flag that makes the
  // per-token hook skip the request.
  const perIp = app.createRateLimit({
    max: config.rateLimitIpMax,
    timeWindow: config.rateLimitWindowMs,
    keyGenerator: (req) => `ip:${req.ip}`,
  });
  app.addHook('onRequest', async (req, reply) => {
    const r = await perIp(req);
    if (r.isAllowed || !r.isExceeded) return undefined;
    req.log.info({ code: 'RATE_LIMITED', ip: req.ip, limit: 'ip' }, 'request refused');
    return reply
      .status(429)
      .header('retry-after', String(r.ttlInSeconds))
      .send(problem('RATE_LIMITED', `too many requests from this address; retry in ${r.ttlInSeconds} s`));
  });

  // authentication, then role: before the body is parsed, so a refused request writes nothing
  app.addHook('onRequest', async (req, reply) => {
    const path = req.url.split('?')[0] ?? '';
    if (req.routeOptions.config.public || PUBLIC_PREFIXES.some((p) => path === p || path.startsWith(`${p}/`))) return undefined;
    const h = req.headers.authorization;
    const token = typeof h === 'string' && h.startsWith('Bearer ') ? h.slice(7).trim() : undefined;
    const now = deps.clock.now();
    const a = token ? await authenticate(deps.db, token, now) : ({ kind: 'unknown' } as const);
    if (a.kind === 'expired') {
      req.log.info({ code: 'TOKEN_EXPIRED', tokenId: a.tokenId }, 'request refused');
      const at = new Date(a.expiresAt).toISOString();
      return reply
        .status(401)
        .header('www-authenticate', 'Bearer error="invalid_token", error_description="token expired"')
        .send(problem('TOKEN_EXPIRED', `expired at ${at}`));
    }
    if (a.kind !== 'ok') {
      req.log.info({ code: 'UNAUTHENTICATED' }, 'request refused');
      return reply.status(401).header('www-authenticate', 'Bearer').send(problem('UNAUTHENTICATED'));
    }
    const p = a.principal;
    req.principal = p;
    req.log = req.log.child({ tokenId: p.tokenId, role: p.role });
    // so a property system rotates in time: on every answer in the last week of the token's life
    const expiring = expiryWarning(a.expiresAt, now);
    if (expiring !== undefined) void reply.header(TOKEN_EXPIRES_HEADER, expiring);
    const auditorWrite = p.role === 'auditor' && WRITE_METHODS.has(req.method) && !req.routeOptions.config.selfService;
    // an admin limited to some sites may not act on every site through a route that does (signing keys, sites, ...)
    const cfg = req.routeOptions.config;
    const notAdminEnough = cfg.adminOnly === true && (p.role !== 'admin' || (p.sites !== null && cfg.scopedAdmin !== true));
    if (auditorWrite || notAdminEnough) {
      req.log.info({ code: 'FORBIDDEN_ROLE' }, 'request refused');
      return reply.status(403).send(problem('FORBIDDEN_ROLE', p.role === 'admin' ? 'an admin of every site only' : `role ${p.role}`));
    }
    return undefined;
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: { title: 'Tobira cloud admin API', version: '1.0.0', description: 'See docs/api.md. Every answer is {status, code, ...}.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  const z_ = app.withTypeProvider<ZodTypeProvider>();
  // Both dependencies are asked on each call (a load balancer takes a replica out on 503); concurrent calls share one query.
  let dbCheck: Promise<string | null> | null = null;
  const databaseCheck = (): Promise<string | null> =>
    (dbCheck ??= databaseFailure(deps.db, config.healthDbTimeoutMs).finally(() => {
      dbCheck = null;
    }));
  const Health = z.object({
    ok: z.boolean(),
    status: z.enum(['ok', 'unavailable']),
    code: z.literal('SERVICE_UNAVAILABLE').optional(),
    reasons: z.array(z.enum(HEALTH_REASONS)),
  });
  // live: the process answers (a supervisor restarts it otherwise); readiness is /readyz
  z_.get('/healthz', { config: { public: true }, schema: { hide: true, response: { 200: Health } } }, async (_req, reply) =>
    reply.status(200).send({ ok: true, status: 'ok', reasons: [] }),
  );
  z_.get('/readyz', { config: { public: true }, schema: { hide: true, response: { 200: Health, 503: Health } } }, async (req, reply) => {
    const reasons: (typeof HEALTH_REASONS)[number][] = [];
    const dbFailure = await databaseCheck();
    if (dbFailure !== null) reasons.push('DATABASE_UNREACHABLE');
    if (!deps.cloud.mqttConnected) reasons.push('BROKER_DISCONNECTED');
    if (reasons.length === 0) return reply.status(200).send({ ok: true, status: 'ok', reasons });
    req.log.warn(
      { code: 'SERVICE_UNAVAILABLE', reasons, ...(dbFailure === null ? {} : { database: dbFailure }) },
      'readiness check failed',
    );
    return reply.status(503).header('retry-after', '5').send({ ok: false, status: 'unavailable', code: 'SERVICE_UNAVAILABLE', reasons });
  });
  z_.get('/openapi.json', { config: { public: true }, schema: { hide: true } }, async () => app.swagger());
  // Prometheus text; admin tokens only (it names every gateway)
  z_.get('/metrics', { config: { adminOnly: true }, schema: { hide: true } }, async (_req, reply) =>
    reply.header('content-type', metrics.contentType).send(await metrics.metrics()),
  );

  for (const plugin of [
    sitesRoutes,
    gatewaysRoutes,
    doorsRoutes,
    peopleRoutes,
    keysRoutes,
    eventsRoutes,
    deadLettersRoutes,
    tokensRoutes,
    webhooksRoutes,
    alarmsRoutes,
    rejectedUplinksRoutes,
    gatewayHealthRoutes,
    staysRoutes,
    billingRoutes,
    roomsRoutes,
    stripeWebhookRoutes,
    payReturnRoutes,
    notificationsRoutes,
    plansRoutes,
    membershipsRoutes,
    staffActionsRoutes,
    signingKeysRoutes,
    mobileTokensRoutes,
    modesRoutes,
    walkInsRoutes,
  ]) {
    await app.register(async (scope) => plugin(scope.withTypeProvider<ZodTypeProvider>(), ctx));
  }
  return app;
}
