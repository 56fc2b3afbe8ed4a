import { noFaults } from '@tobira/stripe-local';
import type { History } from '../history.js';
import { pick } from '../prng.js';
import type { MoneyCluster } from './system.js';

/**
 * The money faults (docs/reliability.md, "Money"), seeded: each starts now and ends by itself after
 * a few seconds; `drain()` waits for the ones in flight and `heal()` clears every knob.
 *
 * - `stripe-down`: every /v1 call fails before any endpoint runs (503, or the connection closed with
 *   no answer, which stands for a refused connection too);
 * - `stripe-slow`: every /v1 answer waits 1.5-4 s (under the cloud's 20 s SDK timeout);
 * - `stripe-timeout`: every /v1 answer waits 21 s, past the SDK's timeout: Stripe acts, the cloud
 *   gave up and retries under the same key (only in long runs: each such call holds a request 60 s);
 * - `stripe-lost-answer`: the next POSTs take effect at Stripe and their answer is lost (500 or reset);
 * - `stripe-decline`: the next confirms are declined whatever the card;
 * - `webhook-dup`: every event delivered three times;
 * - `webhook-reorder`: events held for a few seconds, then sent in reverse or shuffled;
 * - `webhook-drop`: events recorded at Stripe, never sent, for a few seconds;
 * - `webhook-late`: events held past the one-minute hold, then sent (only in long runs);
 * - `kill-cloud`: `npm run cloud` SIGKILLed, restarted 1-3 s later on the same database, and not again
 *   before it has been up for 30 s;
 * - `pg-cut`: every open PostgreSQL connection of the cloud reset (the pool reconnects).
 */
export const MONEY_FAULTS = [
  'stripe-down',
  'stripe-slow',
  'stripe-timeout',
  'stripe-lost-answer',
  'stripe-decline',
  'webhook-dup',
  'webhook-reorder',
  'webhook-drop',
  'webhook-late',
  'kill-cloud',
  'pg-cut',
] as const;
export type MoneyFault = (typeof MONEY_FAULTS)[number];
/** The quick set: every fault whose effects end within seconds. */
export const QUICK_FAULTS: readonly MoneyFault[] = MONEY_FAULTS.filter((f) => f !== 'stripe-timeout' && f !== 'webhook-late');

export function parseMoneyFaults(s: string): MoneyFault[] {
  if (s === 'all') return [...MONEY_FAULTS];
  if (s === 'quick') return [...QUICK_FAULTS];
  if (s === '' || s === 'none') return [];
  return s.split(',').map((f) => {
    if (!(MONEY_FAULTS as readonly string[]).includes(f)) throw new Error(`unknown money fault ${f} (known: ${MONEY_FAULTS.join(', ')})`);
    return f as MoneyFault;
  });
}

