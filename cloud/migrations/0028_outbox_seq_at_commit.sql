-- Issue #14: an outbox row may take its gateway's next seq at its
-- transaction's commit instead of at its insert (adapters/outbox/enqueue.ts
-- `enqueueAtCommit`). Taking the seq locks the gateway's gateway_seq row until
-- the commit, so every other transaction writing to that gateway waits; taken
-- at the insert, the lock was held across every client round trip left in the
-- transaction (an admin API issue: two, plus the commit), which bounded one
-- gateway's issue rate. Taken here, it is held only through the commit itself.
-- The guarantees stay: the seq commits or rolls back with the row (no gap),
-- seqs follow commit order, and rows of one transaction follow their insert
-- order (deferred row triggers fire in the order of their events).
-- A row inserted with its seq (enqueue) is not touched.
ALTER TABLE outbox ALTER COLUMN seq DROP NOT NULL;

CREATE FUNCTION outbox_seq_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  next_seq bigint;
BEGIN
  UPDATE gateway_seq SET last_seq = last_seq + 1 WHERE gateway_id = NEW.gateway_id RETURNING last_seq INTO next_seq;
  IF next_seq IS NULL THEN
    RAISE EXCEPTION 'no seq counter for gateway %', NEW.gateway_id USING ERRCODE = 'P0001';
  END IF;
  UPDATE outbox SET seq = next_seq WHERE id = NEW.id;
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER outbox_seq_at_commit AFTER INSERT ON outbox
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (NEW.seq IS NULL)
  EXECUTE FUNCTION outbox_seq_at_commit();
