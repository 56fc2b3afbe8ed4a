-- 0013: mobile tokens are single use. The decision that allows a relayed mobile token writes its
-- jti here in the same transaction as the access log and outbox rows, so the same token presented
-- again (sniffed off the air, replayed by a lock) is refused MOBILE_TOKEN_REPLAYED until it expires,
-- across restarts. Rows are purged once their token has expired (it is refused as expired then).
CREATE TABLE mobile_token_uses (
  jti         TEXT    PRIMARY KEY,
  expires_at  INTEGER NOT NULL,
  lock_id     TEXT    NOT NULL,
  request_id  TEXT    NOT NULL,
  at          INTEGER NOT NULL
) STRICT;
CREATE INDEX mobile_token_uses_expiry ON mobile_token_uses (expires_at);
