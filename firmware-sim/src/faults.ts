import type { LockChannel } from '@tobira/shared';

/**
 * Fault injection for one direction of one lock's MQTT traffic. Probabilities
 * are 0..1 and rolled per message with the adapter's random source (tests
 * use 0 or 1, so nothing is left to chance).
 */
export interface FaultPlan {
  /** Probability that a message is dropped. */
  readonly drop?: number;
  /** Probability that a message is handled (incoming) or published (outgoing) twice. */
  readonly duplicate?: number;
  /** Every message is held back this long (real time) before it is handled or published. */
  readonly delayMs?: number;
  /** Channels the plan applies to; default: every channel but presence (presence is the connection itself). */
  readonly channels?: readonly LockChannel[];
}

export interface Faults {
  /** Messages the lock receives: command, decision. */
  readonly incoming?: FaultPlan;
  /** Messages the lock publishes: request, state, event. */
  readonly outgoing?: FaultPlan;
}

export const NO_FAULTS: Faults = Object.freeze({});

export interface FaultDecision {
  readonly drop: boolean;
  readonly copies: 1 | 2;
  readonly delayMs: number;
}

const PASS: FaultDecision = Object.freeze({ drop: false, copies: 1, delayMs: 0 });

/** What to do with one message on `channel` under `plan`. */
export function rollFault(plan: FaultPlan | undefined, channel: LockChannel, random: () => number): FaultDecision {
  if (!plan) return PASS;
  const applies = plan.channels ? plan.channels.includes(channel) : channel !== 'presence';
  if (!applies) return PASS;
  if ((plan.drop ?? 0) > 0 && random() < (plan.drop ?? 0)) return { drop: true, copies: 1, delayMs: 0 };
  const copies = (plan.duplicate ?? 0) > 0 && random() < (plan.duplicate ?? 0) ? 2 : 1;
  return { drop: false, copies, delayMs: Math.max(0, plan.delayMs ?? 0) };
}

/** Checks a plan given from outside (CLI, tests) so a typo is an error, not a silent no-op. */
export function validateFaults(f: Faults): Faults {
  for (const [dir, plan] of Object.entries(f) as [string, FaultPlan | undefined][]) {
    if (dir !== 'incoming' && dir !== 'outgoing') throw new TypeError(`unknown fault direction: ${dir}`);
    if (!plan) continue;
    for (const p of ['drop', 'duplicate'] as const) {
      const v = plan[p];
      if (v !== undefined && !(v >= 0 && v <= 1)) throw new RangeError(`${dir}.${p} must be within 0..1`);
    }
    if (plan.delayMs !== undefined && !(plan.delayMs >= 0 && Number.isFinite(plan.delayMs)))
      throw new RangeError(`${dir}.delayMs must be >= 0`);
  }
  return Object.freeze({ ...f });
}
