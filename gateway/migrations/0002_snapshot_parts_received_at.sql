-- Snapshot parts whose siblings never arrive must not stay forever: record when each came in
-- so the hourly purge can drop incomplete snapshots (the cloud sends a new one on the next resync).
ALTER TABLE snapshot_parts ADD COLUMN received_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX snapshot_parts_received_at ON snapshot_parts (received_at);
