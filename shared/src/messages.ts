import { z } from 'zod';
import { DECISION_CODES, REVOKE_REASONS, codesOf, type UplinkBatchCode } from './codes.js';
import { CorrelationId, DoorId, KeyId, LockId, MessageId, PersonId } from './ids.js';
import { OUTCOME_STATUSES } from './outcome.js';
import { summarizeIssues } from './issues.js';
import { Schedule } from './schedule.js';

/**
 * The wire contract: a zod schema for every message of docs/protocol.md. Types are
 * inferred from the schemas. Objects are strict (unknown fields are refused):
 * a new field is a new protocol version under a new topic root.
 *
 * Times are integer milliseconds since the Unix epoch (UTC), except the JWT
 * claims `iat`/`exp`, which are seconds as RFC 7519 says.
 */

/** 64 KiB: the size limit of every message, checked before parsing. */
export const MAX_MESSAGE_BYTES = 64 * 1024;

const Millis = z.int().nonnegative();
const Seq = z.int().positive();
const Version = z.int().positive();

// ---------------------------------------------------------------- key grant

export const CredentialType = z.enum(['pin', 'card', 'mobile']);
export type CredentialType = z.infer<typeof CredentialType>;

/** A credential as the cloud sends it: never in clear, a keyed digest (see credential.ts). */
export const CredentialDigest = z.strictObject({
  type: CredentialType,
  digest: z.string().regex(/^[A-Za-z0-9_-]{43}$/, 'base64url HMAC-SHA256'),
});

// The schedule and time zone schemas live in schedule.ts (one validator for cloud and gateway).
export { Schedule, TimeZone, isTimeZone } from './schedule.js';

/** Offline cap of an offline-capable key whose grant names none (a grant from a cloud before the cap): 7 days. */
export const DEFAULT_OFFLINE_MAX_SECONDS = 7 * 86_400;
/** Highest offline cap a grant may carry (and the cloud may be configured with): 365 days. */
export const OFFLINE_MAX_SECONDS_LIMIT = 365 * 86_400;

/**
 * A name a person reads (a door's "Room 101", a guest's "Aiko Tanaka"): 1–80
 * characters after trimming, no control characters. Never a credential and
 * nothing personal beyond the name itself.
 */
export const DisplayName = z
  .string()
  .trim()
  .min(1)
  .max(80)
  .regex(/^[^\p{Cc}]+$/u, 'no control characters');
export type DisplayName = z.infer<typeof DisplayName>;

export const KeyGrant = z.strictObject({
  keyId: KeyId,
  version: Version,
  personId: PersonId,
  credential: CredentialDigest,
  doors: z.array(DoorId).min(1).max(256),
  validFrom: Millis,
  validUntil: Millis,
  schedule: Schedule.nullable(),
  /**
   * Staff master keys: they keep working in lockdown, and when the freshness
   * lease has run out, but only for `offlineMaxSeconds` after the gateway's
   * last proven-fresh sync; after that they fail closed (CLOUD_STALE) too.
   */
  offlineCapable: z.boolean(),
  /**
   * The offline cap of an offline-capable key, in seconds. Optional on the
   * wire so that grants from an older cloud still parse; a gateway applies
   * DEFAULT_OFFLINE_MAX_SECONDS when it is missing. The cloud sends it only
   * with offlineCapable (an older gateway, whose schema is strict, then
   * refuses only offline-capable grants: upgrade gateways first).
   */
  offlineMaxSeconds: z.int().min(1).max(OFFLINE_MAX_SECONDS_LIMIT).optional(),
  /**
   * Display names, for the staff UI only (never used to decide): the
   * person's, and those of the doors in `doors` (a name for a door not in
   * `doors` is ignored). Optional and additive: a grant without them is
   * shown with ids.
   */
  personName: DisplayName.optional(),
  doorNames: z.record(DoorId, DisplayName).optional(),
  /**
   * A one-time key (a delivery, a cleaner's single visit): it opens for its
   * first successful entry only; the gateway consumes it in the decision's
   * transaction and answers KEY_USED after. Sent only when true, so an older
   * gateway (strict schema) refuses only one-time grants.
   */
  oneTime: z.literal(true).optional(),
  /**
   * A staff key: the gateway keeps it out of a door whose guest
   * has privacy on (PRIVACY_ACTIVE). A grant without it (an older cloud) is
   * judged by `offlineCapable`, as before, so nothing opens that did not. The
   * cloud sends it only when true (every offline-capable key is a staff key),
   * so an older gateway (strict schema) refuses only staff grants: upgrade
   * gateways first.
   */
  staff: z.boolean().optional(),
});
export type KeyGrant = z.infer<typeof KeyGrant>;

