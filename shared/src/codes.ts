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
  WRONG_GATEWAY: "A gateway's report names a door or a key of another gateway: refused and recorded, in no audit.",
  MESSAGE_APPLIED: 'A message was applied.',
  MODE_REQUEST_QUEUED:
    'The mode request was queued for each gateway of the site(s) as a signed site.mode message; each shows pending until its gateway confirms.',
  MODE_APPLIED: 'The gateway applied the site.mode message: its site mode and passage schedules are as requested.',
  MODE_SUPERSEDED:
    "A cloud request to lift the site's lockdown, older than the lockdown staff set at the gateway since: the lockdown stands (a supervisor at the site, or a newer request, lifts it).",
  MODE_UNCHANGED: 'The gateway already was in the requested mode with those passage schedules; nothing changed.',
  MODE_REQUEST_NOT_FOUND: 'No such mode request visible to the caller.',
  MODE_REQUEST_EMPTY: 'The request names neither a mode nor passage; nothing was queued.',
  MODE_NO_GATEWAY: 'No gateway is registered at the site(s) in scope; nothing was queued.',
  BROKER_CREDENTIALS_ROTATED: "The gateway's cloud-broker password was replaced; the old one no longer logs in.",
  MOBILE_TOKEN_ISSUED: "A short-lived mobile token was signed for the key's person, bound to the key and its gateway.",
  KEY_USED_RECORDED: "A one-time key's entry reached the cloud (access event); the key is used.",
  // noop
  KEY_ALREADY_USED: 'The one-time key was already used; nothing changed.',
  KEY_ALREADY_REVOKED: 'The key is already revoked, revoking, expired or failed; nothing changed.',
  KEY_ALREADY_ACTIVE: 'The key is already active; nothing changed.',
  KEY_NOT_EXPIRED: 'The key validity window has not ended; nothing changed.',
  KEY_ALREADY_ISSUED: 'A key with this id and the same content already exists; nothing changed.',
  DUPLICATE_MESSAGE: 'The message id was seen before; it was not applied again.',
  SEQ_CONFLICT:
    'The gateway already applied another message at this seq: its history and the cloud differ (a restored cloud database); it fails closed until a snapshot.',
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
  PERSON_SHARED:
    'The person also belongs to a site this token does not cover, which relies on the same contact and name: only a token covering every site of the person (or an admin of all sites) may change them; nothing changed.',
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
  KEY_NOT_MOBILE: 'Mobile tokens are issued only for keys whose credential type is mobile.',
  KEY_NOT_LIVE: 'The key is not issuing or active (revoked, expired, failed or used); no token is issued.',
  INVALID_SCHEDULE:
    'The schedule is malformed: a window with neither days nor dates, start 24:00 or equal to end, a date not on the calendar, an unknown time zone.',
  OFFLINE_MAX_TOO_LONG:
    "offlineMaxSeconds is above the cloud's cap for offline-capable keys (OFFLINE_KEY_MAX_SECONDS, 7 days by default); nothing changed.",
  INVALID_TRANSITION: 'The event is not allowed from the current state.',
  BILLING_UNAVAILABLE: 'The payment provider could not be reached; nothing changed.',
  BROKER_UNAVAILABLE: 'The MQTT broker could not create or change the account; nothing changed.',
  BROKER_ACCOUNTS_UNMANAGED: 'The cloud does not manage broker accounts (BROKER_ACCOUNTS=unmanaged); the operator sets broker logins.',
  CHECKOUT_IN_PROGRESS: 'A checkout for this subject is already in progress.',
  MESSAGE_REJECTED: 'The message failed verification or validation and was not applied.',
  APPLY_FAILED: 'The message could not be applied after the allowed attempts.',
  // stays and payments (docs/payments.md, docs/state-machines.md)
  STAY_BOOKED: "The stay was booked: pending, holding its room's nights until payment or the hold ends.",
  STAY_CONFIRMED: 'The stay is paid in full; its key is queued for issue.',
  STAY_FAILED: 'The payment failed; the stay failed, its nights were released and nothing is charged.',
  STAY_EXPIRED: 'The stay was not paid within the hold; its nights were released.',
  STAY_CHECKED_IN: 'The guest checked in.',
  STAY_CHECKED_OUT: 'The guest checked out; the key was ended and the remaining nights released.',
  STAY_CANCELLED: 'The stay was cancelled: the key revoked at once, the nights released, the refund (if any) queued.',
  PAYMENT_PROCESSING: 'The payment is processing at the provider.',
  PAYMENT_SUCCEEDED: 'The payment succeeded at the provider and matches the ledger.',
  PAYMENT_SUCCEEDED_LATE:
    'Money arrived for a payment the ledger had marked failed; the ledger follows the provider and the stay side refunds it.',
  PAYMENT_FAILED: 'The payment failed or its intent was cancelled; nothing was charged.',
  REFUND_QUEUED: 'A refund was queued with its idempotency key; it is made exactly once.',
  PAYMENT_REFUNDED: 'Everything received for the payment was refunded.',
  PAYMENT_PARTIALLY_REFUNDED: 'Part of the payment was refunded.',
  STAY_ALREADY_BOOKED: 'A stay with this id and the same booking already exists; nothing changed.',
  STAY_ALREADY_CONFIRMED: 'The stay is already confirmed; nothing changed.',
  STAY_ALREADY_ENDED: 'The stay already failed, expired or checked out; nothing changed.',
  STAY_NOT_PENDING: 'The stay is no longer pending, so its hold cannot expire; nothing changed.',
  STAY_HOLD_NOT_OVER: 'The hold on the room has not ended yet; nothing changed.',
  STAY_PAYMENT_PROCESSING:
    'The hold ended but a payment of the stay is still processing; the stay stays pending until it settles; nothing changed.',
  PAYMENT_DECLINED_RETRYABLE:
    'The latest attempt on the PaymentIntent was declined; the intent awaits another payment method and the hold stands; nothing changed.',
  STAY_ALREADY_CHECKED_IN: 'The guest already checked in; nothing changed.',
  STAY_ALREADY_CHECKED_OUT: 'The guest already checked out; nothing changed.',
  STAY_ALREADY_CANCELLED: 'The stay is already cancelled; nothing changed.',
  STAY_BALANCE_DUE: 'The money settled so far is less than the price; the stay stays pending.',
  PAYMENT_FAILURE_IGNORED:
    'A failure was reported for a payment that already succeeded (ranked status, not arrival order); nothing changed.',
  PAYMENT_STATUS_STALE: 'The reported payment status ranks below the ledger; nothing changed.',
  PAYMENT_ALREADY_SUCCEEDED: 'The payment already succeeded; nothing changed.',
  PAYMENT_ALREADY_FAILED: 'The payment already failed; nothing changed.',
  PAYMENT_NOT_SETTLED: 'The intent is still waiting for the guest; nothing changed.',
  REFUND_ALREADY_REQUESTED: 'A refund of this payment is already queued or made; nothing changed.',
  REFUND_ALREADY_RECORDED: 'The refunded amount is already recorded; nothing changed.',
  REFUND_PENDING: 'Stripe holds the refund as pending: nothing is counted as refunded until it succeeds.',
  REFUND_FAILED: 'Stripe says the refund failed: nothing was refunded; an operator retries it (a new attempt, a new key).',
  REFUND_RECONCILED: "The payment's refunds were read from Stripe and recorded (from any source, the dashboard included).",
  NOTHING_TO_REFUND: 'The cancellation policy refunds nothing; no refund was queued.',
  STAY_ALREADY_EXISTS: 'A stay with this id already exists with a different booking.',
  STAY_NOT_FOUND: 'No such stay.',
  ROOM_NOT_FOUND: 'No such room at this site.',
  ROOM_UNAVAILABLE: 'Another stay holds the room for at least one of these nights; nothing was created.',
  STAY_DATES_INVALID: 'Check-in or check-out is not a real date, or the stay has already ended.',
  STAY_EMPTY: 'Check-out is not after check-in.',
  STAY_TOO_LONG: "The stay has more nights than the site's maximum.",
  STAY_PRICE_INVALID: 'The price or deposit is not a positive integer in minor units, or the deposit exceeds the price.',
  STAY_CURRENCY_MISMATCH: 'The currency is not the one the site charges in.',
  STAY_NOT_STARTED: 'The check-in date has not come yet.',
  NO_SHOW_BEFORE_CHECK_IN:
    'A stay is cancelled as a no-show only once its check-in time has passed and the guest has not checked in (the no-show rule may keep all the money of a guest who can still come).',
  INVALID_CANCELLATION_POLICY: 'The cancellation policy tiers are malformed or refund more as check-in nears.',
  PAYMENT_AFTER_STAY_ENDED: 'Money settled for a stay that already failed, expired or was cancelled; it must be refunded.',
  PAYMENT_NOT_FOUND: 'No such payment.',
  PAYMENT_INTENT_MISMATCH: 'The PaymentIntent is not the one the ledger holds for this payment.',
  PAYMENT_AMOUNT_MISMATCH: 'The amount or currency the provider reports differs from the ledger; refused and alarmed.',
  REFUND_EXCEEDS_PAYMENT: 'The refund is larger than what was received and not yet refunded.',
  PAYMENT_DECLINED: 'The card was declined (a permanent provider error).',
  BILLING_REQUEST_INVALID: 'The provider refused the request as invalid (a permanent error; retrying will not help).',
  BILLING_IDEMPOTENCY_CONFLICT: 'The idempotency key was used with other parameters; a bug to look at, never retried.',
  BILLING_AUTH_FAILED: 'The provider refused the API key.',
  WEBHOOK_SIGNATURE_INVALID: 'The Stripe-Signature header is missing or does not match the raw body.',
  WEBHOOK_TIMESTAMP_STALE: 'The webhook signature is older than the tolerance (300 s).',
  WEBHOOK_MALFORMED: 'The verified webhook body is not a Stripe event this service reads.',
  BILLING_NOT_CONFIGURED: 'Stays are not available: the cloud has no STRIPE_SECRET_KEY; nothing changed.',
  ROOM_CREATED: 'The room was created with its doors.',
  ROOM_ALREADY_EXISTS: 'A room with this id exists (noop when it is the same room, conflict otherwise).',
  ROOM_NAME_TAKEN: 'Another room at the site has this name; nothing changed.',
  STAY_NOT_OVER: 'The stay has not reached its check-out time, so it is not checked out automatically; nothing changed.',
  STAY_SETTINGS_SAVED: "The site's stay settings were saved.",
  STAY_HOLD_OVERDUE: 'Alarm: a stay is still pending past its hold plus the slack; the hold sweeper is not keeping up.',
  NOTIFICATION_QUEUED: "The notification was rendered in the recipient's locale and queued in the notification outbox.",
  NOTIFICATION_DUPLICATE: 'A notification with this dedupe key (the same business event) is already queued or sent; nothing changed.',
  NOTIFICATION_NOT_FOUND: 'No such notification visible to this token.',
  NOTIFICATION_RETRIED: 'The dead notification is pending again with its attempts reset.',
  NOTIFICATION_NOT_DEAD: 'Only a dead notification can be retried; it is pending, sending or sent (the current one is in the answer).',
  NOTIFICATION_NO_ADDRESS: 'The recipient has no address on the notification channel (smtp: no e-mail); dead at once, not retried.',
  NOTIFICATION_SMTP_FAILED: 'The SMTP server could not be reached or refused the message; retried with backoff, then dead.',
  NOTIFICATION_WEBHOOK_FAILED: 'The notification webhook did not answer 2xx (or could not be reached); retried with backoff, then dead.',
  NOTIFICATION_ADDRESS_FORBIDDEN: 'The notification webhook URL is not a public address (egress guard); retried, then dead.',
  NOTIFICATION_CONTACT_SAVED: "A person's e-mail / locale, or a site's locale, was saved (messages queued from now on use it).",
  NOTIFICATION_CHANNEL_UNCONFIGURED: "The row's channel is not configured in this cloud (no SMTP host or webhook URL); retried, then dead.",
  // memberships (docs/memberships.md)
  PLAN_CREATED: 'The plan was created with its doors.',
  PLAN_RETIRED: 'The plan takes no new applications; its memberships end through endMembership (plan_retired).',
  PLAN_ALREADY_EXISTS: 'A plan with this id exists (noop when it is the same plan, refused otherwise).',
  PLAN_ALREADY_RETIRED: 'The plan was already retired; nothing changed.',
  PLAN_NOT_FOUND: 'No such plan visible to the caller.',
  PLAN_NOT_AVAILABLE: 'The plan is retired and takes no applications; nothing changed.',
  PLAN_INVALID: 'The plan is not valid (price, currency, interval, doors, quota or grace); nothing changed.',
  MEMBERSHIP_APPLIED: 'The application was recorded; it waits for staff approval.',
  MEMBERSHIP_APPROVED: 'The application was approved and its checkout started (subscription and first invoice in Stripe).',
  MEMBERSHIP_ACTIVATED: 'The first invoice is paid: the membership is active and its key issued for the plan doors.',
  MEMBERSHIP_RENEWED: 'A renewal invoice is paid: the membership runs to the new period end.',
  MEMBERSHIP_PAYMENT_RECOVERED: 'The overdue invoice is paid: the membership is active again, door access restored if it was suspended.',
  MEMBERSHIP_ACTIVATED_PAST_DUE:
    'The first period was paid and a renewal already failed (the activation was learned late): the key is issued and the membership is past due, inside the plan grace period.',
  MEMBERSHIP_PAST_DUE: 'A renewal payment failed: the membership is past due; door access stays for the plan grace period.',
  MEMBERSHIP_ENDING: 'The Stripe subscription is set to cancel at period end: the membership ends then; access stays until.',
  MEMBERSHIP_ENDED: 'The membership ended: billing stopped first, the key revoked through the key verb.',
  MEMBERSHIP_REJECTED: 'The application was rejected before any payment; nothing is billed.',
  MEMBERSHIP_CHECKOUT_EXPIRED:
    'An approved application whose first invoice was not paid by the checkout deadline ended: its subscription cancelled first, the applicant told, late money refunded.',
  MEMBERSHIP_CHECKOUT_OPEN: 'The checkout of the approved application is still within its deadline; nothing changed.',
  MEMBERSHIP_CHECKOUT_PAID: 'The application was paid before its checkout deadline ended it: it is a membership now; nothing changed.',
  MEMBERSHIP_LATE_PAYMENT_REFUNDED:
    'Money for an application that ended at its checkout deadline was refunded in full (one refund per payment, its key stored with Stripe).',
  MEMBERSHIP_ACCESS_SUSPENDED: 'The grace period of a past-due membership is over: its key is revoked until the invoice is paid.',
  MEMBERSHIP_ACCESS_RESTORED:
    'The site lifted the member’s block: the membership gives door access, so a fresh key with the same credential was issued.',
  MEMBERSHIP_NO_DOOR_ACCESS: 'The membership gives no door access now (suspended, ended or not yet active): no key is given back.',
  MEMBERSHIP_ACCESS_NOT_RESTORED: 'The unblock was done, but this membership could not be given its key back (logged for an operator).',
  MEMBER_KEY_ALREADY_LIVE: 'The membership’s key is still live; nothing changed.',
  MEMBERSHIP_END_PENDING:
    "Stripe did not answer whether billing stopped: the end is recorded as pending and reconciled from Stripe's subscription.",
  MEMBERSHIP_END_NOT_MADE:
    'Stripe refused a pending billing stop for good: the pending record is cleared, the membership is as it was (an alarm).',
  MEMBERSHIP_ALREADY_APPLIED: 'The same application was already recorded; nothing changed.',
  MEMBERSHIP_ALREADY_APPROVED: 'The application was already approved; nothing changed.',
  MEMBERSHIP_ALREADY_ENDING: 'The membership is already ending at its period end; nothing changed.',
  MEMBERSHIP_ALREADY_ENDED: 'The membership has already ended (or was rejected); nothing changed.',
  MEMBERSHIP_ALREADY_PAST_DUE: 'The membership is already past due; nothing changed.',
  MEMBERSHIP_PAYMENT_PENDING: 'The first invoice is not paid yet (or its payment failed and can be retried); nothing changed.',
  MEMBERSHIP_NOT_PAST_DUE: 'The membership is not past due, so there is no access to suspend; nothing changed.',
  MEMBERSHIP_ACCESS_ALREADY_SUSPENDED: 'Door access of the past-due membership is already suspended; nothing changed.',
  MEMBERSHIP_GRACE_NOT_OVER: 'The past-due membership is still within its plan grace period; nothing changed.',
  SUBSCRIPTION_STATUS_UNCHANGED: 'What Stripe says of the subscription changes nothing here; nothing changed.',
  MEMBERSHIP_STATE_CHANGED: 'The membership changed since the caller looked (stale click); the current state is in the answer.',
  MEMBERSHIP_ALREADY_EXISTS: 'A membership with this id exists for another plan or person; nothing changed.',
  MEMBERSHIP_NOT_FOUND: 'No such membership visible to the caller.',
  APPLICATION_UNDER_REVIEW: 'The membership is an application under review: reject it instead; nothing changed.',
  MEMBERSHIP_NOTE_REQUIRED: 'A force-cancel needs the staff actor and a note; nothing changed.',
  SUBSCRIPTION_MISMATCH: 'The Stripe subscription is not the membership recorded one; nothing changed.',
  // signing-key rotation (docs/operations.md)
  SIGNING_KEY_PUBLISHED:
    'The cloud key is published (JWKS) and a keyset.update adding it is queued for every gateway that has not applied it.',
  SIGNING_KEY_SWITCHED: 'The cloud signs with this key from now on; the previous signer stays trusted until it is retired.',
  SIGNING_KEY_RESIGN_QUEUED: 'Every live grant was queued again under the current signing key (one outbox row per key).',
  SIGNING_KEY_RETIRED: 'The key is retired: a keyset.update retiring it is queued for every gateway; nothing it signs is accepted again.',
  KEYSET_UPDATED: 'The gateway applied a keyset.update: its trusted cloud keys changed.',
  SIGNING_KEY_ALREADY_PUBLISHED: 'The key is already published and every gateway has applied it; nothing changed.',
  SIGNING_KEY_ALREADY_SIGNING: 'The key already signs; nothing changed.',
  SIGNING_KEY_ALREADY_RETIRED: 'The key is already retired; nothing changed.',
  KEYSET_UNCHANGED: 'The keyset.update changes nothing the gateway does not already have; nothing changed.',
  SIGNING_KEY_NOT_FOUND: 'No cloud signing key with this kid (a new key is added through CLOUD_SIGNING_JWK and a restart).',
  SIGNING_KEY_NOT_LOADED: "This cloud process does not hold the key's private part (CLOUD_SIGNING_JWK); nothing changed.",
  SIGNING_KEY_NOT_PUBLISHED: 'The key is not published yet (publish it first); nothing changed.',
  SIGNING_KEY_NOT_DELIVERED:
    'A gateway has not applied the keyset.update adding this key yet (detail names them); switching now would fail them closed.',
  SIGNING_KEY_IS_SIGNER: 'The key signs now: switch to another key before retiring it; nothing changed.',
  SIGNING_KEY_RESIGN_PENDING: 'Live grants were not re-sent since this key stopped signing (run the re-sign step first); nothing changed.',
  SIGNING_KEY_WRONG_STATE: 'The key is retired (or only staged) and cannot take this step; nothing changed.',
  KEYSET_KID_RETIRED: 'The keyset.update adds a key the gateway has retired; a retired key is never trusted again. Refused.',
  KEYSET_SELF_RETIRE: 'The keyset.update retires the key it is signed with. Refused.',
  KEYSET_WOULD_BE_EMPTY: 'The keyset.update would leave the gateway trusting no cloud key. Refused.',
  // gateway uplink-key rotation (docs/operations.md "Rotating a gateway's uplink key")
  UPLINK_KEY_ROTATION_REQUESTED: 'An uplink_key.rotate is queued for the gateway; it answers with a proposal signed by its current key.',
  UPLINK_KEY_ROTATION_IN_PROGRESS: "A rotation of this gateway's uplink key is already requested or proposed; nothing changed.",
  UPLINK_KEY_PROPOSAL_ACCEPTED: 'Both proofs verified: the new key is recorded for the gateway and an uplink_key.activate is queued.',
  UPLINK_KEY_ROTATION_UNKNOWN: 'The proposal names a rotation the cloud did not issue to this gateway; refused, nothing changed.',
  UPLINK_KEY_ROTATION_NOT_OPEN:
    'The proposal names a rotation that is no longer waiting for one (failed, or proposed with another key); refused.',
  UPLINK_KEY_NOT_CURRENT: 'The proposal is not signed with the key the cloud has on record as current; refused, nothing changed.',
  UPLINK_KEY_BAD_PROOF: 'The proof made with the proposed key does not verify; the rotation failed, nothing else changed.',
  UPLINK_KEY_KID_TAKEN: 'The proposed kid is one this gateway used before; the rotation failed, nothing else changed.',
  UPLINK_KEY_ACTIVATED: 'The gateway signs its uplinks with the new key from now on; the old private key is deleted.',
  UPLINK_KEY_ALREADY_ACTIVE: 'The gateway already signs with this key; nothing changed.',
  UPLINK_KEY_PROPOSED: 'The gateway made (or kept) a new uplink key for the rotation and queued its proposal.',
  // check-in gates, walk-ins and monthly quotas (docs/memberships.md "Check-in gates")
  GUEST_BLOCKED: 'The site has blocked this person (a booking, walk-in, key issue or check-in there); nothing changed.',
  PLAN_NOT_IN_CONFIG: 'Check-in gate: the plan is not offered at this site (another site, or retired); nothing changed.',
  WALK_IN_NOT_ALLOWED: 'Check-in gate: the site sells no walk-ins, or the plan is not sold at the front desk; nothing changed.',
  MEMBERS_ONLY_PLAN:
    'Check-in gate: the plan is for its members only and the person holds no membership of it that gives access now; nothing changed.',
  QUOTA_EXHAUSTED: "Check-in gate: the person has used the plan's monthly quota for this month of the site; nothing changed.",
  WALK_IN_CREATED: 'The walk-in passed the gates, took one quota use and waits for its payment (PaymentIntent purpose walk_in).',
  WALK_IN_PAID: 'The walk-in is paid: its key is issued through the key verb, to the end of the day at the site.',
  WALK_IN_FAILED: 'The walk-in payment was cancelled: nothing charged, the quota use released.',
  WALK_IN_EXPIRED: 'The walk-in was not paid within its hold: the intent cancelled in Stripe first, the quota use released.',
  WALK_IN_CANCELLED: 'The paid walk-in was cancelled: its key revoked; its quota use given back when the cancellation policy says so.',
  WALK_IN_ALREADY_CREATED: 'The same walk-in was already created; nothing changed.',
  WALK_IN_ALREADY_PAID: 'The walk-in is already paid; nothing changed.',
  WALK_IN_ALREADY_ENDED: 'The walk-in already failed or expired; nothing changed.',
  WALK_IN_ALREADY_CANCELLED: 'The walk-in was already cancelled; nothing changed.',
  WALK_IN_NOT_PENDING: 'The walk-in is not waiting for payment; nothing changed.',
  WALK_IN_PAYMENT_PENDING: 'The walk-in payment has not settled (a declined card may be retried until the hold ends); nothing changed.',
  WALK_IN_HOLD_NOT_OVER: 'The walk-in hold has not ended yet; nothing changed.',
  WALK_IN_ALREADY_EXISTS: 'A walk-in with this id exists for another plan or person; nothing changed.',
  WALK_IN_NOT_FOUND: 'No such walk-in visible to the caller.',
  WALK_IN_NOT_PAID: 'The walk-in is not paid: there is nothing to cancel (an unpaid walk-in is released when its hold ends).',
  WALK_IN_PAYMENT_PROCESSING:
    "The walk-in's payment is processing at Stripe: its hold waits and it cannot be cancelled until the payment decides.",
  PAYMENT_AFTER_WALK_IN_ENDED: 'Money settled for a walk-in that already failed or expired (an alarm: refund it in Stripe).',
  PERSON_BLOCKED:
    "The person is blocked at the site: bookings, walk-ins and key issues there are refused with GUEST_BLOCKED, and the person's live keys at the site are revoked (person_blocked).",
  PERSON_ALREADY_BLOCKED: 'The person was already blocked at the site; nothing changed.',
  PERSON_UNBLOCKED:
    'The block on the person at the site was lifted; each membership of theirs there that gives door access got a fresh key (keysIssued says how many).',
  PERSON_NOT_BLOCKED: 'The person is not blocked at the site; nothing changed.',
  // resync snapshots
  SNAPSHOT_APPLIED:
    "The gateway applied a whole resync snapshot: its key set, the trusted cloud keys and the modes it carried (the ack of the snapshot as a whole, naming its first part's jti).",
  MODE_SNAPSHOT_COVERED:
    "The mode request's site.mode was covered by a resync snapshot the gateway acked; the snapshot carried the site's modes as of its seq.",
  SNAPSHOT_COVERED: 'The keyset.update was covered by a resync snapshot whose trusted cloud keys the gateway applied.',
});
export type OutcomeCode = keyof typeof OUTCOME_CODES;

