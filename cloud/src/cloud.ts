/**
 * The composition root: the only module that wires the parts together.
 * `createCloud` is the core (tests and the demo run it alone),
 * `startAdminApi` the admin API with its background work, `buildCloud` both
 * from one frozen config, as `npm run cloud` runs them.
 */
import {
  createLogger,
  filters,
  newCorrelationId,
  systemClock,
  withCorrelation,
  type Clock,
  type CorrelationId,
  type Logger,
} from '@tobira/shared';
import { whenDatabaseAnswers, type Db } from './adapters/db/db.js';
import { migrate } from './adapters/db/migrate.js';
import { openDb } from './adapters/db/open.js';
import { openMqttLinks, type MqttLinks } from './adapters/mqtt/link.js';
import { listDeadLetters, retryDeadLetter, type DeadLetter } from './adapters/outbox/dead-letters.js';
import { Dispatcher } from './adapters/outbox/dispatcher.js';
import { purgeOld } from './adapters/outbox/purge.js';
import { loadSigner, type CloudSigner } from './adapters/signer.js';
import { loadSecretBox, type SecretBox } from './adapters/kek.js';
import { checkKeyRing, resealSecrets } from './adapters/db/sealed-secrets.js';
import { issueMobileToken, type MobileTokenInput } from './app/mobile-tokens.js';
import { crashAt, killAt, type CrashHook } from './app/crash.js';
import { unmanagedBrokerAccounts, type BrokerAccounts } from './app/broker-accounts.js';
import type { AppDeps } from './app/deps.js';
import * as keys from './app/keys.js';
import * as registry from './app/registry.js';
import { rotateGatewayBrokerCredentials } from './app/broker-rotation.js';
import * as reads from './app/reads.js';
import { listStaffActions, type StaffActionFilter } from './adapters/db/staff-actions.js';
import { Uplink } from './app/uplink.js';
import { Heartbeat } from './app/heartbeat.js';
import { DEFAULT_API_CONFIG, type ApiDeps } from './http/context.js';
import { purgeApiTables } from './adapters/db/api-purge.js';
import { listenAdminApi, type Listener, type ListenOptions } from './http/server.js';
import { WebhookDispatcher, type WebhookOptions } from './adapters/webhooks/worker.js';
import { brokerAccountsFromConfig } from './adapters/broker/index.js';
import type { CloudConfig } from './config.js';
import type { CloudVerbs, VerbOptions } from './app/port.js';
import type Stripe from 'stripe';
import { stripeFromSettings } from './adapters/stripe/client.js';
import { BillingWorker, type BillingWorkerOptions } from './app/billing-worker.js';
import * as stays from './app/stays.js';
import * as memberships from './app/memberships.js';
import * as modes from './app/modes.js';
import * as uplinkKeys from './app/uplink-keys.js';
import * as walkIns from './app/walk-ins.js';
import type { SiteScope } from './adapters/db/scope.js';
import { channelsOf, type Channel } from './adapters/notifications/channels.js';
import { NotificationDispatcher, type NotificationDispatchOptions } from './adapters/notifications/dispatcher.js';
import * as notifications from './app/notifications.js';
import * as signing from './app/signing-keys.js';
import type { NotificationChannel } from './domain/notifications.js';
import { processMetrics } from './adapters/metrics/process.js';
import type { Telemetry } from './app/telemetry.js';

export interface CloudDeps {
  /** An already-open database (tests share one PGlite between instances); not closed by stop(). */
  readonly db?: Db;
  readonly clock?: Clock;
  readonly log?: Logger;
  readonly crash?: CrashHook;
  readonly random?: () => number;
  /** The cloud broker's per-gateway accounts; default: not managed (provisioning carries no credentials). */
  readonly brokerAccounts?: BrokerAccounts;
  /** The Stripe client (tests: one pointed at the local Stripe); default: from config.stripe, none without a secret key. */
  readonly stripe?: Stripe | null;
  /** Billing worker options; false: do not run it in this process (tests drive `runBilling()`). */
  readonly billingWorker?: Partial<BillingWorkerOptions> | false;
  /** Notification dispatcher options; false: do not run it in this process (tests drive `runNotifications()`). */
  readonly notificationDispatcher?: Partial<NotificationDispatchOptions> | false;
  /** Channels to send through instead of the configured ones (tests). */
  readonly notificationChannels?: Partial<Record<NotificationChannel, Channel>>;
}