export const RevokeReason = z.enum(codesOf(REVOKE_REASONS));
export type RevokeReason = z.infer<typeof RevokeReason>;

export const KeyRevoke = z.strictObject({ keyId: KeyId, version: Version, reason: RevokeReason });
export type KeyRevoke = z.infer<typeof KeyRevoke>;

// ---------------------------------------------------------------- envelopes

/** Claims common to every signed message. `seq` only on sequenced types. */
const claims = {
  jti: MessageId,
  iss: z.string().min(1).max(128),
  aud: z.string().min(1).max(128),
  iat: z.int().nonnegative(),
  exp: z.int().nonnegative(),
  cid: CorrelationId,
};

function sequenced<T extends string, B extends z.ZodType>(type: T, body: B) {
  return z.strictObject({ ...claims, type: z.literal(type), seq: Seq, body });
}
function unsequenced<T extends string, B extends z.ZodType>(type: T, body: B) {
  return z.strictObject({ ...claims, type: z.literal(type), body });
}

// ---------------------------------------------------------------- downlink (cloud -> gateway)

export const KeyGrantMessage = sequenced('key.grant', z.strictObject({ key: KeyGrant }));
export const KeyRevokeMessage = sequenced('key.revoke', KeyRevoke);
/**
 * Names the last seq the cloud has handed out to this gateway (committed,
 * sent or not); the gateway's freshness lease hangs on it. `uplinkAck`: the
 * highest uplink seq up to which the cloud has durably applied every uplink
 * of this gateway, with that message's jti (so a gateway whose store was
 * reset never takes another history's ack); the gateway keeps each uplink
 * until it is covered, and sends again what stays uncovered.
 */
export const HeartbeatMessage = unsequenced(
  'heartbeat',
  z.strictObject({
    lastSeq: z.int().nonnegative(),
    intervalMs: z.int().positive(),
    uplinkAck: z.strictObject({ seq: z.int().positive(), jti: MessageId }).optional(),
  }),
);
/** The cloud's answer to a resync request: it replays `fromSeq..toSeq`, or sends a snapshot. */
export const ResyncAnswerMessage = unsequenced(
  'resync.answer',
  z.strictObject({
    requestId: z.uuid(),
    mode: z.enum(['replay', 'snapshot', 'up_to_date']),
    fromSeq: z.int().nonnegative(),
    toSeq: z.int().nonnegative(),
    snapshotId: z.uuid().nullable(),
  }),
);
/** One part of the gateway's whole key set as of `asOfSeq`; applied atomically once all parts are in. */
export const KeySetSnapshotMessage = unsequenced(
  'keyset.snapshot',
  z
    .strictObject({
      snapshotId: z.uuid(),
      asOfSeq: z.int().nonnegative(),
      part: z.int().positive(),
      parts: z.int().positive().max(10_000),
      keys: z.array(KeyGrant).max(1000),
      /** Tombstones: keys revoked at this version; a lower-version grant must not revive them. */
      revoked: z.array(z.strictObject({ keyId: KeyId, version: Version })).max(5000),
      /**
       * The cloud signing keys gateways trust as of `asOfSeq`, on one
       * part only: a gateway that catches up by snapshot skips the keyset.update
       * rows it covers, so it applies this instead (adds and retires; a retired
       * kid is never trusted again; refused if it retires the snapshot's signer).
       * Optional: a snapshot from an older cloud has none.
       */
      trustedKeys: z.lazy(() => SnapshotTrustedKeys).optional(),
      /**
       * The latest cloud-set site mode and passage per door as of `asOfSeq`, each
       * with the seq of its site.mode, on one part only: the gateway applies an
       * entry whose seq is past what it had applied (a site.mode the snapshot
       * skipped). Optional: a snapshot from an older cloud has none.
       */
      modes: z.lazy(() => SnapshotModes).optional(),
    })
    .refine((b) => b.part <= b.parts, { message: 'part > parts' }),
);

