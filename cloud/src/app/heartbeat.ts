import { newCorrelationId, signMessage, topics, withCorrelation, type DownlinkMessage, type MessageOf } from '@tobira/shared';
import { randomUUID } from 'node:crypto';
import { heartbeatTargets } from '../adapters/db/gateways.js';
import { takeRoundLease } from '../adapters/db/leases.js';
import type { MqttLink } from '../adapters/mqtt/link.js';
import type { CloudSigner } from '../adapters/signer.js';
import type { AppDeps } from './deps.js';

type HeartbeatMessage = MessageOf<DownlinkMessage, 'heartbeat'>;

/**
 * Heartbeats: every interval, each gateway not known to be offline (its
 * retained presence, with a last will) gets a signed heartbeat naming the
 * last seq the cloud has **handed out** to it (gateway_seq: committed, sent
 * or not — a revoke waiting out a backoff or dead-lettered included). The
 * gateway extends its freshness lease only once it has applied up to that
 * seq, so a stuck revoke leaves it behind (it asks for a resync, which
 * replays pending and dead rows too) and failing closed, never fresh.
 * Its `iat` is the time read before that seq, never a later one: the gateway
 * counts the lease from `iat`, so a later one would stretch the lease over a
 * revoke committed in between that the heartbeat does not name.
 * The heartbeat also acknowledges the gateway's uplinks (uplink_seq.acked_*),
 * which the gateway keeps until then.
 * Skipping gateways known offline keeps heartbeats out of their broker
 * queues, where they would push out real messages; HEARTBEAT_QOS=0 goes further.
 * With several replicas, the timer's round runs on one of them per interval:
 * each tick first takes the round lease `heartbeat` (cloud_leases, 0021) for
 * 90 % of the interval, and a replica that does not get it skips the round
 * (so a gateway gets one heartbeat per interval, not one per replica; if the
 * holder dies, another replica takes the next round). `beat()` itself (the
 * demo's and tests' `sendHeartbeats`) sends regardless.
 */
export class Heartbeat {
  readonly #app: AppDeps;
  readonly #o: { link: MqttLink; signer: CloudSigner; intervalMs: number; qos: 0 | 1; publishTimeoutMs: number };
  #timer: NodeJS.Timeout | undefined;
  #busy = false;
  readonly #holder = randomUUID();

  constructor(app: AppDeps, o: { link: MqttLink; signer: CloudSigner; intervalMs: number; qos: 0 | 1; publishTimeoutMs: number }) {
    this.#app = app;
    this.#o = o;
  }

  start(): void {
    this.#timer = setInterval(() => {
      if (this.#busy || !this.#o.link.connected) return;
      this.#busy = true;
      this.round()
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

  /** The timer's round: sent only by the replica holding this interval's lease; false when another one has it. */
  async round(): Promise<boolean> {
    const mine = await takeRoundLease(this.#app.db, 'heartbeat', this.#holder, Math.max(1, Math.floor(this.#o.intervalMs * 0.9)));
    if (mine) await this.beat();
    return mine;
  }

  /** One round; returns what was sent to whom. */
  async beat(): Promise<{ gatewayId: string; lastSeq: number }[]> {
    // The time is taken before the last seq is read, and every heartbeat of the round is signed with it:
    // a revoke that commits after the read (while the signing-key read or the publish is slow) then lies
    // after the iat, so a heartbeat that does not name it never grants a lease counted from after it.
    const at = this.#app.clock.now();
    const signedAt = { now: () => at };
    const targets = await heartbeatTargets(this.#app.db);
    await this.#o.signer.refresh(this.#app.db);
    const sent: { gatewayId: string; lastSeq: number }[] = [];
    await Promise.all(
      targets.map(async ({ gatewayId, lastSeq, ackedSeq, ackedJti }) => {
        const cid = newCorrelationId();
        const body = {
          lastSeq,
          intervalMs: this.#o.intervalMs,
          ...(ackedSeq > 0 && ackedJti !== null ? { uplinkAck: { seq: ackedSeq, jti: ackedJti } } : {}),
        };
        const draft = {
          type: 'heartbeat' as const,
          aud: gatewayId,
          cid,
          ttlSeconds: Math.max(60, Math.ceil((3 * this.#o.intervalMs) / 1000)),
          body,
        };
        try {
          const { token } = await signMessage<HeartbeatMessage>(this.#o.signer.key, this.#o.signer.issuer, draft, signedAt);
          await this.#o.link.publish(topics.gatewayDown(gatewayId), token, this.#o.publishTimeoutMs, this.#o.qos);
          sent.push({ gatewayId, lastSeq });
        } catch (e) {
          withCorrelation(this.#app.log, cid, { gatewayId }).warn({ err: String(e) }, 'heartbeat not sent');
        }
      }),
    );
    return sent.sort((a, b) => (a.gatewayId < b.gatewayId ? -1 : 1));
  }
}
