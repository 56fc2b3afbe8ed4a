-- An approved application whose payment's webhooks were all lost would wait for its checkout deadline (hours)
-- with the member's money taken: the billing worker re-reads each open checkout's subscription from Stripe every
-- MEMBERSHIP_CHECKOUT_RECHECK_MS. When it last did, so replicas and passes spread the reads instead of repeating them.
ALTER TABLE memberships ADD COLUMN checkout_checked_at bigint;
CREATE INDEX memberships_open_checkouts ON memberships (checkout_checked_at NULLS FIRST, approved_at)
  WHERE status = 'applied' AND approved_at IS NOT NULL AND subscription_id IS NOT NULL;
