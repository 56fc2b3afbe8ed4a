import {
  conflict,
  credentialDigest,
  newCorrelationId,
  refused,
  withCorrelation,
  type CorrelationId,
  type CredentialType,
  type GatewayId,
  type KeyId,
  type Outcome,
  type RevokeReason,
  type Schedule,
  asKeyId,
  newId,
  asGatewayId,
  DEFAULT_OFFLINE_MAX_SECONDS,
} from '@tobira/shared';
import { enterVerb, type Queryable } from '../adapters/db/db.js';
import {
  appendHistory,
  casKey,
  enterVerbAndLoadKey,
  getKeySummary,
  insertKey,
  keyExists,
  issueTargets,
  keysDueToExpire,
  listHistory,
  loadKey,
  type HistoryRow,
} from '../adapters/db/keys.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { loadBlock } from '../adapters/db/walk-ins.js';
import { enqueueAtCommit, type Queued } from '../adapters/outbox/enqueue.js';
import * as domain from '../domain/keys.js';
import type { EntryKey, KeyOutcome } from '../domain/keys.js';
import type { AppDeps } from './deps.js';
import { RevokeKeyInput as RevokeKeySchema, check, parseIssue, type ParsedIssueKeyInput } from './inputs.js';

/** A verb's answer to its caller: the domain outcome, with the outbox rows it queued. */
export type KeyResult = Outcome<EntryKey, Queued> & { readonly cid: CorrelationId };

const MAX_CAS_ATTEMPTS = 3;

type Verb = 'issueKey' | 'revokeKey' | 'expireKey' | 'recordGatewayReport' | 'recordKeyUse';

/**
 * The adapter that owns a verb's transaction: load → decide (pure) → CAS →
 * history → outbox, all in one transaction with the verb marker set; a lost
 * CAS is retried a bounded number of times with a fresh load. In a caller's
 * transaction (`tx`, or `deps.inCallerTransaction`) it runs in it directly:
 * a lost CAS and a taken credential write nothing, so there is nothing for a
 * savepoint to undo.
 */
async function transition(
  deps: AppDeps,
  verb: Verb,
  keyId: string,
  cid: CorrelationId,
  decide: (current: EntryKey | null, now: number) => KeyOutcome,
  tx?: Queryable,
  /** For a key not yet issued: a refusal found in the verb's own transaction (a block the issue must not race). */
  gate?: (q: Queryable) => Promise<KeyResult | null>,
): Promise<KeyResult> {
  const log = withCorrelation(deps.log, cid, { verb, keyId });
  let last: EntryKey | null = null;
  // the verb of a caller's transaction this one runs in, given back when done (its later writes are its own)
  let outerVerb: string | undefined;
  for (let attempt = 1; attempt <= MAX_CAS_ATTEMPTS; attempt++) {
    const run = async (q: Queryable): Promise<KeyResult | 'lost'> => {
      const entered = await enterVerbAndLoadKey(q, verb, keyId);
      outerVerb ??= entered.outerVerb;
      const current = entered.key;
      last = current;
      const barred = current === null && gate !== undefined ? await gate(q) : null;
      if (barred !== null) return barred;
      const now = deps.clock.now();
      const out = decide(current, now);
      if (out.status !== 'applied') return { ...out, cid };
      const rows = current === null ? await insertKey(q, out.state) : await casKey(q, out.state, current.revision);
      // an insert that met no key of that id met another live key with the credential (keys_live_credential)
      if (rows !== 1 && current === null && !(await keyExists(q, out.state.id))) return { ...refused('CREDENTIAL_IN_USE'), cid };
      if (rows !== 1) return 'lost';
      deps.crash('afterCasBeforeOutboxInsert');
      await appendHistory(q, historyOf(verb, current, out.state, out.code, now));
      // seqs taken at the commit: the gateway's counter is not held across the caller's round trips
      const queued: Queued[] = [];
      for (const m of out.emits) {
        queued.push(
          await enqueueAtCommit(
            q,
            { gatewayId: out.state.gatewayId, type: m.type, keyId: out.state.id, keyVersion: out.state.version, body: m.body, cid },
            now,
          ),
        );
      }
      deps.crash('afterOutboxInsertBeforeCommit');
      return { status: 'applied', code: out.code, state: out.state, emits: queued, cid };
    };
    const inCaller = tx ?? (deps.inCallerTransaction === true ? deps.db : undefined);
    const result = inCaller ? await run(inCaller) : await deps.db.transaction(run);
    // outer verb set: `deps.db` (or `tx`) is that caller's open transaction, directly or through a savepoint
    if (outerVerb !== undefined && outerVerb !== '' && outerVerb !== verb) await enterVerb(inCaller ?? deps.db, outerVerb);
    if (result === 'lost') {
      log.info({ attempt }, 'compare-and-set lost; reloading');
      continue;
    }
    log.info({ status: result.status, code: result.code }, 'key verb done');
    if (!inCaller && result.status === 'applied') {
      deps.crash('afterCommitBeforePublish');
      if (result.emits.length > 0) deps.wake();
    }
    return result;
  }
  log.warn('compare-and-set lost on every attempt');
  return last === null ? { ...refused('KEY_NOT_FOUND'), cid } : { ...conflict('KEY_STATE_CHANGED', last), cid };
}

