-- 0003: what the staff read API (docs/gateway.md "Staff read API") needs. Forward-only.

-- Lock messages refused on the site broker (origin 'gateway': unknown lock, bad topic,
-- malformed or schema-invalid payload, a payload naming another lock) and refusals a
-- lock reported for a gateway command (origin 'lock': a command_result refused with the
-- lock's code, e.g. BAD_MAC, COMMAND_REPLAYED, COMMAND_EXPIRED). Never the payload itself:
-- a request's payload holds a credential value. Bounded: the newest N rows (pruned on
-- insert) and nothing older than 30 days (pruned with the hourly purge).
CREATE TABLE lock_refusals (
  id      INTEGER PRIMARY KEY,
  at      INTEGER NOT NULL,
  origin  TEXT    NOT NULL CHECK (origin IN ('gateway', 'lock')),
  lock_id TEXT,
  channel TEXT    NOT NULL,
  topic   TEXT    NOT NULL,
  code    TEXT    NOT NULL,
  detail  TEXT    NOT NULL,
  bytes   INTEGER NOT NULL
) STRICT;
CREATE INDEX lock_refusals_at ON lock_refusals (at);

-- Newest-first keyset pages on (at, id): an index on at is (at, rowid) in SQLite.
-- (Failed inbox rows page on (processed_at, id) with the existing inbox_processed_at.)
CREATE INDEX access_log_at ON access_log (at);
CREATE INDEX rejected_at ON rejected (at);

-- Alarms become closable: open while closed_at IS NULL. The staff verb that closes
-- (acknowledges) an alarm is not built yet; until it is, every alarm stays open.
ALTER TABLE alarms ADD COLUMN closed_at INTEGER;
ALTER TABLE alarms ADD COLUMN closed_by TEXT;
