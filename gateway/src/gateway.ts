import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import {
  createLogger,
  decodeSecret,
  filters,
  gatewayCloudClientId,
  gatewaySiteClientId,
  monotonicClock,
  newCorrelationId,
  systemClock,
  topics,
  withCorrelation,
  type Clock,
  type KeyPairJwk,
  type Logger,
  type MonotonicClock,
  type SiteMode,
  siteTlsOptions,
} from '@tobira/shared';
import type { FastifyInstance } from 'fastify';
import { openDatabase } from './adapters/sqlite/db.js';
import { loadMemory } from './adapters/sqlite/memory.js';
import type { RetentionLimits } from './adapters/sqlite/diagnostics.js';
import { inboxDepth, releaseAllClaims, type InboxRow } from './adapters/sqlite/inbox.js';
import { allLocks, upsertLock } from './adapters/sqlite/locks.js';
import { outboxDepth } from './adapters/sqlite/outbox.js';
import { capHighWater, readSettings, touchHighWater } from './adapters/sqlite/settings.js';
import { staffLists } from './adapters/sqlite/staff-queries.js';
import { GatewayStore } from './adapters/sqlite/store.js';
import { connectCloudLink, connectSiteLink, type Link } from './adapters/mqtt/links.js';
import { StorageGuard, statfsFreeBytes, type FreeSpaceReader, type StorageStatus } from './adapters/storage.js';
import type { AccessDeps } from './app/access.js';
import { applyPending, maybeResync, type ApplyDeps } from './app/apply.js';
import { TrustedTime, noCrash, nowOf, type AppContext, type CrashHook } from './app/context.js';
import { receiveDownlink, type DownlinkDeps } from './app/downlink.js';
import { CloudKeyRing } from './app/trusted-keys.js';
import { seedTrustedKeys } from './adapters/sqlite/trusted-keys.js';
import { endQuietEpisodes, enqueueStatus } from './app/locks.js';
import { LockEventBudget } from './app/lock-budget.js';
import { purgeOld } from './app/retention.js';
import { siteMessageRouter } from './app/site-requests.js';
import { StaffAccounts } from './app/staff-accounts.js';
import { sealKeyOf } from './app/staff-totp.js';
import { ackAlarmLocally, setSiteMode, setSiteModeAsStaff } from './app/staff-actions.js';
import { staffAudit } from './app/staff-audit.js';
import { remoteUnlock } from './app/staff-unlock.js';
import { LockWatch } from './app/lock-watch.js';
import { LiveFeed } from './app/live-feed.js';
import { health, staffStatus, type StaffStatusDeps } from './app/staff-status.js';
import { UplinkSender, sendResyncRequest, type UplinkDeps } from './app/uplink.js';
import { httpUsesTls, type GatewayConfig } from './config.js';
import { enforceModes, type ModeCheck } from './adapters/file-modes.js';
import { PKI_FILES, ensureSitePki, type SitePki } from './adapters/tls/site-pki.js';
import { renewHttpsCertificate } from './http/tls.js';
import { leaseRemainingSeconds } from './domain/freshness.js';
import { buildApp, registeredRoutes, type RegisteredRoute } from './http/app.js';
import type { ThrottleOptions } from './http/sign-in-throttle.js';
import { evaluatePassage, type PassageChange, type PassageDeps } from './app/passage.js';
import { setPassageLocally } from './app/modes.js';
import { PasswordWork } from './app/password-work.js';
import { createMetrics, type Metrics } from './metrics.js';
import { seedUplinkKey } from './adapters/sqlite/uplink-keys.js';
import { UplinkKeyRing } from './app/uplink-keys.js';

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
  /** The config file the daemon read (main.ts): held to 0600 like the other secrets at rest. */
  readonly configFile?: string | undefined;
  /** Test seam: the sign-in throttle's bounds (default http/sign-in-throttle.ts DEFAULT_THROTTLE). */
  readonly signInThrottle?: Partial<ThrottleOptions>;
}

