import { createHmac } from 'node:crypto';
import type { Clock, CorrelationId, Logger, OutcomeCode } from '@tobira/shared';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Registry } from 'prom-client';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Tx } from '../adapters/db/db.js';
import type { CloudVerbs } from '../app/port.js';
import type { ApiCode } from './codes.js';
import { claim, complete, hold, release } from '../adapters/db/idempotency.js';
import { answerKey, requestHash, seal, unseal } from './idempotency.js';
import type { Principal } from '../domain/tokens.js';

/** The verbs the API calls (the port app/port.ts; the cloud implements it, tests may pass a fake). */
export type AdminCloud = CloudVerbs;

export interface ApiConfig {
  /** Largest accepted body in bytes (413 PAYLOAD_TOO_LARGE beyond). */
  readonly bodyLimit: number;
  /** Requests per token (per client IP without a token) per window, counted after authentication; 429 RATE_LIMITED beyond. */
  readonly rateLimitMax: number;
  readonly rateLimitWindowMs: number;
  /**
   * Requests per client IP per window, counted before authentication (every
   * request, with a token or not), so a flood of bad or missing tokens is
   * refused before it costs a token lookup; 429 RATE_LIMITED beyond.
   */
  readonly rateLimitIpMax: number;
  /** Broker URL handed to a gateway at provisioning (null: the operator configures it). */
  readonly gatewayBrokerUrl: string | null;
  /**
   * Webhook URLs may point at loopback, private, link-local or other internal
   * addresses (SSRF guard off). Default false; tests and the all-on-one-box
   * demo turn it on (TOBIRA_WEBHOOK_ALLOW_PRIVATE=true).
   */
  readonly webhookAllowPrivateNetworks: boolean;
  /** Lifetime of a new API token when the request names none (ms); null: tokens do not expire unless asked. */
  readonly tokenDefaultTtlMs: number | null;
  /** How long `/readyz` waits for its database query before it reports DATABASE_UNREACHABLE (ms). */
  readonly healthDbTimeoutMs: number;
}
export const DEFAULT_API_CONFIG: ApiConfig = Object.freeze({
  bodyLimit: 64 * 1024,
  rateLimitMax: 600,
  rateLimitWindowMs: 60_000,
  rateLimitIpMax: 1_200,
  gatewayBrokerUrl: null,
  webhookAllowPrivateNetworks: false,
  tokenDefaultTtlMs: 90 * 86_400_000,
  healthDbTimeoutMs: 2_000,
});

export interface ApiDeps {
  readonly cloud: AdminCloud;
  /** The cloud's database (tokens, idempotency keys, scoped reads): `cloud.db`. */
  readonly db: Tx;
  readonly log: Logger;
  readonly clock: Clock;
  readonly config?: Partial<ApiConfig>;
  /** The cloud core's per-process metrics (processMetrics), scraped with the API's at GET /metrics; none: the API's only. */
  readonly processRegistry?: Registry;
}

/** A resource plugin's Fastify instance (zod type provider). */
export type Api = Parameters<FastifyPluginAsyncZod>[0];

export interface Ctx {
  readonly cloud: AdminCloud;
  readonly db: Tx;
  readonly clock: Clock;
  readonly config: ApiConfig;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
  }
  interface FastifyContextConfig {
    /** Only admin tokens (sites, tokens). */
    adminOnly?: boolean;
    /** No token needed (health, OpenAPI). */
    public?: boolean;
    /**
     * The answer may carry a secret shown once (a new API token, a gateway's
     * pepper and broker password, a webhook signing secret): no cache may keep it.
     */
    secretAnswer?: boolean;
  }
}

/** The clear bearer token of an authenticated request (the auth hook checked it). */
export function bearerOf(req: FastifyRequest): string {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) throw new Error('no bearer token on an authenticated route');
  return h.slice(7).trim();
}

/** The authenticated caller; the auth hook has run for every non-public route. */
export function who(req: FastifyRequest): Principal {
  if (!req.principal) throw new Error('no principal on an authenticated route');
  return req.principal;
}
export const cidOf = (req: FastifyRequest): CorrelationId => req.id as CorrelationId;

export interface OutcomeLike {
  readonly status: 'applied' | 'noop' | 'conflict' | 'refused';
  readonly code: string;
}
/** Outcome → HTTP status. `appliedAs` is 201 for creations, 202 when a gateway delivery is pending. */
export function statusOf(o: OutcomeLike, appliedAs: 200 | 201 | 202 = 200): number {
  switch (o.status) {
    case 'applied':
      return appliedAs;
    case 'noop':
      return 200;
    case 'conflict':
      return 409;
    case 'refused':
      if (o.code.endsWith('_NOT_FOUND')) return 404;
      // the token does not cover every site the row belongs to (which it does not name)
      if (o.code === 'PERSON_SHARED') return 403;
      if (o.code === 'BILLING_UNAVAILABLE' || o.code === 'BROKER_UNAVAILABLE') return 503;
      return 422;
  }
}