/**
 * A cloud signing key as the wire carries it: an Ed25519 public
 * JWK with its `kid`. Never a private part (`d` is refused by the strict object).
 */
export const PublicSigningJwk = z.strictObject({
  kty: z.literal('OKP'),
  crv: z.literal('Ed25519'),
  x: z.string().regex(/^[A-Za-z0-9_-]{43}$/, 'base64url Ed25519 public key'),
  kid: z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/),
  alg: z.literal('EdDSA').optional(),
  use: z.literal('sig').optional(),
});
export type PublicSigningJwk = z.infer<typeof PublicSigningJwk>;

/**
 * Changes the gateway's trusted set of cloud signing keys (signing-key
 * rotation, docs/operations.md). Signed, like every downlink, by a key the
 * gateway already trusts, and sequenced, so it applies in order with the
 * grants around it: `add` a new cloud key (published before the cloud signs
 * with it), `retire` an old one (after every live grant was re-sent under the
 * new key). A retired kid is never trusted again, whatever a later update or
 * the gateway's config says.
 */
/** A resync snapshot's trusted cloud keys (KeySetSnapshotMessage `trustedKeys`): the keys to trust and the kids retired. */
export const SnapshotTrustedKeys = z.strictObject({
  add: z.array(z.strictObject({ jwk: PublicSigningJwk, notBefore: Millis })).max(16),
  retire: z.array(z.strictObject({ kid: PublicSigningJwk.shape.kid, at: Millis })).max(256),
});
export type SnapshotTrustedKeys = z.infer<typeof SnapshotTrustedKeys>;

/** A resync snapshot's modes (KeySetSnapshotMessage `modes`): the last cloud-set site mode and passage per door, with their site.mode's seq. */
const SnapshotModeOrigin = {
  seq: Seq,
  requestId: z.uuid(),
  by: z.string().min(1).max(100),
  reason: z.string().min(1).max(200).nullable(),
};
export const SnapshotModes = z.strictObject({
  mode: z.strictObject({ ...SnapshotModeOrigin, mode: z.enum(['normal', 'lockdown']) }).nullable(),
  passage: z.array(z.strictObject({ ...SnapshotModeOrigin, doorId: DoorId, schedule: Schedule.nullable() })).max(256),
});
export type SnapshotModes = z.infer<typeof SnapshotModes>;

export const KeySetUpdateMessage = sequenced(
  'keyset.update',
  z
    .strictObject({
      updateId: z.uuid(),
      add: z.array(z.strictObject({ jwk: PublicSigningJwk, notBefore: Millis })).max(16),
      retire: z.array(z.strictObject({ kid: PublicSigningJwk.shape.kid, at: Millis })).max(16),
    })
    .refine((b) => b.add.length + b.retire.length > 0, { message: 'adds or retires nothing' }),
);

/**
 * Operating modes set from the cloud (docs/gateway.md
 * "Modes from the cloud"): the site mode (null: unchanged) and passage
 * schedules per door (schedule null: passage cleared), applied in seq order
 * like a key, acked with the request's result. `by`: the operator (API
 * token name) shown in the staff UI as the mode's origin.
 */
export const SiteModeMessage = sequenced(
  'site.mode',
  z.strictObject({
    requestId: z.uuid(),
    mode: z.enum(['normal', 'lockdown']).nullable(),
    passage: z.array(z.strictObject({ doorId: DoorId, schedule: Schedule.nullable() })).max(256),
    by: z.string().min(1).max(100),
    reason: z.string().min(1).max(200).nullable(),
    /**
     * When the operator asked (the cloud's time, ms). The message can reach the gateway much later (a link
     * down); a lockdown staff set at the gateway after this is not lifted by it (MODE_SUPERSEDED).
     * Optional: a cloud from before it sends none, and is applied as before.
     */
    requestedAt: Millis.optional(),
  }),
);

/**
 * Gateway uplink-key rotation (docs/operations.md): the cloud
 * asks the gateway to make a new uplink signing key for `rotationId`; the
 * gateway answers with an `uplink_key.proposal`. Sequenced, so a gateway
 * offline at the time gets it later, in order, and a replay is a noop.
 */
export const UplinkKeyRotateMessage = sequenced('uplink_key.rotate', z.strictObject({ rotationId: z.uuid() }));
/**
 * The cloud verified the proposal of `rotationId` and accepts `kid` from now
 * on: the gateway switches its uplink signing to that key and deletes the old one.
 */
