-- The gates run again when a stay's key is issued: a stay whose guest the
-- site blocked between booking and payment is cancelled instead of
-- confirmed (reason guest_blocked, everything refunded).
ALTER TABLE stays DROP CONSTRAINT stays_cancel_reason_check;
ALTER TABLE stays ADD CONSTRAINT stays_cancel_reason_check
  CHECK (cancel_reason IN ('guest_cancelled', 'staff_cancelled', 'no_show', 'payment_disputed', 'site_closed', 'membership_ended', 'guest_blocked'));

-- Ending a membership cancels its pending members' bookings too, not only
-- the confirmed ones: the index follows what listOpenStaysOfMembership reads.
DROP INDEX stays_by_membership;
CREATE INDEX stays_by_membership ON stays (membership_id) WHERE membership_id IS NOT NULL AND status IN ('pending', 'confirmed');

-- A door may belong to several rooms (rooms are named sets of doors), so a
-- night held per room does not stop two stays of two rooms sharing a door
-- from opening the same physical door on the same night. Nights are also
-- held per door of the room (not the site's shared doors, which every stay
-- opens): the primary key refuses the second booking whatever races.
CREATE TABLE stay_door_nights (
  door_id text NOT NULL REFERENCES doors(id),
  night date NOT NULL,
  stay_id text NOT NULL REFERENCES stays(id),
  PRIMARY KEY (door_id, night)
);
CREATE INDEX stay_door_nights_by_stay ON stay_door_nights (stay_id);
-- the stays holding their nights now hold their doors too (the first of a
-- clash already on record keeps the door; the other is for an operator)
INSERT INTO stay_door_nights (door_id, night, stay_id)
  SELECT d.door_id, n.night, n.stay_id FROM stay_nights n JOIN room_doors d ON d.room_id = n.room_id
  ORDER BY d.door_id, n.night, n.stay_id
  ON CONFLICT (door_id, night) DO NOTHING;

CREATE OR REPLACE FUNCTION stay_nights_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status NOT IN ('pending', 'confirmed', 'checked_in')
     AND (EXISTS (SELECT 1 FROM stay_nights WHERE stay_id = NEW.id) OR EXISTS (SELECT 1 FROM stay_door_nights WHERE stay_id = NEW.id)) THEN
    RAISE EXCEPTION 'stay % is % but still holds nights', NEW.id, NEW.status USING ERRCODE = 'P0001';
  END IF;
  RETURN NULL;
END $$;

-- Walk-ins refund too (I8): a cancellation the site's policy refunds, money
-- that lands after the walk-in ended, and a pass whose key a gate refused at
-- issue. One row per walk-in (one refund each, its key stored before the
-- call); the call is a billing job (kind walk_in_refund).
CREATE TABLE walk_in_refunds (
  walk_in_id text PRIMARY KEY REFERENCES walk_ins(id),
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded')),
  idempotency_key text NOT NULL UNIQUE,
  stripe_refund_id text UNIQUE,
  cid text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  CHECK ((status = 'succeeded') <= (stripe_refund_id IS NOT NULL))
);
ALTER TABLE billing_jobs DROP CONSTRAINT billing_jobs_kind_check;
ALTER TABLE billing_jobs ADD CONSTRAINT billing_jobs_kind_check
  CHECK (kind IN ('create_intent', 'cancel_intent', 'refund', 'issue_stay_key', 'notify', 'walk_in_refund'));
