import {
  LockRequest,
  asDoorId,
  asLockId,
  credentialDigest,
  newCorrelationId,
  newId,
  parseJson,
  parsePayload,
  decodeText,
  signLockCommand,
  topics,
  withCorrelation,
  type CredentialType,
  type DecisionCode,
  type AccessEvent,
  type LockCommand,
  type LockDecision,
  type KeySet,
  type MobileTokenCheck,
  verifyMobileTokenSignature,
} from '@tobira/shared';
import { decide, decideMobileToken, lastFreshSyncAt } from '../domain/decide.js';
import { CLOCK_SKEW_TOLERANCE_MS } from '../domain/freshness.js';
import { noSiteLockout, recordAttempt, recordSiteAttempt, type LockoutPolicy, type SiteLockoutPolicy } from '../domain/lockout.js';
import { fullBucket, takeToken, type Bucket, type RatePolicy } from '@tobira/shared';
import { commitDecisions, findAccess, insertAccess, type StoredAccessEvent } from '../adapters/sqlite/access-log.js';
import {
  consumeKey,
  consumedBy,
  keySetView,
  mobileTokenUsed,
  mobileTokenUsedElsewhere,
  useMobileToken,
} from '../adapters/sqlite/keyset.js';
import { setLockout, setSiteLockout } from '../adapters/sqlite/locks.js';
import { memoryLock, memorySiteLockout } from '../adapters/sqlite/memory.js';
import { enqueue } from '../adapters/sqlite/outbox.js';
import type { StoredKey } from '../domain/keyset.js';
import { raiseTimeFloor, readSettings, type Settings } from '../adapters/sqlite/settings.js';
import { nowOf, type AppContext } from './context.js';
import { recordLockRefusal } from './locks.js';

/**
 * A lock asks; the gateway decides, records and answers. The decision, the
 * access-log row, the lockout update and the access.event outbox row commit
 * in ONE transaction before anything is published, so every decision reaches
 * the cloud exactly once in effect. A lock retrying the same request id gets
 * the recorded decision again (and the same command), never a second event;
 * a recorded ALLOWED only while it still holds (see `judge`).
 */
export interface AccessOptions {
  readonly pepper: Uint8Array;
  readonly lockout: LockoutPolicy;
  /** Wrong credentials of one type across every lock of the site. */
  readonly siteLockout: SiteLockoutPolicy;
  /** Per-lock token bucket, checked before anything is read or written. */
  readonly requestRate: RatePolicy;
  /** How long the bolt stays open. */
  readonly holdMs: number;
  /** Command lifetime; locks refuse more than 30 s (DEFAULT_MAX_COMMAND_TTL_MS). */
  readonly commandTtlMs: number;
  readonly pairingSecrets: ReadonlyMap<string, Uint8Array>;
  /**
   * How old (by the gateway's trusted time against the lock's `at`) a request may be when it is decided,
   * and how far ahead of the gateway a lock's clock may run. Older: refused REQUEST_STALE (a stalled
   * site link must not open the door for someone who has walked away); further ahead: LOCK_CLOCK_AHEAD
   * (the age of its requests cannot be told). Absent: not checked (the config always sets it).
   */
  readonly requestMaxAgeMs?: number;
  /** The lease length a fresh heartbeat grants (config offlineGraceSeconds), to read the last proven-fresh sync back from the lease. */
  readonly offlineGraceSeconds: number;
  /** The cloud's trusted keys and issuer, to check relayed mobile tokens with (absent: every token is MOBILE_TOKEN_UNKNOWN_SIGNER). */
  /** The cloud keys mobile tokens are checked with: the trusted set as last loaded (null: none loaded yet), or a fixed set. */
  readonly mobileTokens?: {
    readonly keys: KeySet | (() => KeySet | null);
    readonly issuer: string;
    /**
     * When this gateway started, on the cloud's clock (ms; +Infinity before it is known): tokens issued
     * before it are refused (absent: none are).
     */
    readonly startedAt?: number | (() => number);
  };
}

