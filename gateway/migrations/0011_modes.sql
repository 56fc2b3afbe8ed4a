-- 0011: operating modes (issue #17 part 3; docs/gateway.md "Passage mode", "Privacy",
-- "Modes from the cloud"). Forward-only.

-- Where the site mode came from: the gateway's staff (UI/API) or the cloud (a signed site.mode
-- downlink), who set it, when, and the cloud's request id (null when set at the gateway).
ALTER TABLE settings ADD COLUMN mode_origin TEXT NOT NULL DEFAULT 'gateway' CHECK (mode_origin IN ('gateway', 'cloud'));
ALTER TABLE settings ADD COLUMN mode_by TEXT;
ALTER TABLE settings ADD COLUMN mode_at INTEGER;
ALTER TABLE settings ADD COLUMN mode_request_id TEXT;

-- Passage mode: a door held unlocked while its schedule runs (one row per door; no row: none).
CREATE TABLE passage (
  door_id    TEXT    PRIMARY KEY,
  schedule   TEXT    NOT NULL, -- JSON of shared Schedule, validated on read
  origin     TEXT    NOT NULL CHECK (origin IN ('gateway', 'cloud')),
  set_by     TEXT    NOT NULL,
  set_at     INTEGER NOT NULL,
  request_id TEXT
) STRICT;

-- Per lock: since when the gateway holds it open for passage (null: it does not), so a restart
-- knows whether to relock; since when the guest inside has privacy on (null: off).
ALTER TABLE locks ADD COLUMN passage_since INTEGER;
ALTER TABLE locks ADD COLUMN privacy_since INTEGER;
