-- A gateway whose uplink history started again (its store restored from a
-- backup, or reset) may have sent its first uplinks before any heartbeat
-- told it of the acknowledgements its store lost; the acknowledgement
-- pointer then restarts and no heartbeat would ever name the lost history.
-- lost_seq / lost_jti keep the pointer the restart replaced: heartbeats
-- carry it as uplinkAck until the gateway asks for a resync with reason
-- 'conflict' (it saw the restore and fails closed until a snapshot).
ALTER TABLE uplink_seq ADD COLUMN lost_seq bigint CHECK (lost_seq > 0);
ALTER TABLE uplink_seq ADD COLUMN lost_jti text;
ALTER TABLE uplink_seq ADD CONSTRAINT uplink_seq_lost_pair CHECK ((lost_seq IS NULL) = (lost_jti IS NULL));
