import { timingSafeEqual, createHash } from 'node:crypto';
import { SiteMode } from '@tobira/shared';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import type { Registry } from 'prom-client';
import { z } from 'zod';

/**
 * The gateway's local HTTP surface, kept thin: health, Prometheus metrics and
 * the staff lockdown switch. Staff actions need the configured staff token
 * (`Authorization: Bearer <token>`); with no token configured they are
 * refused (503), there is no default password. One error handler hides 5xx
 * details.
 */
export interface HttpDeps {
  health(): { ok: boolean; cloudConnected: boolean; siteConnected: boolean; mode: 'normal' | 'lockdown'; appliedSeq: number; leaseExpiresAt: number | null; leaseRemainingSeconds: number; inboxDepth: number; outboxDepth: number };
  readonly registry: Registry;
  readonly staffToken: string | undefined;
  setMode(mode: 'normal' | 'lockdown', by: string): { mode: 'normal' | 'lockdown'; changed: boolean };
}

const ModeBody = z.strictObject({ mode: SiteMode, reason: z.string().min(1).max(200).optional() });

const digest = (s: string) => createHash('sha256').update(s).digest();

function staffAllowed(req: FastifyRequest, token: string): boolean {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || !h.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(h.slice(7)), digest(token));
}

export function buildApp(deps: HttpDeps): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 16 * 1024 });
  app.setErrorHandler((err: { statusCode?: number; message?: string }, _req, reply) => {
    const status = err.statusCode ?? 500;
    void reply.status(status).send(status >= 500 ? { code: 'INTERNAL' } : { code: 'BAD_REQUEST', detail: err.message ?? 'bad request' });
  });

  app.get('/healthz', async (_req, reply) => {
    const h = deps.health();
    return reply.status(h.ok ? 200 : 503).send(h);
  });

  app.get('/metrics', async (_req, reply) => {
    const body = await deps.registry.metrics();
    return reply.header('content-type', deps.registry.contentType).send(body);
  });

  app.post('/staff/mode', async (req, reply) => {
    if (deps.staffToken === undefined) return reply.status(503).send({ code: 'STAFF_AUTH_NOT_CONFIGURED' });
    if (!staffAllowed(req, deps.staffToken)) return reply.status(401).send({ code: 'UNAUTHORIZED' });
    const body = ModeBody.safeParse(req.body);
    if (!body.success) return reply.status(422).send({ code: 'BAD_REQUEST' });
    const r = deps.setMode(body.data.mode, body.data.reason ?? 'staff');
    return reply.status(200).send({ status: r.changed ? 'applied' : 'noop', mode: r.mode });
  });

  return app;
}
