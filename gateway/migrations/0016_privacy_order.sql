-- A lock's privacy reports (its states and its privacy events) are ordered by the lock's own time: the
-- newest report so far, so a privacy-off older than it (a queue flushed on reconnect) changes nothing.
ALTER TABLE locks ADD COLUMN privacy_at INTEGER;
