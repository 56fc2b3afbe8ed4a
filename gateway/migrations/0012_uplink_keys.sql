-- Rotation of this gateway's own uplink signing key (issue #17 part 1, docs/gateway.md
-- "Uplink key rotation"). The key pair file of the config seeds the first `active` key at
-- start (when the table has none); later keys are made here on an uplink_key.rotate.
-- `proposed`: made for a rotation, its proposal queued, not used to sign yet;
-- `active`: signs every uplink (exactly one); `retired`: replaced, its private part erased.
-- The private JWK never leaves this file (never logged, never sent).
CREATE TABLE uplink_keys (
  kid          TEXT    PRIMARY KEY,
  private_jwk  TEXT,
  public_jwk   TEXT    NOT NULL,
  status       TEXT    NOT NULL CHECK (status IN ('proposed', 'active', 'retired')),
  source       TEXT    NOT NULL CHECK (source IN ('config', 'rotation')),
  rotation_id  TEXT    UNIQUE,
  added_at     INTEGER NOT NULL,
  activated_at INTEGER,
  retired_at   INTEGER,
  CHECK ((status = 'retired') = (private_jwk IS NULL)),
  CHECK ((source = 'rotation') = (rotation_id IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX uplink_keys_one_active ON uplink_keys (status) WHERE status = 'active';
