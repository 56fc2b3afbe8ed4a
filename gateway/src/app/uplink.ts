import { newCorrelationId, signMessage, topics, withCorrelation, type SigningKey, type UplinkMessage } from '@tobira/shared';
import type { Link } from '../adapters/mqtt/links.js';
import { markSent, pendingOutbox } from '../adapters/sqlite/outbox.js';
import type { ResyncReason } from './apply.js';
import { nowOf, type AppContext } from './context.js';

/**
 * The uplink sender: claim -> send -> mark. It reads pending outbox rows in
 * seq order, signs each (issuer = gateway id, audience = cloud issuer, the
 * row's own jti and seq), publishes them at QoS 1 in order on one connection,
 * and marks a row sent only after the broker's PUBACK.
 * Guarantee: at least once, in seq order; a resend after a crash or an
 * outage carries the same jti and seq, so the cloud deduplicates by jti.
 * While the cloud broker is unreachable rows just wait (bounded by disk; see
 * the outbox-full policy in docs/gateway.md).
 */
export interface UplinkDeps extends AppContext {
  readonly link: () => Link | null;
  /** The active uplink key, read when a row is signed (a rotation switches it; app/uplink-keys.ts). */
  readonly signingKey: () => Promise<SigningKey>;
  readonly cloudIssuer: string;
  readonly batchSize: number;
}

export class UplinkSender {
  #running = false;
  #again = false;
  #idle: Promise<void> = Promise.resolve();
  constructor(private readonly deps: UplinkDeps) {}

  /** Starts a drain pass unless one runs (then it runs once more afterwards). */
  wake(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = true;
    this.#idle = this.#drain()
      .catch((e: unknown) => withCorrelation(this.deps.log, newCorrelationId()).error({ err: e }, 'uplink pass failed; rows stay pending'))
      .finally(() => {
        this.#running = false;
      });
  }

  /** Resolves when the current pass is over. */
  idle(): Promise<void> {
    return this.#idle;
  }

  async #drain(): Promise<void> {
    const { deps } = this;
    const topic = topics.gatewayUp(deps.gatewayId);
    do {
      this.#again = false;
      for (;;) {
        const link = deps.link();
        if (link === null || !link.connected) return;
        const rows = pendingOutbox(deps.store.db, deps.batchSize);
        if (rows.length === 0) break;
        const sent: number[] = [];
        try {
          const key = await deps.signingKey();
          const tokens = await Promise.all(
            rows.map(async (r) => {
              const draft = { type: r.type, seq: r.seq, aud: deps.cloudIssuer, body: r.body, cid: r.cid, jti: r.jti };
              return (await signMessage<UplinkMessage>(key, deps.gatewayId, draft as never, { now: () => nowOf(deps) })).token;
            }),
          );
          // Published in seq order on one connection: the broker keeps that order.
          await Promise.all(
            tokens.map((t, i) =>
              link.publish(topic, t, { qos: 1 }).then(() => {
                sent.push(rows[i]!.seq);
              }),
            ),
          );
        } catch (e) {
          withCorrelation(deps.log, rows[0]!.cid, { fromSeq: rows[0]!.seq }).warn(
            { err: e instanceof Error ? e.message : String(e), pending: rows.length - sent.length },
            'uplink publish interrupted; will resend',
          );
          if (sent.length > 0) markSent(deps.store.db, sent, nowOf(deps));
          return;
        } finally {
          if (sent.length === rows.length) markSent(deps.store.db, sent, nowOf(deps));
        }
        deps.metrics.uplinkSent.inc(sent.length);
      }
    } while (this.#again);
  }
}

/** Sends a signed resync.request right away (unsequenced, not through the outbox: the next heartbeat repeats it if lost). */
export function sendResyncRequest(deps: UplinkDeps, reason: ResyncReason, lastAppliedSeq: number, cid: string, requestId: string): void {
  const link = deps.link();
  if (link === null || !link.connected) return;
  const draft = { type: 'resync.request', aud: deps.cloudIssuer, cid, body: { requestId, lastAppliedSeq, reason } };
  deps
    .signingKey()
    .then((key) => signMessage<UplinkMessage>(key, deps.gatewayId, draft as never, { now: () => nowOf(deps) }))
    .then(({ token }) => link.publish(topics.gatewayUp(deps.gatewayId), token, { qos: 1 }))
    .catch((e: unknown) =>
      withCorrelation(deps.log, cid).warn({ err: e instanceof Error ? e.message : String(e) }, 'resync request not sent'),
    );
}
