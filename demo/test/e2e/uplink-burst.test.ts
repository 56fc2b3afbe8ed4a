import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, backends, waitFor } from './system.js';

/**
 * Issue #14: a burst of access events leaves the gateway as `uplink.batch`
 * messages (several outbox rows under one signature) and lands in the cloud
 * audit exactly once each, in the gateway's seq order.
 */
describe.each(backends())('a burst of access events, end to end (%s brokers and database)', (backend) => {
  let sys: System;
  beforeAll(async () => {
    sys = await new System(backend).start();
  });
  afterAll(async () => {
    await sys.stop();
  });

  it('reaches the cloud audit exactly once per event, in seq order, sent in batches', async () => {
    const N = 60;
    const locks = sys.lockIds;
    // unknown PINs on every lock at once: each is a decision, and each decision an access event
    const results = await Promise.all(
      Array.from({ length: N }, (_, i) =>
        sys.fleet.lock(locks[i % locks.length]!).present({ type: 'pin', value: String(900000 + i) }, { timeoutMs: 20_000 }),
      ),
    );
    // the gateway's flood bound answers RATE_LIMITED without an access event (docs/gateway.md); every other decision has one
    const events = results.filter((r) => r.status === 'decided' && r.decision?.code !== 'RATE_LIMITED').length;
    expect(events).toBeGreaterThan(10);

    const sent = () =>
      (
        sys.gateway.store.db.prepare("SELECT seq, body FROM outbox WHERE type = 'access.event' ORDER BY seq").all() as {
          seq: number;
          body: string;
        }[]
      ).map((r) => ({ seq: r.seq, eventId: (JSON.parse(r.body) as { eventId: string }).eventId }));
    const atGateway = await waitFor(() => {
      const s = sent();
      return s.length >= events && s;
    }, 'the decisions in the gateway outbox');
    const audit = await waitFor(async () => {
      const rows = await sys.cloud.listAudit({ gatewayId: sys.gatewayId, limit: 10_000 });
      return rows.length >= atGateway.length && rows;
    }, 'every access event in the cloud audit');
    const bySeq = [...audit].sort((a, b) => a.seq - b.seq);
    expect(bySeq.map((a) => ({ seq: a.seq, eventId: a.eventId }))).toEqual(atGateway); // each once, the same seqs, nothing else
    expect(new Set(audit.map((a) => a.eventId)).size).toBe(audit.length);
    const batches = await sys.gateway.metrics.registry.getSingleMetricAsString('tobira_gateway_uplink_batches_total');
    expect(Number(/ (\d+)$/m.exec(batches)?.[1] ?? 0)).toBeGreaterThan(0);
  });
});