export const UplinkKeyActivateMessage = sequenced(
  'uplink_key.activate',
  z.strictObject({ rotationId: z.uuid(), kid: PublicSigningJwk.shape.kid }),
);

export const DownlinkMessage = z.discriminatedUnion('type', [
  KeyGrantMessage,
  KeyRevokeMessage,
  HeartbeatMessage,
  ResyncAnswerMessage,
  KeySetSnapshotMessage,
  KeySetUpdateMessage,
  SiteModeMessage,
  UplinkKeyRotateMessage,
  UplinkKeyActivateMessage,
]);
export type DownlinkMessage = z.infer<typeof DownlinkMessage>;
export type DownlinkType = DownlinkMessage['type'];

// ---------------------------------------------------------------- uplink (gateway -> cloud)

export const AckResult = z.enum(OUTCOME_STATUSES.filter((s) => s !== 'conflict') as ['applied', 'noop', 'refused']);
/** The gateway's answer to one downlink message, sent after its local commit. */
export const AckMessage = sequenced(
  'ack',
  z.strictObject({
    ackOf: MessageId,
    ackSeq: z.int().positive().nullable(),
    result: AckResult,
    code: z.string().regex(/^[A-Z][A-Z0-9_]{1,63}$/),
    keyId: KeyId.nullable(),
    keyVersion: Version.nullable(),
  }),
);

export const DecisionCode = z.enum(codesOf(DECISION_CODES));
export type DecisionCode = z.infer<typeof DecisionCode>;

/**
 * Who opened a door remotely and why: a supervisor signed in to the gateway's
 * staff UI (the account id is the gateway's; `name` is their display name).
 * Only on `REMOTE_UNLOCK` access events; no other personal data.
 */
export const StaffBy = z.strictObject({
  accountId: z.string().min(1).max(128),
  name: z.string().min(1).max(100),
  reason: z.string().min(1).max(200),
});
export type StaffBy = z.infer<typeof StaffBy>;

/** One door decision, allowed or not. */
export const AccessEventMessage = sequenced(
  'access.event',
  z.strictObject({
    eventId: z.uuid(),
    requestId: z.string().min(1).max(128),
    lockId: LockId,
    doorId: DoorId.nullable(),
    at: Millis,
    allowed: z.boolean(),
    code: DecisionCode,
    keyId: KeyId.nullable(),
    keyVersion: Version.nullable(),
    personId: PersonId.nullable(),
    credentialType: CredentialType.nullable(),
    commandId: z.uuid().nullable(),
    /** Set only on a remote unlock (code REMOTE_UNLOCK): the supervisor who opened the door, and why. Optional: older gateways omit it. */
    by: StaffBy.optional(),
  }),
);
/** One door decision as both services name it (the gateway's access log row, the cloud's audit row). */
export type AccessEvent = MessageOf<UplinkMessage, 'access.event'>['body'];

export const AlarmKind = z.enum(['door_ajar', 'forced_open', 'tamper', 'jam', 'low_battery']);
export type AlarmKind = z.infer<typeof AlarmKind>;
/**
 * What an `alarm` uplink may name: a lock's alarm kinds, and the gateway's own
 * alarms about a lock (`lock_events_throttled`: the lock went over its event
 * budget, docs/gateway.md "Lock event budget"). Locks cannot send the
 * gateway's kinds (LockEvent takes AlarmKind only). An older cloud (strict
 * schema) refuses the gateway's kinds: upgrade the cloud before gateways.
 */
export const AlarmUplinkKind = z.enum([...AlarmKind.options, 'lock_events_throttled']);
export type AlarmUplinkKind = z.infer<typeof AlarmUplinkKind>;

export const AlarmMessage = sequenced(
  'alarm',
  z.strictObject({
    alarmId: z.uuid(),
    lockId: LockId,
    doorId: DoorId.nullable(),
    kind: AlarmUplinkKind,
    at: Millis,
  }),
);

export const BoltState = z.enum(['locked', 'unlocked', 'jammed']);
export const DoorState = z.enum(['open', 'closed']);
/** The site's door mode: `lockdown` refuses every credential (staff UI, gateway status). */
export const SiteMode = z.enum(['normal', 'lockdown']);
export type SiteMode = z.infer<typeof SiteMode>;