/** Access decision codes: the answer a gateway gives at the door. */
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
  REQUEST_STALE:
    "The request was older than the gateway's requestMaxAgeMs when it was decided (a stalled site link, or the lock's clock behind): refused, so no door opens for someone who has walked away; present the credential again.",
  LOCK_CLOCK_AHEAD:
    "The request's time was further ahead of the gateway's than requestMaxAgeMs: the lock's clock runs ahead, so the age of its requests cannot be told; refused until the lock's clock is set.",
  RATE_LIMITED: 'The lock sent more requests than its rate limit allows; refused before anything was decided or recorded.',
  STORAGE_FULL:
    'The gateway is below its free-disk headroom and cannot promise to record the decision; only offline-capable staff keys open.',
  KEY_USED: 'The key is a one-time key and its one entry has been used.',
  MOBILE_TOKEN_INVALID: 'The mobile token is malformed, tampered with (its signature does not verify) or not a Tobira mobile token.',
  MOBILE_TOKEN_UNKNOWN_SIGNER: "The mobile token is signed by a key that is not among the gateway's trusted cloud keys.",
  MOBILE_TOKEN_EXPIRED: 'The mobile token has expired (it lives minutes; the phone asks the cloud for a new one).',
  MOBILE_TOKEN_WRONG_SITE: 'The mobile token was issued for another gateway (site).',
  MOBILE_TOKEN_MISMATCH: 'The mobile token names a key that is not a mobile key of the person it names.',
  MOBILE_TOKEN_REPLAYED:
    'The mobile token has opened a door already: a token is single use (its jti is kept until it expires, across restarts).',
  MOBILE_TOKEN_BEFORE_START:
    'The mobile token was issued before the gateway opened its store (it restarted, or was restored from a backup that forgets which tokens were used): refused; the phone asks the cloud for a new one.',
  REMOTE_UNLOCK:
    "A supervisor opened the door remotely from the gateway's staff UI for one entry; the event's `by` names them and their reason.",
  SIGNER_RETIRED:
    'The key was granted in a message signed by a cloud key that is now retired, and was not re-sent under a current key (signing-key rotation re-sends every live grant first).',
  // operating modes (docs/gateway.md "Passage mode" and "Privacy")
  PASSAGE_UNLOCK: 'Passage mode began at this door: the gateway holds it unlocked (renewed HMAC unlock commands) while its schedule runs.',
  PASSAGE_RELOCK:
    'Passage mode ended at this door (schedule over, cleared, lockdown, failing closed or a restart outside it): a lock command was sent.',
  PRIVACY_ACTIVE: 'The guest inside set privacy (thumb-turn / do-not-disturb): staff keys and staff remote unlocks are refused.',
  PRIVACY_OVERRIDE:
    "A supervisor opened a door in privacy remotely, flagged as an emergency; the event's `by` names them and their reason.",
});