function historyOf(verb: Verb, from: EntryKey | null, to: EntryKey, code: string, now: number): HistoryRow {
  return {
    keyId: to.id,
    version: to.version,
    revision: to.revision,
    event: domain.eventOfCode(code),
    fromStatus: from?.status ?? null,
    toStatus: to.status,
    reason: verb === 'revokeKey' ? to.revokeReason : null,
    code,
    cid: to.cid,
    verb,
    detail: null,
    at: now,
  };
}

// ---------------------------------------------------------------- issue

export interface IssueKeyInput {
  readonly keyId?: string;
  readonly personId: string;
  readonly doors: readonly string[];
  /** The clear value, or its digest with the pepper of the doors' gateway (a stay computes it at booking). */
  readonly credential:
    { readonly type: CredentialType; readonly value: string } | { readonly type: CredentialType; readonly digest: string };
  readonly validFrom: number;
  readonly validUntil: number;
  readonly schedule?: Schedule | null;
  readonly offlineCapable?: boolean;
  /** Offline-capable keys only: at most (and by default) the cloud's cap, `offlineKeyMaxSeconds`. */
  readonly offlineMaxSeconds?: number;
  /** A one-time key: the first entry at the door uses it up (status `used`). */
  readonly oneTime?: boolean;
  /** A staff key: kept out of a room whose guest has privacy on (offline-capable keys are staff keys anyway). */
  readonly staff?: boolean;
  /** The caller's sites (an API token's scope): a person or door outside them is not found. Absent or null: every site. */
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

/**
 * An issue's answer, with the key's gateway as the issue read it before its
 * transaction (null when refused before that): its reply is built from these
 * and the outcome, with no read after the outbox row (key-view.ts `issuedKeyView`).
 */
export type IssueKeyResult = KeyResult & { readonly gateway: { readonly siteId: string; readonly online: boolean | null } | null };

export async function issueKey(deps: AppDeps, input: IssueKeyInput): Promise<IssueKeyResult> {
  const cid = input.cid ?? newCorrelationId();
  const parsed = parseIssue(input);
  if (!parsed.ok) return { ...parsed.refusal, cid, gateway: null };
  return issueParsed(deps, parsed.value, cid);
}

async function issueParsed(deps: AppDeps, input: ParsedIssueKeyInput, cid: CorrelationId): Promise<IssueKeyResult> {
  const early = (r: KeyResult): IssueKeyResult => ({ ...r, gateway: null });
  const offlineCap = deps.offlineKeyMaxSeconds ?? DEFAULT_OFFLINE_MAX_SECONDS;
  if (input.offlineMaxSeconds !== undefined && input.offlineMaxSeconds > offlineCap) {
    return early({ ...refused('OFFLINE_MAX_TOO_LONG', `at most ${offlineCap} s`), cid });
  }
  const keyId = asKeyId(input.keyId ?? newId());
  const targets = await issueTargets(deps.db, deps.secrets, input.siteScope ?? null, input.personId, input.doors);
  if (!targets.personFound) return early({ ...refused('PERSON_NOT_FOUND'), cid });
  const missing = input.doors.filter((d) => !targets.doors.some((r) => r.id === d));
  if (input.doors.length === 0 || missing.length > 0) return early({ ...refused('DOOR_NOT_FOUND', missing.join(',')), cid });
  const gateways = new Set(targets.doors.map((r) => r.gatewayId));
  if (gateways.size !== 1) return early({ ...refused('DOORS_SPAN_GATEWAYS'), cid });
  const first = targets.doors[0];
  if (first === undefined) return early({ ...refused('GATEWAY_NOT_FOUND'), cid });
  const gateway = { siteId: first.siteId, online: first.gatewayOnline };
  const gatewayId = asGatewayId(first.gatewayId);
  const c = input.credential;
  const digest = 'digest' in c ? c.digest : credentialDigest(Buffer.from(first.pepper, 'base64url'), c.type, c.value);
  const cmd: domain.IssueKeyCommand = {
    keyId,
    personId: input.personId,
    gatewayId,
    credential: { type: input.credential.type, digest },
    doors: input.doors,
    validFrom: input.validFrom,
    validUntil: input.validUntil,
    schedule: input.schedule,
    offlineCapable: input.offlineCapable ?? false,
    // every offline-capable key carries its cap, so the gateway never needs the default for it
    offlineMaxSeconds: input.offlineCapable === true ? (input.offlineMaxSeconds ?? offlineCap) : (input.offlineMaxSeconds ?? null),
    oneTime: input.oneTime ?? false,
    staff: input.staff ?? false,
    cid,
    names: targets.names,
  };
  // a credential another live key holds is refused by the insert (CREDENTIAL_IN_USE, by rows affected): no read first
  // A person the site blocked gets no key there (a block revokes their live keys in its transaction, under
  // the person's row lock, which loadBlock shares: the block either sees this key or this issue sees it).
  const blocked = async (q: Queryable): Promise<KeyResult | null> =>
    (await loadBlock(q, first.siteId, input.personId)) === null
      ? null
      : { ...refused('GUEST_BLOCKED', `blocked at site ${first.siteId}`), cid };
  const o = await transition(deps, 'issueKey', keyId, cid, (current, now) => domain.issueKey(current, cmd, now), undefined, blocked);
  return o.status === 'applied' ? { ...o, gateway } : early(o);
}

// ---------------------------------------------------------------- revoke

export interface RevokeKeyInput {
  readonly keyId: string;
  readonly reason: RevokeReason;
  readonly expectedRevision?: number;
  /** The caller's sites: a key at a gateway outside them is not found. Absent or null: every site. */
  readonly siteScope?: SiteScope;
  readonly cid?: CorrelationId;
}

export async function revokeKey(deps: AppDeps, input: RevokeKeyInput): Promise<KeyResult> {
  const cid = input.cid ?? newCorrelationId();
  const invalid = check(RevokeKeySchema, input);
  if (invalid) return { ...invalid, cid };
  const scope = input.siteScope ?? null;
  if (scope !== null && (await getKeySummary(deps.db, scope, input.keyId)) === null) return { ...refused('KEY_NOT_FOUND'), cid };
  const cmd: domain.RevokeKeyCommand =
    input.expectedRevision === undefined
      ? { reason: input.reason, cid }
      : { reason: input.reason, cid, expectedRevision: input.expectedRevision };
  return transition(deps, 'revokeKey', input.keyId, cid, (current, now) => domain.revokeKey(current, cmd, now));
}

// ---------------------------------------------------------------- expire (sweeper)

export function expireKey(deps: AppDeps, keyId: string, cid: CorrelationId = newCorrelationId()): Promise<KeyResult> {
  return transition(deps, 'expireKey', keyId, cid, (current, now) => domain.expireKey(current, { cid }, now));
}

/** The sweeper: expires every live key whose window has ended. Each key is its own transaction. */
export async function expireKeys(
  deps: AppDeps,
  opts: { limit?: number; cid?: CorrelationId } = {},
): Promise<{ expired: string[]; outcomes: KeyResult[] }> {
  const cid = opts.cid ?? newCorrelationId();
  const due = await keysDueToExpire(deps.db, deps.clock.now(), opts.limit ?? 1000);
  const outcomes: KeyResult[] = [];
  for (const id of due) outcomes.push(await expireKey(deps, id, cid));
  const expired = outcomes.flatMap((o) => (o.status === 'applied' ? [o.state.id] : []));
  return { expired, outcomes };
}

// ---------------------------------------------------------------- gateway report

export interface GatewayReportInput {
  readonly keyId: KeyId;
  readonly gatewayId: GatewayId;
  readonly keyVersion: number;
  readonly result: 'applied' | 'noop' | 'refused';
  readonly code: string;
  readonly cid: CorrelationId;
}

/** Applies a gateway ack by (keyId, keyVersion). With `tx`, runs inside the caller's transaction (the uplink inbox). */
export function recordGatewayReport(deps: AppDeps, input: GatewayReportInput, tx?: Queryable): Promise<KeyResult> {
  const report: domain.GatewayReport = {
    gatewayId: input.gatewayId,
    keyVersion: input.keyVersion,
    result: input.result,
    code: input.code,
    cid: input.cid,
  };
  return transition(
    deps,
    'recordGatewayReport',
    input.keyId,
    input.cid,
    (current, now) => domain.recordGatewayReport(current, report, now),
    tx,
  );
}

// ---------------------------------------------------------------- use (one-time keys)

export interface KeyUseInput {
  readonly keyId: KeyId;
  readonly gatewayId: GatewayId;
  /** The gateway's decision time of the entry. */
  readonly at: number;
  readonly cid: CorrelationId;
}

/**
 * An allowed access event of a key: a one-time key becomes `used` (any other
 * key: noop REPORT_IGNORED, nothing written). With `tx`, inside the uplink
 * inbox's transaction, so the audit row and the key's use commit together.
 */
export function recordKeyUse(deps: AppDeps, input: KeyUseInput, tx?: Queryable): Promise<KeyResult> {
  const report: domain.KeyUseReport = { gatewayId: input.gatewayId, at: input.at, cid: input.cid };
  return transition(deps, 'recordKeyUse', input.keyId, input.cid, (current, now) => domain.recordKeyUse(current, report, now), tx);
}

// ---------------------------------------------------------------- reads

export function getKey(deps: AppDeps, keyId: string): Promise<EntryKey | null> {
  return loadKey(deps.db, keyId);
}

export function listKeyHistory(deps: AppDeps, keyId: string, scope: SiteScope = null): Promise<HistoryRow[]> {
  return listHistory(deps.db, keyId, scope);
}
