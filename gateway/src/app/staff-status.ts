import type { SiteMode } from '@tobira/shared';
import { hasGap, inboxDepth } from '../adapters/sqlite/inbox.js';
import { outboxDepth, outboxUnacked } from '../adapters/sqlite/outbox.js';
import { allPassage, lockModes, readSiteMode, type ModeOrigin, type SiteModeInfo } from '../adapters/sqlite/modes.js';
import { readSettings, type Settings } from '../adapters/sqlite/settings.js';
import { staffCounts } from '../adapters/sqlite/staff-queries.js';
import type { StorageStatus } from '../adapters/storage.js';
import { isStale, leaseRemainingSeconds } from '../domain/freshness.js';
import { nowOf, type AppContext, type TrustedTime } from './context.js';

/**
 * The staff status projection (`GET /staff/status`) and `/healthz`, from one
 * reading of the settings: why ordinary keys are denied now, if they are, the
 * link states and the table counts.
 */

/** Why the site denies ordinary keys with CLOUD_STALE. */
export const FAIL_CLOSED_REASONS = ['NO_LEASE', 'TIME_UNPROVEN', 'LEASE_EXPIRED', 'BEHIND_CLOUD', 'SEQ_CONFLICT'] as const;
export type FailClosedReason = (typeof FAIL_CLOSED_REASONS)[number];
/** Why `/healthz` answers 503: the site fails closed (FAIL_CLOSED_REASONS), a broker link is down, or the daemon is stopping. */
export const HEALTH_REASONS = [...FAIL_CLOSED_REASONS, 'CLOUD_LINK_DOWN', 'SITE_LINK_DOWN', 'STOPPING'] as const;
export type HealthReason = (typeof HEALTH_REASONS)[number];

export interface Health {
  /** `ok` (200) or why not (503): `stopping`, else `failing_closed` (ordinary keys are denied), else `degraded` (a link is down). */
  status: 'ok' | 'failing_closed' | 'degraded' | 'stopping';
  reasons: HealthReason[];
  ok: boolean;
  failClosedReason: FailClosedReason | null;
  cloudConnected: boolean;
  siteConnected: boolean;
  mode: SiteMode;
  appliedSeq: number;
  leaseExpiresAt: number | null;
  leaseRemainingSeconds: number;
  inboxDepth: number;
  outboxDepth: number;
}

export interface StaffStatus {
  gatewayId: string;
  /** Trusted now (ms) the answer was computed at. */
  now: number;
  mode: SiteMode;
  cloudConnected: boolean;
  siteConnected: boolean;
  appliedSeq: number;
  leaseExpiresAt: number | null;
  leaseRemainingSeconds: number;
  failClosed: boolean;
  failClosedReason: FailClosedReason | null;
  /** Sequenced inbox rows wait behind a missing seq (a resync is asked for). */
  waitingOnGap: boolean;
  /** The last seq a heartbeat named (the cloud has handed out up to it); null before the first heartbeat. */
  cloudLastSeq: number | null;
  /** Uplinks the broker took that the cloud has not acknowledged applying yet (kept, sent again when overdue). */
  uplinkUnacked: number;
  /** The highest uplink seq the cloud has acknowledged. */
  uplinkAckedSeq: number;
  newestVerifiedIatMs: number;
  lastResyncAt: number | null;
  inboxDepth: number;
  outboxDepth: number;
  inboxFailed: number;
  rejectedDownlinks: number;
  lockRefusals: number;
  openAlarms: number;
  locksTotal: number;
  locksOnline: number;
  /** The site's IANA time zone from the config (the staff UI shows times in it); null: not configured. */
  timeZone: string | null;
  /** Disk headroom of the data folder: while `low`, ordinary keys are refused STORAGE_FULL (docs/gateway.md "Flood bounds"). */
  storage: StorageStatus;
  /** Where the site mode came from (docs/gateway.md "Modes from the cloud"): the gateway's staff or the cloud, who, when. */
  modeOrigin: Omit<SiteModeInfo, 'mode'>;
  /** Passage schedules by door, where each came from, and whether the gateway holds the door open now. */
  passage: { doorId: string; origin: ModeOrigin; setBy: string; setAt: number; held: boolean }[];
  /**
   * CLOCK_SKEW: the wall clock is more than the tolerance off trusted time
   * (`skewMs` > 0: ahead, < 0: behind) since `since` (trusted ms); null when
   * within it. Doors decide on trusted time either way; someone should fix the clock.
   */
  clockSkew: { skewMs: number; since: number } | null;
}

