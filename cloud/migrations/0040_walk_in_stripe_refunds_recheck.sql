-- A walk-in's refund made in Stripe directly (the dashboard, support) that Stripe holds `pending` is re-read
-- like the desk's own when its settling webhook never comes (docs/payments.md "Outcomes whose webhook was
-- lost"): when the billing worker last did, so replicas and passes spread the reads.
ALTER TABLE walk_in_stripe_refunds ADD COLUMN checked_at bigint;
CREATE INDEX walk_in_stripe_refunds_pending ON walk_in_stripe_refunds (checked_at NULLS FIRST, updated_at)
  WHERE status = 'pending';