/** Every code the API answers: its own (codes.ts) and the verbs' (shared/src/codes.ts). */
export type AnswerCode = ApiCode | OutcomeCode;

export const problem = (code: AnswerCode, detail?: string, status: 'refused' | 'conflict' = 'refused') =>
  detail === undefined ? { status, code } : { status, code, detail };

export interface Answer {
  readonly statusCode: number;
  readonly body: Record<string, unknown>;
  readonly headers?: Record<string, string>;
}

/** Drops undefined properties (exactOptionalPropertyTypes: a parsed optional field may be undefined, a verb input may not). */
export type Defined<T> = { [K in keyof T as undefined extends T[K] ? never : K]: T[K] } & {
  [K in keyof T as undefined extends T[K] ? K : never]?: Exclude<T[K], undefined>;
};
export function defined<T extends object>(o: T): Defined<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Defined<T>;
}

const IDEMPOTENCY_KEY = /^[A-Za-z0-9_.:-]{1,200}$/;
/** What `idempotent` seals for a replay. */
const StoredAnswer = z.object({ body: z.unknown(), headers: z.record(z.string(), z.string()).optional() });

/** What a write route's body runs in. */
export interface Unit {
  /**
   * The open transaction of this request: every read and write of the route
   * goes through it, the verbs included (`ctx.cloud.issueKey(input, { db })`),
   * and the stored Idempotency-Key response commits in it too.
   */
  readonly db: Tx;
}

/** A 5xx answer rolls the unit back (nothing of a failed request stays). */
class Rollback {
  constructor(readonly answer: Answer) {}
}

/** The request's Idempotency-Key claim was taken over while it ran: its unit rolls back. */
class ClaimLost extends Error {
  constructor() {
    super('idempotency claim taken over');
  }
}

/**
 * Runs `run` in one transaction; `guard` runs first in it (it throws to keep `run` from running),
 * `store` writes the idempotent response in it. A 5xx answer is returned but rolled back.
 */
async function inUnit(
  ctx: Ctx,
  run: (u: Unit) => Promise<Answer>,
  store?: (db: Tx, a: Answer) => Promise<void>,
  guard?: (db: Tx) => Promise<void>,
): Promise<Answer> {
  try {
    return await ctx.db.transaction(async (db) => {
      await guard?.(db);
      const a = await run({ db });
      if (a.statusCode >= 500) throw new Rollback(a);
      await store?.(db, a);
      return a;
    });
  } catch (e) {
    if (e instanceof Rollback) return e.answer;
    throw e;
  }
}

/**
 * Runs a POST as one unit of work, under its Idempotency-Key when given.
 * The effect and the stored response commit in the same transaction, so a
 * replay answers exactly what the first request answered (secrets shown once,
 * such as a gateway's pepper, included: records are kept 24 h, see
 * adapters/db/api-purge.ts, sealed under a key only the caller's token opens, see
 * idempotency.ts), and a request that failed left nothing behind. A different
 * request under the key is 422 IDEMPOTENCY_KEY_REUSED; a duplicate while the
 * first still runs is 409 IDEMPOTENCY_IN_PROGRESS (retryable; the claim is a
 * committed lock row whose lease lets a retry take over from a crashed holder).
 * A holder slowed past the lease and taken over finds out inside its own
 * transaction, before it runs (`hold`, which also locks the row so nobody
 * takes over while it runs) or at the latest when it stores its answer
 * (`complete`): nothing it did commits, and it answers 409
 * IDEMPOTENCY_CLAIM_LOST (a retry replays the new holder's answer).
 */
