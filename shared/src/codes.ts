/**
 * The public code tables. Every code is a stable contract: callers, tests and
 * docs match on the code, never on message text. Each entry maps the code to
 * its one-line meaning (used in docs and in API error bodies).
 */

function table<const T extends Record<string, string>>(t: T): Readonly<T> {
  return Object.freeze(t);
}

/** Codes carried by `Outcome` values returned from verbs (cloud and gateway). */
export const OUTCOME_CODES = table({
  // applied
  KEY_ISSUED: 'The key was created and its grant queued for the gateway.',
  KEY_REVOKE_QUEUED: 'The key is dead in the cloud and its revoke is queued for the gateway.',
  KEY_ACTIVATED: 'The gateway applied the grant; the key is active.',
  KEY_REVOKE_CONFIRMED: 'The gateway applied the revoke; the key is revoked.',
  KEY_DELIVERY_FAILED: 'The gateway rejected the grant; the key failed.',
  KEY_EXPIRED: 'The key validity window ended; the key expired.',
  REPORT_RECORDED: 'A gateway report was recorded.',
  MESSAGE_APPLIED: 'A message was applied.',
  BROKER_CREDENTIALS_ROTATED: "The gateway's cloud-broker password was replaced; the old one no longer logs in.",
  // noop
  KEY_ALREADY_REVOKED: 'The key is already revoked, revoking, expired or failed; nothing changed.',
  KEY_ALREADY_ACTIVE: 'The key is already active; nothing changed.',
  KEY_NOT_EXPIRED: 'The key validity window has not ended; nothing changed.',
  KEY_ALREADY_ISSUED: 'A key with this id and the same content already exists; nothing changed.',
  DUPLICATE_MESSAGE: 'The message id was seen before; it was not applied again.',
  SEQ_CONFLICT: 'The gateway already applied another message at this seq: its history and the cloud differ (a restored cloud database); it fails closed until a snapshot.',
  STALE_VERSION: 'A newer version of the key is already known; the message was ignored.',
  REPORT_IGNORED: 'The report does not match the current state of the key; nothing changed.',
  // conflict
  KEY_STATE_CHANGED: 'The key changed under the caller (version mismatch); reload and retry.',
  KEY_ALREADY_EXISTS: 'A key with this id already exists with different content.',
  // refused
  KEY_NOT_FOUND: 'No such key.',
  DOOR_NOT_FOUND: 'A named door does not exist.',
  GATEWAY_NOT_FOUND: 'No such gateway.',
  PERSON_NOT_FOUND: 'No such person.',
  SITE_NOT_FOUND: 'No such site.',
  DOORS_SPAN_GATEWAYS: 'A key names doors behind more than one gateway.',
  CREDENTIAL_IN_USE: 'Another live key at this gateway already has this credential.',
  GATEWAY_ALREADY_EXISTS: 'A gateway with this id already exists.',
  INVALID_PUBLIC_KEY: 'The public key is not an Ed25519 public JWK with a kid.',
  DEAD_LETTER_NOT_FOUND: 'No dead-lettered outbox row with this id.',
  INVALID_REQUEST: 'The request does not match its schema (ids, names, types); nothing changed.',
  INVALID_CREDENTIAL: 'The credential value is not valid for its type (PIN 4-12 digits, card 4-64 hex, mobile 16-256 base64url).',
  ALREADY_EXISTS: 'An entity with this id already exists.',
  INVALID_VALIDITY_WINDOW: 'validFrom is not before validUntil, or the window has already ended.',
  INVALID_SCHEDULE: 'The week-day schedule is malformed.',
  OFFLINE_MAX_TOO_LONG: "offlineMaxSeconds is above the cloud's cap for offline-capable keys (OFFLINE_KEY_MAX_SECONDS, 7 days by default); nothing changed.",
  INVALID_TRANSITION: 'The event is not allowed from the current state.',
  BILLING_UNAVAILABLE: 'The payment provider could not be reached; nothing changed.',
  BROKER_UNAVAILABLE: 'The MQTT broker could not create or change the account; nothing changed.',
  BROKER_ACCOUNTS_UNMANAGED: 'The cloud does not manage broker accounts (BROKER_ACCOUNTS=unmanaged); the operator sets broker logins.',
  CHECKOUT_IN_PROGRESS: 'A checkout for this subject is already in progress.',
  MESSAGE_REJECTED: 'The message failed verification or validation and was not applied.',
  APPLY_FAILED: 'The message could not be applied after the allowed attempts.',
});
export type OutcomeCode = keyof typeof OUTCOME_CODES;