export type Cloud = ReturnType<typeof createCloud>;

/**
 * The cloud core. The constructor does nothing; start() opens the database,
 * applies migrations, loads the signing key, connects MQTT and starts the
 * dispatcher, the uplink inbox and the heartbeat; stop() drains them.
 */
export function createCloud(config: CloudConfig, cloudDeps: CloudDeps = {}) {
  // the admin API's port (app/port.ts) is a view of the core: a mismatch fails here, not in a route
  return coreOf(config, cloudDeps) satisfies CloudVerbs;
}

function coreOf(config: CloudConfig, cloudDeps: CloudDeps) {
  const clock = cloudDeps.clock ?? systemClock;
  const log = cloudDeps.log ?? createLogger('cloud');
  const crash = cloudDeps.crash ?? (config.crashMode === 'kill' ? killAt(config.crashAt) : crashAt(config.crashAt));
  let db: Db | undefined;
  let links: MqttLinks | undefined;
  let signer: CloudSigner | undefined;
  let secrets: SecretBox | undefined;
  let dispatcher: Dispatcher | undefined;
  let uplink: Uplink | undefined;
  let heartbeat: Heartbeat | undefined;
  let sweeper: NodeJS.Timeout | undefined;
  let sweeping = false;
  let billing: BillingWorker | undefined;
  let notifier: NotificationDispatcher | undefined;
  const stripe = cloudDeps.stripe === undefined ? stripeFromSettings(config.stripe) : cloudDeps.stripe;
  const metrics = processMetrics({
    backend: () => db?.kind ?? null,
    pool: () => db?.poolStats() ?? null,
    links: () => (links ? { in: links.inbox.connected, out: links.out.connected, inFlight: links.inbox.inFlight } : null),
  });

  const need = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('cloud not started');
    return v;
  };
  const brokerAccounts = cloudDeps.brokerAccounts ?? unmanagedBrokerAccounts;
  const app = (o: VerbOptions = {}): AppDeps => ({
    db: o.db ?? need(db),
    inCallerTransaction: o.db !== undefined,
    clock,
    log,
    crash,
    wake: () => dispatcher?.wake(),
    brokerAccounts,
    secrets: need(secrets),
    offlineKeyMaxSeconds: config.offlineKeyMaxSeconds,
    notificationChannel: config.notifications.channel,
  });
  const signingDeps = (o: VerbOptions = {}): signing.SigningDeps => ({ ...app(o), signer: need(signer) });
  const stayDeps = (o: VerbOptions = {}): stays.StayDeps => ({ ...app(o), stripe, wakeBilling: () => billing?.wake() });

  return {
    async start(): Promise<void> {
      // Start-up work (database, migrations, key, broker link) is one unit of work with its own cid.
      const startLog = withCorrelation(log, newCorrelationId(), { phase: 'start' });
      // before the database: a cloud without its KEK refuses to start (ConfigError KEK_REQUIRED), there is no default
      const box = loadSecretBox(config);
      db = cloudDeps.db ?? (await openDb(config, startLog));
      const started = db;
      // each start-up step is idempotent: a link cut between two of them is waited out, not a failed start
      const step = <T>(f: () => Promise<T>) => whenDatabaseAnswers(f, startLog);
      await step(() => migrate(started, startLog, clock.now()));
      // the rows' key ids must be in the ring and open with it (KEK_UNKNOWN, KEK_WRONG), then no secret stays in clear
      await step(() => checkKeyRing(started, box));
      const sealed = await step(() => resealSecrets(started, box, { onlyClear: true }));
      startLog.info(
        { kid: box.currentKid, kids: box.kids, sealedNow: sealed.rotated, notUnderCurrentKek: sealed.remaining },
        sealed.remaining > 0 ? 'secrets at rest: some are under an older KEK (run `secrets rotate`)' : 'secrets at rest sealed',
      );
      secrets = box;
      signer = await loadSigner(config.issuer, config.signingJwk, startLog);
      const attaching = signer;
      await step(() => attaching.attach(started, clock.now()));
      const opts = {
        // persistent session: uplinks not yet acknowledged (PUBACK after commit) are redelivered after a restart
        clean: config.mqttCleanSession,
        clientId: config.mqttClientId,
        ...(config.mqttUsername ? { username: config.mqttUsername } : {}),
        ...(config.mqttPassword ? { password: config.mqttPassword } : {}),
      };
      // two connections: the inbox's incoming flood never holds up the PUBACKs of the dispatcher's publishes
      links = openMqttLinks(
        config.mqttUrl,
        withCorrelation(log, newCorrelationId(), { part: 'mqtt-link' }),
        opts,
        {
          group: config.mqttSharedGroup,
          filters: [filters.allGatewaysUp], // presence is retained: never shared
        },
        { maxInFlight: config.uplinkMaxInFlight },
      );
      const link = links.out;
      dispatcher = new Dispatcher(
        { db, clock, log, crash, link, signer, random: cloudDeps.random ?? Math.random, telemetry: metrics.telemetry },
        {
          pollMs: config.dispatch.pollMs,
          batch: config.dispatch.batch,
          leaseMs: config.dispatch.leaseMs,
          publishTimeoutMs: config.dispatch.publishTimeoutMs,
          baseMs: config.dispatch.backoffBaseMs,
          maxMs: config.dispatch.backoffMaxMs,
          maxAttempts: config.dispatch.maxAttempts,
        },
      );
      uplink = new Uplink(app(), {
        link: links.inbox,
        publishLink: links.out,
        signer,
        replayMax: config.resyncReplayMax,
        publishTimeoutMs: config.dispatch.publishTimeoutMs,
        resyncRate: config.resyncRate,
        resyncMaxConcurrent: config.resyncMaxConcurrent,
        rejectedMaxRows: config.rejectedUplinksMaxRows,
        telemetry: metrics.telemetry,
      });
      heartbeat = new Heartbeat(app(), {
        link,
        signer,
        intervalMs: config.heartbeatIntervalMs,
        qos: config.heartbeatQos,
        publishTimeoutMs: config.dispatch.publishTimeoutMs,
      });
      uplink.start();
      // not fatal: the link keeps reconnecting, and the uplink subscription is made on every connect
      const ready = await Promise.race([
        Promise.all([uplink.subscribed, links.out.waitConnected(5_000)]).then(([, out]) => out),
        new Promise<boolean>((r) => setTimeout(() => r(false), 5_000).unref()),
      ]);
      if (!ready) startLog.warn({ url: config.mqttUrl }, 'MQTT not connected yet; starting anyway');
      await dispatcher.start();
      heartbeat.start();
      if (stripe) {
        billing = new BillingWorker(
          { ...stayDeps(), stripe, log: log.child({ part: 'billing-worker' }), random: cloudDeps.random ?? Math.random },
          { ...config.billing, ...(cloudDeps.billingWorker === false ? {} : cloudDeps.billingWorker) },
        );
        if (cloudDeps.billingWorker !== false) billing.start();
      }
      notifier = new NotificationDispatcher(
        {
          db,
          clock,
          log: log.child({ part: 'notifications' }),
          crash,
          random: cloudDeps.random ?? Math.random,
          channels: cloudDeps.notificationChannels ?? channelsOf(config.notifications, log.child({ part: 'notifications' })),
        },
        {
          pollMs: config.notifications.pollMs,
          leaseMs: config.notifications.leaseMs,
          maxAttempts: config.notifications.maxAttempts,
          baseMs: config.notifications.backoffBaseMs,
          maxMs: config.notifications.backoffMaxMs,
          ...(cloudDeps.notificationDispatcher || {}),
        },
      );
      if (cloudDeps.notificationDispatcher !== false) notifier.start();
      sweeper = setInterval(() => {
        if (sweeping) return;
        sweeping = true;
        keys
          .expireKeys(app())
          .then(() => purgeOld(need(db), clock.now() - config.retentionMs))
          .catch((e: unknown) => log.warn({ err: String(e) }, 'expire sweep failed'))
          .finally(() => {
            sweeping = false;
          });
      }, config.expireSweepMs);
      sweeper.unref();
    },

    async stop(): Promise<void> {
      if (sweeper) clearInterval(sweeper);
      await billing?.stop();
      // graceful: a pass in flight finishes its sends and marks before the database closes
      await notifier?.stop();
      heartbeat?.stop();
      // the inbox first: it takes nothing new and its handlers in flight commit and are acknowledged
      await links?.inbox.close();
      await uplink?.stop();
      await dispatcher?.stop();
      await links?.out.close();
      if (!cloudDeps.db) await db?.close();
      db = undefined;
    },

    get jwks() {
      return need(signer).jwks;
    },
    /** The KEK box (after start()): the admin API's webhook registration and worker seal and open with it. */
    get secrets(): SecretBox {
      return need(secrets);
    },
    /** The cloud's database, for the HTTP layer's own tables and scoped reads (after start()). */
    get db(): Db {
      return need(db);
    },
    get issuer() {
      return config.issuer;
    },
    /** The dispatcher, for tests and the demo: wake it and wait for the pass to end. */
    async flush(): Promise<void> {
      const d = need(dispatcher);
      d.wake();
      await d.idle();
    },
    get dispatcherCrashed(): boolean {
      return dispatcher?.crashed ?? false;
    },
    get mqttConnected(): boolean {
      return links?.connected ?? false;
    },
    /** Each MQTT link's state and the uplinks in flight in the inbox (tests; /metrics shows the same). */
    get mqttLinks(): { readonly in: boolean; readonly out: boolean; readonly inFlight: number; readonly inFlightPeak: number } {
      return {
        in: links?.inbox.connected ?? false,
        out: links?.out.connected ?? false,
        inFlight: links?.inbox.inFlight ?? 0,
        inFlightPeak: links?.inbox.inFlightPeak ?? 0,
      };
    },
    /** What this process counts (uplinks, dispatch lag, publish failures; the admin API's webhook worker reports here too). */
    telemetry: metrics.telemetry,
    /** Those counters and the database pool, scraped with the admin API's metrics (ApiDeps.processRegistry). */
    metricsRegistry: metrics.registry,

    createSite: (input: Parameters<typeof registry.createSite>[1], o?: VerbOptions) => registry.createSite(app(o), input),
    registerGateway: (input: Parameters<typeof registry.registerGateway>[2], o?: VerbOptions) =>
      registry.registerGateway(app(o), { issuer: config.issuer, jwks: need(signer).jwks }, input),
    /** A new cloud-broker password for a gateway (BROKER_ACCOUNTS_UNMANAGED when accounts are not managed). */
    rotateGatewayBrokerCredentials: (input: Parameters<typeof rotateGatewayBrokerCredentials>[1], o?: VerbOptions) =>
      rotateGatewayBrokerCredentials(app(o), input),
    createDoor: (input: Parameters<typeof registry.createDoor>[1], o?: VerbOptions) => registry.createDoor(app(o), input),
    createPerson: (input: Parameters<typeof registry.createPerson>[1], o?: VerbOptions) => registry.createPerson(app(o), input),

    issueKey: (input: keys.IssueKeyInput, o?: VerbOptions) => keys.issueKey(app(o), input),
    revokeKey: (input: keys.RevokeKeyInput, o?: VerbOptions) => keys.revokeKey(app(o), input),
    expireKeys: (opts: { limit?: number; cid?: CorrelationId } = {}) => keys.expireKeys(app(), opts),
    getKey: (keyId: string) => keys.getKey(app(), keyId),
    listKeyHistory: (keyId: string) => keys.listKeyHistory(app(), keyId),
    /** A short-lived signed token for a mobile key's phone; nothing is written. */
    issueMobileToken: (input: MobileTokenInput, o?: VerbOptions) => issueMobileToken(app(o), need(signer), input),

    listAudit: (opts: reads.AuditQuery = {}) => reads.listAudit(need(db), opts),
    /** Gateway staff actions of the given sites (null: all), newest first (GET /staff-actions). */
    listStaffActions: (sites: readonly string[] | null, f: StaffActionFilter) => listStaffActions(need(db), sites, f),
    listRejectedUplinks: (opts: { gatewayId?: string; limit?: number } = {}) => reads.listRejectedUplinks(need(db), opts),
    listUplinkGaps: (gatewayId: string) => reads.listUplinkGaps(need(db), gatewayId),
    listOutbox: (gatewayId: string) => reads.listOutbox(need(db), gatewayId),
    listDeadLetters: (opts: { gatewayId?: string; limit?: number } = {}): Promise<DeadLetter[]> => listDeadLetters(need(db), opts),
    async retryDeadLetter(id: number, o: VerbOptions = {}) {
      const n = await retryDeadLetter(o.db ?? need(db), id, clock.now());
      if (n === 1) dispatcher?.wake();
      return n === 1
        ? ({ status: 'applied', code: 'MESSAGE_APPLIED' } as const)
        : ({ status: 'refused', code: 'DEAD_LETTER_NOT_FOUND' } as const);
    },
    /** The sweeper's purge, on demand: sent outbox rows and uplink dedupe rows older than RETENTION_MS. */
    purge: () => purgeOld(need(db), clock.now() - config.retentionMs),
    /** Delivery status of a key's messages (one outbox row per grant or revoke). */
    listKeyDeliveries: (keyId: string) => reads.listKeyDeliveries(need(db), keyId),
    /** Sends every online gateway a heartbeat now (the timer does this every HEARTBEAT_INTERVAL_MS). */
    sendHeartbeats: () => need(heartbeat).beat(),

    /** Stays can be booked: a Stripe client is configured. */
    get billingConfigured(): boolean {
      return stripe !== null;
    },
    bookStay: (input: stays.BookStayInput) => stays.bookStay(stayDeps(), input),
    cancelStay: (input: stays.CancelStayInput, o?: VerbOptions) => stays.cancelStay(stayDeps(o), input),
    checkInStay: (input: Parameters<typeof stays.checkInStay>[1], o?: VerbOptions) => stays.checkInStay(stayDeps(o), input),
    checkOutStay: (input: Parameters<typeof stays.checkOutStay>[1], o?: VerbOptions) => stays.checkOutStay(stayDeps(o), input),
    getStay: (stayId: string, scope: SiteScope = null) => stays.getStay(app(), stayId, scope),
    createRoom: (input: stays.CreateRoomInput, o?: VerbOptions) => stays.createRoom(app(o), input),
    setStaySettings: (input: stays.StaySettingsInput, o?: VerbOptions) => stays.setStaySettings(app(o), input),
    receiveStripeWebhook: (raw: Buffer, header: string | undefined, cid: CorrelationId) =>
      stays.receiveStripeWebhook(stayDeps(), config.stripe.webhookSecret, raw, header, cid),
    /** One billing worker pass now (tests and the demo): webhook inbox, billing jobs, hold sweep, automatic check-out. */
    runBilling: () => need(billing).runOnce(),

    /** One notification dispatcher pass now (tests and the demo); returns how many rows it claimed. */
    runNotifications: () => need(notifier).runOnce(),
    /** A dead notification back to pending (docs/notifications.md). */
    retryNotification: (input: { id: number; siteScope?: SiteScope; cid?: CorrelationId }, o?: VerbOptions) =>
      notifications.retryNotification(app(o), input.id, input.siteScope ?? null, input.cid),
    savePersonContact: (input: Parameters<typeof notifications.savePersonContact>[1], o?: VerbOptions) =>
      notifications.savePersonContact(app(o), input),
    saveSiteLocale: (input: Parameters<typeof notifications.saveSiteLocale>[1], o?: VerbOptions) =>
      notifications.saveSiteLocale(app(o), input),
    // memberships (docs/memberships.md): Stripe is called between transactions, so these take no `db`
    createPlan: (input: memberships.CreatePlanInput) => memberships.createPlan(stayDeps(), input),
    retirePlan: (input: Parameters<typeof memberships.retirePlan>[1]) => memberships.retirePlan(stayDeps(), input),
    requestMode: (input: modes.RequestModeInput, o?: VerbOptions) => modes.requestMode(app(o), input),
    rotateUplinkKey: (input: Parameters<typeof uplinkKeys.rotateUplinkKey>[1], o?: VerbOptions) =>
      uplinkKeys.rotateUplinkKey(app(o), input),
    listUplinkKeyRotations: (gatewayId: string, scope: SiteScope) => uplinkKeys.listUplinkKeyRotations(app(), gatewayId, scope),
    getModeRequest: (requestId: string, scope: SiteScope) => modes.getModeRequest(app(), requestId, scope),
    listSiteModeRequests: (siteId: string, scope: SiteScope, limit?: number) => modes.listSiteModeRequests(app(), siteId, scope, limit),
    applyMembership: (input: memberships.ApplyMembershipInput) => memberships.applyMembership(stayDeps(), input),
    approveMembership: (input: Parameters<typeof memberships.approveMembership>[1]) => memberships.approveMembership(stayDeps(), input),
    /** THE verb for every way a membership ends (billing stops first). */
    endMembership: (input: memberships.EndMembershipInput) => memberships.endMembership(stayDeps(), input),
    selfCancelMembership: (input: Parameters<typeof memberships.selfCancelMembership>[1]) =>
      memberships.selfCancelMembership(stayDeps(), input),
    // signing-key rotation (docs/operations.md): publish → switch → re-sign → retire
    listSigningKeys: () => signing.listSigningKeys(signingDeps()),
    publishSigningKey: (input: Parameters<typeof signing.publishSigningKey>[1], o?: VerbOptions) =>
      signing.publishSigningKey(signingDeps(o), input),
    switchSigningKey: (input: Parameters<typeof signing.switchSigningKey>[1], o?: VerbOptions) =>
      signing.switchSigningKey(signingDeps(o), input),
    resignLiveGrants: (input: Parameters<typeof signing.resignLiveGrants>[1] = {}, o?: VerbOptions) =>
      signing.resignLiveGrants(signingDeps(o), input),
    retireSigningKey: (input: Parameters<typeof signing.retireSigningKey>[1], o?: VerbOptions) =>
      signing.retireSigningKey(signingDeps(o), input),
    // check-in gates, walk-ins and quotas (docs/memberships.md "Check-in gates")
    createWalkIn: (input: walkIns.CreateWalkInInput) => walkIns.createWalkIn(stayDeps(), input),
    cancelWalkIn: (input: Parameters<typeof walkIns.cancelWalkIn>[1]) => walkIns.cancelWalkIn(stayDeps(), input),
    blockPerson: (input: Parameters<typeof walkIns.blockPerson>[1]) => walkIns.blockPerson(stayDeps(), input),
    unblockPerson: (input: Parameters<typeof walkIns.unblockPerson>[1]) => walkIns.unblockPerson(stayDeps(), input),
    quotaView: (input: Parameters<typeof walkIns.quotaView>[1]) => walkIns.quotaView(stayDeps(), input),
  };
}

