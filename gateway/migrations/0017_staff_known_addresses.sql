-- 0017: the addresses each staff account signed in from (docs/gateway.md "Sign-in throttling"). Forward-only.

-- An address that signed in successfully as an account is exempt from the per-name sign-in limit
-- for that account (a guesser on many addresses cannot slow its owner there), and the exemption must
-- survive a restart. Written only by a successful sign-in, so it grows only with real sign-ins; kept
-- for 30 days after the last one and at most 10 addresses per account, the newest (app/staff-accounts.ts).
CREATE TABLE staff_known_addresses (
  account_id        TEXT    NOT NULL REFERENCES staff_accounts (account_id) ON DELETE CASCADE,
  ip                TEXT    NOT NULL,
  last_signed_in_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, ip)
) STRICT;
CREATE INDEX staff_known_addresses_at ON staff_known_addresses (last_signed_in_at);
