import { applied, newId, refused, withCorrelation, type CorrelationId, type Outcome, type Schedule, type SiteMode } from '@tobira/shared';
import type { Queryable } from '../adapters/db/db.js';
import {
  doorsIn,
  gatewaysWithDoors,
  insertModeRequest,
  modeRequestRows,
  siteModeRows,
  type ModeRequestRow,
  type PassageEntry,
} from '../adapters/db/modes.js';
import { getSite } from '../adapters/db/registry.js';
import type { SiteScope } from '../adapters/db/scope.js';
import { enqueue } from '../adapters/outbox/enqueue.js';
import type { AppDeps } from './deps.js';

/**
 * Operating modes set from the cloud (docs/api.md "Modes"): lockdown and
 * passage for one site or every site in the caller's scope. One transaction
 * queues, per gateway, a signed `site.mode` outbox row (its gateway's next
 * seq) and the `mode_requests` row that shows `pending` until that gateway
 * acks (app/uplink.ts settles it). The gateway applies it with the same rules
 * as a mode set there (gateway app/site-mode.ts), so a gateway that fails
 * closed stays closed whatever the cloud asks.
 */
export interface RequestModeInput {
  /** The caller's sites (null: every site). */
  readonly scope: SiteScope;
  /** One site, or null: every site in `scope`. */
  readonly siteId: string | null;
  /** The site mode to set (null: leave it). */
  readonly mode: SiteMode | null;
  /** Passage to set (schedule) or clear (null) on the named doors (absent doorIds: every door of the site(s)); null: leave it. */
  readonly passage: { readonly doorIds: readonly string[] | null; readonly schedule: Schedule | null } | null;
  /** Who asked (the API token's name), shown at the gateway as the mode's origin. */
  readonly by: string;
  readonly reason: string | null;
  readonly cid: CorrelationId;
}

export type ModeRequestStatus = 'pending' | 'applied' | 'refused';

export interface ModeRequestView {
  readonly requestId: string;
  /** pending until every gateway confirmed; refused if one refused; applied once all applied. */
  readonly status: ModeRequestStatus;
  readonly mode: SiteMode | null;
  readonly requestedBy: string;
  readonly reason: string | null;
  readonly requestedAt: number;
  readonly gateways: {
    readonly gatewayId: string;
    readonly siteId: string;
    readonly seq: number;
    readonly passage: PassageEntry[];
    readonly status: ModeRequestStatus;
    readonly code: string | null;
    readonly settledAt: number | null;
  }[];
}

const MAX_PASSAGE_DOORS = 256;

export function viewOf(rows: readonly ModeRequestRow[]): ModeRequestView | null {
  const first = rows[0];
  if (first === undefined) return null;
  const status: ModeRequestStatus = rows.some((r) => r.status === 'refused')
    ? 'refused'
    : rows.some((r) => r.status === 'pending')
      ? 'pending'
      : 'applied';
  return {
    requestId: first.requestId,
    status,
    mode: first.mode,
    requestedBy: first.requestedBy,
    reason: first.reason,
    requestedAt: first.requestedAt,
    gateways: rows.map((r) => ({
      gatewayId: r.gatewayId,
      siteId: r.siteId,
      seq: r.seq,
      passage: [...r.passage],
      status: r.status,
      code: r.code,
      settledAt: r.settledAt,
    })),
  };
}

export async function requestMode(deps: AppDeps, input: RequestModeInput): Promise<Outcome<ModeRequestView, never>> {
  const log = withCorrelation(deps.log, input.cid, { verb: 'requestMode', siteId: input.siteId });
  if (input.mode === null && input.passage === null) return refused('MODE_REQUEST_EMPTY');
  const run = async (q: Queryable & { transaction?: unknown }): Promise<Outcome<ModeRequestView, never>> => {
    if (input.siteId !== null && (await getSite(q, input.scope, input.siteId)) === null) return refused('SITE_NOT_FOUND');
    const sites: SiteScope = input.siteId !== null ? [input.siteId] : input.scope;
    const gateways = await gatewaysWithDoors(q, sites);
    if (gateways.length === 0) return refused('MODE_NO_GATEWAY');
    const named = input.passage?.doorIds ?? null;
    let doorGateway: Map<string, string> | null = null;
    if (named !== null) {
      doorGateway = await doorsIn(q, named, sites);
      const missing = named.filter((d) => !doorGateway!.has(d));
      if (missing.length > 0) return refused('DOOR_NOT_FOUND', `not found: ${missing.slice(0, 5).join(', ')}`);
    }
    const requestId = newId();
    const now = deps.clock.now();
    let queued = 0;
    for (const g of gateways) {
      const doors =
        input.passage === null ? [] : doorGateway === null ? g.doors : g.doors.filter((d) => doorGateway!.get(d) === g.gatewayId);
      if (doors.length > MAX_PASSAGE_DOORS)
        return refused('INVALID_REQUEST', `more than ${MAX_PASSAGE_DOORS} doors behind gateway ${g.gatewayId}`);
      const passage: PassageEntry[] = doors.map((doorId) => ({ doorId, schedule: input.passage?.schedule ?? null }));
      if (input.mode === null && passage.length === 0) continue;
      const body = { requestId, mode: input.mode, passage, by: input.by.slice(0, 100), reason: input.reason, requestedAt: now };
      const e = await enqueue(q, { gatewayId: g.gatewayId, type: 'site.mode', keyId: null, keyVersion: null, body, cid: input.cid }, now);
      await insertModeRequest(q, {
        requestId,
        gatewayId: g.gatewayId,
        siteId: g.siteId,
        mode: input.mode,
        passage,
        requestedBy: input.by,
        reason: input.reason,
        jti: e.jti,
        seq: e.seq,
        cid: input.cid,
        requestedAt: now,
      });
      queued++;
    }
    if (queued === 0) return refused('MODE_NO_GATEWAY', 'no gateway has any of the doors');
    const view = viewOf(await modeRequestRows(q, requestId, null));
    if (view === null) throw new Error('mode request rows not read back');
    return applied('MODE_REQUEST_QUEUED', view);
  };
  const out = await deps.db.transaction(run);
  if (out.status === 'applied') {
    log.warn(
      { code: out.code, requestId: out.state.requestId, mode: input.mode, gateways: out.state.gateways.length },
      'mode request queued',
    );
    deps.wake();
  } else log.info({ code: out.code }, 'mode request refused');
  return out;
}

/** One request as the caller may see it (null: not found, or none of its gateways in scope). */
export async function getModeRequest(deps: AppDeps, requestId: string, scope: SiteScope): Promise<ModeRequestView | null> {
  return viewOf(await modeRequestRows(deps.db, requestId, scope));
}

/** The newest requests of a site (null: no such site in scope). */
export async function listSiteModeRequests(deps: AppDeps, siteId: string, scope: SiteScope, limit = 20): Promise<ModeRequestView[] | null> {
  if ((await getSite(deps.db, scope, siteId)) === null) return null;
  const rows = await siteModeRows(deps.db, siteId, limit * 8);
  const byId = new Map<string, ModeRequestRow[]>();
  for (const r of rows) byId.set(r.requestId, [...(byId.get(r.requestId) ?? []), r]);
  return [...byId.values()]
    .slice(0, limit)
    .map((rs) => viewOf(rs))
    .filter((v): v is ModeRequestView => v !== null);
}