export interface AccessDeps extends AppContext {
  readonly access: AccessOptions;
  /** The rate-limit buckets, by lock id (in memory: a restart refills them, which only lets a burst through). */
  readonly buckets: Map<string, Bucket>;
  /** Cached free-space verdict of the data folder (StorageGuard): a decision reads it, never the disk. */
  readonly storageLow: () => boolean;
}

export interface AccessAnswer {
  readonly decision: LockDecision;
  readonly command: LockCommand | null;
  readonly replayed: boolean;
  readonly cid: string;
}

const REQUEST_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/** Best effort request id of a refused request, so the lock can match the BAD_REQUEST answer. */
function salvageRequestId(payload: unknown): string | null {
  const text = decodeText(payload);
  if (!text.ok) return null;
  const json = parseJson(text.value);
  if (!json.ok || typeof json.value !== 'object' || json.value === null) return null;
  const id = (json.value as { requestId?: unknown }).requestId;
  return typeof id === 'string' && REQUEST_ID.test(id) ? id : null;
}

/** Lock ids that are not paired share one bucket, so made-up ids can neither grow the map nor dodge the limit. */
const UNPAIRED = '\u0000unpaired';

/**
 * The rate limit, before anything else: a request over it is answered
 * RATE_LIMITED (when its request id can be read) and otherwise only counted.
 * The first refusal of a flood is logged with its cid and recorded in
 * lock_refusals (bounded); the end of the flood logs how many were refused.
 * No access-log or outbox row, so a flood cannot fill the disk or the uplink.
 * Returns undefined when the request may go on.
 */
function rateLimit(deps: AccessDeps, lockId: string, payload: unknown, now: number): AccessAnswer | null | undefined {
  const paired = deps.access.pairingSecrets.has(lockId);
  const key = paired ? lockId : UNPAIRED;
  const policy = deps.access.requestRate;
  const t = takeToken(deps.buckets.get(key) ?? fullBucket(policy, now), now, policy);
  deps.buckets.set(key, t.bucket);
  if (t.ok) {
    if (t.refusedBefore > 0)
      withCorrelation(deps.log, newCorrelationId(), { lockId }).info(
        { code: 'RATE_LIMITED', refused: t.refusedBefore, paired },
        'lock request flood over: requests refused by the rate limit',
      );
    return undefined;
  }
  const cid = newCorrelationId();
  const topic = topics.lock(deps.gatewayId, lockId, 'request');
  if (t.first) {
    recordLockRefusal(deps, withCorrelation(deps.log, cid, { lockId }), {
      origin: 'gateway',
      lockId,
      channel: 'request',
      topic,
      code: 'RATE_LIMITED',
      detail: `over ${policy.burst} requests at once or ${policy.perSecond}/s; further refusals until it slows down are only counted`,
      payload,
    });
  } else deps.metrics.lockMessagesRefused.inc({ channel: 'request', code: 'RATE_LIMITED' });
  const requestId = paired ? salvageRequestId(payload) : null;
  return requestId === null
    ? null
    : { decision: { requestId, allowed: false, code: 'RATE_LIMITED', commandId: null }, command: null, replayed: false, cid };
}

/** Handles one lock request. Returns null when there is nothing to answer (a lock not paired with this gateway, or a rate-limited request without a readable request id). */
export function handleLockRequest(deps: AccessDeps, lockId: string, payload: unknown): AccessAnswer | null {
  return handleLockRequests(deps, [{ lockId, payload }])[0] ?? null;
}

type Decided = {
  readonly row: StoredAccessEvent;
  readonly command: LockCommand | null;
  readonly replayed: boolean;
  readonly siteLockoutUntil?: number;
  /** A repeat of a recorded ALLOWED that no longer holds: the refusal answered instead (nothing resent, nothing new in the access log). */
  readonly withdrawn?: DecisionCode;
};

