/**
 * SIGINT/SIGTERM handling for long-running processes: the first signal asks
 * for a graceful stop (drain), a second one forces.
 *
 * One Ctrl-C usually arrives more than once: the terminal signals the whole
 * process group, and wrappers in between (`npm run`, `tsx`) forward the
 * signal to their child as well. Signals within `duplicateWindowMs` of the
 * first are therefore taken as the same request, not as "force".
 */
export interface ShutdownHandlers {
  /** Starts the graceful stop (called once). */
  graceful(signal: NodeJS.Signals): void;
  /** A later, separate signal while the graceful stop runs. */
  forced(signal: NodeJS.Signals): void;
}

export function onShutdownSignals(handlers: ShutdownHandlers, opts: { duplicateWindowMs?: number; now?: () => number } = {}): () => void {
  const window = opts.duplicateWindowMs ?? 1000;
  const now = opts.now ?? Date.now;
  let first: number | null = null;
  const on = (signal: NodeJS.Signals) => {
    const t = now();
    if (first === null) {
      first = t;
      handlers.graceful(signal);
    } else if (t - first >= window) {
      handlers.forced(signal);
    }
  };
  process.on('SIGINT', on);
  process.on('SIGTERM', on);
  return () => {
    process.off('SIGINT', on);
    process.off('SIGTERM', on);
  };
}

/** The end of a graceful stop: the process exits 0 once `stopped` resolves, or 1 after `onError` (the caller's log line) if it rejects. */
export function exitWhenStopped(stopped: Promise<unknown>, onError: (e: unknown) => void): void {
  stopped.then(
    () => process.exit(0),
    (e: unknown) => {
      onError(e);
      process.exit(1);
    },
  );
}
