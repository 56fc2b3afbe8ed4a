-- 0015: a TOTP second factor for supervisors (docs/gateway.md "Second factor (TOTP)"). Forward-only.

-- One row per account that has started or finished enrolment. `secret_box` is the TOTP secret sealed
-- with AES-256-GCM under a key derived from the config's credentialPepper (bound to the account id),
-- so this file alone does not give the secret. `confirmed_at` NULL: enrolment started, not yet
-- confirmed with a code (not asked at sign-in). `last_step` is the RFC 6238 time step of the last
-- code accepted: a code at or before it is refused TOTP_REPLAYED.
CREATE TABLE staff_totp (
  account_id   TEXT    PRIMARY KEY REFERENCES staff_accounts (account_id) ON DELETE CASCADE,
  secret_box   TEXT    NOT NULL,
  confirmed_at INTEGER,
  last_step    INTEGER,
  created_at   INTEGER NOT NULL
) STRICT;

-- Recovery codes (10 at a confirmed enrolment): only the SHA-256 of each (50 random bits), each
-- usable once (`used_at`). Replaced whole at every enrolment, deleted with the enrolment.
CREATE TABLE staff_recovery_codes (
  account_id TEXT    NOT NULL REFERENCES staff_accounts (account_id) ON DELETE CASCADE,
  code_hash  TEXT    NOT NULL,
  used_at    INTEGER,
  PRIMARY KEY (account_id, code_hash)
) STRICT;