/**
 * Handles the lock requests that arrived together (group commit): each is
 * decided in arrival order inside ONE transaction, so one fsync covers them
 * all and each decision sees the lockout state the previous one left. Nothing
 * is published before that commit.
 */
export function handleLockRequests(deps: AccessDeps, items: readonly { lockId: string; payload: unknown }[]): (AccessAnswer | null)[] {
  const { store, access } = deps;
  const arrivedAt = nowOf(deps);
  const limited = items.map(({ lockId, payload }) => rateLimit(deps, lockId, payload, arrivedAt));
  const prepared = items.map(({ lockId, payload }, i) => {
    if (limited[i] !== undefined) return null;
    const secret = access.pairingSecrets.get(lockId);
    const topic = topics.lock(deps.gatewayId, lockId, 'request');
    if (secret === undefined) {
      const log = withCorrelation(deps.log, newCorrelationId(), { lockId });
      recordLockRefusal(deps, log, {
        origin: 'gateway',
        lockId,
        channel: 'request',
        topic,
        code: 'UNKNOWN_LOCK',
        detail: 'request from a lock that is not paired with this gateway',
        payload,
      });
      return null;
    }
    const parsed = parsePayload(LockRequest, payload);
    if (!parsed.ok) {
      // Still answered (BAD_REQUEST, in the access log); the refusal keeps the parse code and a detail
      // that cannot hold a credential value: zod's issue messages name paths and rules, never the input,
      // but V8's JSON.parse message quotes the text around the error, so MALFORMED gets a fixed detail.
      const detail = parsed.code === 'MALFORMED' ? 'payload is not UTF-8 JSON' : parsed.detail;
      recordLockRefusal(deps, withCorrelation(deps.log, newCorrelationId(), { lockId }), {
        origin: 'gateway',
        lockId,
        channel: 'request',
        topic,
        code: parsed.code,
        detail,
        payload,
      });
    }
    const requestId = parsed.ok ? parsed.value.requestId : (salvageRequestId(payload) ?? `invalid-${newId()}`);
    const c = parsed.ok ? parsed.value.credential : null;
    const credential: Presented | null =
      c === null
        ? null
        : c.type === 'mobile_token'
          ? { type: 'mobile', token: checkMobileToken(access, c.value) }
          : { type: c.type, digest: credentialDigest(access.pepper, c.type, c.value) };
    return { lockId, secret, requestId, credential, sentAt: parsed.ok ? parsed.value.at : null };
  });

  const decided = commitDecisions(store.db, (): (Decided | null)[] => {
    // Read once per batch: no decision writes what another one reads from it (mode, lease); each
    // decision's own writes (lockouts, uplink seq) are read per decision.
    const settings = readSettings(store.db);
    const now = deps.time.now(store.db, settings);
    const ceiling = deps.time.ceiling();
    const earliest = ceiling === null ? now : Math.min(now, ceiling - CLOCK_SKEW_TOLERANCE_MS);
    const batch = { settings, now, storageLow: deps.storageLow(), earliest };
    const out = prepared.map((p): Decided | null => {
      if (p === null) return null;
      const earlier = findAccess(store.db, p.lockId, p.requestId);
      if (earlier !== null) {
        const now = earlier.code === 'ALLOWED' ? judge(deps, batch, p, true).d : null;
        if (now !== null && !now.allowed) return { row: earlier, command: null, replayed: true, withdrawn: now.code };
        return { row: earlier, command: recordedCommand(earlier, p.secret), replayed: true };
      }
      return { ...decideOne(deps, batch, p), replayed: false };
    });
    if (out.some((d) => d !== null && !d.replayed)) raiseTimeFloor(store.db, 0, now);
    return out;
  });

  const answers = decided.map((d, i): AccessAnswer | null => {
    const refusal = limited[i];
    if (refusal !== undefined) return refusal;
    if (d === null) return null;
    const { row } = d;
    const log = withCorrelation(deps.log, row.cid, { lockId: row.lockId, requestId: row.requestId });
    if (d.siteLockoutUntil !== undefined) {
      log.warn(
        { code: 'LOCKED_OUT', credentialType: row.credentialType, until: d.siteLockoutUntil, policy: access.siteLockout },
        'wrong credentials of one type across the site: that type is locked out at every lock',
      );
    }
    if (d.withdrawn !== undefined) {
      recordLockRefusal(deps, log, {
        origin: 'gateway',
        lockId: row.lockId,
        channel: 'request',
        topic: topics.lock(deps.gatewayId, row.lockId, 'request'),
        code: d.withdrawn,
        detail: `repeat of a request allowed at ${row.at} (command ${row.commandId ?? '-'}) refused now: the unlock is not sent again`,
        payload: items[i]!.payload,
      });
      return {
        decision: { requestId: row.requestId, allowed: false, code: d.withdrawn, commandId: null },
        command: null,
        replayed: true,
        cid: row.cid,
      };
    }
    if (d.replayed) log.info({ code: row.code }, 'repeated request: answering the recorded decision');
    else {
      deps.metrics.decisions.inc({ code: row.code });
      log.info(
        { allowed: row.allowed, code: row.code, keyId: row.keyId, personId: row.personId, commandId: row.commandId },
        'door decision',
      );
    }
    return {
      decision: { requestId: row.requestId, allowed: row.allowed, code: row.code, commandId: row.commandId },
      command: d.command,
      replayed: d.replayed,
      cid: row.cid,
    };
  });
  if (decided.some((d) => d !== null && !d.replayed)) {
    deps.outboxWritten();
    deps.crash('afterDecisionBeforePublish');
  }
  return answers;
}

