-- Presence is unknown until the gateway's retained presence message arrives:
-- NULL = never heard, true/false = last retained presence.
ALTER TABLE gateways ALTER COLUMN online DROP NOT NULL;
ALTER TABLE gateways ALTER COLUMN online DROP DEFAULT;
UPDATE gateways SET online = NULL WHERE online = false;
ALTER TABLE gateways ADD COLUMN presence_at bigint;
