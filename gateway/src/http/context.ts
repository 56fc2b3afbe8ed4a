import type { Logger, SiteMode } from '@tobira/shared';
import type { Registry } from 'prom-client';
import type { StaffLists } from '../adapters/sqlite/staff-queries.js';
import type { AlarmAck } from '../app/staff-actions.js';
import type { Health, StaffStatus } from '../app/staff-status.js';

/** What the HTTP layer is given: the use cases and reads it maps to routes (no store, no SQL). */
export interface StaffReads extends StaffLists {
  status(): StaffStatus;
}

export interface HttpDeps {
  health(): Health;
  readonly registry: Registry;
  readonly staffToken: string | undefined;
  /** Bearer token `/metrics` asks for; undefined: `/metrics` is open. */
  readonly metricsToken?: string | undefined;
  readonly log: Logger;
  /** The address the server listens on (default 127.0.0.1): one of the default allowed Host names. */
  readonly listenHost?: string;
  /** Allowed Host header values (`name` or `name:port`); undefined: the default (hosts.ts defaultHostRules). */
  readonly allowedHosts?: readonly string[] | undefined;
  /** Wrong tokens per client IP per window (default 10 per 300 s). */
  readonly authFailures?: { readonly max: number; readonly windowSeconds: number };
  /** Clock (ms) of the auth-failure windows; default Date.now. */
  readonly now?: () => number;
  setMode(mode: SiteMode, by: string, cid: string): { mode: SiteMode; changed: boolean };
  /** Closes an open alarm once (`by` is recorded as closed_by); a second ack is a noop. */
  ackAlarm(alarmId: string, by: string, cid: string): AlarmAck;
  readonly staff: StaffReads;
}
