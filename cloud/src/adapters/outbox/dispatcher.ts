import { randomUUID } from 'node:crypto';
import {
  signMessage,
  topics,
  withCorrelation,
  type Clock,
  type CorrelationId,
  type DownlinkMessage,
  type Logger,
  type MessageId,
} from '@tobira/shared';
import { SimulatedCrash, type CrashHook } from '../../app/crash.js';
import { noTelemetry, type Telemetry } from '../../app/telemetry.js';
import type { Db } from '../db/db.js';
import { NotConnected, type MqttLink } from '../mqtt/link.js';
import type { CloudSigner } from '../signer.js';
import { claim, type ClaimedRow } from './claim.js';
import { OUTBOX_CHANNEL } from './enqueue.js';
import { expediteAfterReconnect, failRow, releaseUnspent, type BackoffPolicy } from './fail.js';
import { markSent } from './mark-sent.js';
import { renewLease } from './renew.js';

export interface DispatcherOptions extends BackoffPolicy {
  readonly pollMs: number;
  readonly batch: number;
  readonly leaseMs: number;
  readonly publishTimeoutMs: number;
}

export interface DispatcherDeps {
  readonly db: Db;
  readonly clock: Clock;
  readonly log: Logger;
  readonly crash: CrashHook;
  readonly link: MqttLink;
  readonly signer: CloudSigner;
  readonly random: () => number;
  /** Dispatch lag and publish failures (GET /metrics); default: reported nowhere. */
  readonly telemetry?: Telemetry;
}

/** Signs one sequenced outbox row as its downlink message (fresh iat/exp; same jti and seq on every attempt and replay). */
export async function signRow(
  signer: CloudSigner,
  row: Pick<ClaimedRow, 'gatewayId' | 'seq' | 'jti' | 'type' | 'body' | 'cid'>,
  clock: Clock,
): Promise<string> {
  const draft = {
    type: row.type,
    aud: row.gatewayId,
    seq: row.seq,
    jti: row.jti as MessageId,
    cid: row.cid as CorrelationId,
    body: row.body,
  } as Parameters<typeof signMessage<DownlinkMessage>>[2];
  return (await signMessage<DownlinkMessage>(signer.key, signer.issuer, draft, clock)).token;
}

/**
 * The outbox dispatcher: claim → (renew) → sign → publish (QoS 1, wait for
 * PUBACK) → mark sent, row by row through the claimed batch. Guarantee: every
 * row is published at least once, and marked sent only after a PUBACK by the
 * dispatcher that still holds its lease; receivers dedupe by jti/seq, so
 * delivery is once in effect. The batch's lease is renewed before each
 * publish (renew.ts), so a slow broker does not hand the rest of the batch
 * to another replica, and a row whose lease was lost anyway is not
 * published. A broker cut mid-batch gives the unsent rows back (pending, due
 * at once, the attempt returned: fail.ts releaseUnspent); an outage never
 * walks a row towards the dead letter. It runs when
 * woken (a commit in this process, a NOTIFY from another replica, the broker
 * connection coming back) and on a slow poll as the safety net.
 */
export class Dispatcher {
  readonly #d: DispatcherDeps;
  readonly #o: DispatcherOptions;
  #running = false;
  #again = false;
  #stopped = true;
  #dead = false;
  #timer: NodeJS.Timeout | undefined;
  #unlisten: (() => Promise<void>) | undefined;
  #current: Promise<void> = Promise.resolve();

  constructor(deps: DispatcherDeps, opts: DispatcherOptions) {
    this.#d = deps;
    this.#o = opts;
  }

  async start(): Promise<void> {
    this.#stopped = false;
    this.#unlisten = await this.#d.db.listen(OUTBOX_CHANNEL, () => this.wake());
    this.#d.link.onConnect(() => {
      if (this.#stopped) return;
      // rows that waited out the outage go now, not after their backoff
      void expediteAfterReconnect(this.#d.db, this.#d.clock.now())
        .catch((e: unknown) => this.#d.log.warn({ err: String(e) }, 'expedite after reconnect failed'))
        .finally(() => this.wake());
    });
    this.#timer = setInterval(() => this.wake(), this.#o.pollMs);
    this.#timer.unref();
    this.wake();
  }

  /** Runs a pass now (or right after the current one). Never throws. */
  wake(): void {
    if (this.#stopped || this.#dead) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = true;
    this.#current = this.#loop().finally(() => {
      this.#running = false;
    });
  }

  /** Resolves when no pass is running (tests use it after wake()). */
  idle(): Promise<void> {
    return this.#current;
  }

  get crashed(): boolean {
    return this.#dead;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    await this.#current;
    await this.#unlisten?.();
  }

  async #loop(): Promise<void> {
    do {
      this.#again = false;
      try {
        while (!this.#stopped && this.#d.link.connected) {
          const n = await this.#pass();
          if (n === 0) break;
        }
      } catch (e) {
        if (e instanceof SimulatedCrash) {
          // a simulated process death: stop here, leaving claims as a dead process would
          this.#dead = true;
          this.#d.log.error({ point: e.point }, 'dispatcher crashed (simulated)');
          return;
        }
        this.#d.log.error({ err: e instanceof Error ? e.message : String(e) }, 'dispatch pass failed');
        return;
      }
    } while (this.#again && !this.#stopped);
  }