/** Why a signed cloud <-> gateway message was refused by `verifyMessage`. */
export const VERIFY_CODES = table({
  TOO_LARGE: 'The message is larger than 64 KiB; it was not parsed.',
  MALFORMED: 'The message is not a well-formed compact JWS with a JSON payload (bad encoding, bad JSON, truncated).',
  ALG_NOT_ALLOWED: 'The JWS algorithm is not EdDSA (includes "none" and algorithm swaps).',
  WRONG_TYP: 'The JWS typ header is not the Tobira message type.',
  UNKNOWN_KID: 'The key id is not in the trusted key set (keys are never fetched on demand).',
  KID_RETIRED: 'The message is signed by a key that was retired (signing-key rotation); nothing it signs is accepted any more.',
  KID_NOT_YET_VALID:
    "The message is signed by a trusted key before the key's notBefore, judged on the receiver's trusted time; nothing it signs counts before then.",
  BAD_SIGNATURE: 'The signature does not verify with the named key.',
  WRONG_ISSUER: 'The issuer is not the expected sender.',
  WRONG_AUDIENCE: 'The message is addressed to someone else.',
  EXPIRED: 'The message expired.',
  NOT_YET_VALID: 'The message was issued in the future (beyond the clock tolerance).',
  SCHEMA_INVALID: 'The claims do not match the message schema.',
});
export type VerifyCode = keyof typeof VERIFY_CODES;

