-- The outbox row state machine (cloud/src/adapters/outbox/states.ts):
-- pending -> sending -> sent | pending | dead; sending -> sending (lease
-- taken over); dead -> pending (operator retry). Anything else is a bug.
CREATE FUNCTION outbox_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (OLD.status, NEW.status) NOT IN (
       ('pending', 'sending'), ('sending', 'sending'), ('sending', 'sent'),
       ('sending', 'pending'), ('sending', 'dead'), ('dead', 'pending')) THEN
    RAISE EXCEPTION 'outbox status % -> % is not a transition of the outbox state machine', OLD.status, NEW.status USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER outbox_status_guard BEFORE UPDATE ON outbox FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR NEW.status = 'sending')
  EXECUTE FUNCTION outbox_status_guard();
