-- Signing-key rotation (issue #17, docs/gateway.md "Trusted cloud keys").
-- The cloud keys this gateway trusts: seeded from its config (cloud.jwks) at start, then
-- changed only by signed keyset.update messages. A retired kid is never trusted again,
-- whatever the config or a later update says (its row stays, status retired).
CREATE TABLE trusted_keys (
  kid        TEXT    PRIMARY KEY,
  jwk        TEXT    NOT NULL,
  status     TEXT    NOT NULL CHECK (status IN ('trusted', 'retired')),
  source     TEXT    NOT NULL CHECK (source IN ('config', 'cloud')),
  not_before INTEGER,
  added_at   INTEGER NOT NULL,
  retired_at INTEGER
) STRICT;

-- The kid of the cloud key that signed the message a key's grant came in (null: a grant
-- stored before this migration). A grant whose signer is retired opens no door
-- (SIGNER_RETIRED): the cloud re-sends every live grant under its new key before it retires
-- the old one, so only a grant the cloud no longer stands behind is left on it.
ALTER TABLE keys ADD COLUMN signer_kid TEXT;

-- The kid each verified downlink was signed with (null: stored before this migration).
ALTER TABLE inbox ADD COLUMN kid TEXT;