export const GatewayStatusMessage = sequenced(
  'gateway.status',
  z.strictObject({
    mode: SiteMode,
    appliedSeq: z.int().nonnegative(),
    leaseExpiresAt: Millis.nullable(),
    outboxDepth: z.int().nonnegative(),
    locks: z
      .array(
        z.strictObject({
          lockId: LockId,
          online: z.boolean(),
          bolt: BoltState.nullable(),
          door: DoorState.nullable(),
          battery: z.int().min(0).max(100).nullable(),
          at: Millis.nullable(),
        }),
      )
      .max(256),
  }),
);

/** Why a gateway asks for a resync (see ResyncRequestMessage). */
export const ResyncReason = z.enum(['gap', 'startup', 'stale', 'operator', 'conflict', 'ahead']);
export type ResyncReason = z.infer<typeof ResyncReason>;

/**
 * The gateway saw a gap (or just started) and asks for everything after
 * `lastAppliedSeq`. `conflict`: it was sent a message for a seq it had
 * already applied under another id, so its history and the cloud's differ;
 * the cloud answers with a snapshot past both (docs/architecture.md).
 * `ahead`: a heartbeat named a last seq below the gateway's applied one (a
 * restored cloud database, or a heartbeat overtaken by a newer message).
 * `uplinkUnackedFrom` (with `conflict`): the lowest uplink seq this store has
 * not had acknowledged, or its next seq when it has none; after a restore
 * the cloud acknowledges from just below it (docs/protocol.md).
 */
export const ResyncRequestMessage = unsequenced(
  'resync.request',
  z.strictObject({
    requestId: z.uuid(),
    lastAppliedSeq: z.int().nonnegative(),
    reason: ResyncReason,
    uplinkUnackedFrom: z.int().positive().optional(),
  }),
);

/** What a staff member did at the gateway's staff UI or API (the gateway's `staff_actions` audit). */
export const StaffActionKind = z.enum([
  'setup',
  'sign_in',
  'sign_out',
  'set_mode',
  'ack_alarm',
  'remote_unlock',
  'account_create',
  'account_disable',
  'account_enable',
  'account_password_reset',
  'set_passage',
  'account_totp_enrol',
  'account_totp_reset',
]);
export type StaffActionKind = z.infer<typeof StaffActionKind>;

/**
 * One staff action at a gateway, sent through its outbox in the transaction
 * of the action (exactly once in effect, deduplicated by `actionId`). The
 * actor is the gateway's staff account (id and display name), or null for
 * the gateway's API token (automation, named "API token"). No password,
 * session or token ever travels.
 */
export const StaffActionMessage = sequenced(
  'staff.action',
  z.strictObject({
    actionId: z.uuid(),
    at: Millis,
    actor: z.strictObject({ accountId: z.string().min(1).max(128).nullable(), name: z.string().min(1).max(100) }),
    action: StaffActionKind,
    /** What it was done to: a lock id, an alarm id, an account id, the new site mode; null for sign-in/out. */
    target: z.string().min(1).max(128).nullable(),
    /** The reason or note given (remote unlock, lockdown, alarm ack) or the account changed; at most 200 characters. */
    detail: z.string().max(200).nullable(),
    result: z.enum(['applied', 'noop', 'refused']),
    code: z
      .string()
      .regex(/^[A-Z][A-Z0-9_]{1,63}$/)
      .nullable(),
  }),
);

/**
 * The gateway's answer to an `uplink_key.rotate`: the new public key and a
 * proof made with its private part over the gateway id, rotation id and kid
 * (shared `signUplinkKeyProof`). The message itself is signed with the
 * gateway's current (old) key: the cloud checks both, so only the holder of
 * the old key can name the new one, and only for a key it holds.
 */
export const UplinkKeyProposalMessage = sequenced(
  'uplink_key.proposal',
  z.strictObject({
    rotationId: z.uuid(),
    publicJwk: PublicSigningJwk,
    proof: z.string().regex(/^[A-Za-z0-9_-]{86}$/, 'base64url Ed25519 signature'),
  }),
);

