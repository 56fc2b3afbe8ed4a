-- The gateway keeps each uplink until the cloud has acknowledged applying it
-- (DESIGN.md §5), not merely the broker's PUBACK. acked_seq / acked_jti: the
-- highest uplink seq up to which every uplink of the gateway's current
-- history is applied here, and that message's jti; heartbeats carry both.
ALTER TABLE uplink_seq ADD COLUMN acked_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE uplink_seq ADD COLUMN acked_jti text;
-- Gateways already sending before this migration: everything up to the
-- highest seq seen counts as applied (as it did before), so the pointer can move on.
UPDATE uplink_seq u SET acked_seq = u.max_seq,
  acked_jti = (SELECT i.jti FROM uplink_inbox i WHERE i.gateway_id = u.gateway_id AND i.seq = u.max_seq ORDER BY i.received_at DESC LIMIT 1);
UPDATE uplink_seq SET acked_seq = 0 WHERE acked_jti IS NULL;
-- A verified uplink is never dropped for clock skew: the skew of the
-- gateway's clock (its message's iat minus the cloud's now), as last measured.
ALTER TABLE gateways ADD COLUMN clock_skew_ms bigint;
ALTER TABLE gateways ADD COLUMN clock_skew_at bigint;
