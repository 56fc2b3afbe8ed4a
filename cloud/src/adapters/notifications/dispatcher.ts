import { withCorrelation, type Clock, type Logger } from '@tobira/shared';
import { hostname } from 'node:os';
import { SimulatedCrash, type CrashHook } from '../../app/crash.js';
import { fillSecret } from '../../domain/notifications.js';
import type { BackoffPolicy } from '../backoff.js';
import type { Queryable } from '../db/db.js';
import type { Channel } from './channels.js';
import { claimDueNotifications, type ClaimedNotification } from './claim.js';
import { failNotification } from './fail.js';
import { markNotificationSent } from './mark-sent.js';

/**
 * The notification dispatcher (docs/notifications.md): claims due rows of
 * `notification_outbox` with a lease (claim.ts), sends each through its
 * row's channel (channels.ts), marks it sent (mark-sent.ts), or releases the
 * claim with the shared capped backoff (fail.ts), dead at maxAttempts (a
 * permanent failure, such as no address, is dead at once) with its code
 * leading `last_error`. One row's failure never holds up another: each row
 * is sent and settled on its own.
 *
 * Guarantee: at least once. A dispatcher that dies between the send and the
 * mark (crash point `afterNotificationSendBeforeMark`) leaves the row
 * `sending`; after `leaseMs` another pass claims it and sends it again. The
 * dedupe key and the Message-ID (`<notification-{id}.…@tobira>`) /
 * `Tobira-Notification-Id` header are the same both times.
 */

export interface NotificationDispatchOptions extends BackoffPolicy {
  readonly pollMs: number;
  readonly batch: number;
  readonly leaseMs: number;
  /** who claims (kept in `claimed_by`); default host:pid */
  readonly workerId: string;
}
export const DEFAULT_NOTIFICATION_OPTIONS: NotificationDispatchOptions = Object.freeze({
  pollMs: 1_000,
  batch: 20,
  leaseMs: 60_000,
  maxAttempts: 8,
  baseMs: 5_000,
  maxMs: 30 * 60_000,
  workerId: `${hostname()}:${process.pid}`,
});

export interface NotificationDispatcherDeps {
  readonly db: Queryable;
  readonly clock: Clock;
  readonly log: Logger;
  readonly channels: Partial<Record<ClaimedNotification['channel'], Channel>>;
  readonly crash?: CrashHook;
  readonly random?: () => number;
}

export class NotificationDispatcher {
  readonly #o: NotificationDispatchOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<unknown> | undefined;

  constructor(
    private readonly deps: NotificationDispatcherDeps,
    options: Partial<NotificationDispatchOptions> = {},
  ) {
    this.#o = { ...DEFAULT_NOTIFICATION_OPTIONS, ...options };
  }

  start(): void {
    this.#timer ??= setInterval(() => {
      this.#running ??= this.runOnce()
        .catch((e: unknown) => this.deps.log.warn({ err: String(e) }, 'notification pass failed'))
        .finally(() => {
          this.#running = undefined;
        });
    }, this.#o.pollMs);
    this.#timer.unref();
  }

  /** Graceful: no new pass starts; the running one finishes its sends and marks. Then the channels close. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#running;
    for (const c of Object.values(this.deps.channels)) await c.close();
  }

  /** One pass: claim due rows, send each. Returns how many were claimed. Throws SimulatedCrash at the crash point. */
  async runOnce(): Promise<number> {
    const rows = await claimDueNotifications(this.deps.db, this.deps.clock.now(), this.#o);
    const results = await Promise.allSettled(rows.map((row) => this.#send(row)));
    for (const r of results) {
      if (r.status === 'rejected' && r.reason instanceof SimulatedCrash) throw r.reason;
      if (r.status === 'rejected') this.deps.log.warn({ err: String(r.reason) }, 'notification send failed');
    }
    return rows.length;
  }

  async #send(row: ClaimedNotification): Promise<void> {
    const log = withCorrelation(this.deps.log, row.cid, {
      notificationId: row.id,
      template: row.template,
      channel: row.channel,
      attempt: row.attempts,
    });
    const channel = this.deps.channels[row.channel];
    // the secret (a drawn PIN) goes into the text only on its way out; the row and the logs never hold it filled in
    const message = row.secret === null ? row : { ...row, body: fillSecret(row.body, row.secret) };
    const result = channel
      ? await channel.send(message, this.deps.clock.now())
      : ({
          ok: false,
          code: 'NOTIFICATION_CHANNEL_UNCONFIGURED',
          detail: `channel ${row.channel} is not configured`,
          permanent: false,
        } as const);
    const leased = { id: row.id, leaseToken: row.lease_token, attempts: row.attempts };
    if (result.ok) {
      this.deps.crash?.('afterNotificationSendBeforeMark');
      const marked = await markNotificationSent(this.deps.db, leased, this.deps.clock.now());
      log.info({ code: 'NOTIFICATION_SENT', marked }, 'notification delivered');
      return;
    }
    const policy = result.permanent ? { ...this.#o, maxAttempts: row.attempts } : this.#o;
    const status = await failNotification(
      this.deps.db,
      leased,
      `${result.code}: ${result.detail}`,
      this.deps.clock.now(),
      policy,
      (this.deps.random ?? Math.random)(),
    );
    const fields = { code: result.code, error: result.detail, dead: status === 'dead', lostLease: status === null };
    if (status === 'dead') log.error(fields, 'notification dead-lettered');
    else log.warn(fields, 'notification send failed; retried with backoff');
  }
}
