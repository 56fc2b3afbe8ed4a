-- Cloud broker accounts kept in the cloud database, for the embedded broker
-- (cloud/src/adapters/broker/embedded.ts; docs/architecture.md "Broker accounts").
-- A Mosquitto broker keeps its own accounts (dynamic security); this table is
-- then unused.
--
-- username: `gw:{gatewayId}` for a gateway, any other name for a service
--   account (the cloud's own login); gateway ids are slugs, so no service
--   name can look like a gateway's.
-- password_hash: `scrypt$N$r$p$salt$hash` (node:crypto scrypt, base64url,
--   a random 16-byte salt per row); the password itself is never stored.
-- rotated_at: when the password was last set (creation included); a rotation
--   replaces the hash, so the old password stops working for new connections.
CREATE TABLE broker_accounts (
  username text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('gateway', 'service')),
  gateway_id text REFERENCES gateways (id) ON DELETE CASCADE,
  password_hash text NOT NULL,
  created_at bigint NOT NULL,
  rotated_at bigint NOT NULL,
  CHECK ((kind = 'gateway') = (gateway_id IS NOT NULL)),
  CHECK (kind <> 'gateway' OR username = 'gw:' || gateway_id),
  CHECK (kind <> 'service' OR username NOT LIKE 'gw:%')
);
CREATE UNIQUE INDEX broker_accounts_gateway ON broker_accounts (gateway_id) WHERE gateway_id IS NOT NULL;
