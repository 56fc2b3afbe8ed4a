-- 0007: bounds on what a flood from the site side can do (docs/gateway.md "Flood bounds"). Forward-only.

-- The uplink seq of each access event's outbox row, so retention can prune only rows the
-- cloud already has (never an event still pending in the outbox: DESIGN I2).
ALTER TABLE access_log ADD COLUMN outbox_seq INTEGER;
-- Rows written before 0007: find their outbox row by event id. A row with no outbox row left
-- had it purged, which only happens once it was sent; it stays NULL and counts as delivered.
UPDATE access_log SET outbox_seq = (
  SELECT o.seq FROM outbox o WHERE o.type = 'access.event' AND json_extract(o.body, '$.eventId') = access_log.event_id
);
CREATE INDEX access_log_outbox_seq ON access_log (outbox_seq);

-- Wrong-credential lockout across the site, one row per credential type (pin, card, mobile):
-- failures counted in a fixed window, at any lock; locked out while now < locked_out_until.
CREATE TABLE site_lockout (
  credential_type  TEXT    PRIMARY KEY,
  failures         INTEGER NOT NULL,
  window_start     INTEGER,
  locked_out_until INTEGER,
  updated_at       INTEGER NOT NULL
) STRICT;
