import Fastify, { type FastifyInstance } from 'fastify';
import { PresentedCredential } from '@tobira/shared';
import type { Fleet } from '@tobira/firmware-sim';

/**
 * The demo's lock panel: a tiny HTTP surface so a person can "walk up to a
 * door" with curl. POST /locks/:lockId/present {type, value} presents a
 * credential at the simulated lock and answers with what happened (the
 * gateway's decision, the command the lock executed or refused, the bolt).
 * It binds to loopback only and exists only in the demo.
 */
export async function startLockPanel(fleet: Fleet, host: string, port: number): Promise<{ url: string; app: FastifyInstance }> {
  const app = Fastify({ logger: false, bodyLimit: 4096 });
  app.get('/locks', async () => fleet.locks.map((l) => ({ lockId: l.lockId, connected: l.connected, bolt: l.bolt })));
  app.post<{ Params: { lockId: string } }>('/locks/:lockId/present', async (req, reply) => {
    if (!fleet.lockIds.includes(req.params.lockId)) return reply.status(404).send({ status: 'refused', code: 'LOCK_NOT_FOUND' });
    const credential = PresentedCredential.safeParse(req.body);
    if (!credential.success)
      return reply
        .status(422)
        .send({ status: 'refused', code: 'BAD_CREDENTIAL', detail: credential.error.issues[0]?.message ?? 'invalid' });
    const r = await fleet.lock(req.params.lockId).present(credential.data, { timeoutMs: 5000 });
    return reply.status(r.status === 'decided' ? 200 : 504).send(r);
  });
  const address = await app.listen({ host, port });
  return { url: address, app };
}
