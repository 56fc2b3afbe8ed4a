import type { ApiCode } from '../../http/codes.js';

/**
 * Every webhook event type, in one table: the API's subscription enum and the
 * triggers of migrations 0006, 0013, 0015, 0017 and 0019 (which write these names) agree on it.
 * `alarm` and `alarm.raised` report the same insert (the latter with the site and
 * receive time); `gateway.offline` and `gateway.failing_closed` are raised once per
 * transition, not once per report; the `stay.*` and `payment.*` events once per
 * status change into the named state (docs/api.md "Webhooks").
 */
export const WEBHOOK_EVENTS = [
  'key.state_changed',
  'access.event',
  'alarm',
  'downlink.dead_lettered',
  'alarm.raised',
  'gateway.offline',
  'gateway.failing_closed',
  'stay.confirmed',
  'stay.cancelled',
  'stay.expired',
  'stay.failed',
  'stay.checked_out',
  'payment.succeeded',
  'payment.refunded',
  'membership.activated',
  'membership.ended',
] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/** The stable code of a failed delivery attempt (webhook_deliveries.code; null when delivered). */
export type DeliveryCode = Extract<
  ApiCode,
  | 'WEBHOOK_HTTP_STATUS'
  | 'WEBHOOK_REDIRECT_NOT_FOLLOWED'
  | 'WEBHOOK_ADDRESS_FORBIDDEN'
  | 'WEBHOOK_TIMEOUT'
  | 'WEBHOOK_CONNECTION_FAILED'
  | 'WEBHOOK_SECRET_UNREADABLE'
>;
