-- Tobira gateway schema v1. Forward-only: never edit a released migration, add the next number.

-- Every verified downlink message, unique by message id (jti). Sequenced types
-- carry the cloud's per-gateway seq; heartbeats, resync answers and snapshot
-- parts carry none. One writer applies pending rows (see app/apply.ts).
CREATE TABLE inbox (
  id            INTEGER PRIMARY KEY,
  jti           TEXT    NOT NULL UNIQUE,
  type          TEXT    NOT NULL,
  seq           INTEGER,
  cid           TEXT    NOT NULL,
  iat           INTEGER NOT NULL,
  message       TEXT    NOT NULL,
  status        TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processed', 'failed')),
  attempts      INTEGER NOT NULL DEFAULT 0,
  claimed_until INTEGER,
  last_error    TEXT,
  result        TEXT,
  code          TEXT,
  received_at   INTEGER NOT NULL,
  processed_at  INTEGER
) STRICT;
CREATE INDEX inbox_pending_seq ON inbox (status, seq);
CREATE INDEX inbox_processed_at ON inbox (status, processed_at);

-- Downlink messages refused by verification: never applied, kept for operators.
CREATE TABLE rejected (
  id     INTEGER PRIMARY KEY,
  at     INTEGER NOT NULL,
  topic  TEXT    NOT NULL,
  code   TEXT    NOT NULL,
  detail TEXT    NOT NULL,
  bytes  INTEGER NOT NULL
) STRICT;

-- The key set. A revoked key keeps its row (status revoked, version = the revoke's)
-- so a door can answer KEY_REVOKED; tombstones hold the highest revoked version.
CREATE TABLE keys (
  key_id            TEXT    PRIMARY KEY,
  version           INTEGER NOT NULL,
  status            TEXT    NOT NULL CHECK (status IN ('active', 'revoked')),
  person_id         TEXT    NOT NULL,
  credential_type   TEXT    NOT NULL,
  credential_digest TEXT    NOT NULL,
  grant_json        TEXT    NOT NULL,
  grant_cid         TEXT    NOT NULL,
  updated_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX keys_by_credential ON keys (credential_type, credential_digest);

CREATE TABLE tombstones (
  key_id  TEXT    PRIMARY KEY,
  version INTEGER NOT NULL,
  at      INTEGER NOT NULL
) STRICT;

-- Parts of a key-set snapshot until all have arrived; applied at once.
CREATE TABLE snapshot_parts (
  snapshot_id TEXT    NOT NULL,
  part        INTEGER NOT NULL,
  parts       INTEGER NOT NULL,
  as_of_seq   INTEGER NOT NULL,
  jti         TEXT    NOT NULL,
  cid         TEXT    NOT NULL,
  body        TEXT    NOT NULL,
  PRIMARY KEY (snapshot_id, part)
) STRICT;

CREATE TABLE locks (
  lock_id          TEXT    PRIMARY KEY,
  door_id          TEXT,
  online           INTEGER NOT NULL DEFAULT 0,
  bolt             TEXT,
  door             TEXT,
  battery          INTEGER,
  state_at         INTEGER,
  failures         INTEGER NOT NULL DEFAULT 0,
  locked_out_until INTEGER,
  updated_at       INTEGER NOT NULL
) STRICT;

-- Every door decision, allowed or not. (lock_id, request_id) is unique so a lock
-- retrying a request gets the same decision and no second audit event.
CREATE TABLE access_log (
  id                 INTEGER PRIMARY KEY,
  event_id           TEXT    NOT NULL UNIQUE,
  lock_id            TEXT    NOT NULL,
  request_id         TEXT    NOT NULL,
  door_id            TEXT,
  at                 INTEGER NOT NULL,
  allowed            INTEGER NOT NULL,
  code               TEXT    NOT NULL,
  key_id             TEXT,
  key_version        INTEGER,
  person_id          TEXT,
  credential_type    TEXT,
  command_id         TEXT,
  command_expires_at INTEGER,
  hold_ms            INTEGER,
  cid                TEXT    NOT NULL,
  UNIQUE (lock_id, request_id)
) STRICT;

CREATE TABLE alarms (
  alarm_id    TEXT    PRIMARY KEY,
  lock_id     TEXT    NOT NULL,
  kind        TEXT    NOT NULL,
  at          INTEGER NOT NULL,
  received_at INTEGER NOT NULL
) STRICT;

-- Uplink to the cloud. seq is the gateway's gap-free uplink sequence, taken from
-- settings.next_uplink_seq in the transaction that writes the row.
CREATE TABLE outbox (
  seq        INTEGER PRIMARY KEY,
  jti        TEXT    NOT NULL UNIQUE,
  type       TEXT    NOT NULL,
  cid        TEXT    NOT NULL,
  body       TEXT    NOT NULL,
  essential  INTEGER NOT NULL,
  status     TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent')),
  created_at INTEGER NOT NULL,
  sent_at    INTEGER
) STRICT;
CREATE INDEX outbox_pending ON outbox (status, seq);

CREATE TABLE settings (
  id               INTEGER PRIMARY KEY CHECK (id = 1),
  applied_seq      INTEGER NOT NULL,
  lease_expires_at INTEGER,
  max_iat_ms       INTEGER NOT NULL,
  high_water_ms    INTEGER NOT NULL,
  mode             TEXT    NOT NULL CHECK (mode IN ('normal', 'lockdown')),
  next_uplink_seq  INTEGER NOT NULL,
  last_resync_at   INTEGER
) STRICT;
INSERT INTO settings (id, applied_seq, lease_expires_at, max_iat_ms, high_water_ms, mode, next_uplink_seq, last_resync_at)
VALUES (1, 0, NULL, 0, 0, 'normal', 1, NULL);