/**
 * What a lock presented, ready to decide on: a keyed digest, or a mobile
 * token with its signature already checked (outside the transaction: the
 * check reads nothing the transaction writes).
 */
type Presented = { readonly type: CredentialType; readonly digest: string } | { readonly type: 'mobile'; readonly token: MobileTokenCheck };

/** The start a relayed mobile token must be issued after, as decide takes it (none when not configured). */
function startedAtOf(access: AccessOptions): { startedAt?: number } {
  const s = access.mobileTokens?.startedAt;
  return s === undefined ? {} : { startedAt: typeof s === 'function' ? s() : s };
}

function checkMobileToken(access: AccessOptions, token: string): MobileTokenCheck {
  if (access.mobileTokens === undefined)
    return { ok: false, code: 'MOBILE_TOKEN_UNKNOWN_SIGNER', detail: 'this gateway trusts no cloud key for mobile tokens' };
  const k = access.mobileTokens.keys;
  const keys = typeof k === 'function' ? k() : k;
  if (keys === null) return { ok: false, code: 'MOBILE_TOKEN_UNKNOWN_SIGNER', detail: 'the trusted cloud keys are not loaded yet' };
  return verifyMobileTokenSignature(token, keys, access.mobileTokens.issuer);
}

type Batch = {
  readonly settings: Settings;
  readonly now: number;
  readonly storageLow: boolean;
  /**
   * The earliest real time `now` may stand for: the cloud-proven time carried by elapsed time (trusted time
   * may sit up to the skew tolerance above it while the wall clock runs ahead, flagged or not), or `now`
   * before a proof.
   */
  readonly earliest: number;
};

/** A request ready to decide on; `sentAt` is the lock's own `at` (null: the request did not parse). */
interface Prepared {
  readonly lockId: string;
  readonly secret: Uint8Array;
  readonly requestId: string;
  readonly credential: Presented | null;
  readonly sentAt: number | null;
}

/**
 * Why a request is too late (or from a lock whose clock runs ahead) to open a door now, or null.
 * Judged again on a lock's retry of an allowed request, so a retry that comes late is withdrawn too.
 * The age counts from `earliest`, the earliest real time `now` may stand for, so a gateway whose own
 * wall clock runs ahead does not refuse every honest lock, and one whose clock is behind gives no slack.
 */