  async #pass(): Promise<number> {
    const token = randomUUID();
    const rows = await this.#d.db.transaction((tx) =>
      claim(tx, { token, now: this.#d.clock.now(), leaseMs: this.#o.leaseMs, limit: this.#o.batch }),
    );
    // The signer is read after the claim: a later statement sees every switch committed before the
    // rows it claimed (re-sent grants and a retire are queued after the switch), so those rows are
    // never signed with the key they replace, whichever replica sends them (docs/operations.md).
    if (rows.length > 0) await this.#d.signer.refresh(this.#d.db);
    // a gateway whose row did not go out in this pass: its later rows must not overtake it (claim.ts)
    const stopped = new Set<string>();
    for (const [i, row] of rows.entries()) {
      if (i > 0) {
        // the claim's lease covers the whole batch; renew what is left before each publish (renew.ts)
        const held = await renewLease(
          this.#d.db,
          rows.slice(i).map((r) => r.id),
          token,
          this.#d.clock.now(),
          this.#o.leaseMs,
        );
        if (!held.has(row.id)) {
          this.#rowLog(row).warn('lease lost before publishing: another dispatcher claimed the row; not publishing it');
          stopped.add(row.gatewayId);
          continue;
        }
      }
      if (stopped.has(row.gatewayId)) {
        // an earlier row of its gateway did not go out: give this one back unspent, to follow it in order
        const released = await releaseUnspent(this.#d.db, [row.id], token, this.#d.clock.now());
        this.#rowLog(row).info({ released }, 'an earlier row of the gateway did not go out: back to pending, behind it');
        continue;
      }
      const outcome = await this.#deliver(row);
      if (outcome === 'failed') stopped.add(row.gatewayId);
      if (outcome === 'disconnected') {
        const rest = rows.slice(i + 1);
        if (rest.length === 0) break;
        const released = await releaseUnspent(
          this.#d.db,
          rest.map((r) => r.id),
          token,
          this.#d.clock.now(),
        );
        // one line for the batch; it names every row's cid so each command's trail still finds it
        this.#d.log.warn(
          { released, seqs: rest.map((r) => `${r.gatewayId}:${r.seq}`), cids: rest.map((r) => r.cid) },
          'broker connection lost mid-batch: unsent rows back to pending, no attempt spent',
        );
        break;
      }
    }
    return rows.length;
  }

  #rowLog(row: ClaimedRow): Logger {
    return withCorrelation(this.#d.log, row.cid, {
      gatewayId: row.gatewayId,
      seq: row.seq,
      jti: row.jti,
      type: row.type,
      attempt: row.attempts,
    });
  }

  /** Signs and publishes one row, then marks it; 'failed' when it was failed (backoff or dead); 'disconnected' when the broker link was lost (the row is released unspent). */
  async #deliver(row: ClaimedRow): Promise<'done' | 'failed' | 'disconnected'> {
    const log = this.#rowLog(row);
    let token: string;
    try {
      token = await signRow(this.#d.signer, row, this.#d.clock);
    } catch (e) {
      await this.#fail(row, log, e);
      return 'failed';
    }
    try {
      await this.#d.link.publish(topics.gatewayDown(row.gatewayId), token, this.#o.publishTimeoutMs);
    } catch (e) {
      if (e instanceof NotConnected || !this.#d.link.connected) {
        const released = await releaseUnspent(this.#d.db, [row.id], row.leaseToken, this.#d.clock.now());
        log.warn(
          { err: e instanceof Error ? e.message : String(e), released },
          'publish broken by the broker connection; back to pending, no attempt spent',
        );
        this.#telemetry.publishFailed('disconnected');
        return 'disconnected';
      }
      await this.#fail(row, log, e);
      return 'failed';
    }
    this.#d.crash('afterPublishBeforeMark');
    const now = this.#d.clock.now();
    const marked = await markSent(this.#d.db, row.id, row.leaseToken, now);
    this.#telemetry.published(now - row.createdAt);
    if (marked === 1) log.info('outbox row sent');
    else log.warn('published, but the lease was lost before marking: another dispatcher owns the row (receiver dedupes by jti)');
    return 'done';
  }

  get #telemetry(): Telemetry {
    return this.#d.telemetry ?? noTelemetry;
  }

  async #fail(row: ClaimedRow, log: Logger, e: unknown): Promise<void> {
    const err = e instanceof Error ? e.message : String(e);
    const status = await failRow(this.#d.db, row, err, this.#d.clock.now(), this.#o, this.#d.random());
    this.#telemetry.publishFailed(status === null ? 'lease_lost' : status === 'dead' ? 'dead' : 'retry');
    if (status === 'dead') log.error({ err }, 'outbox row dead-lettered');
    else if (status === null) log.warn({ err }, 'publish failed and the lease was already lost');
    else log.warn({ err }, 'publish failed; will retry');
  }
}
