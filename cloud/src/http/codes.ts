/**
 * Codes the HTTP layer answers with on its own (the verbs' codes are in
 * shared/src/codes.ts). Stable contract: clients match on the code.
 */
export const API_CODES = Object.freeze({
  BAD_REQUEST: 'The request does not match its schema (types, unknown fields, bad query or header); nothing changed.',
  MALFORMED_JSON: 'The body is not valid JSON; nothing changed.',
  PAYLOAD_TOO_LARGE: 'The body is larger than the limit; nothing changed.',
  UNSUPPORTED_MEDIA_TYPE: 'The body is not application/json.',
  UNAUTHENTICATED: 'No bearer token, or the token is unknown or revoked.',
  FORBIDDEN_ROLE: 'The token role may not do this (auditors read only; only admins manage sites and tokens).',
  NOT_FOUND: 'No such route or resource visible to this token.',
  ID_UNAVAILABLE:
    'A create named an id that cannot be used (ids are one namespace across sites and this one is taken by a row this token cannot see); nothing changed and nothing about that row is told. Choose another id, or leave it out and the server makes one.',
  URI_TOO_LONG: 'A path segment is longer than any id the API accepts (414); nothing changed.',
  TOKEN_NOT_FOUND: 'No such live API token.',
  TOKEN_EXPIRED: 'The bearer token has expired (401); or the token named for rotation has (422). Nothing changed.',
  TOKEN_REVOKED: 'The token named for rotation is revoked; nothing changed.',
  TOKEN_ALREADY_ROTATED: 'The token named for rotation already has a live successor (rotate that one); nothing changed.',
  WEBHOOK_NOT_FOUND: 'No such webhook endpoint visible to this token.',
  WEBHOOK_ALREADY_DISABLED: 'The webhook endpoint is already disabled; nothing changed.',
  WEBHOOK_URL_FORBIDDEN:
    'The webhook URL is refused by the SSRF guard: not https, carries userinfo, or points at (resolves to) a loopback, private, link-local or other internal address; nothing changed.',
  WEBHOOK_URL_UNRESOLVABLE: 'The host of the webhook URL does not resolve; nothing changed.',
  WEBHOOK_HTTP_STATUS: 'Delivery log: the endpoint answered a status other than 2xx (in statusCode); retried with backoff.',
  WEBHOOK_REDIRECT_NOT_FOLLOWED: 'Delivery log: the endpoint answered a redirect (3xx), which is never followed; retried with backoff.',
  WEBHOOK_TIMEOUT: 'Delivery log: no answer within the delivery timeout; retried with backoff.',
  WEBHOOK_CONNECTION_FAILED: 'Delivery log: the connection failed (DNS, refused, reset, TLS); retried with backoff.',
  WEBHOOK_SECRET_UNREADABLE:
    "Delivery log: the endpoint's sealed signing secret did not open with the loaded KEKs (wrong or missing KEK, or a ciphertext moved to another row); nothing was sent, retried with backoff.",
  WEBHOOK_ADDRESS_FORBIDDEN:
    'Delivery log: the attempt was refused before connecting, the endpoint now resolves to an internal address (a failed attempt, retried with backoff).',
  IDEMPOTENCY_KEY_REUSED: 'This Idempotency-Key was used with a different request.',
  IDEMPOTENCY_IN_PROGRESS: 'A request with this Idempotency-Key is still running; retry later.',
  IDEMPOTENCY_CLAIM_LOST:
    'This request ran past its Idempotency-Key lock and another request with the key took it over; nothing this request did was kept. Retry: it answers what the request that holds the key answered.',
  DELIVERY_DEAD_LETTERED:
    "A key's delivery notice (errors): its message to the gateway was dead-lettered; retry it with POST /dead-letters/{id}/retry.",
  DELIVERY_RETRYING:
    "A key's delivery notice (warnings): its message to the gateway failed and is retried with backoff (the last error in the message).",
  GATEWAY_OFFLINE: "A key's delivery notice (warnings): its gateway is offline; delivery waits for it.",
  RATE_LIMITED:
    'Too many requests from this client address (counted before authentication) or for this token; retry after the Retry-After seconds.',
  SERVICE_UNAVAILABLE: 'A dependency (database, broker) is down; retry later. `/readyz` names which in `reasons`.',
  DATABASE_UNREACHABLE: '`/readyz` reason: the database did not answer a query within healthDbTimeoutMs (or refused it).',
  BROKER_DISCONNECTED:
    "`/readyz` reason: one of the cloud's two MQTT links to the broker (inbox, publishing) is not connected (nothing is received, or nothing dispatched).",
  INTERNAL: 'An internal error; details are in the server log under the correlation id.',
  ALARM_NOT_FOUND: 'No such alarm visible to this token.',
  ALARM_ACKNOWLEDGED: 'The alarm is acknowledged now, under the calling token (applied).',
  ALARM_ALREADY_ACKED: 'The alarm was already acknowledged; who and when are unchanged (noop).',
});
export type ApiCode = keyof typeof API_CODES;
