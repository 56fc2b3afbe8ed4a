-- Uplinks are deduplicated by message id (jti) only. A gateway whose store
-- was reset starts its uplink seq again; its new messages must still be
-- applied (an access event is never dropped), so (gateway_id, seq) is an
-- index for gap tracking, not a uniqueness rule.
DROP INDEX uplink_inbox_seq;
CREATE INDEX uplink_inbox_seq ON uplink_inbox (gateway_id, seq) WHERE seq IS NOT NULL;
