import type { Queryable } from '../adapters/db/db.js';
import { getGateway } from '../adapters/db/gateways.js';
import { getKeySummary, summaryOf, type KeySummary } from '../adapters/db/keys.js';
import { listKeyDeliveries, type KeyDelivery } from '../adapters/db/outbox-reads.js';
import type { SiteScope } from '../adapters/db/scope.js';
import type { Queued } from '../adapters/outbox/enqueue.js';
import type { EntryKey } from '../domain/keys.js';

/** The delivery notices a key view carries; each is in the API's code table (http/codes.ts API_CODES). */
export type KeyNoticeCode = 'DELIVERY_DEAD_LETTERED' | 'DELIVERY_RETRYING' | 'GATEWAY_OFFLINE';

type Notice = { code: string; message: string };

/** One command's delivery as the API shows it. */
export interface DeliveryView {
  readonly outboxId: number;
  readonly gatewayId: string;
  /** Null inside the transaction that queued the row (the answer of the request that did): the seq is taken at its commit. */
  readonly seq: number | null;
  readonly type: string;
  readonly keyVersion: number | null;
  readonly status: KeyDelivery['status'];
  readonly attempts: number;
  readonly lastError: string | null;
  readonly cid: string;
  readonly createdAt: number;
  readonly sentAt: number | null;
}

/**
 * A key as the API shows it: the key, the delivery status of its latest
 * command (pending → succeeded / failed, in the manner of an action attempt)
 * and its errors and warnings.
 */
export interface KeyView {
  readonly key: KeySummary;
  readonly delivery: 'pending' | 'succeeded' | 'failed';
  readonly errors: Notice[];
  readonly warnings: Notice[];
  readonly deliveries: DeliveryView[];
}

const deliveryView = (d: KeyDelivery): DeliveryView => ({
  outboxId: d.id,
  gatewayId: d.gatewayId,
  seq: d.seq,
  type: d.type,
  keyVersion: d.keyVersion,
  status: d.status,
  attempts: d.attempts,
  lastError: d.lastError,
  cid: d.cid,
  createdAt: d.createdAt,
  sentAt: d.sentAt,
});

export function deliveryOf(key: KeySummary, deliveries: readonly DeliveryView[], gatewayOnline: boolean | null) {
  const errors: Notice[] = [];
  const warnings: Notice[] = [];
  const latest = deliveries.filter((d) => d.keyVersion === key.version);
  for (const d of latest) {
    if (d.status === 'dead')
      errors.push({
        code: 'DELIVERY_DEAD_LETTERED' satisfies KeyNoticeCode,
        message: `outbox row ${d.outboxId}: ${d.lastError ?? 'gave up'}; retry with POST /dead-letters/${d.outboxId}/retry`,
      });
    else if (d.status !== 'sent' && d.lastError)
      warnings.push({ code: 'DELIVERY_RETRYING' satisfies KeyNoticeCode, message: `attempt ${d.attempts}: ${d.lastError}` });
  }
  if (key.status === 'failed') errors.push({ code: key.lastCode, message: 'the gateway rejected the grant' });
  const pending = key.status === 'issuing' || key.status === 'revoking';
  if (pending && gatewayOnline === false)
    warnings.push({
      code: 'GATEWAY_OFFLINE' satisfies KeyNoticeCode,
      message: `gateway ${key.gatewayId} is offline; delivery waits for it`,
    });
  const delivery: 'pending' | 'succeeded' | 'failed' =
    key.status === 'failed' || errors.length > 0 ? 'failed' : pending ? 'pending' : 'succeeded';
  return { delivery, errors, warnings };
}

async function viewOf(q: Queryable, key: KeySummary, gatewayOnline: boolean | null): Promise<KeyView> {
  const deliveries = (await listKeyDeliveries(q, key.id)).map(deliveryView);
  return { key, ...deliveryOf(key, deliveries, gatewayOnline), deliveries };
}

/** The view of a key a verb answered with (its outcome's state): the key is not read again, only its deliveries and gateway. */
export async function keyViewOf(q: Queryable, k: EntryKey): Promise<KeyView> {
  const gw = await getGateway(q, null, k.gatewayId);
  // keys.gateway_id is a foreign key: a missing gateway is a broken database, not an answer
  if (gw === null) throw new Error(`gateway ${k.gatewayId} of key ${k.id} not found`);
  return viewOf(q, summaryOf(k, gw.siteId), gw.online);
}

/**
 * The view of a key its issue just inserted, from the outcome alone: the key
 * is new (an issue applies only where no key was), so its deliveries are the
 * outbox rows the issue queued, still pending and unseen by the dispatcher
 * until the commit, exactly what `keyViewOf` would read back (their seq
 * too: null, taken at the commit). No read: one round trip less for every
 * issue.
 */
export function issuedKeyView(
  k: EntryKey,
  queued: readonly Queued[],
  gateway: { readonly siteId: string; readonly online: boolean | null },
): KeyView {
  const deliveries = queued.map((e): DeliveryView => ({
    outboxId: e.id,
    gatewayId: e.gatewayId,
    seq: null,
    type: e.type,
    keyVersion: k.version,
    status: 'pending',
    attempts: 0,
    lastError: null,
    cid: e.cid,
    createdAt: e.createdAt,
    sentAt: null,
  }));
  const key = summaryOf(k, gateway.siteId);
  return { key, ...deliveryOf(key, deliveries, gateway.online), deliveries };
}

/** The view of a key visible to the scope, or null. */
export async function getKeyView(q: Queryable, scope: SiteScope, keyId: string): Promise<KeyView | null> {
  const key = await getKeySummary(q, scope, keyId);
  if (key === null) return null;
  const gw = await getGateway(q, null, key.gatewayId);
  return viewOf(q, key, gw?.online ?? null);
}
