-- Fencing for Idempotency-Key claims (docs/api.md "Idempotency-Key"): each
-- claim (the first, and every takeover of one whose lock ran out) writes a
-- fresh random token, and completing or releasing the key names it, so a
-- holder that was slowed past its lock and taken over changes 0 rows and its
-- transaction rolls back instead of overwriting the new holder's answer.
-- NULL for rows claimed before this migration: those can only be taken over.
ALTER TABLE idempotency_keys ADD COLUMN claim_token text;