export interface AdminApiOptions extends ListenOptions {
  /** Webhook worker options (its `allowPrivateNetworks` is `config.webhookAllowPrivateNetworks`); false: do not deliver webhooks from this process. */
  readonly webhooks?: Partial<WebhookOptions> | false;
  /** Where the webhook worker counts its deliveries (the cloud's `telemetry`); none: not counted. */
  readonly telemetry?: Telemetry;
}
export type AdminApi = Listener;

/** API tables' retention pass (idempotency keys, delivered webhooks): hourly; a failed pass is retried at the next. */
const API_PURGE_MS = 3_600_000;

/**
 * The admin API (docs/api.md): listens, and starts its background work, the
 * webhook worker and the hourly purge of its tables. close() stops accepting
 * requests, waits for those in flight, then drains the worker. The cloud must
 * be started (its database open) first.
 */
export async function startAdminApi(opts: AdminApiOptions): Promise<AdminApi> {
  const listener = await listenAdminApi(opts);
  // one SSRF switch for registration and delivery: the API config's
  const allowPrivateNetworks = opts.config?.webhookAllowPrivateNetworks ?? DEFAULT_API_CONFIG.webhookAllowPrivateNetworks;
  const webhooks =
    opts.webhooks === false
      ? undefined
      : new WebhookDispatcher(
          {
            db: opts.db,
            secrets: opts.cloud.secrets,
            clock: opts.clock,
            log: opts.log.child({ part: 'webhooks' }),
            ...(opts.telemetry ? { telemetry: opts.telemetry } : {}),
          },
          { ...opts.webhooks, allowPrivateNetworks },
        );
  webhooks?.start();
  const sweeper = setInterval(() => {
    purgeApiTables(opts.db, opts.clock.now()).catch((e: unknown) => opts.log.warn({ err: String(e) }, 'admin API purge failed'));
  }, API_PURGE_MS);
  sweeper.unref();
  let closing: Promise<void> | undefined;
  return {
    url: listener.url,
    app: listener.app,
    close: () =>
      (closing ??= (async () => {
        clearInterval(sweeper);
        await listener.close();
        await webhooks?.stop();
      })()),
  };
}