export const UplinkMessage = z.discriminatedUnion('type', [
  AckMessage,
  AccessEventMessage,
  AlarmMessage,
  GatewayStatusMessage,
  ResyncRequestMessage,
  StaffActionMessage,
  UplinkKeyProposalMessage,
]);
export type UplinkMessage = z.infer<typeof UplinkMessage>;
export type UplinkType = UplinkMessage['type'];

// ---------------------------------------------------------------- uplink batch

/** Most items one `uplink.batch` carries (its size is bounded by MAX_MESSAGE_BYTES as well). */
export const UPLINK_BATCH_MAX_ITEMS = 100;
/** Uplink types a batch may carry: every sequenced one. resync.request (unsequenced) is never batched. */
export const BATCHABLE_UPLINK_TYPES = [
  'ack',
  'access.event',
  'alarm',
  'gateway.status',
  'staff.action',
  'uplink_key.proposal',
] as const satisfies readonly Exclude<UplinkType, 'resync.request'>[];
export type BatchableUplink = Exclude<UplinkMessage, { type: 'resync.request' }>;
// Every sequenced uplink type must be batchable: the gateway packs whatever its outbox holds, and a batch
// with a type missing here would be rejected whole, every time it is resent (a compile error instead).
const everySequencedTypeIsBatchable: Exclude<BatchableUplink['type'], (typeof BATCHABLE_UPLINK_TYPES)[number]> extends never
  ? true
  : never = true;
void everySequencedTypeIsBatchable;

/**
 * Consecutive outbox rows of one gateway under one signature:
 * each item is what the row would have been sent as alone, less the claims
 * the envelope carries for all (`iss`, `aud`, `iat`, `exp`). The envelope's
 * own `jti` is not deduplicated; its items are, each by its own `jti`, and
 * ordered by their `seq`. The schema checks the shape only: `checkUplinkBatch`
 * checks the items (types, consecutive seqs, each against its own schema).
 */
export const UplinkBatchMessage = unsequenced(
  'uplink.batch',
  z.strictObject({
    items: z
      .array(
        z.strictObject({
          type: z.string().min(1).max(64),
          seq: Seq,
          jti: MessageId,
          cid: CorrelationId,
          body: z.unknown(),
        }),
      )
      .min(1)
      .max(UPLINK_BATCH_MAX_ITEMS),
  }),
);
export type UplinkBatchMessage = z.infer<typeof UplinkBatchMessage>;

/** Everything the cloud's uplink topic carries: a single uplink message or a batch of them. */
export const UplinkEnvelope = z.discriminatedUnion('type', [...UplinkMessage.options, UplinkBatchMessage]);
export type UplinkEnvelope = z.infer<typeof UplinkEnvelope>;

const BATCHABLE: ReadonlySet<string> = new Set(BATCHABLE_UPLINK_TYPES);

/**
 * The items of a verified batch as the messages they stand for, in seq order;
 * or the code that refuses the whole batch. Invariant: an `ok` answer holds
 * only valid sequenced uplinks with distinct jtis and consecutive seqs.
 */
export function checkUplinkBatch(
  m: UplinkBatchMessage,
):
  | { readonly ok: true; readonly items: BatchableUplink[] }
  | { readonly ok: false; readonly code: UplinkBatchCode; readonly detail: string } {
  const items: BatchableUplink[] = [];
  const jtis = new Set<string>();
  for (const [i, it] of m.body.items.entries()) {
    if (!BATCHABLE.has(it.type)) return { ok: false, code: 'BATCH_TYPE_NOT_ALLOWED', detail: `item ${i}: type ${it.type.slice(0, 64)}` };
    const first = m.body.items[0]!.seq;
    if (it.seq !== first + i)
      return { ok: false, code: 'BATCH_SEQ_NOT_CONSECUTIVE', detail: `item ${i}: seq ${it.seq}, expected ${first + i}` };
    if (jtis.has(it.jti)) return { ok: false, code: 'BATCH_DUPLICATE_ITEM', detail: `item ${i}: jti ${it.jti}` };
    jtis.add(it.jti);
    const one = UplinkMessage.safeParse({
      jti: it.jti,
      iss: m.iss,
      aud: m.aud,
      iat: m.iat,
      exp: m.exp,
      cid: it.cid,
      type: it.type,
      seq: it.seq,
      body: it.body,
    });
    if (!one.success) return { ok: false, code: 'BATCH_ITEM_INVALID', detail: `item ${i} (${it.type}): ${summarizeIssues(one.error)}` };
    items.push(one.data as BatchableUplink);
  }
  return { ok: true, items };
}