function requestTimeRefusal(
  access: AccessOptions,
  sentAt: number | null,
  now: number,
  earliest: number,
): 'REQUEST_STALE' | 'LOCK_CLOCK_AHEAD' | null {
  const max = access.requestMaxAgeMs;
  if (max === undefined || sentAt === null) return null;
  if (earliest - sentAt > max) return 'REQUEST_STALE';
  if (sentAt - now > max) return 'LOCK_CLOCK_AHEAD';
  return null;
}

/**
 * What the rules say now about what a lock presented; reads only. `repeat`:
 * judging a retry of this very request, whose recorded ALLOWED already used
 * up its one-time key or mobile token: that use (and only that one) does not
 * count against it, every other rule (revoke, lockdown, privacy, expiry,
 * schedule, freshness of the cloud sync, lockouts) does.
 * A lock that lost the unlock retries with the same request id up to the
 * command's expiry: answering the recorded ALLOWED without asking again would
 * open the door after a lockdown or a revoke.
 */
function judge(deps: AccessDeps, batch: Batch, request: Prepared, repeat: boolean) {
  const { access } = deps;
  const { lockId, requestId, credential } = request;
  const { db } = deps.store;
  const { settings, now } = batch;
  // every read below is from memory (adapters/sqlite/memory.ts), the writes go to SQLite and memory
  const lock = memoryLock(db, lockId);
  const siteLockout = credential === null ? null : (memorySiteLockout(db, credential.type) ?? noSiteLockout);
  const current = keySetView(db);
  const ownUse = (k: StoredKey): StoredKey => {
    if (!repeat || k.consumedAt === undefined || !consumedBy(db, k.grant.keyId, lockId, requestId)) return k;
    const { consumedAt: _, ...rest } = k;
    return rest;
  };
  const keySet: typeof current = repeat
    ? {
        ...current,
        byCredential: (t, digest) => current.byCredential(t, digest).map(ownUse),
        byKeyId: (keyId) => {
          const k = current.byKeyId?.(keyId) ?? null;
          return k === null ? null : ownUse(k);
        },
      }
    : current;
  // the lease this process may act on: none until a restart is proven (TrustedTime.proven)
  const leaseExpiresAt = deps.time.lease(settings);
  const site = {
    ...settings,
    leaseExpiresAt,
    lastFreshAt: lastFreshSyncAt(leaseExpiresAt, access.offlineGraceSeconds),
    storageLow: batch.storageLow,
    ...(siteLockout === null ? {} : { credentialLockout: siteLockout }),
  };
  const lockView =
    lock === null
      ? null
      : {
          failures: lock.failures,
          lockedOutUntil: lock.lockedOutUntil,
          doorId: lock.doorId === null ? null : asDoorId(lock.doorId),
          privacy: lock.privacySince !== null,
          privacyUnknown: deps.watch !== undefined && !deps.watch.privacyKnown(lockId),
        };
  const late = requestTimeRefusal(access, request.sentAt, now, batch.earliest);
  const d =
    credential === null
      ? ({ allowed: false, code: 'BAD_REQUEST' } as const)
      : late !== null
        ? ({ allowed: false, code: late } as const)
        : 'token' in credential
          ? decideMobileToken(
              credential.token.ok
                ? {
                    lockId: asLockId(lockId),
                    claims: credential.token.claims,
                    audience: deps.gatewayId,
                    used: repeat
                      ? mobileTokenUsedElsewhere(db, credential.token.claims.jti, lockId, requestId)
                      : mobileTokenUsed(db, credential.token.claims.jti),
                    ...startedAtOf(access),
                  }
                : { lockId: asLockId(lockId), refused: credential.token.code },
              keySet,
              lockView,
              site,
              now,
            )
          : decide({ lockId: asLockId(lockId), credentialType: credential.type, digest: credential.digest }, keySet, lockView, site, now);
  return { d, lock, siteLockout, keySet };
}

