import type { Logger, Schedule, SiteMode } from '@tobira/shared';
import type { PassageResult } from '../app/modes.js';
import type { ModeChangeCode } from '../domain/staff-modes.js';
import type { Registry } from 'prom-client';
import type { StaffLists } from '../adapters/sqlite/staff-queries.js';
import type { StaffAccounts, StaffActor, SessionInfo } from '../app/staff-accounts.js';
import type { LiveFeed } from '../app/live-feed.js';
import type { AlarmAck } from '../app/staff-actions.js';
import type { RemoteUnlockResult } from '../app/staff-unlock.js';
import type { Health, StaffStatus } from '../app/staff-status.js';
import type { StaffTls } from './tls.js';

/** What the HTTP layer is given: the use cases and reads it maps to routes (no store, no SQL). */
export interface StaffReads extends StaffLists {
  status(): StaffStatus;
}

export interface HttpDeps {
  health(): Health;
  readonly registry: Registry;
  /** The API bearer token for automation (acts with the `staff` role, as "API token"); undefined: no bearer access. */
  readonly staffToken: string | undefined;
  /** Bearer token `/metrics` asks for; undefined: `/metrics` answers 503 METRICS_TOKEN_NOT_CONFIGURED. */
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
  /** Staff accounts and sessions; undefined: no account sign-in (only the bearer token). */
  readonly accounts?: StaffAccounts | undefined;
  /** Key and certificate: the server speaks HTTPS only and sends HSTS (http/tls.ts); undefined: plain HTTP (loopback). */
  readonly tls?: StaffTls | undefined;
  /** The page is served over TLS (directly or by a proxy): the session cookie is `__Host-` prefixed and Secure. */
  readonly secureCookies?: boolean | undefined;
  /**
   * `reason`: the caller's (undefined: none given); `actor`: who asked (audited). Refused: a lockdown the cloud
   * set, lifted by someone who may not (domain/staff-modes.ts).
   */
  setMode(
    mode: SiteMode,
    reason: string | undefined,
    cid: string,
    actor: StaffActor,
  ): { mode: SiteMode; changed: boolean } | { refused: ModeChangeCode };
  /** Closes an open alarm once (`by` is recorded as closed_by); a second ack is a noop. */
  ackAlarm(alarmId: string, by: string, cid: string, actor?: StaffActor): AlarmAck;
  readonly staff: StaffReads;
  /** Sets or clears a door's passage schedule (app/modes.ts); undefined: not offered. */
  setPassage?: ((doorId: string, schedule: Schedule | null, by: string, cid: string, actor: StaffActor) => PassageResult) | undefined;
  /** Opens one door for one entry (supervisors; app/staff-unlock.ts) and publishes the command; undefined: not offered. */
  remoteUnlock?: ((lockId: string, reason: string, actor: StaffActor, cid: string, emergency?: boolean) => RemoteUnlockResult) | undefined;
  /** The live feed GET /staff/events streams (routes/events.ts); undefined: not offered. */
  readonly live?: LiveFeed | undefined;
  /** Open live streams allowed per session and in all (default routes/events.ts LIVE_STREAM_LIMITS). */
  readonly liveStreamLimits?: { readonly perSession?: number; readonly perAccount?: number; readonly total?: number } | undefined;
}

/** Who the request is from, set by the staff auth hook (app.ts). */
export interface StaffAuth {
  readonly actor: StaffActor;
  /** The session (null: the API bearer token). */
  readonly session: SessionInfo | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    staffAuth: StaffAuth | null;
  }
}

/** The request's staff identity; only called behind the auth hook, which sets it or answers. */
export function authOf(req: { staffAuth: StaffAuth | null }): StaffAuth {
  if (req.staffAuth === null) throw new Error('staff route reached without the auth hook');
  return req.staffAuth;
}
