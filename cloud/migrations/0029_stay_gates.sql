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
