-- Fencing for Idempotency-Key claims (docs/api.md "Idempotency-Key"): each
-- claim (the first, and every takeover of one whose lock ran out) writes a
-- fresh random token, and completing or releasing the key names it, so a
-- holder that was slowed past its lock and taken over changes 0 rows and its
-- transaction rolls back instead of overwriting the new holder's answer.
-- NULL for rows claimed before this migration: those can only be taken over.
ALTER TABLE idempotency_keys ADD COLUMN claim_token text;

-- The offline cap of an offline-capable key (docs/api.md "Offline-capable
-- keys"): how long after the gateway's last proven-fresh sync it may still
-- open a door while the gateway fails closed. Set at issue to the request's
-- value or the cloud's OFFLINE_KEY_MAX_SECONDS, and sent in the grant. NULL
-- for other keys, and for offline-capable keys issued before this migration
-- (their grants carry no cap and gateways apply the 7-day default).
ALTER TABLE keys ADD COLUMN offline_max_seconds int
  CHECK (offline_max_seconds IS NULL OR (offline_capable AND offline_max_seconds > 0));
