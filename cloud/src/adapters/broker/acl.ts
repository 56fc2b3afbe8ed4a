import { GatewayId, TOPIC_ROOT, gatewayCloudClientId, topics } from '@tobira/shared';

/**
 * Who may do what on the cloud broker (docs/architecture.md "Broker
 * accounts"). Pure: both broker adapters derive their rules from here, so
 * the embedded broker enforces what Mosquitto does.
 *
 * - a gateway `G` (username `gw:G`) subscribes to exactly `tobira/v1/gw/G/down`
 *   (the literal filter, no wildcard), receives only that topic, and
 *   publishes only `tobira/v1/gw/G/up` and `tobira/v1/gw/G/presence` (its
 *   retained presence and last will);
 * - the cloud's service account may publish, subscribe and receive anything
 *   under `tobira/v1/gw/#` (every gateway's down, up and presence);
 * - a gateway's login connects only with the client id of its cloud link,
 *   `tobira-gw-G` (mayUseClientId);
 * - nothing else is allowed (deny by default).
 *
 * Gateway ids are slugs (shared/src/ids.ts: [A-Za-z0-9_-]), so an id can
 * hold no `/`, `+`, `#` or `:`: a gateway's topics are one fixed level each,
 * and `gw:` usernames never collide with a service username.
 */
export const GATEWAY_USERNAME_PREFIX = 'gw:';

/** The cloud broker username of a gateway. Throws on an id that is not a gateway id (a bug: ids are validated at the API). */
export function gatewayUsername(gatewayId: string): string {
  return `${GATEWAY_USERNAME_PREFIX}${GatewayId.parse(gatewayId)}`;
}

/** The gateway id of a gateway username, or null for any other username. */
export function gatewayIdOfUsername(username: string): string | null {
  if (!username.startsWith(GATEWAY_USERNAME_PREFIX)) return null;
  const id = username.slice(GATEWAY_USERNAME_PREFIX.length);
  return GatewayId.safeParse(id).success ? id : null;
}

/** The topics one gateway may use; every entry is a literal topic (no wildcard). */
export interface GatewayAcl {
  /** Subscription filters, matched literally. */
  readonly subscribe: readonly string[];
  /** Topics it may publish to. */
  readonly publish: readonly string[];
  /** Topics the broker may deliver to it. */
  readonly receive: readonly string[];
}

export function gatewayAcl(gatewayId: string): GatewayAcl {
  const down = topics.gatewayDown(GatewayId.parse(gatewayId));
  return Object.freeze({
    subscribe: [down],
    publish: [topics.gatewayUp(gatewayId), topics.gatewayPresence(gatewayId)],
    receive: [down],
  });
}

/** The service account's whole scope: every gateway topic, as one filter. */
export const SERVICE_FILTER = `${TOPIC_ROOT}/gw/#`;
const SERVICE_PREFIX = `${TOPIC_ROOT}/gw/`;

/** A broker account: one gateway's, or the cloud's own service account. */
export type BrokerAccount = { readonly kind: 'gateway'; readonly gatewayId: string } | { readonly kind: 'service' };

/**
 * The only MQTT client id a gateway's login may connect with: the one its
 * cloud link uses (shared gatewayCloudClientId). Without the pin, one
 * gateway's credentials could connect under another client's id, evict it
 * and take over its persistent session (and its queued downlinks). The
 * service account is not pinned: each cloud replica has its own id
 * (MQTT_CLIENT_ID).
 */
export function mayUseClientId(account: BrokerAccount, clientId: string): boolean {
  return account.kind === 'service' || clientId === gatewayCloudClientId(account.gatewayId);
}

/** May this account subscribe with this filter? A gateway: only its own down, literally; the service: filters inside tobira/v1/gw/#. */
export function maySubscribe(account: BrokerAccount, filter: string): boolean {
  if (account.kind === 'service')
    return filter === SERVICE_FILTER || (filter.startsWith(SERVICE_PREFIX) && filter.length > SERVICE_PREFIX.length);
  return gatewayAcl(account.gatewayId).subscribe.includes(filter);
}

/** May this account publish to this topic? */
export function mayPublish(account: BrokerAccount, topic: string): boolean {
  if (account.kind === 'service') return isServiceTopic(topic);
  return gatewayAcl(account.gatewayId).publish.includes(topic);
}

/** May the broker deliver a message on this topic to this account? */
export function mayReceive(account: BrokerAccount, topic: string): boolean {
  if (account.kind === 'service') return isServiceTopic(topic);
  return gatewayAcl(account.gatewayId).receive.includes(topic);
}

function isServiceTopic(topic: string): boolean {
  return topic.startsWith(SERVICE_PREFIX) && topic.length > SERVICE_PREFIX.length && !topic.includes('+') && !topic.includes('#');
}

/** A Mosquitto dynamic-security ACL entry. */
export interface DynsecAcl {
  readonly acltype:
    'publishClientSend' | 'publishClientReceive' | 'subscribeLiteral' | 'subscribePattern' | 'unsubscribeLiteral' | 'unsubscribePattern';
  readonly topic: string;
  readonly allow: true;
}

/** The dynsec role of one gateway: exactly gatewayAcl, as literal entries (the default ACL access denies the rest). */
export function gatewayDynsecAcls(gatewayId: string): DynsecAcl[] {
  const a = gatewayAcl(gatewayId);
  return [
    ...a.subscribe.flatMap((topic) => [
      { acltype: 'subscribeLiteral' as const, topic, allow: true as const },
      { acltype: 'unsubscribeLiteral' as const, topic, allow: true as const },
    ]),
    ...a.publish.map((topic) => ({ acltype: 'publishClientSend' as const, topic, allow: true as const })),
    ...a.receive.map((topic) => ({ acltype: 'publishClientReceive' as const, topic, allow: true as const })),
  ];
}

/** The dynsec role of the cloud's service account: everything under tobira/v1/gw/#. */
export function serviceDynsecAcls(): DynsecAcl[] {
  return (['publishClientSend', 'publishClientReceive', 'subscribePattern', 'unsubscribePattern'] as const).map((acltype) => ({
    acltype,
    topic: SERVICE_FILTER,
    allow: true as const,
  }));
}

/** The dynsec role name of a gateway (one role per gateway, named like its client). */
export const gatewayRoleName = (gatewayId: string): string => gatewayUsername(gatewayId);
/** The dynsec role the cloud's own link account needs (docs/cloud.md). */
export const SERVICE_ROLE = 'tobira-cloud';
