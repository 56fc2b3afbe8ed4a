-- The desk may cancel a walk-in that is still pending (docs/payments.md
-- "Walk-ins"): its intent is cancelled in Stripe first, and money that landed
-- meanwhile is refunded by the policy. Such a pass never had a key, so a
-- cancelled walk-in no longer implies one; a paid walk-in still does.
-- (The move itself, pending → cancelled by cancelWalkIn, is a row of the
-- state table that the cloud copies into verb_moves at start.)
ALTER TABLE walk_ins DROP CONSTRAINT walk_ins_check1;
ALTER TABLE walk_ins ADD CONSTRAINT walk_ins_paid_has_key CHECK (status <> 'paid' OR key_id IS NOT NULL);
