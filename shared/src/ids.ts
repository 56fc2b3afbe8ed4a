import { v7 as uuidv7 } from 'uuid';
import { z } from 'zod';

/**
 * Ids. Message, event, command and request ids are UUIDv7 (time-ordered, so
 * indexes stay compact and logs sort by time). Entity ids that appear in MQTT
 * topics (gateways, locks) are slugs: they must be safe as one topic level.
 */
export const newId = (): string => uuidv7();

const SLUG = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
const ENTITY = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

const slug = () => z.string().regex(SLUG, 'expected 1-64 of [A-Za-z0-9_-], starting alphanumeric');
const entity = () => z.string().regex(ENTITY, 'expected 1-128 of [A-Za-z0-9_.:-], starting alphanumeric');

export const GatewayId = slug().brand<'GatewayId'>();
export type GatewayId = z.infer<typeof GatewayId>;
export const LockId = slug().brand<'LockId'>();
export type LockId = z.infer<typeof LockId>;
export const SiteId = entity().brand<'SiteId'>();
export type SiteId = z.infer<typeof SiteId>;
export const DoorId = entity().brand<'DoorId'>();
export type DoorId = z.infer<typeof DoorId>;
export const PersonId = entity().brand<'PersonId'>();
export type PersonId = z.infer<typeof PersonId>;
export const KeyId = entity().brand<'KeyId'>();
export type KeyId = z.infer<typeof KeyId>;
export const MessageId = z.uuid().brand<'MessageId'>();
export type MessageId = z.infer<typeof MessageId>;
/** Correlation ids come from outside (X-Correlation-Id), so they are a bounded, printable string. */
export const CorrelationId = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,128}$/)
  .brand<'CorrelationId'>();
export type CorrelationId = z.infer<typeof CorrelationId>;

export const isSlug = (s: string): boolean => SLUG.test(s);

/** Brand a trusted string (one we made ourselves) without re-validating. */
export const asGatewayId = (s: string) => s as GatewayId;
export const asLockId = (s: string) => s as LockId;
export const asDoorId = (s: string) => s as DoorId;
export const asKeyId = (s: string) => s as KeyId;
export const asPersonId = (s: string) => s as PersonId;
export const asSiteId = (s: string) => s as SiteId;
export const newMessageId = () => uuidv7() as MessageId;
export const newCorrelationId = () => uuidv7() as CorrelationId;