export interface Gateway {
  start(): Promise<void>;
  /** Drains (stops taking requests, flushes the outbox for up to drainTimeoutMs) unless `force`. */
  stop(opts?: { force?: boolean }): Promise<void>;
  readonly store: GatewayStore;
  readonly metrics: Metrics;
  /** The HTTP address once started (null when http is disabled). */
  readonly httpUrl: string | null;
  /** Every route the HTTP server registered, as Fastify reported them (the authorization matrix test reads it). */
  readonly httpRoutes: readonly RegisteredRoute[];
  /** Runs the inbox writer now (tests; it also runs on every stored message and every tick). */
  applyNow(): number;
  /** Evaluates passage mode now (tests; it also runs at start, on every tick and after a mode change). */
  passageNow(): PassageChange[];
  /** Runs the hourly purge now (tests); returns the rows deleted. */
  purgeNow(): number;
  /** The time the gateway decides on now (trusted time; tests: what a lock whose clock the gateway keeps set reads). */
  trustedNow(): number;
  /** Reads the data folder's free space now (tests; it also runs at start and every storage.checkIntervalMs). */
  checkStorageNow(): Promise<StorageStatus>;
  /** Resolves when the uplink sender has nothing more it can send now. */
  uplinkIdle(): Promise<void>;
  /** `cid`: the correlation id of the staff request (a fresh one when absent). */
  setMode(mode: SiteMode, by: string, cid?: string): { mode: SiteMode; changed: boolean };
  enqueueStatus(): boolean;
  /**
   * The one-time setup code of the first supervisor account, made at start
   * while no staff account exists (null otherwise, and before start). Shown
   * once by main.ts and the demo; only its hash is stored.
   */
  readonly setupCode: { readonly code: string; readonly expiresAt: number } | null;
  /** The staff page's live feed (GET /staff/events). */
  readonly live: LiveFeed;
  /** Staff accounts and sessions (after start). */
  readonly accounts: StaffAccounts;
  readonly cloudConnected: boolean;
  readonly siteConnected: boolean;
  /** The cloud has answered a resync request of this process, so the persisted lease counts (TrustedTime.proven). */
  readonly timeProven: boolean;
  /** The site CA and the certificates it signed (after start; null with an in-memory database and no `tls.dir`). */
  readonly sitePki: SitePki | null;
  /** Runs the certificate renewal check now (tests; it also runs at start and daily). Returns what was made. */
  renewCertificatesNow(): Promise<string[]>;
}

const DAY = 24 * 3600 * 1000;

