-- A living membership's subscription is re-read from Stripe every BILLING_RECONCILE_MS (docs/memberships.md
-- "Webhooks lost"): Stripe can end or move it (the dashboard, a failed renewal, its own retries ending) with
-- every event lost, and a member key runs until a membership verb revokes it. When it was last re-read, so
-- replicas and passes spread the reads.
ALTER TABLE memberships ADD COLUMN subscription_checked_at bigint;
CREATE INDEX memberships_living_recheck ON memberships (subscription_checked_at NULLS FIRST)
  WHERE status IN ('active', 'past_due', 'ending') AND subscription_id IS NOT NULL;