/** One decision, inside `commitDecisions`' transaction: decide, lockouts (lock and site), access log, outbox. */
function decideOne(
  deps: AccessDeps,
  batch: Batch,
  request: Prepared,
): { row: StoredAccessEvent; command: LockCommand | null; siteLockoutUntil?: number } {
  const { access } = deps;
  const { db } = deps.store;
  const { now } = batch;
  const { lockId, secret, requestId, credential } = request;
  const { d, lock, siteLockout, keySet } = judge(deps, batch, request, false);
  if (lock !== null && d.code !== 'LOCKED_OUT') setLockout(db, lockId, recordAttempt(lock, d.code, now, access.lockout), now);
  let siteLockoutUntil: number | undefined;
  if (credential !== null && siteLockout !== null) {
    const next = recordSiteAttempt(siteLockout, d.code, now, access.siteLockout);
    if (next !== siteLockout) setSiteLockout(db, credential.type, next, now);
    if (next.lockedOutUntil !== null && next.lockedOutUntil !== siteLockout.lockedOutUntil) siteLockoutUntil = next.lockedOutUntil;
  }
  const key = d.key ?? null;
  // A one-time key is consumed in this transaction, with its decision: the next decision (the next
  // request of this batch, or of the next transaction at any lock) reads it and answers KEY_USED.
  if (d.allowed && key !== null && key.grant.oneTime === true) {
    if (!consumeKey(db, { keyId: key.grant.keyId, version: key.version, lockId, requestId }, now))
      throw new Error(`one-time key ${key.grant.keyId} allowed although already consumed`);
  }
  // A mobile token is used up in this transaction, with its decision, so a replay is refused at any lock, after a restart too.
  if (d.allowed && credential !== null && 'token' in credential && credential.token.ok) {
    const c = credential.token.claims;
    if (!useMobileToken(db, { jti: c.jti, expiresAt: c.exp * 1000, lockId, requestId }, now))
      throw new Error(`mobile token ${c.jti} allowed although already used`);
  }
  const cid = (key !== null ? keySet.grantCid(key.grant.keyId) : null) ?? newCorrelationId();
  const command = d.allowed
    ? signLockCommand(secret, {
        commandId: newId(),
        lockId: asLockId(lockId),
        action: 'unlock',
        holdMs: access.holdMs,
        expiresAt: now + access.commandTtlMs,
      })
    : null;
  const event: AccessEvent = {
    eventId: newId(),
    requestId,
    lockId: asLockId(lockId),
    doorId: lock?.doorId == null ? null : asDoorId(lock.doorId),
    at: now,
    allowed: d.allowed,
    code: d.code,
    keyId: key?.grant.keyId ?? null,
    keyVersion: key?.version ?? null,
    personId: key?.grant.personId ?? null,
    credentialType: credential?.type ?? null,
    commandId: command?.commandId ?? null,
  };
  const row: StoredAccessEvent = { ...event, commandExpiresAt: command?.expiresAt ?? null, holdMs: command?.holdMs ?? null, cid };
  const queued = enqueue(db, deps.store.limits, 'access.event', event, cid, true, now);
  insertAccess(db, row, 'seq' in queued ? queued.seq : null);
  return { row, command, ...(siteLockoutUntil === undefined ? {} : { siteLockoutUntil }) };
}

/**
 * The same command again: same id, action and expiry, so the same MAC; a lock refuses it if already
 * executed or expired. A passage relock recorded a `lock` command: re-signing it as an unlock would
 * hand whoever repeats its request id a valid unlock under an id the lock may never have executed.
 */
function recordedCommand(row: StoredAccessEvent, secret: Uint8Array): LockCommand | null {
  return row.commandId !== null && row.commandExpiresAt !== null && row.holdMs !== null
    ? signLockCommand(secret, {
        commandId: row.commandId,
        lockId: row.lockId,
        action: row.code === 'PASSAGE_RELOCK' ? 'lock' : 'unlock',
        holdMs: row.holdMs,
        expiresAt: row.commandExpiresAt,
      })
    : null;
}