/** Access decision codes (DESIGN.md §3): the answer a gateway gives at the door. */
export const DECISION_CODES = table({
  ALLOWED: 'The credential is valid for this door now; an unlock command was sent.',
  UNKNOWN_CREDENTIAL: 'No key on this site has this credential.',
  KEY_REVOKED: 'The key was revoked.',
  KEY_NOT_YET_VALID: 'The key validity window has not started.',
  KEY_EXPIRED: 'The key validity window has ended.',
  OUTSIDE_SCHEDULE: 'The key is valid, but not at this time of the week.',
  DOOR_NOT_PERMITTED: 'The key does not open this door.',
  SITE_LOCKDOWN: 'The site is in lockdown; only offline-capable staff keys open doors.',
  CLOUD_STALE: 'The gateway cannot prove it is in sync with the cloud (freshness lease ran out); failing closed.',
  LOCKED_OUT: 'Too many wrong credentials at this lock, or of this credential type across the site; it is cooling down.',
  BAD_REQUEST: 'The access request was malformed.',
  RATE_LIMITED: 'The lock sent more requests than its rate limit allows; refused before anything was decided or recorded.',
  STORAGE_FULL: 'The gateway is below its free-disk headroom and cannot promise to record the decision; only offline-capable staff keys open.',
});

/** Why a signed cloud <-> gateway message was refused by `verifyMessage`. */
export const VERIFY_CODES = table({
  TOO_LARGE: 'The message is larger than 64 KiB; it was not parsed.',
  MALFORMED: 'The message is not a well-formed compact JWS with a JSON payload (bad encoding, bad JSON, truncated).',
  ALG_NOT_ALLOWED: 'The JWS algorithm is not EdDSA (includes "none" and algorithm swaps).',
  WRONG_TYP: 'The JWS typ header is not the Tobira message type.',
  UNKNOWN_KID: 'The key id is not in the trusted key set (keys are never fetched on demand).',
  BAD_SIGNATURE: 'The signature does not verify with the named key.',
  WRONG_ISSUER: 'The issuer is not the expected sender.',
  WRONG_AUDIENCE: 'The message is addressed to someone else.',
  EXPIRED: 'The message expired.',
  NOT_YET_VALID: 'The message was issued in the future (beyond the clock tolerance).',
  SCHEMA_INVALID: 'The claims do not match the message schema.',
});
export type VerifyCode = keyof typeof VERIFY_CODES;

/** Why a lock controller refused a gateway command (HMAC check). */
export const LOCK_COMMAND_CODES = table({
  BAD_MAC: 'The command MAC does not verify with the lock pairing secret.',
  COMMAND_EXPIRED: 'The command expired before it arrived.',
  COMMAND_TOO_FAR_AHEAD: 'The command expiry is further ahead than the lock accepts.',
  COMMAND_REPLAYED: 'The command id was seen before.',
  WRONG_LOCK: 'The command is addressed to another lock.',
  MALFORMED_COMMAND: 'The command does not match the command schema.',
});
export type LockCommandCode = keyof typeof LOCK_COMMAND_CODES;

/** Reasons a key is revoked: one parameter of one verb (DESIGN.md §4). */
export const REVOKE_REASONS = table({
  staff_revoked: 'An operator or staff member revoked the key.',
  stay_cancelled: 'The stay the key belonged to was cancelled.',
  stay_checked_out: 'The guest checked out.',
  membership_ended: 'The membership the key belonged to ended.',
  credential_lost: 'The holder reported the credential lost or stolen.',
  plan_retired: 'The plan the key belonged to was retired.',
  payment_failed: 'The payment that gated the key failed.',
});

export function codesOf<T extends Record<string, string>>(t: T): [keyof T & string, ...(keyof T & string)[]] {
  return Object.keys(t) as [keyof T & string, ...(keyof T & string)[]];
}
