import { CredentialType, OFFLINE_MAX_SECONDS_LIMIT, RevokeReason, Schedule } from '@tobira/shared';
import { z } from 'zod';

/** Shared HTTP schemas: ids, the error body, pagination, and the response map every route spreads. */
export const Id = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, 'expected 1-128 of [A-Za-z0-9_.:-], starting alphanumeric');
export const Slug = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, 'expected 1-64 of [A-Za-z0-9_-], starting alphanumeric');
export const Millis = z.int().nonnegative().max(8_640_000_000_000_000);
export const QueryMillis = z.coerce.number().int().nonnegative().max(8_640_000_000_000_000);
export const Limit = z.coerce.number().int().min(1).max(500).default(100);
export const Cursor = z.string().min(1).max(400);
/** What a list's opaque cursor decodes to: the last row's (time, id) sort key. */
export const TimeIdCursor = z.tuple([
  z.int().nonnegative(),
  z
    .string()
    .min(1)
    .max(200)
    .refine((x) => !x.includes('\u0000')),
]);

/** Every non-2xx body (and the outcome part of every 2xx body). */
export const Problem = z.object({
  status: z.enum(['refused', 'conflict']),
  code: z.string(),
  detail: z.string().optional(),
  cid: z.string().optional(),
});

/** The error statuses any authenticated route can answer. */
export const errorResponses = {
  400: Problem.describe('BAD_REQUEST, MALFORMED_JSON: the request does not match its schema'),
  401: Problem.describe('UNAUTHENTICATED or TOKEN_EXPIRED'),
  403: Problem.describe('FORBIDDEN_ROLE'),
  404: Problem.describe('*_NOT_FOUND or NOT_FOUND: no such resource visible to this token'),
  409: Problem.describe(
    'a conflict outcome, or ID_UNAVAILABLE (a create named an id another site holds; nothing of that row is told), or IDEMPOTENCY_IN_PROGRESS (retryable), or IDEMPOTENCY_CLAIM_LOST (retry to get the holder answer)',
  ),
  413: Problem.describe('PAYLOAD_TOO_LARGE'),
  414: Problem.describe('URI_TOO_LONG: a path segment longer than 512 characters'),
  415: Problem.describe('UNSUPPORTED_MEDIA_TYPE'),
  422: Problem.describe('a refused outcome, or IDEMPOTENCY_KEY_REUSED'),
  429: Problem.describe('RATE_LIMITED'),
  500: Problem.describe('INTERNAL (details only in the server log, under the correlation id)'),
  503: Problem.describe('SERVICE_UNAVAILABLE'),
} as const;

export const OutcomeStatus = z.enum(['applied', 'noop', 'conflict', 'refused']);

export const Site = z.object({
  id: z.string(),
  name: z.string(),
  timeZone: z.string(),
  offlineGraceSeconds: z.int(),
  createdAt: z.int().optional(),
});
export const Gateway = z.object({
  id: z.string(),
  siteId: z.string(),
  online: z.boolean().nullable(),
  lastStatusAt: z.int().nullable(),
  createdAt: z.int(),
  /** The gateway clock's skew as its last uplinks showed it (their iat minus the cloud's now, ms); null: not measured yet. */
  clockSkewMs: z.int().nullable(),
  clockSkewAt: z.int().nullable(),
  /** The highest seq handed out to it; a gateway that has not applied it is behind (and fails closed once its lease runs out). */
  lastSeq: z.int(),
  /** Its downlinks the dispatcher gave up on (GET /dead-letters); it catches them up by resync or fails closed. */
  deadLetters: z.int(),
});
export const Door = z.object({
  id: z.string(),
  siteId: z.string(),
  gatewayId: z.string(),
  name: z.string(),
  createdAt: z.int().optional(),
});
export const Person = z.object({ id: z.string(), name: z.string(), sites: z.array(z.string()), createdAt: z.int().optional() });

export const PublicJwk = z.strictObject({
  kty: z.literal('OKP'),
  crv: z.literal('Ed25519'),
  x: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
  kid: z.string().min(1).max(128),
  alg: z.literal('EdDSA').optional(),
  use: z.literal('sig').optional(),
});

