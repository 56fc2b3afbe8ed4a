import { isSlug } from './ids.js';

/**
 * Every MQTT topic of Tobira, and the only place topic strings are written.
 *
 * Topic forms (all under `tobira/v1/`):
 *
 * | form                                          | publisher | subscriber | payload            | QoS | retain |
 * |-----------------------------------------------|-----------|------------|--------------------|-----|--------|
 * | gw/{gatewayId}/down                           | cloud     | gateway    | JWS downlink       | 1   | no     |
 * | gw/{gatewayId}/up                             | gateway   | cloud      | JWS uplink         | 1   | no     |
 * | gw/{gatewayId}/presence                       | gateway (last will: offline) | cloud | presence JSON | 1 | yes |
 * | site/{gatewayId}/lock/{lockId}/request        | lock      | gateway    | access request     | 1   | no     |
 * | site/{gatewayId}/lock/{lockId}/decision       | gateway   | lock       | decision           | 1   | no     |
 * | site/{gatewayId}/lock/{lockId}/command        | gateway   | lock       | HMAC command       | 1   | no     |
 * | site/{gatewayId}/lock/{lockId}/state          | lock      | gateway    | lock state         | 1   | yes    |
 * | site/{gatewayId}/lock/{lockId}/event          | lock      | gateway    | alarm / cmd result | 1   | no     |
 * | site/{gatewayId}/lock/{lockId}/presence       | lock (last will: offline) | gateway | presence JSON | 1 | yes |
 *
 * Ids in topics are slugs (1-64 of [A-Za-z0-9_-]); `parseTopic` refuses
 * anything else, including wildcards, empty levels and unknown forms.
 */
export const TOPIC_ROOT = 'tobira/v1';

export const GATEWAY_CHANNELS = ['down', 'up', 'presence'] as const;
export type GatewayChannel = (typeof GATEWAY_CHANNELS)[number];
export const LOCK_CHANNELS = ['request', 'decision', 'command', 'state', 'event', 'presence'] as const;
export type LockChannel = (typeof LOCK_CHANNELS)[number];

export type ParsedTopic =
  | { readonly kind: 'gateway'; readonly gatewayId: string; readonly channel: GatewayChannel }
  | { readonly kind: 'lock'; readonly gatewayId: string; readonly lockId: string; readonly channel: LockChannel };

function need(id: string, what: string): string {
  if (!isSlug(id)) throw new TypeError(`${what} is not a valid topic id: ${JSON.stringify(id)}`);
  return id;
}

/** Builders. They throw on an invalid id: callers pass ids they already validated. */
export const topics = Object.freeze({
  gatewayDown: (gatewayId: string) => `${TOPIC_ROOT}/gw/${need(gatewayId, 'gatewayId')}/down`,
  gatewayUp: (gatewayId: string) => `${TOPIC_ROOT}/gw/${need(gatewayId, 'gatewayId')}/up`,
  gatewayPresence: (gatewayId: string) => `${TOPIC_ROOT}/gw/${need(gatewayId, 'gatewayId')}/presence`,
  lock: (gatewayId: string, lockId: string, channel: LockChannel) =>
    `${TOPIC_ROOT}/site/${need(gatewayId, 'gatewayId')}/lock/${need(lockId, 'lockId')}/${channel}`,
});

/** Subscription filters (the only topic strings with wildcards). */
export const filters = Object.freeze({
  /** The cloud listens to every gateway's uplink. */
  allGatewaysUp: `${TOPIC_ROOT}/gw/+/up`,
  allGatewaysPresence: `${TOPIC_ROOT}/gw/+/presence`,
  /** A gateway listens to one channel of all its locks. */
  locksOf: (gatewayId: string, channel: LockChannel) => `${TOPIC_ROOT}/site/${need(gatewayId, 'gatewayId')}/lock/+/${channel}`,
});

/**
 * Parses a concrete topic (never a filter). Returns null for anything that is
 * not exactly one of the forms above. Never throws.
 */
export function parseTopic(topic: unknown): ParsedTopic | null {
  if (typeof topic !== 'string' || topic.length > 512) return null;
  const parts = topic.split('/');
  if (parts[0] !== 'tobira' || parts[1] !== 'v1') return null;
  if (parts.length === 5 && parts[2] === 'gw') {
    const [, , , gatewayId, channel] = parts as [string, string, string, string, string];
    if (!isSlug(gatewayId) || !(GATEWAY_CHANNELS as readonly string[]).includes(channel)) return null;
    return { kind: 'gateway', gatewayId, channel: channel as GatewayChannel };
  }
  if (parts.length === 7 && parts[2] === 'site' && parts[4] === 'lock') {
    const [, , , gatewayId, , lockId, channel] = parts as [string, string, string, string, string, string, string];
    if (!isSlug(gatewayId) || !isSlug(lockId) || !(LOCK_CHANNELS as readonly string[]).includes(channel)) return null;
    return { kind: 'lock', gatewayId, lockId, channel: channel as LockChannel };
  }
  return null;
}
