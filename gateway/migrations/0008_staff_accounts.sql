-- 0008: staff accounts, their sessions, the one-time setup code and the staff action audit
-- (docs/gateway.md "Staff accounts and sessions"). Forward-only.

-- One row per person. The password is kept only as an Argon2id PHC string (@node-rs/argon2).
-- Usernames compare without case. A disabled account keeps its row (the audit names it) and
-- has no session (disabling deletes them in the same transaction).
CREATE TABLE staff_accounts (
  account_id    TEXT    PRIMARY KEY,
  username      TEXT    NOT NULL UNIQUE COLLATE NOCASE,
  display_name  TEXT    NOT NULL,
  role          TEXT    NOT NULL CHECK (role IN ('staff', 'supervisor')),
  password_hash TEXT    NOT NULL,
  disabled_at   INTEGER,
  created_at    INTEGER NOT NULL,
  created_by    TEXT    NOT NULL,
  updated_at    INTEGER NOT NULL
) STRICT;

-- Server-side sessions. The cookie carries a random id; only its SHA-256 is stored here, so a
-- reader of the file cannot use a row. Idle and absolute timeouts are judged on read.
CREATE TABLE staff_sessions (
  session_hash TEXT    PRIMARY KEY,
  account_id   TEXT    NOT NULL REFERENCES staff_accounts (account_id) ON DELETE CASCADE,
  created_at   INTEGER NOT NULL,
  last_seen_at INTEGER NOT NULL,
  ip           TEXT    NOT NULL
) STRICT;
CREATE INDEX staff_sessions_account ON staff_sessions (account_id);

-- The one-time setup code that creates the first supervisor: at most one row, only the SHA-256
-- of the code (80 random bits), deleted by the transaction that uses it.
CREATE TABLE staff_setup_code (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  code_hash  TEXT    NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) STRICT;

-- What staff did (sign-in/out, lockdown, alarm ack, remote unlock, account changes), newest last.
-- Each row is sent to the cloud as a `staff.action` uplink written in the same transaction.
CREATE TABLE staff_actions (
  id           INTEGER PRIMARY KEY,
  action_id    TEXT    NOT NULL UNIQUE,
  at           INTEGER NOT NULL,
  actor_id     TEXT,
  actor_name   TEXT    NOT NULL,
  action       TEXT    NOT NULL,
  target       TEXT,
  detail       TEXT,
  result       TEXT    NOT NULL,
  code         TEXT,
  cid          TEXT    NOT NULL
) STRICT;
CREATE INDEX staff_actions_at ON staff_actions (at, id);

-- A remote unlock's access-log row names the supervisor and the reason (JSON of the wire's StaffBy:
-- accountId, name, reason); NULL on every decision made at a lock.
ALTER TABLE access_log ADD COLUMN by_staff TEXT;