/** How long the cloud stays up after a restart before the next `kill-cloud` may strike. */
export const KILL_CLOUD_UPTIME_MS = 30_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class MoneyInjector {
  readonly counts: Record<string, number> = {};
  total = 0;
  readonly #running = new Set<Promise<void>>();
  /**
   * a kill of the cloud in progress, or the real time (ms) its restart last ended: one at a time, and the
   * cloud up for KILL_CLOUD_UPTIME_MS between kills, so a long run spends most of its time with a cloud that
   * answers (a restart takes 3-25 s with the machine loaded) and its answers are checked, not only its absence
   */
  #cloudBusy = false;
  #lastKillEnded = 0;

  constructor(
    readonly c: MoneyCluster,
    readonly h: History,
    readonly r: () => number,
    readonly kinds: readonly MoneyFault[],
  ) {}

  inject(kind: MoneyFault | undefined = this.kinds.length > 0 ? pick(this.r, this.kinds) : undefined): void {
    if (kind === undefined) return;
    // a kill that would not happen is not counted as a fault: the run's total says what it survived
    if (kind === 'kill-cloud' && !this.#mayKillCloud()) return;
    this.counts[kind] = (this.counts[kind] ?? 0) + 1;
    this.total++;
    const p = this.#run(kind).catch((e: unknown) => void this.h.add('injector', 'fault-error', { kind, error: String(e) }));
    this.#running.add(p);
    void p.finally(() => this.#running.delete(p));
  }

  async #run(kind: MoneyFault): Promise<void> {
    const local = this.c.stripe;
    const ms = 1500 + Math.floor(this.r() * 3000);
    const end = (extra: Record<string, unknown> = {}) => this.h.add('injector', 'fault-end', { kind, ...extra });
    switch (kind) {
      case 'stripe-down': {
        const mode = this.r() < 0.5 ? 'error' : 'reset';
        this.h.add('injector', 'fault', { kind, mode, ms });
        Object.assign(local.faults, { unavailable: true, unavailableMode: mode });
        await sleep(ms);
        Object.assign(local.faults, { unavailable: false });
        return void end();
      }
      case 'stripe-slow':
      case 'stripe-timeout': {
        const delayMs = kind === 'stripe-slow' ? 1500 + Math.floor(this.r() * 2500) : 21_000;
        this.h.add('injector', 'fault', { kind, delayMs, ms });
        local.faults.delayMs = delayMs;
        await sleep(ms);
        local.faults.delayMs = 0;
        return void end();
      }
      case 'stripe-lost-answer': {
        const n = 1 + Math.floor(this.r() * 3);
        const mode = this.r() < 0.5 ? '500' : 'reset';
        this.h.add('injector', 'fault', { kind, n, mode });
        Object.assign(local.faults, { failAfterEffect: n, failAfterEffectMode: mode });
        return;
      }
      case 'stripe-decline': {
        const n = 1 + Math.floor(this.r() * 2);
        this.h.add('injector', 'fault', { kind, n });
        local.faults.declineNextConfirms = n;
        return;
      }
      case 'webhook-dup': {
        this.h.add('injector', 'fault', { kind, ms });
        local.webhooks.faults.duplicates = 3;
        await sleep(ms);
        local.webhooks.faults.duplicates = 1;
        return void end();
      }
      case 'webhook-reorder':
      case 'webhook-late': {
        const hold = kind === 'webhook-late' ? 65_000 : ms;
        const order = this.r() < 0.5 ? 'reverse' : 'shuffle';
        this.h.add('injector', 'fault', { kind, holdMs: hold, order });
        local.webhooks.faults.hold = true;
        await sleep(hold);
        local.webhooks.faults.hold = false;
        const sent = local.webhooks.release(order, Math.floor(this.r() * 1e9));
        return void end({ released: sent.length });
      }
      case 'webhook-drop': {
        this.h.add('injector', 'fault', { kind, ms });
        local.webhooks.faults.drop = true;
        await sleep(ms);
        local.webhooks.faults.drop = false;
        return void end();
      }
      case 'kill-cloud': {
        this.#cloudBusy = true;
        try {
          this.h.add('injector', 'fault', { kind });
          await this.c.cloud.kill('SIGKILL');
          await sleep(1000 + Math.floor(this.r() * 2000));
          await this.c.startCloud();
        } finally {
          this.#cloudBusy = false;
          this.#lastKillEnded = Date.now();
        }
        return void end();
      }
      case 'pg-cut': {
        this.h.add('injector', 'fault', { kind });
        this.c.pgLink.reset();
        return;
      }
    }
  }

  #mayKillCloud(): boolean {
    return !this.#cloudBusy && this.c.cloud.running && Date.now() - this.#lastKillEnded >= KILL_CLOUD_UPTIME_MS;
  }

  /** Waits for every fault in flight to end by itself. */
  async drain(): Promise<void> {
    while (this.#running.size > 0) await Promise.all([...this.#running]);
  }

  /** Every knob back to normal, held events sent, the cloud running. */
  async heal(): Promise<void> {
    const local = this.c.stripe;
    Object.assign(local.faults, noFaults());
    Object.assign(local.webhooks.faults, { duplicates: 1, hold: false, drop: false });
    local.webhooks.release('fifo');
    while (this.#cloudBusy) await sleep(200);
    if (!this.c.cloud.running) await this.c.startCloud();
  }
}
