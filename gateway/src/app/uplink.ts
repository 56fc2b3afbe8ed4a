import {
  MAX_MESSAGE_BYTES,
  newCorrelationId,
  newMessageId,
  signMessage,
  topics,
  withCorrelation,
  type SigningKey,
  type UplinkBatchMessage,
  type UplinkMessage,
} from '@tobira/shared';
import type { Link } from '../adapters/mqtt/links.js';
import { markSent, pendingOutbox, unackedFrom, type OutboxRow } from '../adapters/sqlite/outbox.js';
import type { ResyncReason } from './apply.js';
import { nowOf, type AppContext } from './context.js';

/**
 * The uplink sender: claim -> send -> mark. It reads pending outbox rows in
 * seq order, packs runs of consecutive rows into `uplink.batch` messages (at
 * most `batchMax` rows and BATCH_BUDGET_BYTES each, one signature per batch;
 * a run of one row goes alone, as its own message), signs them (issuer =
 * gateway id, audience = cloud issuer, each row with its own jti and seq),
 * publishes them at QoS 1 in order on one connection, and marks a row sent
 * only after the broker's PUBACK of the message that carried it.
 * Guarantee: at least once, in seq order; a resend after a crash or an
 * outage carries the same jti and seq for every row (a batch envelope gets a
 * new jti: the cloud deduplicates the items, never the envelope).
 * While the cloud broker is unreachable rows just wait (bounded by disk; see
 * the outbox-full policy in docs/gateway.md).
 */
export interface UplinkDeps extends AppContext {
  readonly link: () => Link | null;
  /** The active uplink key, read when a row is signed (a rotation switches it; app/uplink-keys.ts). */
  readonly signingKey: () => Promise<SigningKey>;
  readonly cloudIssuer: string;
  /** Rows read per pass. */
  readonly batchSize: number;
  /** Rows per `uplink.batch` (config `uplinkBatchMax`); 1: every row is sent alone (a cloud older than the batch). */
  readonly batchMax: number;
}

/**
 * Bytes of item JSON one batch carries at most: the signed token is the
 * base64url of the claims (4/3) plus header and signature, and must stay
 * under MAX_MESSAGE_BYTES (64 KiB, the broker's and the cloud's limit).
 */
export const BATCH_BUDGET_BYTES = Math.floor(((MAX_MESSAGE_BYTES - 1024) * 3) / 4);

/** Runs of consecutive seqs, each at most `max` rows and `budget` bytes of item JSON (a row over the budget goes alone). */
export function packRows(rows: readonly OutboxRow[], max: number, budget = BATCH_BUDGET_BYTES): OutboxRow[][] {
  const units: OutboxRow[][] = [];
  let cur: OutboxRow[] = [];
  let bytes = 0;
  for (const r of rows) {
    const size = Buffer.byteLength(JSON.stringify(itemOf(r))) + 1;
    const last = cur[cur.length - 1];
    if (last !== undefined && (last.seq + 1 !== r.seq || cur.length >= max || bytes + size > budget)) {
      units.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(r);
    bytes += size;
  }
  if (cur.length > 0) units.push(cur);
  return units;
}

function itemOf(r: OutboxRow): UplinkBatchMessage['body']['items'][number] {
  return { type: r.type, seq: r.seq, jti: r.jti, cid: r.cid, body: r.body };
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
        const units = packRows(rows, deps.batchMax);
        try {
          const clock = { now: () => nowOf(deps) };
          const key = await deps.signingKey();
          const tokens = await Promise.all(
            units.map(async (unit) => {
              if (unit.length === 1) {
                const r = unit[0]!;
                const draft = { type: r.type, seq: r.seq, aud: deps.cloudIssuer, body: r.body, cid: r.cid, jti: r.jti };
                return (await signMessage<UplinkMessage>(key, deps.gatewayId, draft as never, clock)).token;
              }
              // the envelope's cid is its first row's: the batch's log lines meet that row's
              const draft = {
                type: 'uplink.batch',
                aud: deps.cloudIssuer,
                cid: unit[0]!.cid,
                jti: newMessageId(),
                body: { items: unit.map(itemOf) },
              };
              return (await signMessage<UplinkBatchMessage>(key, deps.gatewayId, draft as never, clock)).token;
            }),
          );
          // Published in seq order on one connection: the broker keeps that order.
          await Promise.all(
            tokens.map((t, i) =>
              link.publish(topic, t, { qos: 1 }).then(() => {
                for (const r of units[i]!) sent.push(r.seq);
                if (units[i]!.length > 1) deps.metrics.uplinkBatches.inc();
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
  // a conflict may be this store's restore: the cloud acknowledges our uplinks again from what we hold
  const from = reason === 'conflict' ? { uplinkUnackedFrom: unackedFrom(deps.store.db) } : {};
  const draft = { type: 'resync.request', aud: deps.cloudIssuer, cid, body: { requestId, lastAppliedSeq, reason, ...from } };
  deps
    .signingKey()
    .then((key) => signMessage<UplinkMessage>(key, deps.gatewayId, draft as never, { now: () => nowOf(deps) }))
    .then(({ token }) => link.publish(topics.gatewayUp(deps.gatewayId), token, { qos: 1 }))
    .catch((e: unknown) =>
      withCorrelation(deps.log, cid).warn({ err: e instanceof Error ? e.message : String(e) }, 'resync request not sent'),
    );
}