/** Constructs a gateway; does nothing until `start()`. */
export function createGateway(config: GatewayConfig, deps: GatewayDeps = {}): Gateway {
  const clock = deps.clock ?? systemClock;
  const time = new TrustedTime(clock, deps.monotonic ?? deps.clock ?? monotonicClock);
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
  let accounts: StaffAccounts | null = null;
  let setupCode: { code: string; expiresAt: number } | null = null;
  let sitePki: SitePki | null = null;
  const live = new LiveFeed(runLog);
  const watch = new LockWatch();
  const timers: NodeJS.Timeout[] = [];
  let stopping = false;
  let applyScheduled = false;
  let passageDeps: PassageDeps | null = null;
  const passageNow = (): PassageChange[] => (passageDeps === null ? [] : evaluatePassage(passageDeps));
  const passageSoon = () =>
    setImmediate(() => {
      try {
        passageNow();
      } catch (e) {
        runLog.error({ err: e }, 'passage evaluation failed');
      }
    });

  // CLOCK_SKEW once per episode (the staff status shows it while it lasts; docs/gateway.md "Freshness lease and trusted time")
  let skewReported = false;
  const reportClockSkew = (db: GatewayStore['db']) => {
    // a high-water mark above the ceiling (a wall clock that ran ahead before the cloud proved the time) must not outlive the clock's fix
    const ceiling = time.ceiling();
    if (ceiling !== null && capHighWater(db, ceiling))
      runLog.warn(
        { code: 'CLOCK_SKEW', highWaterMs: ceiling },
        'the time high-water mark was ahead of the time the cloud proved: lowered to it',
      );
    const skew = time.skew;
    if (skew !== null && !skewReported)
      runLog.warn(
        { code: 'CLOCK_SKEW', skewMs: skew.skewMs, since: skew.since },
        skew.skewMs > 0
          ? 'the wall clock is ahead of the time the cloud proved: doors decide on trusted time, fix the clock'
          : 'the wall clock is behind trusted time: doors decide on trusted time, fix the clock',
      );
    else if (skew === null && skewReported) runLog.info({ code: 'CLOCK_SKEW_CLEARED' }, 'the wall clock agrees with trusted time again');
    skewReported = skew !== null;
  };

  const need = <T>(v: T | null): T => {
    if (v === null) throw new Error('gateway not started');
    return v;
  };

  const applyNow = (): number => (applyDeps === null ? 0 : applyPending(applyDeps));
  const purgeNow = (): number => purgeOld({ store: need(store), time });
  const applySoon = () => {
    if (applyScheduled) return;
    applyScheduled = true;
    setImmediate(() => {
      applyScheduled = false;
      try {
        // a site.mode from the cloud (lockdown, passage) takes effect at the doors at once
        if (applyNow() > 0) passageNow();
      } catch (e) {
        runLog.error({ err: e }, 'inbox writer pass failed');
      }
    });
  };

  const setMode = (mode: SiteMode, by: string, cid: string = newCorrelationId()) => {
    const r = setSiteMode(ctx(), mode, by, cid);
    if (r.changed) passageNow();
    return r;
  };

  const gw: Gateway = {
    get store() {
      return need(store);
    },
    metrics,
    get httpUrl() {
      return httpUrl;
    },
    get httpRoutes() {
      return http === null ? [] : registeredRoutes(http);
    },
    get setupCode() {
      return setupCode;
    },
    live,
    get accounts() {
      return need(accounts);
    },
    get timeProven() {
      return time.proven;
    },
    get sitePki() {
      return sitePki;
    },
    renewCertificatesNow: () => renewCertificates(),
    get cloudConnected() {
      return cloud?.connected ?? false;
    },
    get siteConnected() {
      return site?.connected ?? false;
    },
    applyNow,
    passageNow,
    purgeNow,
    trustedNow: () => time.now(need(store).db),
    checkStorageNow: () => need(storage).check(),
    uplinkIdle: () => uplink?.idle() ?? Promise.resolve(),
    setMode,
    enqueueStatus: () => enqueueStatus(ctx()),

    async start() {
      const fileBacked = config.sqlitePath !== ':memory:';
      const dataDir0 = fileBacked ? dirname(resolve(config.sqlitePath)) : null;
      const pkiDir = config.tls.dir ?? (dataDir0 === null ? null : join(dataDir0, 'tls'));
      // secrets at rest readable only by their owner, checked before any is read (adapters/file-modes.ts)
      const modeChecks = (): ModeCheck[] => [
        ...(dataDir0 === null
          ? []
          : [
              { path: dataDir0, mode: 0o700 } as const,
              ...['', '-wal', '-shm', '-journal'].map((x) => ({ path: resolve(config.sqlitePath) + x, mode: 0o600 }) as const),
            ]),
        { path: config.keyPairFile, mode: 0o600 },
        ...(deps.configFile === undefined ? [] : [{ path: deps.configFile, mode: 0o600 } as const]),
        ...(pkiDir === null
          ? []
          : [
              { path: pkiDir, mode: 0o700 } as const,
              ...Object.values(PKI_FILES).map((f) => ({ path: join(pkiDir, f), mode: 0o600 }) as const),
            ]),
      ];
      if (dataDir0 !== null) mkdirSync(dataDir0, { recursive: true, mode: 0o700 });
      enforceModes(modeChecks(), runLog);
      const needTls = (config.http !== null && httpUsesTls(config.http)) || !config.site.url.startsWith('mqtt:');
      if (pkiDir === null && needTls)
        throw Object.assign(new Error('TLS needs a folder for the site PKI: set tls.dir (the database is in memory)'), {
          code: 'SITE_TLS_DIR_NEEDED',
        });
      if (pkiDir !== null) {
        const r = await ensureSitePki({ dir: pkiDir, names: config.tls.names, now: clock.now(), log: runLog });
        sitePki = r.pki;
        runLog.info(
          {
            caFingerprint: r.pki.ca.fingerprint,
            brokerFingerprint: r.pki.broker.fingerprint,
            httpsFingerprint: r.pki.https.fingerprint,
            caFile: r.pki.ca.certFile,
          },
          'site TLS: pair locks with the CA fingerprint; staff check the UI certificate fingerprint',
        );
      }
      const s = new GatewayStore(
        openDatabase(config.sqlitePath),
        { maxRows: config.outboxMaxRows },
        { accessLogMaxRows: config.accessLog.maxRows, accessLogMaxAgeMs: config.accessLog.maxAgeDays * DAY, ...deps.retention },
      );
      store = s;
      // -wal and -shm exist only once the database is open; SQLite gives them the database file's mode, checked again
      enforceModes(modeChecks(), runLog);
      // what a door decision reads, filled from SQLite before anything runs (adapters/sqlite/memory.ts):
      // a restart, or a start after a crash, rebuilds it from what was committed
      loadMemory(s.db);
      const dataDir = config.sqlitePath === ':memory:' ? process.cwd() : dirname(resolve(config.sqlitePath));
      const guard = new StorageGuard(dataDir, config.storage.minFreeBytes, deps.freeSpace ?? statfsFreeBytes, runLog, () =>
        nowOf({ store: s, time }),
      );
      storage = guard;
      // Before the first request is decided: a gateway started on a full disk starts refusing.
      await guard.check();
      const now0 = clock.now();
      for (const l of config.locks) upsertLock(s.db, l.lockId, l.doorId, now0);
      releaseAllClaims(s.db);

      const pair = JSON.parse(readFileSync(config.keyPairFile, 'utf8')) as KeyPairJwk;
      // the key pair file seeds the first uplink key; a rotation (uplink_key.rotate) replaces it in the store
      if (!seedUplinkKey(s.db, pair, now0))
        runLog.info({ fileKid: pair.kid }, 'the key pair file is not the active uplink key (rotated since); the stored key signs');
      const uplinkKeys = new UplinkKeyRing(s.db);
      await uplinkKeys.current(); // a broken stored key stops the start, before anything is signed
      // the config seeds the trusted cloud keys; signed keyset.update messages change them (a retired one never comes back)
      seedTrustedKeys(s.db, config.cloud.jwks.keys, now0);
      const cloudKeys = new CloudKeyRing(s.db);
      await cloudKeys.current(); // loaded before the first decision (mobile tokens are checked synchronously)

      const base: AppContext = {
        gatewayId: config.gatewayId,
        store: s,
        time,
        log,
        metrics,
        crash: deps.crash ?? noCrash,
        outboxWritten: () => uplink?.wake(),
        watch,
        eventBudget: new LockEventBudget(config.lockEventRate),
      };
      const upDeps: UplinkDeps = {
        ...base,
        link: () => cloud,
        signingKey: () => uplinkKeys.current(),
        cloudIssuer: config.cloud.issuer,
        batchSize: 100,
        batchMax: config.uplinkBatchMax,
      };
      uplink = new UplinkSender(upDeps);
      const ad: ApplyDeps = {
        ...base,
        options: {
          offlineGraceSeconds: config.offlineGraceSeconds,
          maxAttempts: config.inboxMaxAttempts,
          claimLeaseMs: config.inboxClaimLeaseMs,
          resyncIntervalMs: config.resyncIntervalMs,
          uplinkAckTimeoutMs: config.uplinkAckTimeoutMs,
        },
        resyncThrottle: { lastMono: Number.NEGATIVE_INFINITY },
        requestResync: (reason, seq, cid, requestId) => sendResyncRequest(upDeps, reason, seq, cid, requestId),
        ...(deps.beforeApply ? { beforeApply: deps.beforeApply } : {}),
        trustedKeysChanged: () => cloudKeys.invalidate(),
        uplinkKeyChanged: () => uplinkKeys.invalidate(),
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
          requestMaxAgeMs: config.requestMaxAgeMs,
          pairingSecrets: new Map(config.locks.map((l) => [l.lockId, decodeSecret(l.pairingSecret)])),
          offlineGraceSeconds: config.offlineGraceSeconds,
          // mobile tokens are checked with the same trusted cloud keys as the downlink; one issued before this
          // start may have been used under a store that a restore replaced, so it is refused: the start on the
          // cloud's clock, from the first proof (before it, every token is)
          mobileTokens: {
            keys: () => cloudKeys.loaded(),
            issuer: config.cloud.issuer,
            startedAt: () => time.startedAt() ?? Number.POSITIVE_INFINITY,
          },
        },
        buckets: new Map(),
        storageLow: () => guard.low,
      };
      metrics.bind({
        inboxDepth: () => inboxDepth(s.db),
        outboxDepth: () => outboxDepth(s.db),
        leaseRemainingSeconds: () => leaseRemainingSeconds(time.lease(readSettings(s.db)), nowOf(base)),
        locks: () => allLocks(s.db),
        storage: () => guard.status(),
      });

      // Rows committed before a crash or a restart are applied first.
      applyNow();

      let firstConnect = true;
      cloud = connectCloudLink(
        config.cloud,
        {
          clientId: gatewayCloudClientId(config.gatewayId),
          downTopic: topics.gatewayDown(config.gatewayId),
          presenceTopic: topics.gatewayPresence(config.gatewayId),
        },
        {
          onDownlink: async (topic, payload) => {
            await receiveDownlink(downDeps, topic, payload);
          },
          onConnect: () => {
            uplink?.wake();
            // After a start or an outage, ask the cloud what we missed; the heartbeat then renews the lease.
            maybeResync(ad, firstConnect ? 'startup' : 'stale', newCorrelationId(), firstConnect);
            firstConnect = false;
          },
        },
        withCorrelation(log, newCorrelationId(), { link: 'cloud' }),
      );

      const onSiteMessage = siteMessageRouter({
        ...accessDeps,
        site: () => site,
        stopping: () => stopping,
        runLog,
        changed: (e) => live.publish(e),
      });
      const siteFilters = (['request', 'state', 'event', 'presence'] as const).map((c) => filters.locksOf(config.gatewayId, c));
      site = connectSiteLink(
        { ...config.site, tls: siteTlsOptions(config.site.url, { caPem: sitePki?.ca.certPem }) },
        { clientId: gatewaySiteClientId(config.gatewayId), filters: siteFilters },
        onSiteMessage,
        withCorrelation(log, newCorrelationId(), { link: 'site' }),
        // retained states come back on the subscribe that follows: until then no lock's privacy counts as known
        () => watch.siteConnected(),
      );

      passageDeps = {
        ...accessDeps,
        passage: config.passage,
        lastUnlock: new Map(),
        sendCommand: (lockId, command, cid) => {
          // QoS 1: while the site link is down mqtt.js queues it; the lock refuses it if it arrives expired.
          site
            ?.publish(topics.lock(config.gatewayId, lockId, 'command'), JSON.stringify(command), { qos: 1 })
            .catch((e: unknown) =>
              withCorrelation(log, cid, { lockId }).warn({ err: String(e), commandId: command.commandId }, 'passage command not published'),
            );
        },
      };
      // A restart re-evaluates what it held: relock outside the schedule, renew at once inside it.
      passageNow();

      const tickMs = deps.tickMs ?? 1000;
      timers.push(
        setInterval(() => {
          try {
            applyNow();
            touchHighWater(s.db, nowOf(base));
            reportClockSkew(s.db);
            passageNow();
            endQuietEpisodes(base);
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

      const statusDeps: StaffStatusDeps = {
        ...base,
        cloudConnected: () => cloud?.connected ?? false,
        siteConnected: () => site?.connected ?? false,
        stopping: () => stopping,
        storage: () => guard.status(),
        timeZone: config.timeZone ?? null,
      };

      // The lease runs out with no message arriving: the status the page shows is compared every second while a page listens.
      live.sampleStatus = () => {
        const st = staffStatus(statusDeps);
        return {
          failClosed: st.failClosed,
          failClosedReason: st.failClosedReason,
          mode: st.mode,
          cloudConnected: st.cloudConnected,
          siteConnected: st.siteConnected,
          locksOnline: st.locksOnline,
        };
      };
      timers.push(
        setInterval(() => {
          if (stopping) return;
          try {
            live.tick();
          } catch (e) {
            runLog.error({ err: e }, 'live status check failed');
          }
        }, 1000),
      );
      timers[timers.length - 1]?.unref();
      timers.push(
        setInterval(() => {
          renewCertificates().catch((e: unknown) => runLog.error({ err: e }, 'certificate renewal check failed'));
        }, DAY),
      );
      timers[timers.length - 1]?.unref();

      const audit = staffAudit(
        s.db,
        () => nowOf(base),
        s.limits,
        () => uplink?.wake(),
      );
      const acc = new StaffAccounts({
        db: s.db,
        now: () => nowOf(base),
        log,
        idleMs: (config.http?.sessionIdleSeconds ?? 1800) * 1000,
        absoluteMs: (config.http?.sessionMaxSeconds ?? 43_200) * 1000,
        audit,
        work: new PasswordWork(config.http?.passwordWork ?? {}),
        totp: {
          policy: config.staffTotp.supervisors,
          sealKey: sealKeyOf(decodeSecret(config.credentialPepper)),
          issuer: config.staffTotp.issuer ?? `Tobira ${config.gatewayId}`,
        },
      });
      accounts = acc;
      setupCode = acc.issueSetupCode();
      if (setupCode !== null)
        runLog.warn({ expiresAt: setupCode.expiresAt }, 'no staff account yet: a one-time setup code was made (printed once on stdout)');
      timers.push(
        setInterval(() => {
          try {
            acc.purge();
          } catch (e) {
            runLog.error({ err: e }, 'session purge failed');
          }
        }, 60_000),
      );
      timers[timers.length - 1]?.unref();

      const guestRooms = new Set(config.locks.filter((l) => l.guestRoom === true).map((l) => l.doorId));
      if (config.http !== null) {
        http = buildApp({
          registry: metrics.registry,
          staffToken: config.staffToken,
          metricsToken: config.metricsToken,
          listenHost: config.http.host,
          allowedHosts: config.http.allowedHosts,
          authFailures: config.http.authFailures,
          connections: config.http.connections,
          now: () => clock.now(),
          log,
          accounts: acc,
          ...(deps.signInThrottle === undefined ? {} : { signInThrottle: deps.signInThrottle }),
          tls: httpUsesTls(config.http) && sitePki !== null ? { key: sitePki.https.keyPem, cert: sitePki.https.certPem } : undefined,
          secureCookies: config.http.secureCookies ?? httpUsesTls(config.http),
          setMode: (mode, reason, cid, actor) => {
            const r = setSiteModeAsStaff(ctx(), mode, reason, cid, { actor, audit });
            if ('changed' in r && r.changed) passageSoon();
            return r;
          },
          setPassage: (doorId, schedule, by, cid, actor) => {
            const r = setPassageLocally(ctx(), doorId, schedule, by, cid, { actor, audit }, guestRooms);
            if (r.status === 'applied') passageSoon();
            return r;
          },
          ackAlarm: (alarmId, by, cid, actor) => {
            const r = ackAlarmLocally(base, alarmId, by, cid, actor === undefined ? null : { actor, audit });
            if (r.status === 'applied') live.publish({ type: 'alarm', lockId: r.alarm.lockId });
            return r;
          },
          remoteUnlock: (lockId, reason, actor, cid, emergency) => {
            const r = remoteUnlock(accessDeps, audit, actor, lockId, reason, cid, emergency);
            if (r.status === 'applied') {
              live.publish({ type: 'access', lockId, allowed: true, code: r.event.code });
              // after the commit, as a key decision's command (site-requests.ts publishAnswers)
              const l = withCorrelation(log, cid, { lockId });
              const link = site;
              if (link === null)
                l.warn({ commandId: r.command.commandId }, 'remote unlock recorded but the locks link is down: command not sent');
              else
                link
                  .publish(topics.lock(config.gatewayId, lockId, 'command'), JSON.stringify(r.command), { qos: 1 })
                  .catch((e: unknown) => l.warn({ err: String(e), commandId: r.command.commandId }, 'remote unlock command not published'));
            }
            return r;
          },
          staff: { status: () => staffStatus(statusDeps), ...staffLists(s.db, () => nowOf(base)) },
          health: () => health(statusDeps),
          live,
        });
        const listened = await http.listen({ host: config.http.host, port: config.http.port });
        // Fastify names the scheme from its own options; the server made by http/tls.ts speaks https
        httpUrl = httpUsesTls(config.http) ? listened.replace(/^http:/, 'https:') : listened;
      }
      runLog.info({ httpUrl, appliedSeq: readSettings(s.db).appliedSeq }, 'gateway started');
    },

    async stop(opts = {}) {
      if (stopping) return;
      stopping = true;
      for (const t of timers) clearInterval(t);
      const s = store;
      // Where trusted time resumes after a restart (a restart must not hand back elapsed lease time).
      try {
        if (s !== null) touchHighWater(s.db, nowOf({ store: s, time }));
      } catch (e) {
        runLog.error({ err: e }, 'time floor not saved at stop');
      }
      if (!opts.force && s !== null && cloud?.connected) {
        // Drain: give the outbox a bounded time to reach the cloud.
        const deadline = Date.now() + config.drainTimeoutMs;
        while (outboxDepth(s.db) > 0 && cloud.connected && Date.now() < deadline) {
          uplink?.wake();
          await Promise.race([uplink?.idle(), new Promise((r) => setTimeout(r, 50))]);
        }
      }
      if (cloud?.connected && !opts.force) {
        await cloud
          .publish(topics.gatewayPresence(config.gatewayId), JSON.stringify({ online: false }), { qos: 1, retain: true })
          .catch(() => {});
      }
      const force = opts.force ?? false;
      await Promise.all([cloud?.end(force || !cloud.connected), site?.end(force || !site.connected), http?.close()]);
      s?.db.close();
      runLog.info({ forced: opts.force ?? false }, 'gateway stopped');
    },
  };

  /** The daily check (also at start): renews what expires soon, swaps the staff UI's certificate in, says what the site broker needs. */
  async function renewCertificates(): Promise<string[]> {
    if (sitePki === null) return [];
    const r = await ensureSitePki({ dir: sitePki.dir, names: config.tls.names, now: clock.now(), log: runLog });
    sitePki = r.pki;
    if (r.made.includes('https') && http !== null && config.http !== null && httpUsesTls(config.http))
      renewHttpsCertificate(http, { key: r.pki.https.keyPem, cert: r.pki.https.certPem });
    if (r.made.includes('broker'))
      runLog.warn(
        { code: 'SITE_BROKER_CERT_RENEWED', fingerprint: r.pki.broker.fingerprint },
        'site broker certificate renewed: run site-broker-files and reload Mosquitto (docs/operations.md)',
      );
    return r.made;
  }

  function ctx(): AppContext {
    return {
      gatewayId: config.gatewayId,
      store: need(store),
      time,
      log,
      metrics,
      crash: deps.crash ?? noCrash,
      outboxWritten: () => uplink?.wake(),
    };
  }
  return gw;
}