export type SignedMessage = DownlinkMessage | UplinkMessage | UplinkBatchMessage;
export type MessageOf<M extends SignedMessage, T extends M['type']> = Extract<M, { type: T }>;

// ---------------------------------------------------------------- presence (retained, last will)

export const Presence = z.strictObject({ online: z.boolean() });
export type Presence = z.infer<typeof Presence>;

// ---------------------------------------------------------------- gateway <-> lock (site broker)

/** A credential presented at a lock: keypad PIN, card id or mobile token, in clear on the site broker only. */
export const PresentedCredential = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('pin'), value: z.string().regex(/^\d{4,12}$/) }),
  z.strictObject({ type: z.literal('card'), value: z.string().regex(/^[0-9A-Fa-f]{4,64}$/) }),
  z.strictObject({ type: z.literal('mobile'), value: z.string().regex(/^[A-Za-z0-9_-]{16,256}$/) }),
  /**
   * A mobile token the cloud signed for a phone (shared/src/mobile-token.ts), relayed by the lock as it
   * got it; the gateway verifies it offline and decides for the key it names (credential type `mobile`).
   */
  z.strictObject({
    type: z.literal('mobile_token'),
    value: z
      .string()
      .max(2048)
      .regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/),
  }),
]);
export type PresentedCredential = z.infer<typeof PresentedCredential>;

export const LockRequest = z.strictObject({
  requestId: z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/),
  credential: PresentedCredential,
  at: Millis,
});
export type LockRequest = z.infer<typeof LockRequest>;

export const LockDecision = z.strictObject({
  requestId: z.string().min(1).max(128),
  allowed: z.boolean(),
  code: DecisionCode,
  commandId: z.uuid().nullable(),
});
export type LockDecision = z.infer<typeof LockDecision>;

export const LockAction = z.enum(['unlock', 'lock']);
/** A gateway -> lock command. `mac` is HMAC-SHA256 over the other fields (see lock-auth.ts). */
export const LockCommand = z.strictObject({
  commandId: z.uuid(),
  lockId: LockId,
  action: LockAction,
  /** How long the bolt stays open before it relocks by itself. */
  holdMs: z.int().min(0).max(60_000),
  expiresAt: Millis,
  mac: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
});
export type LockCommand = z.infer<typeof LockCommand>;

export const LockState = z.strictObject({
  lockId: LockId,
  bolt: BoltState,
  door: DoorState,
  battery: z.int().min(0).max(100),
  at: Millis,
  lastCommandId: z.uuid().nullable(),
  /**
   * The guest's privacy (thumb-turn / do-not-disturb), part of the lock's
   * state so that the retained state and the state re-announced on every
   * connect carry it: an event alone is lost while the gateway is away.
   * Optional so that states of older locks still parse; a gateway treats a
   * lock whose state does not say as private for the keys privacy refuses.
   * An older gateway (strict schema) refuses states that carry it: upgrade
   * gateways before locks.
   */
  privacy: z.boolean().optional(),
});
export type LockState = z.infer<typeof LockState>;

export const LockEvent = z.discriminatedUnion('kind', [
  z.strictObject({ eventId: z.uuid(), lockId: LockId, at: Millis, kind: AlarmKind }),
  /**
   * The guest inside turned privacy on (thumb-turn, do-not-disturb) or it was
   * cleared (turned back, or the inside handle opened the door on the way out).
   */
  z.strictObject({ eventId: z.uuid(), lockId: LockId, at: Millis, kind: z.literal('privacy'), active: z.boolean() }),
  z.strictObject({
    eventId: z.uuid(),
    lockId: LockId,
    at: Millis,
    kind: z.literal('command_result'),
    commandId: z.string().max(64),
    result: z.enum(['executed', 'refused']),
    code: z.string().max(64).nullable(),
  }),
]);
export type LockEvent = z.infer<typeof LockEvent>;

/** Schema of the JSON payload carried on each plain (unsigned) topic channel. */
export const LOCK_CHANNEL_SCHEMAS = Object.freeze({
  request: LockRequest,
  decision: LockDecision,
  command: LockCommand,
  state: LockState,
  event: LockEvent,
  presence: Presence,
});