/**
 * Why the cloud refused an `uplink.batch` as a whole (docs/protocol.md
 * "uplink.batch"): recorded in rejected uplinks like a verification code; nothing
 * of such a batch is applied.
 */
export const UPLINK_BATCH_CODES = table({
  BATCH_TYPE_NOT_ALLOWED: 'A batch item has a type that is never batched (resync.request, uplink.batch) or no uplink type at all.',
  BATCH_SEQ_NOT_CONSECUTIVE: 'The batch items do not carry consecutive, increasing seqs (a gap, a repeat or a decrease).',
  BATCH_DUPLICATE_ITEM: 'Two items of the batch carry the same jti.',
  BATCH_ITEM_INVALID: 'A batch item does not match the schema of its own message type.',
});
export type UplinkBatchCode = keyof typeof UPLINK_BATCH_CODES;

/**
 * Why the gateway dropped a lock's state, event or presence message, and the
 * gateway's own alarms about a lock (docs/gateway.md "Lock event budget").
 */
export const LOCK_MESSAGE_CODES = table({
  LOCK_EVENTS_THROTTLED:
    'The lock sent more states, events or presence messages than its event budget allows: dropped before anything was written, one alarm (kind lock_events_throttled) per episode, ended once the lock is back under budget.',
});
export type LockMessageCode = keyof typeof LOCK_MESSAGE_CODES;

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

/** Reasons a key is revoked: one parameter of one verb. */
export const REVOKE_REASONS = table({
  staff_revoked: 'An operator or staff member revoked the key.',
  stay_cancelled: 'The stay the key belonged to was cancelled.',
  stay_checked_out: 'The guest checked out.',
  membership_ended: 'The membership the key belonged to ended.',
  credential_lost: 'The holder reported the credential lost or stolen.',
  plan_retired: 'The plan the key belonged to was retired.',
  payment_failed: 'The payment that gated the key failed.',
  walk_in_cancelled: 'The walk-in day pass the key belonged to was cancelled.',
  person_blocked: 'The site blocked the holder.',
  key_used:
    "A one-time key's one entry was used at the door and the cloud recorded it: sent as a sequenced revoke so that every copy of the gateway's key set learns it, one restored from a backup taken before the entry included.",
});

export function codesOf<T extends Record<string, string>>(t: T): [keyof T & string, ...(keyof T & string)[]] {
  return Object.keys(t) as [keyof T & string, ...(keyof T & string)[]];
}
