import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

/**
 * Every log line is JSON and carries the correlation id (`cid`) of the work it
 * belongs to: take a child logger with `withCorrelation` for each unit of work.
 */
export function createLogger(name: string, options: LoggerOptions = {}): Logger {
  return pino({
    name,
    level: process.env.LOG_LEVEL ?? (process.env.NODE_ENV === 'test' || process.env.VITEST ? 'silent' : 'info'),
    base: { svc: name },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...options,
  });
}

export function withCorrelation(log: Logger, cid: string, bindings: Record<string, unknown> = {}): Logger {
  return log.child({ cid, ...bindings });
}
