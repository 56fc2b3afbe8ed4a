-- Outcomes Stripe tells only by webhook, re-read when the webhook never comes (docs/payments.md
-- "Outcomes whose webhook was lost"): the billing worker re-reads a refund still pending at Stripe, and an
-- intent still open for a stay that has ended, every BILLING_RECONCILE_MS. When it last did, so replicas
-- and passes spread the reads instead of repeating the same rows.
ALTER TABLE refunds ADD COLUMN checked_at bigint;
CREATE INDEX refunds_pending_at_stripe ON refunds (checked_at NULLS FIRST, updated_at)
  WHERE status = 'pending' AND stripe_refund_id IS NOT NULL;

ALTER TABLE payments ADD COLUMN checked_at bigint;
CREATE INDEX payments_open_intents ON payments (checked_at NULLS FIRST, updated_at)
  WHERE status IN ('requires_payment', 'processing') AND intent_id IS NOT NULL;

-- A walk-in's refund by the desk (or the policy) the same way.
ALTER TABLE walk_in_refunds ADD COLUMN checked_at bigint;
CREATE INDEX walk_in_refunds_pending_at_stripe ON walk_in_refunds (checked_at NULLS FIRST, updated_at)
  WHERE status = 'pending' AND stripe_refund_id IS NOT NULL;
