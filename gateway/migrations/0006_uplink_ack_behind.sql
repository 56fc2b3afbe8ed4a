-- Uplinks are kept until the cloud acknowledges applying them (the
-- heartbeat's uplinkAck), not merely until the broker's PUBACK: a broker that
-- loses its queue, or a cloud that refused a message, no longer loses it.
-- Rows sent before this migration were taken as delivered then: they stay so.
ALTER TABLE outbox ADD COLUMN acked_at INTEGER;
UPDATE outbox SET acked_at = sent_at WHERE status = 'sent';
CREATE INDEX outbox_unacked ON outbox (seq) WHERE acked_at IS NULL;
-- cloud_last_seq: the last seq a heartbeat named (the cloud has handed out up
-- to it). behind_hb_*: the newest heartbeat that found this gateway behind;
-- once everything up to its seq is applied, its proof of freshness counts.
-- uplink_acked_seq: the highest uplink seq the cloud has acknowledged.
ALTER TABLE settings ADD COLUMN cloud_last_seq INTEGER;
ALTER TABLE settings ADD COLUMN behind_hb_seq INTEGER;
ALTER TABLE settings ADD COLUMN behind_hb_iat_ms INTEGER;
ALTER TABLE settings ADD COLUMN uplink_acked_seq INTEGER NOT NULL DEFAULT 0;
