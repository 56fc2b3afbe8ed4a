import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  KeySet,
  createLogger,
  decodeSecret,
  filters,
  gatewayCloudClientId,
  gatewaySiteClientId,
  importSigningKey,
  monotonicClock,
  newCorrelationId,
  parseTopic,
  systemClock,
  topics,
  withCorrelation,
  type Clock,
  type KeyPairJwk,
  type Logger,
  type MonotonicClock,
} from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { openDatabase } from './adapters/sqlite/db.js';
import { GatewayStore, type InboxRow, type RetentionLimits, type Settings } from './adapters/sqlite/store.js';
import { connectCloudLink, connectSiteLink, type Link } from './adapters/mqtt/links.js';
import { StorageGuard, statfsFreeBytes, type FreeSpaceReader, type StorageStatus } from './adapters/storage.js';
import { handleLockRequests, type AccessDeps } from './app/access.js';
import { applyPending, maybeResync, type ApplyDeps } from './app/apply.js';
import { TrustedTime, noCrash, nowOf, type AppContext, type CrashHook } from './app/context.js';
import { receiveDownlink, type DownlinkDeps } from './app/downlink.js';
import { enqueueStatus, handleLockMessage, recordLockRefusal } from './app/locks.js';
import { UplinkSender, sendResyncRequest, type UplinkDeps } from './app/uplink.js';
import type { GatewayConfig } from './config.js';
import { isStale, leaseRemainingSeconds } from './domain/freshness.js';
import { getAlarm, staffCounts, staffLists } from './adapters/sqlite/staff-queries.js';
import { buildApp, healthVerdict, type FailClosedReason } from './http/app.js';
import { createMetrics, type Metrics } from './metrics.js';

export interface GatewayDeps {
  /** Wall clock (default: the system's). */
  readonly clock?: Clock;
  /**
   * Elapsed-time clock for trusted time (default: performance.now(); when a
   * test passes only `clock`, that clock: a hand-moved wall clock then also
   * measures elapsed time, as the tests written before it expect). A test of
   * a wrong wall clock passes both.
   */
  readonly monotonic?: MonotonicClock;
  readonly log?: Logger;
  readonly crash?: CrashHook;
  /** Test seam: throw to make an inbox apply fail. */
  readonly beforeApply?: (row: InboxRow) => void;
  /** Periodic work interval (apply retries, claim reclaim). */
  readonly tickMs?: number;
  /** Test seam: bounds of the diagnostic tables (default DEFAULT_RETENTION: 10,000 rows, 30 days each). */
  readonly retention?: Partial<RetentionLimits>;
  /** Test seam: the free-space reader of the data folder (default fs.statfs). */
  readonly freeSpace?: FreeSpaceReader;
}

export interface Gateway {
  start(): Promise<void>;
  /** Drains (stops taking requests, flushes the outbox for up to drainTimeoutMs) unless `force`. */
  stop(opts?: { force?: boolean }): Promise<void>;
  readonly store: GatewayStore;
  readonly metrics: Metrics;
  /** The HTTP address once started (null when http is disabled). */
  readonly httpUrl: string | null;
  /** Runs the inbox writer now (tests; it also runs on every stored message and every tick). */
  applyNow(): number;
  /** Runs the hourly purge now (tests); returns the rows deleted. */
  purgeNow(): number;
  /** Reads the data folder's free space now (tests; it also runs at start and every storage.checkIntervalMs). */
  checkStorageNow(): Promise<StorageStatus>;
  /** Resolves when the uplink sender has nothing more it can send now. */
  uplinkIdle(): Promise<void>;
  /** `cid`: the correlation id of the staff request (a fresh one when absent). */
  setMode(mode: 'normal' | 'lockdown', by: string, cid?: string): { mode: 'normal' | 'lockdown'; changed: boolean };
  enqueueStatus(): boolean;
  readonly cloudConnected: boolean;
  readonly siteConnected: boolean;
}

const DAY = 24 * 3600 * 1000;