export const Provisioning = z.object({
  gatewayId: z.string(),
  siteId: z.string(),
  credentialPepper: z.string().describe('base64url secret for credential digests; shown once, at registration'),
  cloudIssuer: z.string(),
  cloudJwks: z.object({ keys: z.array(z.record(z.string(), z.unknown())) }),
  offlineGraceSeconds: z.int(),
  timeZone: z
    .string()
    .describe("the site's IANA time zone (e.g. Asia/Tokyo); the gateway's staff UI shows times in it (gateway config `timeZone`)"),
  topics: z.object({ down: z.string(), up: z.string(), presence: z.string() }),
  broker: z
    .object({
      url: z
        .string()
        .nullable()
        .describe('the cloud broker as the gateway reaches it (GATEWAY_BROKER_URL); null: the operator configures it'),
      username: z
        .string()
        .nullable()
        .describe("the gateway's own broker login (`gw:{gatewayId}`); null when the cloud does not manage broker accounts"),
      password: z.string().nullable().describe('its password, shown once here (only a hash is kept); null when unmanaged'),
    })
    .describe("the gateway's cloud broker login: it may subscribe to its down topic and publish its up and presence topics, nothing else"),
});

/** A gateway's new broker login (POST /gateways/{gatewayId}/broker-credentials). */
export const BrokerLogin = z.object({
  gatewayId: z.string(),
  broker: z.object({
    url: z.string().nullable(),
    username: z.string(),
    password: z.string().describe('shown once; the old password no longer logs in'),
  }),
});

export const KeyStatusEnum = z.enum(['issuing', 'active', 'revoking', 'revoked', 'expired', 'failed', 'used']);
export const Key = z.object({
  id: z.string(),
  siteId: z.string(),
  personId: z.string(),
  gatewayId: z.string(),
  credentialType: z.string(),
  doors: z.array(z.string()),
  validFrom: z.int(),
  validUntil: z.int(),
  schedule: z.unknown(),
  offlineCapable: z.boolean(),
  offlineMaxSeconds: z
    .int()
    .nullable()
    .describe(
      'offline-capable keys: how long after its gateway last proved itself in sync the key still opens while the gateway fails closed',
    ),
  oneTime: z.boolean().describe('a one-time key: its first entry at the door uses it up (status `used`)'),
  staff: z.boolean().describe('a staff key (asked for, or offline-capable): kept out of a room whose guest has privacy on'),
  usedAt: z.int().nullable().describe('a used one-time key: when the gateway allowed its entry (epoch ms); null otherwise'),
  version: z.int(),
  revision: z.int().describe('compare-and-set revision; the ETag, and what If-Match names'),
  status: z.string(),
  revokeReason: z.string().nullable(),
  lastCode: z.string(),
  cid: z.string(),
  createdAt: z.int(),
  updatedAt: z.int(),
});
export const Notice = z.object({ code: z.string(), message: z.string() });
export const Delivery = z.object({
  outboxId: z.int(),
  gatewayId: z.string(),
  seq: z
    .int()
    .nullable()
    .describe("the message's seq at its gateway; null in the answer of the request that queued it (taken at its commit)"),
  type: z.string(),
  keyVersion: z.int().nullable(),
  status: z.enum(['pending', 'sending', 'sent', 'dead']),
  attempts: z.int(),
  lastError: z.string().nullable(),
  cid: z.string(),
  createdAt: z.int(),
  sentAt: z.int().nullable(),
});
export const KeyView = z.object({
  key: Key,
  delivery: z.enum(['pending', 'succeeded', 'failed']).describe('of the latest command for this key (grant or revoke)'),
  errors: z.array(Notice),
  warnings: z.array(Notice),
  deliveries: z.array(Delivery),
});

export const IssueKeyBody = z.strictObject({
  keyId: Id.optional(),
  personId: Id,
  doors: z.array(Id).min(1).max(256),
  credential: z.strictObject({ type: CredentialType, value: z.string().min(1).max(256) }),
  validFrom: Millis.describe('epoch milliseconds'),
  validUntil: Millis.describe('epoch milliseconds'),
  schedule: Schedule.nullable().optional(),
  offlineCapable: z
    .boolean()
    .optional()
    .describe(
      'a staff master key that opens in lockdown and while the gateway fails closed (admin tokens only; 403 FORBIDDEN_ROLE otherwise)',
    ),
  offlineMaxSeconds: z
    .int()
    .min(1)
    .max(OFFLINE_MAX_SECONDS_LIMIT)
    .optional()
    .describe(
      "offline-capable keys only: how long after the gateway's last proven-fresh sync the key still opens; at most, and by default, the server's cap (7 days unless configured; above it 422 OFFLINE_MAX_TOO_LONG)",
    ),
  oneTime: z
    .boolean()
    .optional()
    .describe(
      'a one-time key (a delivery, a single visit): the first entry at the door uses it up; later presentations are refused KEY_USED and the key shows status `used` once the entry reached the cloud',
    ),
  staff: z
    .boolean()
    .optional()
    .describe(
      "a staff key (a cleaner's, a supervisor's): the gateway keeps it out of a room whose guest has privacy on (PRIVACY_ACTIVE); every offline-capable key is a staff key",
    ),
});
export const RevokeKeyBody = z.strictObject({ reason: RevokeReason });
