-- 0026: rotating a gateway's own uplink signing key (issue #17 part 1;
-- docs/operations.md "Rotating a gateway's uplink key", docs/state-machines.md). Forward-only.

-- Every uplink key a gateway has had. `current`: the key its uplinks are verified with
-- (gateways.public_jwk keeps a copy); `previous`: the key it signed with before the last
-- accepted proposal, still accepted until the first uplink under the new key arrives;
-- `retired`: never accepted again (KID_RETIRED). At most one current and one previous.
CREATE TABLE gateway_uplink_keys (
  gateway_id  text   NOT NULL REFERENCES gateways(id),
  kid         text   NOT NULL,
  public_jwk  jsonb  NOT NULL,
  status      text   NOT NULL CHECK (status IN ('current', 'previous', 'retired')),
  rotation_id text,
  added_at    bigint NOT NULL,
  retired_at  bigint,
  PRIMARY KEY (gateway_id, kid),
  CHECK ((status = 'retired') = (retired_at IS NOT NULL))
);
CREATE UNIQUE INDEX gateway_uplink_keys_one_current ON gateway_uplink_keys (gateway_id) WHERE status = 'current';
CREATE UNIQUE INDEX gateway_uplink_keys_one_previous ON gateway_uplink_keys (gateway_id) WHERE status = 'previous';
-- the key each gateway registered with is its first current key
INSERT INTO gateway_uplink_keys (gateway_id, kid, public_jwk, status, added_at)
  SELECT id, public_jwk->>'kid', public_jwk, 'current', created_at FROM gateways WHERE public_jwk->>'kid' IS NOT NULL;

-- One row per rotation: requested (uplink_key.rotate queued) → proposed (both proofs verified,
-- new key current, uplink_key.activate queued) → active (first uplink under the new key; the
-- old one retired); requested → failed (a proposal signed with the current key whose new-key
-- proof or kid was bad). One rotation in progress per gateway (unique partial index).
CREATE TABLE gateway_uplink_key_rotations (
  id           text   PRIMARY KEY,
  gateway_id   text   NOT NULL REFERENCES gateways(id),
  status       text   NOT NULL CHECK (status IN ('requested', 'proposed', 'active', 'failed')),
  old_kid      text   NOT NULL,
  new_kid      text,
  code         text,
  requested_by text   NOT NULL,
  cid          text   NOT NULL,
  rotate_jti   text   NOT NULL,
  rotate_seq   bigint NOT NULL,
  activate_jti text,
  activate_seq bigint,
  requested_at bigint NOT NULL,
  proposed_at  bigint,
  settled_at   bigint,
  CHECK ((status IN ('proposed', 'active')) = (new_kid IS NOT NULL))
);
CREATE UNIQUE INDEX gateway_uplink_key_rotations_one_open ON gateway_uplink_key_rotations (gateway_id)
  WHERE status IN ('requested', 'proposed');
CREATE INDEX gateway_uplink_key_rotations_gateway ON gateway_uplink_key_rotations (gateway_id, requested_at DESC);

-- I4: the rotation status changes only inside a verb's transaction (tobira.verb), starts
-- requested, moves only forward, and active/failed are final.
CREATE FUNCTION uplink_key_rotation_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('tobira.verb', true), '') = '' THEN
    RAISE EXCEPTION 'gateway_uplink_key_rotations.status may only change inside a verb (tobira.verb unset)' USING ERRCODE = 'P0001';
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'requested' THEN
      RAISE EXCEPTION 'a rotation starts requested, not %', NEW.status USING ERRCODE = 'P0001';
    END IF;
    RETURN NEW;
  END IF;
  IF NOT ((OLD.status = 'requested' AND NEW.status IN ('proposed', 'failed')) OR (OLD.status = 'proposed' AND NEW.status = 'active')) THEN
    RAISE EXCEPTION 'rotation % may not go from % to %', OLD.id, OLD.status, NEW.status USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER uplink_key_rotations_status_insert BEFORE INSERT ON gateway_uplink_key_rotations
  FOR EACH ROW EXECUTE FUNCTION uplink_key_rotation_status_guard();
CREATE TRIGGER uplink_key_rotations_status_update BEFORE UPDATE ON gateway_uplink_key_rotations
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION uplink_key_rotation_status_guard();

-- The outbox carries the two new sequenced downlinks (every earlier type kept, see 0025).
ALTER TABLE outbox DROP CONSTRAINT IF EXISTS outbox_type_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_type_check
  CHECK (type IN ('key.grant', 'key.revoke', 'keyset.update', 'site.mode', 'uplink_key.rotate', 'uplink_key.activate'));