/** Why ordinary keys are denied CLOUD_STALE (null when they are not). */
function failClosedReasonOf(st: Settings, stale: boolean): FailClosedReason | null {
  if (!stale) return null;
  if (st.seqConflictAt !== null) return 'SEQ_CONFLICT';
  if (st.leaseExpiresAt === null) return 'NO_LEASE';
  // the cloud has handed out seqs we never got (a revoke stuck in its backoff or dead-lettered, a lost resync)
  if (st.cloudLastSeq !== null && st.cloudLastSeq > st.appliedSeq) return 'BEHIND_CLOUD';
  return 'LEASE_EXPIRED';
}

/** Constructs a gateway; does nothing until `start()`. */
export function createGateway(config: GatewayConfig, deps: GatewayDeps = {}): Gateway {
  const clock = deps.clock ?? systemClock;
  const time = new TrustedTime(clock, deps.monotonic ?? (deps.clock ?? monotonicClock));
  const log = (deps.log ?? createLogger('gateway')).child({ gatewayId: config.gatewayId });
  // Lifecycle lines (start, stop, periodic work) carry the cid of this run of the daemon.
  const runLog = withCorrelation(log, newCorrelationId());
  const metrics = createMetrics(true);
  let store: GatewayStore | null = null;
  let cloud: Link | null = null;
  let site: Link | null = null;
  let http: FastifyInstance | null = null;
  let httpUrl: string | null = null;
  let uplink: UplinkSender | null = null;
  let applyDeps: ApplyDeps | null = null;
  let storage: StorageGuard | null = null;
  const timers: NodeJS.Timeout[] = [];
  let stopping = false;
  let applyScheduled = false;

  const need = <T>(v: T | null): T => {
    if (v === null) throw new Error('gateway not started');
    return v;
  };

  const applyNow = (): number => (applyDeps === null ? 0 : applyPending(applyDeps));
  /**
   * Retention: processed inbox 30 days, sent outbox 7 days, incomplete snapshots 1 day, lock refusals and
   * rejected downlinks by `retention`, the access log by `accessLog` (only rows the cloud already has).
   */
  const purgeNow = (): number => {
    const s = need(store);
    const now = nowOf({ store: s, time });
    return (
      s.purgeProcessed(now - 30 * DAY) + s.purgeSentOutbox(now - 7 * DAY) + s.purgeIncompleteSnapshots(now - DAY) + s.purgeLockRefusals(now) + s.purgeRejected(now) + s.purgeAccessLog(now)
    );
  };
  const applySoon = () => {
    if (applyScheduled) return;
    applyScheduled = true;
    setImmediate(() => {
      applyScheduled = false;
      try {
        applyNow();
      } catch (e) {
        runLog.error({ err: e }, 'inbox writer pass failed');
      }
    });
  };

  function setMode(mode: 'normal' | 'lockdown', by: string, cid: string = newCorrelationId()) {
    const s = need(store);
    const changed = s.db
      .transaction(() => {
        if (s.settings().mode === mode) return false;
        s.setMode(mode);
        return true;
      })
      .immediate();
    withCorrelation(log, cid).warn({ mode, by, changed }, 'site mode set locally');
    if (changed) gw.enqueueStatus();
    return { mode, changed };
  }

  const gw: Gateway = {
    get store() {
      return need(store);
    },
    metrics,
    get httpUrl() {
      return httpUrl;
    },
    get cloudConnected() {
      return cloud?.connected ?? false;
    },
    get siteConnected() {
      return site?.connected ?? false;
    },
    applyNow,
    purgeNow,
    checkStorageNow: () => need(storage).check(),
    uplinkIdle: () => uplink?.idle() ?? Promise.resolve(),
    setMode,
    enqueueStatus: () => enqueueStatus(ctx()),

    async start() {
      const s = new GatewayStore(
        openDatabase(config.sqlitePath),
        { maxRows: config.outboxMaxRows },
        { accessLogMaxRows: config.accessLog.maxRows, accessLogMaxAgeMs: config.accessLog.maxAgeDays * DAY, ...deps.retention },
      );
      store = s;
      const dataDir = config.sqlitePath === ':memory:' ? process.cwd() : dirname(resolve(config.sqlitePath));
      const guard = new StorageGuard(dataDir, config.storage.minFreeBytes, deps.freeSpace ?? statfsFreeBytes, runLog, () => nowOf({ store: s, time }));
      storage = guard;
      // Before the first request is decided: a gateway started on a full disk starts refusing.
      await guard.check();
      const now0 = clock.now();
      for (const l of config.locks) s.upsertLock(l.lockId, l.doorId, now0);
      s.releaseAllClaims();

      const pair = JSON.parse(readFileSync(config.keyPairFile, 'utf8')) as KeyPairJwk;
      const signingKey = await importSigningKey(pair.privateJwk);
      const cloudKeys = await KeySet.fromJwks(config.cloud.jwks);

      const base: AppContext = { gatewayId: config.gatewayId, store: s, time, log, metrics, crash: deps.crash ?? noCrash, outboxWritten: () => uplink?.wake() };
      const upDeps: UplinkDeps = { ...base, link: () => cloud, signingKey, cloudIssuer: config.cloud.issuer, batchSize: 100 };
      uplink = new UplinkSender(upDeps);
      const ad: ApplyDeps = {
        ...base,
        options: { offlineGraceSeconds: config.offlineGraceSeconds, maxAttempts: config.inboxMaxAttempts, claimLeaseMs: config.inboxClaimLeaseMs, resyncIntervalMs: config.resyncIntervalMs, uplinkAckTimeoutMs: config.uplinkAckTimeoutMs },
        resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
        requestResync: (reason, seq, cid) => sendResyncRequest(upDeps, reason, seq, cid),
        ...(deps.beforeApply ? { beforeApply: deps.beforeApply } : {}),
      };
      applyDeps = ad;
      const downDeps: DownlinkDeps = { ...base, cloudKeys, cloudIssuer: config.cloud.issuer, applySoon };
      const accessDeps: AccessDeps = {
        ...base,
        access: {
          pepper: decodeSecret(config.credentialPepper),
          lockout: config.lockout,
          siteLockout: config.siteLockout,
          requestRate: config.requestRate,
          holdMs: config.holdMs,
          commandTtlMs: config.commandTtlMs,
          pairingSecrets: new Map(config.locks.map((l) => [l.lockId, decodeSecret(l.pairingSecret)])),
          offlineGraceSeconds: config.offlineGraceSeconds,
        },
        buckets: new Map(),
        storageLow: () => guard.low,
      };
      metrics.bind({
        inboxDepth: () => s.inboxDepth(),
        outboxDepth: () => s.outboxDepth(),
        leaseRemainingSeconds: () => leaseRemainingSeconds(s.settings().leaseExpiresAt, nowOf(base)),
        locks: () => s.locks(),
        storage: () => guard.status(),
      });

      // Rows committed before a crash or a restart are applied first.
      applyNow();

      let firstConnect = true;
      cloud = connectCloudLink(
        config.cloud,
        { clientId: gatewayCloudClientId(config.gatewayId), downTopic: topics.gatewayDown(config.gatewayId), presenceTopic: topics.gatewayPresence(config.gatewayId) },
        {
          onDownlink: async (topic, payload) => {
            await receiveDownlink(downDeps, topic, payload);
          },
          onConnect: () => {
            uplink?.wake();
            // After a start or an outage, ask the cloud what we missed; the heartbeat then renews the lease.
            maybeResync(ad, firstConnect ? 'startup' : 'stale', newCorrelationId());
            firstConnect = false;
          },
        },
        withCorrelation(log, newCorrelationId(), { link: 'cloud' }),
      );

      const pendingRequests: { lockId: string; payload: Buffer }[] = [];
      const flushRequests = () => {
        const batch = pendingRequests.splice(0);
        if (batch.length === 0 || stopping) return;
        let answers: ReturnType<typeof handleLockRequests>;
        try {
          answers = handleLockRequests(accessDeps, batch);
        } catch (e) {
          // Nothing was committed, nothing is published: the locks stay locked and retry (fail closed).
          runLog.error({ err: e, requests: batch.length }, 'lock requests not decided');
          return;
        }
        const link = site;
        if (link === null) return;
        for (const [i, answer] of answers.entries()) {
          if (answer === null) continue;
          const lockId = batch[i]!.lockId;
          const l = withCorrelation(log, answer.cid, { lockId, requestId: answer.decision.requestId });
          link.publish(topics.lock(config.gatewayId, lockId, 'decision'), JSON.stringify(answer.decision), { qos: 1 }).catch((e: unknown) => l.warn({ err: String(e) }, 'decision not published'));
          if (answer.command !== null) {
            link.publish(topics.lock(config.gatewayId, lockId, 'command'), JSON.stringify(answer.command), { qos: 1 }).catch((e: unknown) => l.warn({ err: String(e) }, 'command not published'));
          }
        }
      };
      const siteFilters = (['request', 'state', 'event', 'presence'] as const).map((c) => filters.locksOf(config.gatewayId, c));
      site = connectSiteLink(
        config.site,
        { clientId: gatewaySiteClientId(config.gatewayId), filters: siteFilters },
        (topic, payload) => {
          if (stopping) return;
          const t = parseTopic(topic);
          if (t === null || t.kind !== 'lock' || t.gatewayId !== config.gatewayId) {
            // Only this gateway's lock filters are subscribed: this is a lock id that is not a slug.
            const channel = topic.slice(topic.lastIndexOf('/') + 1);
            recordLockRefusal(base, withCorrelation(log, newCorrelationId()), { origin: 'gateway', lockId: null, channel, topic, code: 'BAD_TOPIC', detail: 'not a lock topic of this gateway', payload });
            return;
          }
          try {
            if (t.channel === 'request') {
              // Group commit: requests that arrive in the same turn share one transaction (one fsync).
              pendingRequests.push({ lockId: t.lockId, payload });
              if (pendingRequests.length === 1) setImmediate(flushRequests);
            } else if (t.channel === 'state' || t.channel === 'event' || t.channel === 'presence') {
              handleLockMessage(base, t.lockId, t.channel, payload);
            }
          } catch (e) {
            runLog.error({ err: e, topic }, 'site message handling failed');
          }
        },
        withCorrelation(log, newCorrelationId(), { link: 'site' }),
      );

      const tickMs = deps.tickMs ?? 1000;
      timers.push(
        setInterval(() => {
          try {
            applyNow();
            s.touchHighWater(nowOf(base));
          } catch (e) {
            runLog.error({ err: e }, 'tick failed');
          }
        }, tickMs),
        setInterval(() => gw.enqueueStatus(), config.statusIntervalMs),
        setInterval(() => {
          guard.check().catch((e: unknown) => runLog.error({ err: e }, 'disk headroom check failed'));
        }, config.storage.checkIntervalMs),
        setInterval(() => {
          try {
            const purged = purgeNow();
            if (purged > 0) runLog.info({ purged }, 'purged old rows (inbox, outbox, snapshot parts, lock refusals, rejected downlinks)');
          } catch (e) {
            runLog.error({ err: e }, 'purge failed');
          }
        }, 3600 * 1000),
      );
      for (const t of timers) t.unref();

      /** Why ordinary keys are denied now, if they are: one projection for `/staff/status` and `/healthz`. */
      const freshness = () => {
        const st = s.settings();
        const now = nowOf(base);
        return { st, now, failClosedReason: failClosedReasonOf(st, isStale(st.leaseExpiresAt, now)) };
      };

      if (config.http !== null) {
        http = buildApp({
          registry: metrics.registry,
          staffToken: config.staffToken,
          metricsToken: config.metricsToken,
          listenHost: config.http.host,
          allowedHosts: config.http.allowedHosts,
          authFailures: config.http.authFailures,
          now: () => clock.now(),
          log,
          setMode,
          ackAlarm: (alarmId, by, cid) => {
            const result = s.ackAlarm(alarmId, by, nowOf(base));
            const alarm = getAlarm(s.db, alarmId);
            withCorrelation(log, cid).info({ alarmId, by, result }, 'alarm acknowledged locally');
            if (result === 'not_found' || alarm === null) return { status: 'refused', code: 'ALARM_NOT_FOUND' };
            return { status: result, alarm };
          },
          staff: {
            status: () => {
              const { st, now, failClosedReason } = freshness();
              const c = staffCounts(s.db);
              return {
                gatewayId: config.gatewayId,
                now,
                mode: st.mode,
                cloudConnected: cloud?.connected ?? false,
                siteConnected: site?.connected ?? false,
                appliedSeq: st.appliedSeq,
                leaseExpiresAt: st.leaseExpiresAt,
                leaseRemainingSeconds: leaseRemainingSeconds(st.leaseExpiresAt, now),
                failClosed: failClosedReason !== null,
                failClosedReason,
                waitingOnGap: s.hasGap(st.appliedSeq),
                cloudLastSeq: st.cloudLastSeq,
                uplinkUnacked: s.outboxUnacked(),
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
                timeZone: config.timeZone ?? null,
                storage: guard.status(),
              };
            },
            ...staffLists(s.db, () => nowOf(base)),
          },
          health: () => {
            const { st, now, failClosedReason } = freshness();
            const remaining = leaseRemainingSeconds(st.leaseExpiresAt, now);
            const cloudConnected = cloud?.connected ?? false;
            const siteConnected = site?.connected ?? false;
            return {
              ...healthVerdict({ stopping, failClosedReason, cloudConnected, siteConnected }),
              failClosedReason,
              cloudConnected,
              siteConnected,
              mode: st.mode,
              appliedSeq: st.appliedSeq,
              leaseExpiresAt: st.leaseExpiresAt,
              leaseRemainingSeconds: remaining,
              inboxDepth: s.inboxDepth(),
              outboxDepth: s.outboxDepth(),
            };
          },
        });
        httpUrl = await http.listen({ host: config.http.host, port: config.http.port });
      }
      runLog.info({ httpUrl, appliedSeq: s.settings().appliedSeq }, 'gateway started');
    },

    async stop(opts = {}) {
      if (stopping) return;
      stopping = true;
      for (const t of timers) clearInterval(t);
      const s = store;
      // Where trusted time resumes after a restart (a restart must not hand back elapsed lease time).
      try {
        if (s !== null) s.touchHighWater(nowOf({ store: s, time }));
      } catch (e) {
        runLog.error({ err: e }, 'time floor not saved at stop');
      }
      if (!opts.force && s !== null && cloud?.connected) {
        // Drain: give the outbox a bounded time to reach the cloud.
        const deadline = Date.now() + config.drainTimeoutMs;
        while (s.outboxDepth() > 0 && cloud.connected && Date.now() < deadline) {
          uplink?.wake();
          await Promise.race([uplink?.idle(), new Promise((r) => setTimeout(r, 50))]);
        }
      }
      if (cloud?.connected && !opts.force) {
        await cloud.publish(topics.gatewayPresence(config.gatewayId), JSON.stringify({ online: false }), { qos: 1, retain: true }).catch(() => {});
      }
      const force = opts.force ?? false;
      await Promise.all([cloud?.end(force || !cloud.connected), site?.end(force || !site.connected), http?.close()]);
      s?.db.close();
      runLog.info({ forced: opts.force ?? false }, 'gateway stopped');
    },
  };

  function ctx(): AppContext {
    return { gatewayId: config.gatewayId, store: need(store), time, log, metrics, crash: deps.crash ?? noCrash, outboxWritten: () => uplink?.wake() };
  }
  return gw;
}
