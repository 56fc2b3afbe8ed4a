-- 0014: coalesced lock alarms and the per-lock event budget (docs/gateway.md "Lock event budget"). Forward-only.

-- A repeated alarm (same lock and kind, while one is open) is counted on the open row instead of
-- becoming a row of its own: `count` repeats, first seen is received_at, last seen last_seen_at.
ALTER TABLE alarms ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
ALTER TABLE alarms ADD COLUMN last_seen_at INTEGER;
UPDATE alarms SET last_seen_at = received_at;
-- When the condition an alarm stands for ended on its own (a lock back under its event budget);
-- the alarm stays open until staff acknowledge it, so a short flood is still seen.
ALTER TABLE alarms ADD COLUMN ended_at INTEGER;
-- Not unique: alarms written before 0014 may hold several open rows of one lock and kind; new
-- repeats are counted on the newest of them.
CREATE INDEX alarms_open_by_kind ON alarms (lock_id, kind, received_at) WHERE closed_at IS NULL;
