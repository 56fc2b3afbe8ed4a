-- 0010: one-time keys (issue #17 part 2). A one-time key opens for its first successful entry only;
-- the decision that allows it writes its row here in the same transaction as the access log and
-- outbox rows, so two locks presenting it at once cannot both open. Never purged, and a snapshot
-- (which replaces the key set) does not touch it: a consumed key stays consumed. Forward-only.
CREATE TABLE consumed_keys (
  key_id      TEXT    PRIMARY KEY,
  version     INTEGER NOT NULL,
  lock_id     TEXT    NOT NULL,
  request_id  TEXT    NOT NULL,
  at          INTEGER NOT NULL
) STRICT;
