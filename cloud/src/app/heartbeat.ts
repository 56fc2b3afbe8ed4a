import { newCorrelationId, signMessage, topics, withCorrelation, type DownlinkMessage } from '@tobira/shared';
import type { MqttLink } from '../adapters/mqtt/link.js';
import type { CloudSigner } from '../adapters/signer.js';
import type { AppDeps } from './deps.js';

type Draft = Parameters<typeof signMessage<DownlinkMessage>>[2];

/**
 * Heartbeats: every interval, each gateway not known to be offline (its
 * retained presence, with a last will) gets a signed heartbeat naming the
 * last seq the cloud has sent it (the highest `sent` outbox row). The
 * gateway extends its freshness lease only if it has applied up to that seq.
 * Skipping gateways known offline keeps heartbeats out of their broker
 * queues, where they would push out real messages; HEARTBEAT_QOS=0 goes further.
 */
export class Heartbeat {
  readonly #app: AppDeps;
  readonly #o: { link: MqttLink; signer: CloudSigner; intervalMs: number; qos: 0 | 1; publishTimeoutMs: number };
  #timer: NodeJS.Timeout | undefined;
  #busy = false;

  constructor(app: AppDeps, o: { link: MqttLink; signer: CloudSigner; intervalMs: number; qos: 0 | 1; publishTimeoutMs: number }) {
    this.#app = app;
    this.#o = o;
  }

  start(): void {
    this.#timer = setInterval(() => {
      if (this.#busy || !this.#o.link.connected) return;
      this.#busy = true;
      this.beat()
        .catch((e: unknown) => this.#app.log.warn({ err: String(e) }, 'heartbeat round failed'))
        .finally(() => {
          this.#busy = false;
        });
    }, this.#o.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
  }

  /** One round; returns what was sent to whom. */
  async beat(): Promise<{ gatewayId: string; lastSeq: number }[]> {
    const r = await this.#app.db.query<{ id: string; last_sent: number }>(
      `SELECT g.id, COALESCE((SELECT max(seq) FROM outbox o WHERE o.gateway_id = g.id AND o.status = 'sent'), 0) AS last_sent
         FROM gateways g WHERE g.online IS DISTINCT FROM false ORDER BY g.id`,
    );
    const sent: { gatewayId: string; lastSeq: number }[] = [];
    await Promise.all(r.rows.map(async (g) => {
      const cid = newCorrelationId();
      const draft = { type: 'heartbeat', aud: g.id, cid, ttlSeconds: Math.max(60, Math.ceil((3 * this.#o.intervalMs) / 1000)), body: { lastSeq: Number(g.last_sent), intervalMs: this.#o.intervalMs } } as Draft;
      try {
        const { token } = await signMessage<DownlinkMessage>(this.#o.signer.key, this.#o.signer.issuer, draft, this.#app.clock);
        await this.#o.link.publish(topics.gatewayDown(g.id), token, this.#o.publishTimeoutMs, this.#o.qos);
        sent.push({ gatewayId: g.id, lastSeq: Number(g.last_sent) });
      } catch (e) {
        withCorrelation(this.#app.log, cid, { gatewayId: g.id }).warn({ err: String(e) }, 'heartbeat not sent');
      }
    }));
    return sent.sort((a, b) => (a.gatewayId < b.gatewayId ? -1 : 1));
  }
}
