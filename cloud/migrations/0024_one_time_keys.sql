-- 0024: one-time keys (issue #17 part 2). A one-time key opens for its first successful entry;
-- the gateway consumes it at the door and its access event moves the key to `used` here (verb
-- recordKeyUse, through the key verbs' trigger like every status change). Forward-only.
ALTER TABLE keys ADD COLUMN one_time boolean NOT NULL DEFAULT false;
-- when the entry was made (the gateway's decision time), set with status `used`
ALTER TABLE keys ADD COLUMN used_at bigint;

ALTER TABLE keys DROP CONSTRAINT keys_status_check;
ALTER TABLE keys ADD CONSTRAINT keys_status_check
  CHECK (status IN ('issuing', 'active', 'revoking', 'revoked', 'expired', 'failed', 'used'));
ALTER TABLE keys ADD CONSTRAINT keys_used_at_check CHECK ((status = 'used') = (used_at IS NOT NULL));

ALTER TABLE key_history DROP CONSTRAINT key_history_event_check;
ALTER TABLE key_history ADD CONSTRAINT key_history_event_check
  CHECK (event IN ('issue', 'grant_applied', 'grant_rejected', 'revoke', 'revoke_applied', 'validity_ended', 'used_at_door'));
