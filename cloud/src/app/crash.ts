/**
 * Named crash points. Production code calls `crash(point)` at
 * each; a test turns a point into a throw (config CRASH_AT or an injected
 * hook) to prove that state and outbox are both there or both absent, and
 * that delivery happens once in effect after a restart.
 */
export const CRASH_POINTS = [
  'afterCasBeforeOutboxInsert',
  'afterOutboxInsertBeforeCommit',
  'afterCommitBeforePublish',
  'afterPublishBeforeMark',
  'afterInboxInsertBeforeApply',
  // between a Stripe call that took effect and the local write recording it
  'afterIntentCreatedBeforeRecord',
  'afterRefundBeforeRecord',
  // between a notification handed to its channel and the row marked sent: sent again after the lease
  'afterNotificationSendBeforeMark',
  // memberships: the subscription made / billing stopped, the local write not yet
  'afterSubscriptionCreatedBeforeRecord',
  'afterBillingStoppedBeforeEnd',
] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number];
export type CrashHook = (point: CrashPoint) => void;

export class SimulatedCrash extends Error {
  constructor(readonly point: CrashPoint) {
    super(`simulated crash at ${point}`);
    this.name = 'SimulatedCrash';
  }
}

export const noCrash: CrashHook = () => {};

/** A hook that throws SimulatedCrash at the named points. */
export function crashAt(points: readonly CrashPoint[]): CrashHook {
  if (points.length === 0) return noCrash;
  const set = new Set(points);
  return (point) => {
    if (set.has(point)) throw new SimulatedCrash(point);
  };
}

/**
 * A hook that SIGKILLs this process at the named points (CRASH_MODE=kill): no
 * finally block, no graceful stop, nothing flushed, as a power cut. For crash
 * tests that run the cloud as a child process and restart it on the same database.
 */
export function killAt(points: readonly CrashPoint[]): CrashHook {
  if (points.length === 0) return noCrash;
  const set = new Set(points);
  return (point) => {
    if (set.has(point)) process.kill(process.pid, 'SIGKILL');
  };
}
