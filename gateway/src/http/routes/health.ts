import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { HttpDeps } from '../context.js';

/** undefined: the token matched; otherwise the refusal has been sent (app.ts's limiter counts it). */
export type TokenCheck = (req: FastifyRequest, reply: FastifyReply, token: string, what: 'staff' | 'metrics') => FastifyReply | undefined;

/**
 * GET /healthz (open: 200 or 503 with the reasons) and GET /metrics
 * (Prometheus, only with the metrics token: lock ids, counts and timings
 * tell an outsider which doors exist and when they are used; no token
 * configured is 503, never open).
 */
export async function healthRoutes(app: FastifyInstance, deps: HttpDeps, checkToken: TokenCheck): Promise<void> {
  app.get('/healthz', async (_req, reply) => {
    const h = deps.health();
    return reply.status(h.ok ? 200 : 503).send(h);
  });

  app.get('/metrics', async (req, reply) => {
    if (deps.metricsToken === undefined) {
      req.log.warn({ code: 'METRICS_TOKEN_NOT_CONFIGURED' }, 'metrics request refused');
      return reply.status(503).send({ code: 'METRICS_TOKEN_NOT_CONFIGURED' });
    }
    const refused = checkToken(req, reply, deps.metricsToken, 'metrics');
    if (refused !== undefined) return refused;
    const body = await deps.registry.metrics();
    return reply.header('content-type', deps.registry.contentType).send(body);
  });
}