/** The answer of `/healthz` from the same projection as `/staff/status` (its failClosedReason and link states). */
export function healthVerdict(s: {
  stopping: boolean;
  failClosedReason: FailClosedReason | null;
  cloudConnected: boolean;
  siteConnected: boolean;
}): Pick<Health, 'status' | 'reasons' | 'ok'> {
  const reasons: HealthReason[] = [];
  if (s.stopping) reasons.push('STOPPING');
  if (s.failClosedReason !== null) reasons.push(s.failClosedReason);
  if (!s.cloudConnected) reasons.push('CLOUD_LINK_DOWN');
  if (!s.siteConnected) reasons.push('SITE_LINK_DOWN');
  const status = s.stopping ? 'stopping' : s.failClosedReason !== null ? 'failing_closed' : reasons.length > 0 ? 'degraded' : 'ok';
  return { status, reasons, ok: status === 'ok' };
}

/**
 * Why ordinary keys are denied CLOUD_STALE (null when they are not), from
 * the settings, this process's trusted time and whether it has proven the
 * time since it started (TrustedTime.proven).
 */
export function failClosedReasonOf(st: Settings, time: Pick<TrustedTime, 'lease' | 'proven'>, now: number): FailClosedReason | null {
  if (!isStale(time.lease(st), now)) return null;
  if (st.seqConflictAt !== null) return 'SEQ_CONFLICT';
  if (st.leaseExpiresAt === null) return 'NO_LEASE';
  // restarted, and no answer from the cloud yet says how long we were off
  if (!time.proven) return 'TIME_UNPROVEN';
  // the cloud has handed out seqs we never got (a revoke stuck in its backoff or dead-lettered, a lost resync)
  if (st.cloudLastSeq !== null && st.cloudLastSeq > st.appliedSeq) return 'BEHIND_CLOUD';
  return 'LEASE_EXPIRED';
}

/** What the projection reads besides the store: link states, the disk verdict, the config's zone. */
export interface StaffStatusDeps extends Pick<AppContext, 'gatewayId' | 'store' | 'time'> {
  readonly cloudConnected: () => boolean;
  readonly siteConnected: () => boolean;
  readonly stopping: () => boolean;
  readonly storage: () => StorageStatus;
  readonly timeZone: string | null;
}

function freshness(deps: StaffStatusDeps) {
  const st = readSettings(deps.store.db);
  const now = nowOf(deps);
  return { st, now, lease: deps.time.lease(st), failClosedReason: failClosedReasonOf(st, deps.time, now) };
}

export function staffStatus(deps: StaffStatusDeps): StaffStatus {
  const { db } = deps.store;
  const { st, now, lease, failClosedReason } = freshness(deps);
  const c = staffCounts(db);
  return {
    gatewayId: deps.gatewayId,
    now,
    mode: st.mode,
    cloudConnected: deps.cloudConnected(),
    siteConnected: deps.siteConnected(),
    appliedSeq: st.appliedSeq,
    leaseExpiresAt: lease,
    leaseRemainingSeconds: leaseRemainingSeconds(lease, now),
    failClosed: failClosedReason !== null,
    failClosedReason,
    waitingOnGap: hasGap(db, st.appliedSeq),
    cloudLastSeq: st.cloudLastSeq,
    uplinkUnacked: outboxUnacked(db),
    uplinkAckedSeq: st.uplinkAckedSeq,
    newestVerifiedIatMs: st.maxIatMs,
    lastResyncAt: st.lastResyncAt,
    inboxDepth: c.inboxPending,
    outboxDepth: c.outboxPending,
    inboxFailed: c.inboxFailed,
    rejectedDownlinks: c.rejected,
    lockRefusals: c.lockRefusals,
    openAlarms: c.openAlarms,
    locksTotal: c.locks,
    locksOnline: c.locksOnline,
    timeZone: deps.timeZone,
    storage: deps.storage(),
    ...modesOf(db),
    clockSkew: deps.time.skew,
  };
}

function modesOf(db: StaffStatusDeps['store']['db']): Pick<StaffStatus, 'modeOrigin' | 'passage'> {
  const { origin, by, at, requestId } = readSiteMode(db);
  const modeOrigin = { origin, by, at, requestId };
  const held = new Set(lockModes(db).flatMap((l) => (l.passageSince !== null && l.doorId !== null ? [l.doorId] : [])));
  const passage = allPassage(db).map((p) => ({
    doorId: p.doorId,
    origin: p.origin,
    setBy: p.setBy,
    setAt: p.setAt,
    held: held.has(p.doorId),
  }));
  return { modeOrigin, passage };
}

export function health(deps: StaffStatusDeps): Health {
  const { db } = deps.store;
  const { st, now, lease, failClosedReason } = freshness(deps);
  const cloudConnected = deps.cloudConnected();
  const siteConnected = deps.siteConnected();
  return {
    ...healthVerdict({ stopping: deps.stopping(), failClosedReason, cloudConnected, siteConnected }),
    failClosedReason,
    cloudConnected,
    siteConnected,
    mode: st.mode,
    appliedSeq: st.appliedSeq,
    leaseExpiresAt: lease,
    leaseRemainingSeconds: leaseRemainingSeconds(lease, now),
    inboxDepth: inboxDepth(db),
    outboxDepth: outboxDepth(db),
  };
}
