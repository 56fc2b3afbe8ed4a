-- One writer per column, enforced by the database (DESIGN.md I4; docs/state-machines.md
-- "Verb guards"). Forward-only.
--
-- The tables below hold which verb may make which move of a status column (verb_moves) and
-- which verbs may change a money column or billing flag (verb_columns). Their rows are NOT
-- written here: the code's literal state tables are the source (cloud/src/domain/verb-guards.ts),
-- and the cloud copies them in, under the migration lock, at every start (migrate →
-- syncVerbGuards). One trigger function, verb_guard, checks every insert and update of a
-- guarded table against them; it replaces the status parts of the guards of 0001, 0014, 0019,
-- 0026 and 0027 (their version rule stays, in version_guard).

-- Which columns of which table are guarded: a status column (its moves) or a value (its writers).
CREATE TABLE verb_guarded_columns (
  table_name  text NOT NULL,
  column_name text NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('status', 'value')),
  PRIMARY KEY (table_name, column_name)
);

-- (verb, from, to) of a status column; from_value null is the row's insert.
CREATE TABLE verb_moves (
  table_name  text NOT NULL,
  column_name text NOT NULL,
  verb        text NOT NULL,
  from_value  text,
  to_value    text NOT NULL
);
CREATE UNIQUE INDEX verb_moves_one ON verb_moves (table_name, column_name, verb, (from_value IS NULL), coalesce(from_value, ''), to_value);

-- A verb that may change a value column once the row exists (none listed: nobody may).
CREATE TABLE verb_columns (
  table_name  text NOT NULL,
  column_name text NOT NULL,
  verb        text NOT NULL,
  PRIMARY KEY (table_name, column_name, verb)
);

-- The check. SQLSTATE TB401 with the table and column in the error's fields; the message names
-- the table, column, move and verb, and the verbs that may make that move. The cloud treats it as
-- a bug (a verb wrote what its table does not allow): the transaction rolls back, nothing moved.
CREATE FUNCTION verb_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_verb text := coalesce(current_setting('tobira.verb', true), '');
  v_shown text;
  v_new jsonb := to_jsonb(NEW);
  v_old jsonb;
  v_from text;
  v_to text;
  v_who text;
  g record;
BEGIN
  v_shown := CASE WHEN v_verb = '' THEN '(none: tobira.verb unset)' ELSE v_verb END;
  IF TG_OP = 'UPDATE' THEN
    v_old := to_jsonb(OLD);
  END IF;
  FOR g IN SELECT column_name, kind FROM verb_guarded_columns WHERE table_name = TG_TABLE_NAME LOOP
    IF g.kind = 'status' THEN
      v_from := v_old ->> g.column_name;
      v_to := v_new ->> g.column_name;
      CONTINUE WHEN TG_OP = 'UPDATE' AND v_from IS NOT DISTINCT FROM v_to;
      CONTINUE WHEN EXISTS (SELECT 1 FROM verb_moves m
        WHERE m.table_name = TG_TABLE_NAME AND m.column_name = g.column_name AND m.verb = v_verb
          AND m.from_value IS NOT DISTINCT FROM v_from AND m.to_value = v_to);
      SELECT string_agg(m.verb, ', ' ORDER BY m.verb) INTO v_who FROM verb_moves m
        WHERE m.table_name = TG_TABLE_NAME AND m.column_name = g.column_name
          AND m.from_value IS NOT DISTINCT FROM v_from AND m.to_value = v_to;
      RAISE EXCEPTION 'verb guard: %.% % -> % is not a move of verb % (verbs that may make it: %)', TG_TABLE_NAME, g.column_name,
          coalesce(v_from, '—'), coalesce(v_to, 'null'), v_shown, coalesce(v_who, 'none')
        USING ERRCODE = 'TB401', TABLE = TG_TABLE_NAME, COLUMN = g.column_name;
    ELSIF TG_OP = 'UPDATE' AND (v_old -> g.column_name) IS DISTINCT FROM (v_new -> g.column_name) THEN
      CONTINUE WHEN EXISTS (SELECT 1 FROM verb_columns c
        WHERE c.table_name = TG_TABLE_NAME AND c.column_name = g.column_name AND c.verb = v_verb);
      SELECT string_agg(c.verb, ', ' ORDER BY c.verb) INTO v_who FROM verb_columns c
        WHERE c.table_name = TG_TABLE_NAME AND c.column_name = g.column_name;
      RAISE EXCEPTION 'verb guard: %.% % -> % is not written by verb % (verbs that may write it: %)', TG_TABLE_NAME, g.column_name,
          coalesce(v_old ->> g.column_name, 'null'), coalesce(v_new ->> g.column_name, 'null'), v_shown,
          coalesce(v_who, 'none, it is set at insert only')
        USING ERRCODE = 'TB401', TABLE = TG_TABLE_NAME, COLUMN = g.column_name;
    END IF;
  END LOOP;
  RETURN NEW;
