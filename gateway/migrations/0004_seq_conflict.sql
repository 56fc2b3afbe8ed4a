-- Detecting a cloud whose history differs from ours (its database restored
-- to a point before our applied seq, so it hands out seqs we already used):
-- snapshot_seq is the asOfSeq of the last applied snapshot; every seq above
-- it and up to applied_seq was applied one message at a time, so a message
-- for such a seq under a new id (ids are unique, a redelivery is dropped at
-- insert) can only come from a different history. seq_conflict_at is set
-- then; while it is set the lease is not renewed (the site fails closed)
-- until a snapshot replaces the key set.
ALTER TABLE settings ADD COLUMN snapshot_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE settings ADD COLUMN seq_conflict_at INTEGER;
-- a gateway upgraded in place: what it applied before is taken as settled
UPDATE settings SET snapshot_seq = applied_seq;