export async function idempotent(ctx: Ctx, req: FastifyRequest, reply: FastifyReply, run: (u: Unit) => Promise<Answer>): Promise<void> {
  const p = who(req);
  const raw = req.headers['idempotency-key'];
  const send = (a: Answer): void => {
    if (a.headers) void reply.headers(a.headers);
    void reply.status(a.statusCode).send(a.body);
  };
  const say = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
    void reply.status(status).headers(headers).send(body);
  };
  if (raw === undefined) return send(await inUnit(ctx, run));
  if (typeof raw !== 'string' || !IDEMPOTENCY_KEY.test(raw))
    return say(400, problem('BAD_REQUEST', 'Idempotency-Key: 1-200 of [A-Za-z0-9_.:-]'));
  const hash = requestHash(req.method, req.routeOptions.url ?? req.url, req.params, req.body ?? null, {
    ifMatch: req.headers['if-match'] ?? null,
  });
  const key = answerKey(bearerOf(req), raw);
  const c = await claim(ctx.db, p.tokenId, raw, hash, ctx.clock.now());
  switch (c.kind) {
    case 'reused':
      return say(422, problem('IDEMPOTENCY_KEY_REUSED'));
    case 'in_progress':
      return say(409, problem('IDEMPOTENCY_IN_PROGRESS', undefined, 'conflict'), { 'retry-after': '1' });
    case 'replay': {
      const stored = StoredAnswer.safeParse(unseal(key, c.body));
      if (!stored.success) throw new Error('a stored idempotent answer does not open with the caller token');
      return say(c.statusCode, stored.data.body, { ...stored.data.headers, 'idempotent-replayed': 'true' });
    }
    case 'run':
      break;
  }
  let a: Answer;
  try {
    a = await inUnit(
      ctx,
      run,
      async (db, done) => {
        if (!(await complete(db, p.tokenId, raw, c.token, done.statusCode, seal(key, { body: done.body, headers: done.headers ?? {} }))))
          throw new ClaimLost();
      },
      async (db) => {
        if (!(await hold(db, p.tokenId, raw, c.token))) throw new ClaimLost();
      },
    );
  } catch (e) {
    if (e instanceof ClaimLost) {
      req.log.warn(
        { code: 'IDEMPOTENCY_CLAIM_LOST', idempotencyKey: raw },
        'request rolled back: its Idempotency-Key claim ran out and was taken over',
      );
      return say(
        409,
        problem('IDEMPOTENCY_CLAIM_LOST', 'another request with this key took it over; nothing of this one was kept', 'conflict'),
        { 'retry-after': '1' },
      );
    }
    await release(ctx.db, p.tokenId, raw, c.token).catch((err: unknown) =>
      req.log.warn({ err: String(err) }, 'idempotency release failed'),
    );
    throw e;
  }
  if (a.statusCode >= 500) await release(ctx.db, p.tokenId, raw, c.token);
  return send(a);
}

/**
 * One request at a time per (token, Idempotency-Key), for routes whose verb
 * calls Stripe between its own transactions and so cannot run inside the
 * idempotent unit (`POST /stays`, `POST /walk-ins`): the key is claimed in
 * the Idempotency-Key store while the verb runs and released after, so a
 * concurrent repeat answers 409 IDEMPOTENCY_IN_PROGRESS (retryable) instead
 * of racing the first, and a different request under a key in flight is 422
 * IDEMPOTENCY_KEY_REUSED. No answer is stored: a repeat after the first ends
 * runs the verb again, which answers the same booking as a noop, and a
 * refusal (a 503 from Stripe) leaves the key free for the retry. A holder
 * that died keeps the key until its claim runs out (60 s). The request's
 * hash is an HMAC under the caller's token (as sealed answers are), since
 * the body holds the guest's credential in clear.
 */
export async function oneAtATime(ctx: Ctx, req: FastifyRequest, reply: FastifyReply, run: () => Promise<Answer>): Promise<void> {
  const p = who(req);
  const raw = req.headers['idempotency-key'];
  const send = (a: Answer): void => {
    if (a.headers) void reply.headers(a.headers);
    void reply.status(a.statusCode).send(a.body);
  };
  if (raw === undefined) return send(await run());
  if (typeof raw !== 'string' || !IDEMPOTENCY_KEY.test(raw))
    return void reply.status(400).send(problem('BAD_REQUEST', 'Idempotency-Key: 1-200 of [A-Za-z0-9_.:-]'));
  const hash = createHmac('sha256', answerKey(bearerOf(req), raw))
    .update(requestHash(req.method, req.routeOptions.url ?? req.url, req.params, req.body ?? null, {}))
    .digest('hex');
  const c = await claim(ctx.db, p.tokenId, raw, hash, ctx.clock.now());
  if (c.kind === 'reused') return void reply.status(422).send(problem('IDEMPOTENCY_KEY_REUSED'));
  // 'replay' cannot come from this route's own use of the key (it stores no answer); another route's finished key is in use
  if (c.kind === 'in_progress' || c.kind === 'replay')
    return void reply
      .status(409)
      .headers({ 'retry-after': '1' })
      .send(problem('IDEMPOTENCY_IN_PROGRESS', undefined, 'conflict'));
  let a: Answer;
  try {
    a = await run();
  } finally {
    // released before the answer goes out: a retry the client makes on it finds the key free
    await release(ctx.db, p.tokenId, raw, c.token).catch((err: unknown) =>
      req.log.warn({ err: String(err) }, 'idempotency release failed'),
    );
  }
  send(a);
}