END $$;

CREATE TRIGGER keys_verb_guard BEFORE INSERT OR UPDATE ON keys FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER stays_verb_guard BEFORE INSERT OR UPDATE ON stays FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER payments_verb_guard BEFORE INSERT OR UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER refunds_verb_guard BEFORE INSERT OR UPDATE ON refunds FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER walk_ins_verb_guard BEFORE INSERT OR UPDATE ON walk_ins FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER memberships_verb_guard BEFORE INSERT OR UPDATE ON memberships FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER mode_requests_verb_guard BEFORE INSERT OR UPDATE ON mode_requests FOR EACH ROW EXECUTE FUNCTION verb_guard();
CREATE TRIGGER gateway_uplink_key_rotations_verb_guard BEFORE INSERT OR UPDATE ON gateway_uplink_key_rotations
  FOR EACH ROW EXECUTE FUNCTION verb_guard();

-- The version (compare-and-set counter, and a key's wire version) changes only inside a verb and
-- never shrinks; which status a verb may write is verb_guard's.
CREATE FUNCTION version_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('tobira.verb', true), '') = '' THEN
    RAISE EXCEPTION '%.version may only change inside a verb (tobira.verb unset)', TG_TABLE_NAME
      USING ERRCODE = 'TB401', TABLE = TG_TABLE_NAME, COLUMN = 'version';
  END IF;
  IF NEW.version < OLD.version THEN
    RAISE EXCEPTION '%.version may not shrink', TG_TABLE_NAME USING ERRCODE = 'TB401', TABLE = TG_TABLE_NAME, COLUMN = 'version';
  END IF;
  RETURN NEW;
END $$;

DROP TRIGGER keys_status_insert ON keys;
DROP TRIGGER keys_status_update ON keys;
DROP FUNCTION keys_status_guard();
CREATE TRIGGER keys_version_guard BEFORE UPDATE ON keys FOR EACH ROW
  WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION version_guard();

DROP TRIGGER stays_status_insert ON stays;
DROP TRIGGER stays_status_update ON stays;
DROP TRIGGER payments_status_insert ON payments;
DROP TRIGGER payments_status_update ON payments;
DROP TRIGGER walk_ins_status_insert ON walk_ins;
DROP TRIGGER walk_ins_status_update ON walk_ins;
DROP FUNCTION billing_status_guard();
DROP TRIGGER memberships_status_insert ON memberships;
DROP TRIGGER memberships_status_update ON memberships;
DROP FUNCTION membership_status_guard();
CREATE TRIGGER stays_version_guard BEFORE UPDATE ON stays FOR EACH ROW
  WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION version_guard();
CREATE TRIGGER payments_version_guard BEFORE UPDATE ON payments FOR EACH ROW
  WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION version_guard();
CREATE TRIGGER walk_ins_version_guard BEFORE UPDATE ON walk_ins FOR EACH ROW
  WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION version_guard();
CREATE TRIGGER memberships_version_guard BEFORE UPDATE ON memberships FOR EACH ROW
  WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION version_guard();

DROP TRIGGER mode_requests_status_insert ON mode_requests;
DROP TRIGGER mode_requests_status_update ON mode_requests;
DROP FUNCTION mode_request_status_guard();
DROP TRIGGER uplink_key_rotations_status_insert ON gateway_uplink_key_rotations;
DROP TRIGGER uplink_key_rotations_status_update ON gateway_uplink_key_rotations;
DROP FUNCTION uplink_key_rotation_status_guard();