/** The admin API's settings from the config's `api` section (the rest keep DEFAULT_API_CONFIG). */
export const apiConfigOf = (config: CloudConfig): NonNullable<ApiDeps['config']> => ({
  gatewayBrokerUrl: config.gatewayBrokerUrl,
  webhookAllowPrivateNetworks: config.api.webhookAllowPrivateNetworks,
  tokenDefaultTtlMs: config.api.tokenDefaultTtlMs,
  healthDbTimeoutMs: config.api.healthDbTimeoutMs,
  rateLimitIpMax: config.api.rateLimitIpMax,
});

/**
 * Everything `npm run cloud` runs, from one frozen config: the broker
 * accounts' admin link, the core (database, MQTT link, dispatcher, uplink
 * inbox, heartbeat, expiry and purge sweeper) and the admin API (listener,
 * webhook worker, its purge). start() brings them up in that order; stop()
 * drains them in the reverse one (no new requests, then no new work, then
 * the links), so a SIGTERM loses nothing in flight.
 */
export function buildCloud(config: CloudConfig, deps: { readonly log: Logger; readonly clock?: Clock }) {
  const clock = deps.clock ?? systemClock;
  // constructors do nothing: the admin link connects in start()
  const brokerAccounts = brokerAccountsFromConfig(config, deps.log);
  const cloud = createCloud(config, { log: deps.log, clock, brokerAccounts });
  let api: AdminApi | undefined;
  return {
    cloud,
    brokerAccounts,
    get apiUrl(): string | undefined {
      return api?.url;
    },
    async start(): Promise<void> {
      await brokerAccounts.start();
      await cloud.start();
      api = await startAdminApi({
        cloud,
        db: cloud.db,
        log: deps.log,
        clock,
        host: config.api.host,
        port: config.api.port,
        config: apiConfigOf(config),
        telemetry: cloud.telemetry,
        processRegistry: cloud.metricsRegistry,
        ...(config.api.bootstrapAdminToken ? { bootstrapAdminToken: config.api.bootstrapAdminToken } : {}),
      });
    },
    async stop(): Promise<void> {
      await api?.close();
      await cloud.stop();
      await brokerAccounts.stop();
    },
  };
}
